//! Store limits read from a file: a tier's limits build the limiter the
//! typed values build (all-or-nothing included), change a limiter's
//! limits while serving, and mistakes are refused at the field's path.
#![cfg(feature = "serde")]

use weir_rate::spec::TiersSpec;
use weir_rate::{CheckKeyAsync, FixedWindow, Quota, SlidingWindow, Tier, nonzero};
use weir_store::memory::{MemoryBackend, MemoryStore};
use weir_store::{StoreLimiter, StoreLimits, StoreTiers};

fn spec(text: &str) -> TiersSpec {
    toml::from_str(text).expect("a valid file")
}

const FILE: &str = r#"
    default = "free"
    [tiers]
    free = [
        { algorithm = "fixed_window", limit = 3, per = "1m" },
        { algorithm = "sliding_window", limit = 5, per = "1d", counters = 24 },
    ]
    internal = "unlimited"
"#;

async fn decisions(limiter: &impl CheckKeyAsync<str>, key: &str) -> Vec<(bool, u32)> {
    let mut out = Vec::new();
    for _ in 0..8 {
        let d = limiter.check_n_async(key, 1).await.unwrap();
        out.push((d.is_allowed(), d.remaining()));
    }
    out
}

#[tokio::test(start_paused = true)]
async fn a_tier_read_from_a_file_decides_as_its_typed_limits() {
    let store = MemoryStore::new();
    let mut tiers = Vec::new();
    for tier in spec(FILE).tiers::<StoreLimits>().unwrap() {
        tiers.push(match tier.limit() {
            Some(limits) => Tier::limited(
                tier.name(),
                StoreLimiter::<MemoryBackend>::builder_of(limits)
                    .prefix("file")
                    .connect(store.clone())
                    .await
                    .unwrap(),
            ),
            None => Tier::unlimited(tier.name()),
        });
    }
    let from_file =
        StoreTiers::try_new(tiers, "free", |k: &str| (k == "ops").then_some("internal")).unwrap();
    let typed: StoreLimiter<MemoryBackend> =
        StoreLimiter::builder(FixedWindow::new(Quota::per_minute(nonzero!(3))))
            .and(SlidingWindow::try_new(Quota::per_day(nonzero!(5)), 24).unwrap())
            .prefix("typed")
            .connect(store.clone())
            .await
            .unwrap();
    assert_eq!(
        decisions(&from_file, "k").await,
        decisions(&typed, "k").await
    );
    assert!(
        decisions(&from_file, "ops")
            .await
            .iter()
            .all(|(allowed, _)| *allowed)
    );

    // A changed file changes a running limiter's limits.
    let wider = spec(&FILE.replace("limit = 3,", "limit = 30,"));
    let limits = wider.tiers::<StoreLimits>().unwrap();
    let free = limits
        .iter()
        .find(|t| t.name() == "free")
        .unwrap()
        .limit()
        .unwrap();
    typed.set_limits(free.limits()).unwrap();
    // Three of the minute's 30 and of the day's 5 are spent: the day binds.
    let allowed = decisions(&typed, "k")
        .await
        .iter()
        .filter(|(a, _)| *a)
        .count();
    assert_eq!(allowed, 2);
}

#[test]
fn what_a_store_cannot_keep_is_refused_at_its_field() {
    let log = spec(&FILE.replace("\"fixed_window\"", "\"sliding_log\""));
    let error = log.tiers::<StoreLimits>().unwrap_err();
    assert_eq!(error.field(), "tiers.free[0].algorithm");
    let empty = spec(&FILE.replace(
        FILE[FILE.find("free = [").unwrap()..FILE.find("internal").unwrap()].trim(),
        "free = []",
    ));
    let error = empty.tiers::<StoreLimits>().unwrap_err();
    assert_eq!(error.field(), "tiers.free");
    let zero = spec(&FILE.replace("limit = 5,", "limit = 0,"));
    let error = zero.tiers::<StoreLimits>().unwrap_err();
    assert_eq!(error.field(), "tiers.free[1].limit");
    assert_eq!(error.config(), Some(&weir_rate::ConfigError::ZeroRate));
}
