//! Limits per key on a store: each key decided by its tier's limiter, a
//! key that changes tier keeps what it spent (the same decisions as the
//! in-process tiers give), settlement by the deciding tier, and tiers on
//! different prefixes or layouts refused.

use std::sync::{Arc, Mutex};
use std::time::Duration;
use weir_rate::clock::ManualClock;
use weir_rate::{CheckKeyAsync, FixedWindow, Gcra, Quota, SettleKey, Tier, TieredLimiter};
use weir_store::memory::{MemoryBackend, MemoryStore};
use weir_store::{ConfigError, StoreLimiter, StoreTiers};

fn gcra(per_minute: u32) -> Gcra {
    Gcra::new(Quota::try_new(per_minute, Duration::from_secs(60)).unwrap())
}

async fn on(store: &MemoryStore, prefix: &str, per_minute: u32) -> StoreLimiter<MemoryBackend> {
    StoreLimiter::builder(gcra(per_minute))
        .prefix(prefix)
        .connect(store.clone())
        .await
        .unwrap()
}

/// The tier of every key, as the test sets it.
#[derive(Clone, Default)]
struct Now(Arc<Mutex<&'static str>>);

impl Now {
    fn set(&self, tier: &'static str) {
        *self.0.lock().unwrap() = tier;
    }

    fn resolver(&self) -> impl Fn(&str) -> Option<&'static str> + Send + Sync + 'static {
        let now = self.clone();
        move |_| Some(*now.0.lock().unwrap())
    }
}

/// Free 2, paid 10 a minute, internal unlimited, on one store prefix.
async fn tiers(
    store: &MemoryStore,
    now: &Now,
) -> StoreTiers<MemoryBackend, impl weir_rate::TierOf<str> + 'static> {
    StoreTiers::try_new(
        vec![
            Tier::limited("free", on(store, "api", 2).await),
            Tier::limited("paid", on(store, "api", 10).await),
            Tier::unlimited("internal"),
        ],
        "free",
        now.resolver(),
    )
    .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_key_changing_tier_is_decided_as_the_in_process_tiers_decide() {
    let (store, now) = (MemoryStore::new(), Now::default());
    let on_store = tiers(&store, &now).await;
    let clock = ManualClock::new();
    let twin = TieredLimiter::<String, _, _, _>::try_with_clock(
        vec![
            Tier::limited("free", gcra(2)),
            Tier::limited("paid", gcra(10)),
            Tier::unlimited("internal"),
        ],
        "free",
        now.resolver(),
        clock.clone(),
    )
    .unwrap();
    let steps: [(&'static str, u64, usize); 6] = [
        ("paid", 0, 8),
        ("free", 0, 5),
        ("free", 30, 5),
        ("paid", 0, 20),
        ("internal", 0, 50),
        ("paid", 0, 5),
    ];
    for (tier, wait, checks) in steps {
        now.set(tier);
        tokio::time::advance(Duration::from_secs(wait)).await;
        clock.advance(Duration::from_secs(wait));
        let mut got = 0;
        for _ in 0..checks {
            let decision = on_store.check_n("alice", 1).await.unwrap();
            assert_eq!(decision.policy(), Some(tier));
            got += usize::from(decision.is_allowed());
        }
        let expected = (0..checks)
            .filter(|_| twin.check("alice").is_allowed())
            .count();
        assert_eq!(got, expected, "{tier} after {wait} s");
    }
    // The paid tier moved alice by 8, 2 and nothing: the free tier's fresh
    // key "bob" still has its own 2.
    now.set("free");
    let bob: Vec<bool> = checks_of(&on_store, "bob", 3).await;
    assert_eq!(bob, [true, true, false]);
}

async fn checks_of(
    tiers: &StoreTiers<MemoryBackend, impl weir_rate::TierOf<str> + 'static>,
    key: &str,
    n: usize,
) -> Vec<bool> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(tiers.check_n_async(key, 1).await.unwrap().is_allowed());
    }
    out
}

#[tokio::test(start_paused = true)]
async fn a_settlement_is_made_by_the_tier_that_decided() {
    let (store, now) = (MemoryStore::new(), Now::default());
    let tiers = tiers(&store, &now).await;
    now.set("paid");
    let admitted = tiers.check_n("k", 10).await.unwrap();
    assert!(admitted.is_allowed());
    now.set("free");
    // 5 of paid's 6 s units back, not 5 of free's 30 s.
    SettleKey::<str>::settle(&tiers, "k", &admitted, 10, 5)
        .await
        .unwrap();
    now.set("paid");
    let mut allowed = 0;
    for _ in 0..20 {
        allowed += usize::from(tiers.check_n("k", 1).await.unwrap().is_allowed());
    }
    assert_eq!(allowed, 5);
}

#[tokio::test(start_paused = true)]
async fn tiers_that_would_not_share_a_keys_state_are_refused() {
    let store = MemoryStore::new();
    let none = |_: &str| None::<&'static str>;
    let prefixes = StoreTiers::try_new(
        vec![
            Tier::limited("a", on(&store, "one", 2).await),
            Tier::limited("b", on(&store, "two", 5).await),
        ],
        "a",
        none,
    );
    assert!(matches!(prefixes, Err(ConfigError::Invalid(_))));
    let window = StoreLimiter::builder(FixedWindow::new(Quota::per_minute(weir_rate::nonzero!(5))))
        .prefix("one")
        .connect(store.clone())
        .await
        .unwrap();
    let layouts = StoreTiers::try_new(
        vec![
            Tier::limited("a", on(&store, "one", 2).await),
            Tier::limited("b", window),
        ],
        "a",
        none,
    );
    assert!(matches!(layouts, Err(ConfigError::Invalid(_))));
    let default = StoreTiers::try_new(
        vec![Tier::limited("a", on(&store, "one", 2).await)],
        "b",
        none,
    );
    assert!(matches!(default, Err(ConfigError::Invalid(_))));
    let tiers = StoreTiers::try_new(
        vec![Tier::limited("a", on(&store, "one", 2).await)],
        "a",
        none,
    )
    .unwrap();
    assert!(
        tiers
            .set_tiers(vec![Tier::limited("a", on(&store, "other", 2).await)], "a")
            .is_err()
    );
    assert_eq!(tiers.tiers(), ["a"]);
}

/// A charge owed by a decision whose tier has since been removed is made
/// by the key's tier now, never skipped.
#[tokio::test(start_paused = true)]
async fn a_charge_owed_by_a_removed_tier_is_still_charged() {
    let (store, now) = (MemoryStore::new(), Now::default());
    let tiers = tiers(&store, &now).await;
    now.set("paid");
    let admitted = tiers.check_n("k", 1).await.unwrap();
    tiers
        .set_tiers(
            vec![
                Tier::limited("free", on(&store, "api", 2).await),
                Tier::limited("gold", on(&store, "api", 10).await),
            ],
            "free",
        )
        .unwrap();
    now.set("gold");
    SettleKey::<str>::settle(&tiers, "k", &admitted, 1, 9)
        .await
        .unwrap();
    let mut allowed = 0;
    for _ in 0..20 {
        allowed += usize::from(tiers.check_n("k", 1).await.unwrap().is_allowed());
    }
    assert_eq!(allowed, 1, "9 of gold's 10 spent");
}

/// A directory of keys changed while serving: by `set_resolver`, or with
/// the tiers by `replace`, deciding as the in-process tiers decide after
/// the same changes (the key keeps what it spent); a refused replacement
/// changes neither the tiers nor the directory.
#[tokio::test(start_paused = true)]
async fn the_directory_and_the_tiers_change_while_serving() {
    use std::collections::HashMap;
    let store = MemoryStore::new();
    let clock = ManualClock::new();
    let directory = |tier: &str| HashMap::from([("k".to_owned(), tier.to_owned())]);
    let on_store = StoreTiers::try_new(
        vec![
            Tier::limited("free", on(&store, "api", 2).await),
            Tier::limited("paid", on(&store, "api", 10).await),
        ],
        "free",
        directory("paid"),
    )
    .unwrap();
    let twin = TieredLimiter::<String, _, _, _>::try_with_clock(
        vec![
            Tier::limited("free", gcra(2)),
            Tier::limited("paid", gcra(10)),
        ],
        "free",
        directory("paid"),
        clock.clone(),
    )
    .unwrap();
    let same = async |tier: &str, checks: usize| {
        let mut got = 0;
        for _ in 0..checks {
            let decision = on_store.check_n("k", 1).await.unwrap();
            assert_eq!(decision.policy(), Some(tier));
            got += usize::from(decision.is_allowed());
        }
        let expected = (0..checks).filter(|_| twin.check("k").is_allowed()).count();
        assert_eq!(got, expected, "{tier}");
        got
    };
    assert_eq!(same("paid", 3).await, 3);
    on_store.set_resolver(directory("free"));
    twin.set_resolver(directory("free"));
    same("free", 3).await;
    let gold = async || {
        vec![
            Tier::limited("free", on(&store, "api", 2).await),
            Tier::limited("gold", on(&store, "api", 20).await),
        ]
    };
    on_store
        .replace(gold().await, "free", directory("gold"))
        .unwrap();
    twin.replace(
        vec![
            Tier::limited("free", gcra(2)),
            Tier::limited("gold", gcra(20)),
        ],
        "free",
        directory("gold"),
    )
    .unwrap();
    assert!(same("gold", 25).await > 0);
    let refused = on_store.replace(
        vec![Tier::limited("free", on(&store, "elsewhere", 2).await)],
        "free",
        directory("free"),
    );
    assert!(matches!(refused, Err(ConfigError::Invalid(_))));
    assert_eq!(on_store.tiers(), ["free", "gold"]);
    tokio::time::advance(Duration::from_secs(3)).await;
    clock.advance(Duration::from_secs(3));
    assert_eq!(same("gold", 2).await, 1);
}

/// The resolver places a key as the caller typed it (here a number; an
/// `OrKey` from the layers), not by the text the store keys it under.
#[tokio::test(start_paused = true)]
async fn the_resolver_places_the_typed_key() {
    struct ByNumber;
    impl weir_rate::TierOf<u64> for ByNumber {
        fn tier_of<'a>(&'a self, key: &u64) -> Option<&'a str> {
            (*key >= 1000).then_some("paid")
        }
    }
    let store = MemoryStore::new();
    let tiers = StoreTiers::try_new(
        vec![
            Tier::limited("free", on(&store, "api", 2).await),
            Tier::limited("paid", on(&store, "api", 10).await),
        ],
        "free",
        ByNumber,
    )
    .unwrap();
    let decision = tiers.check_n_async(&1234u64, 1).await.unwrap();
    assert_eq!(decision.policy(), Some("paid"));
    assert_eq!(
        tiers.check_n_async(&7u64, 1).await.unwrap().policy(),
        Some("free")
    );
}

/// A tier's limiter, reached by name, changes that tier's limits in place.
#[tokio::test(start_paused = true)]
async fn a_tiers_limiter_changes_its_limits_in_place() {
    let (store, now) = (MemoryStore::new(), Now::default());
    let tiers = tiers(&store, &now).await;
    assert!(tiers.limiter("internal").is_none());
    assert!(tiers.limiter("gold").is_none());
    now.set("free");
    assert_eq!(checks_of(&tiers, "k", 3).await, [true, true, false]);
    let free = tiers.limiter("free").unwrap();
    free.set_limits(&[weir_store::Limit::of(&gcra(4))]).unwrap();
    // 30 s on, the old two a minute would allow one; four a minute two.
    tokio::time::advance(Duration::from_secs(30)).await;
    assert_eq!(checks_of(&tiers, "k", 3).await, [true, true, false]);
}
