//! Limits per key: each key decided by its tier's quota, a change of tier
//! read as a change of quota for that key alone (its spending carries
//! over), unlimited tiers, settling by the tier that decided, and tiers
//! that cannot be checked together refused.

use proptest::prelude::*;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use weir_rate::clock::ManualClock;
use weir_rate::{
    CheckKey, ConfigError, FixedWindow, Gcra, KeyedLimiter, PerKeyQuota, Quota, SettleKey,
    SlidingWindow, Tier, TierOf, TieredLimiter, nonzero,
};

/// Tiers looked up in a map the test changes while the limiter serves.
#[derive(Clone, Default)]
struct Directory(Arc<Mutex<HashMap<String, &'static str>>>);

impl Directory {
    fn put(&self, key: &str, tier: &'static str) {
        self.0.lock().unwrap().insert(key.to_owned(), tier);
    }
}

impl TierOf<str> for Directory {
    fn tier_of<'a>(&'a self, key: &str) -> Option<&'a str> {
        self.0.lock().unwrap().get(key).copied()
    }
}

/// Every key in the default tier.
fn no_tier(_: &str) -> Option<&'static str> {
    None
}

fn gcra_per_minute(n: u32) -> Gcra {
    Gcra::new(Quota::try_new(n, Duration::from_secs(60)).unwrap())
}

/// free 2, paid 10 a minute, internal unlimited; the default free.
fn api_tiers() -> Vec<Tier<Gcra>> {
    vec![
        Tier::limited("free", gcra_per_minute(2)),
        Tier::limited("paid", gcra_per_minute(10)),
        Tier::unlimited("internal"),
    ]
}

fn tiered(
    directory: &Directory,
    clock: &ManualClock,
) -> TieredLimiter<String, Gcra, Directory, ManualClock> {
    TieredLimiter::try_with_clock(api_tiers(), "free", directory.clone(), clock.clone()).unwrap()
}

fn allowed(limiter: &impl CheckKey<str>, key: &str, n: usize) -> usize {
    (0..n)
        .filter(|_| limiter.check_n(key, 1).unwrap().is_allowed())
        .count()
}

#[test]
fn each_key_gets_its_tiers_quota_and_name() {
    let (directory, clock) = (Directory::default(), ManualClock::new());
    directory.put("pk_1", "paid");
    directory.put("ops", "internal");
    directory.put("typo", "no-such-tier");
    let limiter = tiered(&directory, &clock);
    assert_eq!(allowed(&limiter, "anon", 20), 2);
    assert_eq!(allowed(&limiter, "pk_1", 20), 10);
    assert_eq!(allowed(&limiter, "ops", 1000), 1000);
    assert_eq!(
        allowed(&limiter, "typo", 20),
        2,
        "an unknown tier is the default"
    );
    let paid = limiter.check("pk_1");
    assert_eq!(paid.policy(), Some("paid"));
    assert_eq!(paid.headers("api")[0].1, "\"paid\";q=10;w=60");
    let free = limiter.check("anon");
    assert_eq!(free.headers("api")[0].1, "\"free\";q=2;w=60");
    let internal = limiter.check("ops");
    assert!(internal.is_unlimited() && internal.headers("api").is_empty());
    assert_eq!(internal.policy(), Some("internal"));
    // The unlimited tier counted nothing: the key holds no state.
    assert_eq!(limiter.keys().len(), 3);
}

#[test]
fn a_key_moved_down_keeps_what_it_spent_and_one_moved_up_gets_the_room() {
    let (directory, clock) = (Directory::default(), ManualClock::new());
    directory.put("k", "paid");
    let limiter = tiered(&directory, &clock);
    // GCRA allows a unit while the key's schedule (its stored time, one
    // interval T further per unit) stays within now + burst·T.
    // Paid: T = 6 s, burst 10. Eight units: the stored time is 48 s.
    assert_eq!(allowed(&limiter, "k", 8), 8);
    directory.put("k", "free");
    // Free: T = 30 s, burst 2: 48 + 30 > 0 + 60. A fresh free key would
    // get 2; this one gets none, its spending read at the free rate.
    assert_eq!(allowed(&limiter, "k", 5), 0, "no fresh free quota");
    clock.advance(Duration::from_secs(30));
    // 48 + 30 ≤ 30 + 60: one, and the stored time is 78 s.
    assert_eq!(allowed(&limiter, "k", 5), 1);
    directory.put("k", "paid");
    // Back in paid: 84 and 90 ≤ 30 + 60: two.
    assert_eq!(allowed(&limiter, "k", 20), 2);
    // Moved to the unlimited tier and back: nothing counted meanwhile,
    // nothing forgotten.
    directory.put("k", "internal");
    assert_eq!(allowed(&limiter, "k", 50), 50);
    directory.put("k", "paid");
    assert_eq!(allowed(&limiter, "k", 5), 0);
}

#[test]
fn a_refund_is_made_by_the_tier_that_decided() {
    let (directory, clock) = (Directory::default(), ManualClock::new());
    directory.put("k", "paid");
    let limiter = tiered(&directory, &clock);
    let admitted = limiter.check_n("k", 10).unwrap();
    assert!(admitted.is_allowed());
    directory.put("k", "free");
    // Settled at 5 of 10 by paid's rate: 5 units of paid's 6 s each come
    // back (30 s of time), not 5 of free's 30 s (150 s), which would hand
    // the key more than it spent.
    let Ok(()) = limiter.settle("k", &admitted, 10, 5).into_inner();
    directory.put("k", "paid");
    assert_eq!(allowed(&limiter, "k", 20), 5);
}

#[test]
fn tiers_change_while_serving_and_bad_tiers_are_refused() {
    let (directory, clock) = (Directory::default(), ManualClock::new());
    let limiter = tiered(&directory, &clock);
    assert_eq!(allowed(&limiter, "anon", 5), 2);
    limiter
        .set_tiers(
            vec![
                Tier::limited("free", gcra_per_minute(4)),
                Tier::limited("paid", gcra_per_minute(10)),
            ],
            "free",
        )
        .unwrap();
    assert_eq!(limiter.tiers(), ["free", "paid"]);
    // Two units of 30 s each are a stored time of 60 s: at the new 15 s
    // interval with a tolerance of 60 s, nothing more fits now.
    assert_eq!(
        allowed(&limiter, "anon", 5),
        0,
        "what was spent carries over"
    );
    clock.advance(Duration::from_secs(30));
    assert_eq!(
        allowed(&limiter, "anon", 5),
        2,
        "the new interval refills it"
    );

    let per =
        |window: u64| FixedWindow::new(Quota::try_new(5, Duration::from_secs(window)).unwrap());
    let refused = [
        TieredLimiter::<String, _, _>::try_new(
            vec![Tier::limited("a", per(1)), Tier::limited("b", per(60))],
            "a",
            no_tier,
        )
        .map(|_| ()),
        TieredLimiter::<String, _, _>::try_new(
            vec![Tier::limited("a", per(1)), Tier::limited("a", per(1))],
            "a",
            no_tier,
        )
        .map(|_| ()),
        TieredLimiter::<String, _, _>::try_new(vec![Tier::limited("a", per(1))], "b", no_tier)
            .map(|_| ()),
        TieredLimiter::<String, FixedWindow, _>::try_new(vec![Tier::unlimited("a")], "a", no_tier)
            .map(|_| ()),
    ];
    for result in refused {
        assert!(matches!(result, Err(ConfigError::Tiers(_))), "{result:?}");
    }
    // A change to another layout leaves the tiers as they were.
    let windows =
        TieredLimiter::<String, _, _>::try_new(vec![Tier::limited("a", per(1))], "a", no_tier)
            .unwrap();
    assert!(
        windows
            .set_tiers(vec![Tier::limited("a", per(60))], "a")
            .is_err()
    );
    assert_eq!(windows.tiers(), ["a"]);
}

/// One step of a key's life: a tier (by place) and a cost, after a wait.
fn steps() -> impl Strategy<Value = Vec<(usize, u32, u64)>> {
    prop::collection::vec((0usize..3, 1u32..4, 0u64..3_000), 1..80)
}

/// A tiered limiter decides a key as a keyed limiter of that key alone
/// whose limit is set to the key's tier before each check: a tier change
/// is a quota change for that key, nothing more.
fn as_set_limit<L: PerKeyQuota + 'static>(limits: [L; 3], schedule: &[(usize, u32, u64)])
where
    L::State: Send,
{
    let clock = ManualClock::new();
    let tier_now: Arc<Mutex<usize>> = Arc::default();
    let names = ["a", "b", "c"];
    let tiers = limits
        .iter()
        .zip(names)
        .map(|(l, n)| Tier::limited(n, l.clone()))
        .collect();
    let resolver = {
        let tier_now = Arc::clone(&tier_now);
        move |_: &str| Some(names[*tier_now.lock().unwrap()])
    };
    let tiered =
        TieredLimiter::<String, _, _, _>::try_with_clock(tiers, "a", resolver, clock.clone())
            .unwrap();
    let twin = KeyedLimiter::<String, _, _>::with_clock(limits[0].clone(), clock.clone());
    for (i, &(tier, cost, wait_ms)) in schedule.iter().enumerate() {
        clock.advance(Duration::from_millis(wait_ms));
        *tier_now.lock().unwrap() = tier;
        twin.set_limit(limits[tier].clone());
        let got = tiered.check_n("k", cost);
        let expected = twin.check_n("k", cost);
        let summary = |d: &weir_rate::Decision| (d.is_allowed(), d.remaining(), d.retry_after());
        assert_eq!(
            got.as_ref().map(summary).ok(),
            expected.as_ref().map(summary).ok(),
            "step {i}"
        );
    }
}

proptest! {
    #[test]
    fn a_tier_change_is_a_quota_change_for_that_key(schedule in steps()) {
        as_set_limit([gcra_per_minute(3), gcra_per_minute(40), gcra_per_minute(7)], &schedule);
        let window = |n| FixedWindow::new(Quota::try_new(n, Duration::from_secs(2)).unwrap());
        as_set_limit([window(3), window(9), window(1)], &schedule);
        let sliding = |n| SlidingWindow::try_new(Quota::try_new(n, Duration::from_secs(2)).unwrap(), 4).unwrap();
        as_set_limit([sliding(4), sliding(12), sliding(2)], &schedule);
    }
}

#[test]
fn the_limiter_is_a_checker_for_the_layers() {
    fn takes<C: weir_rate::CheckKeyAsync<str> + SettleKey<str>>(_: &C) {}
    let limiter = TieredLimiter::<String, _, _>::try_new(
        vec![Tier::limited(
            "all",
            Gcra::new(Quota::per_second(nonzero!(5))),
        )],
        "all",
        no_tier,
    )
    .unwrap();
    takes(&limiter);
}

/// A charge owed by a decision whose tier has since been removed is still
/// charged (by the key's tier now): the work was done, and skipping the
/// charge would loosen the limit. A refund then stays unmade (stricter).
#[test]
fn a_charge_owed_by_a_removed_tier_is_still_charged() {
    let (directory, clock) = (Directory::default(), ManualClock::new());
    directory.put("k", "paid");
    let limiter = tiered(&directory, &clock);
    let admitted = limiter.check_n("k", 1).unwrap();
    limiter
        .set_tiers(
            vec![
                Tier::limited("free", gcra_per_minute(2)),
                Tier::limited("gold", gcra_per_minute(10)),
            ],
            "free",
        )
        .unwrap();
    directory.put("k", "gold");
    // The response turned out to cost 9: 8 more, charged by gold.
    let Ok(()) = limiter.settle("k", &admitted, 1, 9).into_inner();
    assert_eq!(allowed(&limiter, "k", 20), 1, "9 of gold's 10 spent");
}

/// Old: `k` is paid. New: `k` is gold, and paid is gone. A check that saw
/// the new tiers with the old resolver (or the old tiers with the new
/// one) would find `k`'s tier missing and decide it as free.
#[test]
fn tiers_and_resolver_replaced_together_are_never_seen_mixed() {
    type Limiter = TieredLimiter<String, Gcra, HashMap<String, String>>;
    let old = || {
        (
            vec![
                Tier::limited("free", gcra_per_minute(1)),
                Tier::unlimited("paid"),
            ],
            HashMap::from([("k".to_owned(), "paid".to_owned())]),
        )
    };
    let new = || {
        (
            vec![
                Tier::limited("free", gcra_per_minute(1)),
                Tier::unlimited("gold"),
            ],
            HashMap::from([("k".to_owned(), "gold".to_owned())]),
        )
    };
    let (tiers, directory) = old();
    let limiter = Arc::new(Limiter::try_new(tiers, "free", directory).unwrap());
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let checker = {
        let (limiter, stop) = (Arc::clone(&limiter), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut seen = HashMap::<String, usize>::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let policy = limiter.check("k").policy().unwrap_or("none").to_owned();
                *seen.entry(policy).or_default() += 1;
            }
            seen
        })
    };
    for round in 0..20_000 {
        let (tiers, directory) = if round % 2 == 0 { new() } else { old() };
        limiter.replace(tiers, "free", directory).unwrap();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let seen = checker.join().unwrap();
    assert_eq!(
        seen.get("free"),
        None,
        "a check saw a mixed table: {seen:?}"
    );
    assert!(
        seen.contains_key("paid") || seen.contains_key("gold"),
        "{seen:?}"
    );

    // A refused replacement leaves both as they were.
    let (_, directory) = new();
    let refused = limiter.replace(vec![Tier::unlimited("gold")], "gold", directory);
    assert!(matches!(refused, Err(ConfigError::Tiers(_))));
    assert_eq!(limiter.tiers(), ["free", "paid"]);
    assert_eq!(limiter.check("k").policy(), Some("paid"));
}
