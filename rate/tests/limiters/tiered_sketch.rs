//! Tiers per key in fixed memory: a roomy sketch decides each key as the
//! exact tiers do (tier changes included), keys of different tiers that
//! share every cell are each held no looser than exactly, and a
//! settlement charges by the tier that decided.

use proptest::prelude::*;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use weir_rate::clock::ManualClock;
use weir_rate::{Decision, Gcra, Quota, SettleKey, Shape, Tier, TieredLimiter, TieredSketch};

fn gcra(per_minute: u32, burst: u32) -> Gcra {
    Gcra::new(
        Quota::try_new(per_minute, Duration::from_secs(60))
            .unwrap()
            .allow_burst(burst.try_into().unwrap()),
    )
}

fn tiers() -> Vec<Tier<Gcra>> {
    vec![
        Tier::limited("a", gcra(3, 2)),
        Tier::limited("b", gcra(40, 10)),
        Tier::limited("c", gcra(7, 1)),
        Tier::unlimited("d"),
    ]
}

const NAMES: [&str; 4] = ["a", "b", "c", "d"];

proptest! {
    /// With room enough that no key's every cell is shared, the sketch
    /// decides as the exact limiter: tier changes carry the spent time
    /// over alike.
    #[test]
    fn a_roomy_sketch_decides_as_the_exact_tiers(
        schedule in prop::collection::vec((0usize..3, 0usize..4, 1u32..3, 0u64..4_000), 1..120),
    ) {
        let clock = ManualClock::new();
        let placed: Arc<Mutex<[usize; 3]>> = Arc::default();
        let resolver = || {
            let placed = Arc::clone(&placed);
            move |key: &str| {
                let key: usize = key.parse().unwrap();
                Some(NAMES[placed.lock().unwrap()[key]])
            }
        };
        let sketch = TieredSketch::try_with_clock(tiers(), "a", resolver(), Shape::rows::<4, 4096>(), clock.clone()).unwrap();
        let exact = TieredLimiter::<String, _, _, _>::try_with_clock(tiers(), "a", resolver(), clock.clone()).unwrap();
        for (i, &(key, tier, cost, wait_ms)) in schedule.iter().enumerate() {
            clock.advance(Duration::from_millis(wait_ms));
            placed.lock().unwrap()[key] = tier;
            let key = key.to_string();
            let summary = |d: &Decision| (d.is_allowed(), d.remaining(), d.retry_after(), d.policy().map(str::to_owned));
            let got = sketch.check_n(key.as_str(), cost);
            let expected = exact.check_n(key.as_str(), cost);
            prop_assert_eq!(got.as_ref().map(summary).ok(), expected.as_ref().map(summary).ok(), "step {}", i);
        }
    }

    /// Three keys of three tiers on one cell: each is allowed no more than
    /// its tier allows it exactly, whatever the others spend.
    #[test]
    fn keys_of_different_tiers_on_shared_cells_are_never_looser(
        schedule in prop::collection::vec((0usize..3, 0u64..3_000), 1..200),
    ) {
        let clock = ManualClock::new();
        let by_key = |key: &str| Some(NAMES[key.parse::<usize>().unwrap()]);
        let sketch = TieredSketch::try_with_clock(tiers(), "a", by_key, Shape::rows::<1, 1>(), clock.clone()).unwrap();
        let exact = TieredLimiter::<String, _, _, _>::try_with_clock(tiers(), "a", by_key, clock.clone()).unwrap();
        let mut allowed = [[0usize; 2]; 3];
        for &(key, wait_ms) in &schedule {
            clock.advance(Duration::from_millis(wait_ms));
            let name = key.to_string();
            allowed[key][0] += usize::from(sketch.check(name.as_str()).is_allowed());
            allowed[key][1] += usize::from(exact.check(name.as_str()).is_allowed());
        }
        for (key, [by_sketch, exactly]) in allowed.iter().enumerate() {
            prop_assert!(by_sketch <= exactly, "key {}: {} > {}", key, by_sketch, exactly);
        }
    }
}

/// A response that cost more than its check is charged by the tier that
/// decided, even after the key moved to a tier that spends more per unit.
#[test]
fn a_settlement_charges_by_the_tier_that_decided() {
    let clock = ManualClock::new();
    let tier: Arc<Mutex<&'static str>> = Arc::new(Mutex::new("b"));
    let resolver = {
        let tier = Arc::clone(&tier);
        move |_: &str| Some(*tier.lock().unwrap())
    };
    let sketch =
        TieredSketch::try_with_clock(tiers(), "a", resolver, Shape::rows::<4, 4096>(), clock)
            .unwrap();
    // b: 40 a minute, burst 10.
    let admitted = sketch.check_n("k", 1).unwrap();
    *tier.lock().unwrap() = "a";
    SettleKey::<str>::settle(&sketch, "k", &admitted, 1, 5)
        .into_inner()
        .unwrap();
    *tier.lock().unwrap() = "b";
    // Five of b's units spent: five more of its burst of ten remain.
    let left = (0..10).filter(|_| sketch.check("k").is_allowed()).count();
    assert_eq!(left, 5);
    // A refund is not made: a sketch lowers no cell.
    let admitted = sketch.check_n("j", 4).unwrap();
    SettleKey::<str>::settle(&sketch, "j", &admitted, 4, 1)
        .into_inner()
        .unwrap();
    assert_eq!(
        (0..10).filter(|_| sketch.check("j").is_allowed()).count(),
        6
    );
}
