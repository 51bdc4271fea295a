//! Extreme inputs at the in-process limiters' public entry points: each
//! gets a typed error or a documented, saturated outcome, never a panic,
//! and never loosens another key's limit.

use std::num::NonZeroU32;
use weir_rate::clock::ManualClock;
use weir_rate::{Gcra, KeyedLimiter, Quota};

/// A shard count beyond any power of two a `usize` holds is capped, not
/// an overflow inside the constructor.
#[test]
fn a_huge_shard_count_is_capped() {
    let q = Quota::per_second(NonZeroU32::MIN);
    let limiter =
        KeyedLimiter::<u32, _, _>::with_shards(Gcra::new(q), ManualClock::new(), usize::MAX);
    assert!(limiter.allows(&1));
    assert!(!limiter.allows(&1));
    assert!(limiter.allows(&2));
}

mod extremes {
    use proptest::prelude::*;
    use std::time::Duration;
    use weir_limits::Shape;
    use weir_rate::clock::{ManualClock, Timestamp};
    use weir_rate::{
        FixedWindow, Gcra, KeyedLimiter, Limiter, Quota, RateLimiter, SketchLimiter, SlidingLog,
        SlidingWindow, TokenBucket,
    };

    /// Times from the edges of the range as well as ordinary ones.
    fn time() -> impl Strategy<Value = u64> {
        prop_oneof![
            Just(0u64),
            Just(u64::MAX),
            Just(u64::MAX - 1),
            any::<u64>(),
            0u64..10_000_000_000,
        ]
    }

    fn cost() -> impl Strategy<Value = u32> {
        prop_oneof![Just(0u32), Just(1), Just(u32::MAX), any::<u32>(), 0u32..16]
    }

    fn window() -> impl Strategy<Value = Duration> {
        prop_oneof![
            Just(Duration::from_nanos(1)),
            Just(Duration::MAX),
            Just(Duration::from_secs(u64::MAX)),
            (1u64..u64::MAX).prop_map(Duration::from_nanos),
        ]
    }

    /// Every request against every container: no panic whatever the time,
    /// cost or quota (a quota the constructor rejects is a typed error).
    fn hammer<L: Limiter + Clone>(l: L, requests: &[(u64, u32)]) {
        let single = RateLimiter::with_clock(l.clone(), ManualClock::new());
        let keyed = KeyedLimiter::<u64, L, ManualClock>::with_clock(l, ManualClock::new());
        for &(t, cost) in requests {
            let at = Timestamp::from_nanos(t);
            if let Ok(d) = single.check_n_at(cost, at) {
                single.refund(&d);
                let _ = d.headers("p");
            }
            if let Ok(d) = keyed.check_n_at(&(t % 3), cost, at) {
                keyed.refund(&(t % 3), &d);
                let _ = d.headers("p");
            }
            let _ = single.peek_n(cost);
            let _ = keyed.allows(&7u64);
        }
        let _ = keyed.evict_idle();
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn no_time_cost_or_quota_panics(
            limit in prop_oneof![Just(1u32), Just(u32::MAX), 1u32..1000],
            window in window(),
            burst in prop_oneof![Just(1u32), Just(u32::MAX), 1u32..1000],
            counters in prop_oneof![Just(0u32), Just(1), Just(2), Just(u32::MAX), 0u32..64],
            requests in proptest::collection::vec((time(), cost()), 1..24),
        ) {
            let Ok(quota) = Quota::try_new(limit, window) else {
                return Ok(());
            };
            let quota = quota.try_burst(burst).unwrap_or(quota);
            hammer(Gcra::new(quota), &requests);
            hammer(TokenBucket::new(quota), &requests);
            hammer(FixedWindow::new(quota), &requests);
            if limit <= 1000 {
                hammer(SlidingLog::new(quota), &requests);
            }
            if let Ok(sw) = SlidingWindow::try_new(quota, counters) {
                hammer(sw, &requests);
            }
            let sketch = SketchLimiter::with_clock(quota, Shape::rows::<2, 64>(), ManualClock::new());
            for &(t, cost) in &requests {
                let _ = sketch.check_n_at(&(t % 5), cost, Timestamp::from_nanos(t));
            }
        }
    }
}

/// A key whose cells are all saturated at the end of time (a check
/// stamped `u64::MAX`) is answered, not retried forever, whatever the
/// cost (a cost of zero is always allowed, so it always commits).
#[test]
fn a_saturated_sketch_cell_answers_instead_of_spinning() {
    use weir_limits::Shape;
    use weir_rate::SketchLimiter;
    use weir_rate::clock::Timestamp;
    let q = Quota::per_second(NonZeroU32::MIN);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let end = Timestamp::from_nanos(u64::MAX);
        // One row of two cells, a fresh sketch per key: about half of the
        // keys land on the cell that is not the first one.
        for key in 0..16u32 {
            let sketch = SketchLimiter::with_clock(q, Shape::rows::<1, 2>(), ManualClock::new());
            for _ in 0..2 {
                let _ = sketch.check_n_at(&key, 0, end);
            }
        }
        let _ = tx.send(());
    });
    assert!(
        rx.recv_timeout(std::time::Duration::from_secs(10)).is_ok(),
        "a check on saturated cells never returned"
    );
}
