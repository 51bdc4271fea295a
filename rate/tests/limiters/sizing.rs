//! The sketch limiter's sizing rule, checked on a simulated clock: at the
//! size `shape_for_load` picks, keys within their quota lose at most
//! the target fraction of their checks to collisions (the sketch admits at
//! most that share fewer than the exact limiter on the same requests); well
//! below that size, far more.
#![cfg(not(loom))]

use std::num::{NonZeroU32, NonZeroU64};
use weir_limits::clock::ManualClock;
use weir_primitives::random::SplitMix64;
use weir_rate::clock::Timestamp;
use weir_rate::{Gcra, KeyedLimiter, Quota, SketchLimiter};
use weir_rate::{Layout, Shape};

const KEYS: u64 = 2_000;
/// Each key's mean rate: half its quota.
const KEY_RATE: f64 = 5.0;
const SECONDS: f64 = 20.0;

/// Every key's requests as independent (Poisson) arrivals, merged in time
/// order: `(nanoseconds, key)`.
fn arrivals(seed: u64) -> Vec<(u64, u64)> {
    let mut random = SplitMix64::new(seed);
    let mut uniform = move || (random.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
    let mut events = Vec::new();
    for key in 0..KEYS {
        let mut t = 0.0;
        loop {
            t += -(1.0 - uniform()).ln() / KEY_RATE;
            if t >= SECONDS {
                break;
            }
            events.push(((t * 1e9) as u64, key));
        }
    }
    events.sort_unstable();
    events
}

/// The share of all checks the exact limiter allows and the sketch of this
/// shape does not: (exact admissions − sketch admissions) / checks.
fn wrong_denials(quota: Quota, hashes: usize, slots: usize, events: &[(u64, u64)]) -> f64 {
    let exact = KeyedLimiter::with_clock(Gcra::new(quota), ManualClock::new());
    let shape = Shape::try_new(hashes, slots, Layout::Rows)
        .unwrap()
        .with_seed(11);
    let sketch = SketchLimiter::with_clock(quota, shape, ManualClock::new());
    let (mut by_exact, mut by_sketch) = (0usize, 0usize);
    for &(now, key) in events {
        by_exact += usize::from(
            exact
                .check_n_at(&key, 1, Timestamp::from_nanos(now))
                .unwrap()
                .is_allowed(),
        );
        by_sketch += usize::from(
            sketch
                .check_n_at(&key, 1, Timestamp::from_nanos(now))
                .unwrap()
                .is_allowed(),
        );
    }
    assert!(by_sketch <= by_exact, "the sketch is never looser in total");
    (by_exact - by_sketch) as f64 / events.len() as f64
}

#[test]
fn at_the_rules_size_keys_within_quota_are_rarely_wrongly_denied() {
    // Burst 1: a cell that is busy at all denies, the rule's worst case.
    let quota = Quota::per_second(NonZeroU32::new(10).unwrap()).allow_burst(NonZeroU32::MIN);
    let load = NonZeroU64::new((KEYS as f64 * KEY_RATE) as u64).unwrap();
    let events = arrivals(5);
    for target in [0.01, 0.05] {
        let shape = SketchLimiter::shape_for_load(quota, load, target).unwrap();
        let (hashes, slots) = (shape.hashes(), shape.slots());
        let at_size = wrong_denials(quota, hashes, slots, &events);
        assert!(
            at_size <= target,
            "{hashes} x {slots}: {at_size:.4} wrongly denied, target {target}"
        );
        // The check can fail: an eighth of the size misses the target by far.
        let undersized = wrong_denials(quota, hashes, slots / 8, &events);
        assert!(
            undersized > 2.0 * target,
            "{hashes} x {}: {undersized:.4} wrongly denied",
            slots / 8
        );
    }
}

#[test]
fn the_rule_rejects_impossible_targets() {
    let quota = Quota::per_second(NonZeroU32::new(10).unwrap());
    let load = NonZeroU64::new(1000).unwrap();
    for bad in [0.0, 1.0, -0.5, f64::NAN] {
        assert!(
            SketchLimiter::shape_for_load(quota, load, bad).is_err(),
            "{bad}"
        );
    }
    assert!(SketchLimiter::shape_for_load(quota, NonZeroU64::MAX, 1e-9).is_err());
}
