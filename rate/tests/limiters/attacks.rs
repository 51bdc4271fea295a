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
    let limiter = KeyedLimiter::<u32, _>::builder(Gcra::new(q))
        .clock(ManualClock::new())
        .shards(usize::MAX)
        .build();
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
        FixedWindow, Forgettable, Gcra, KeyedLimiter, Quota, RateLimiter, SketchLimiter,
        SlidingLog, SlidingWindow, TokenBucket,
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
    fn hammer<L: Forgettable + Clone>(l: L, requests: &[(u64, u32)]) {
        let single = RateLimiter::with_clock(l.clone(), ManualClock::new());
        let keyed = KeyedLimiter::<u64, L, ManualClock>::with_clock(l.clone(), ManualClock::new());
        // One key at a time: every new key forgets the last into the
        // spill sketch, and restores its own from it.
        let one = std::num::NonZeroUsize::MIN;
        let bounded = KeyedLimiter::<u64, L>::builder(l)
            .clock(ManualClock::new())
            .shards(1)
            .max_keys(one)
            .build();
        for &(t, cost) in requests {
            let at = Timestamp::from_nanos(t);
            if let Ok(d) = single.check_n_at(cost, at) {
                single.refund(&d);
                let _ = d.headers("p");
            }
            for keyed in [&keyed, &bounded] {
                if let Ok(d) = keyed.check_n_at(&(t % 3), cost, at) {
                    keyed.refund(&(t % 3), &d);
                    let _ = d.headers("p");
                }
                let _ = keyed.allows(&7u64);
                let _ = keyed.peek_n(&(t % 5), cost);
            }
            let _ = single.peek_n(cost);
        }
        let _ = keyed.evict_idle();
        let _ = bounded.evict_idle();
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

/// A check stamped at the end of time must not move the
/// time its shard judges other keys at. With one shard every key shares
/// it; before the fix the shard judged every later check at `u64::MAX`,
/// where GCRA can only deny.
#[test]
fn a_far_future_check_leaves_other_keys_in_its_shard_alone() {
    use std::time::Duration;
    use weir_rate::CheckAtError;
    use weir_rate::clock::{Clock, MAX_AHEAD};
    let q = Quota::per_second(NonZeroU32::MIN);
    let clock = ManualClock::new();
    let keyed = KeyedLimiter::<&str, _>::builder(Gcra::new(q))
        .clock(clock.clone())
        .shards(1)
        .build();
    // The last is within the horizon a caller's time is trusted for: it
    // is judged at for its own key, and still for no other.
    let ahead = [
        Duration::MAX,
        Duration::from_secs(1 << 40),
        Duration::from_secs(3600),
        Duration::from_secs(30),
    ];
    for (i, ahead) in ahead.into_iter().enumerate() {
        let attack = keyed.check_n_at(&"attacker", 1, clock.now() + ahead);
        if ahead > MAX_AHEAD {
            assert!(
                matches!(attack, Err(CheckAtError::AheadOfClock { .. })),
                "{attack:?}"
            );
        } else {
            assert!(
                attack.unwrap().is_allowed(),
                "its own key is judged at its time"
            );
        }
        let victim = ["a", "b", "c", "d"][i];
        assert!(
            keyed.check(&victim).is_allowed(),
            "{victim} after {ahead:?}"
        );
        assert!(
            !keyed.check(&victim).is_allowed(),
            "{victim} spent its burst"
        );
        clock.advance(Duration::from_secs(1));
        assert!(keyed.check(&victim).is_allowed(), "{victim} refilled");
    }
}

mod caller_times {
    use proptest::prelude::*;
    use std::num::NonZeroU32;
    use std::time::Duration;
    use weir_rate::clock::{ManualClock, Timestamp};
    use weir_rate::{Gcra, KeyedLimiter, Quota, TokenBucket};

    /// Another key's check: its time (ordinary, beyond the horizon, or the
    /// end of time), key, cost, and whether it is refunded.
    fn stamped() -> impl Strategy<Value = Option<(u64, u8, u32, bool)>> {
        let at = prop_oneof![Just(u64::MAX), any::<u64>(), 0u64..200_000_000_000];
        prop_oneof![
            Just(None),
            (at, 1u8..4, 0u32..3, any::<bool>()).prop_map(Some)
        ]
    }

    proptest! {
        /// Whatever times a caller stamps its checks with, a key checked
        /// on the clock in the same shard decides exactly as it would
        /// alone.
        #[test]
        fn caller_times_never_change_another_keys_decisions(
            steps in proptest::collection::vec((0u64..400_000_000, stamped()), 1..80),
        ) {
            let q = Quota::per_second(NonZeroU32::new(4).unwrap())
                .allow_burst(NonZeroU32::new(2).unwrap());
            let limits = (Gcra::new(q), TokenBucket::new(q));
            let clock = ManualClock::new();
            let shared = KeyedLimiter::<u8, _>::builder(limits.clone()).clock(clock.clone()).shards(1).build();
            let alone = KeyedLimiter::<u8, _>::builder(limits).clock(clock.clone()).shards(1).build();
            for (gap, other) in steps {
                clock.advance(Duration::from_nanos(gap));
                if let Some((at, key, cost, refund)) = other
                    && let Ok(d) = shared.check_n_at(&key, cost, Timestamp::from_nanos(at))
                        && refund {
                            shared.refund(&key, &d);
                        }
                prop_assert_eq!(shared.check(&0), alone.check(&0));
            }
        }
    }
}

/// The single limiter has one state, so a far-future stamp would judge
/// every later check at the end of time: frozen for good.
#[test]
fn a_far_future_check_does_not_freeze_a_single_limiter() {
    use std::time::Duration;
    use weir_rate::clock::{Clock, MAX_AHEAD};
    use weir_rate::{CheckAtError, RateLimiter};
    let q = Quota::per_second(NonZeroU32::MIN);
    let clock = ManualClock::new();
    let single = RateLimiter::with_clock(Gcra::new(q), clock.clone());
    for ahead in [Duration::MAX, Duration::from_secs(1 << 40)] {
        let attack = single.check_n_at(1, clock.now() + ahead);
        assert!(
            matches!(attack, Err(CheckAtError::AheadOfClock { .. })),
            "{attack:?}"
        );
        assert!(single.check().is_allowed(), "after {ahead:?}");
        assert!(!single.check().is_allowed());
        clock.advance(Duration::from_secs(1));
    }
    // At the horizon a time is still judged at: the limiter waits for it,
    // and no longer than that.
    assert!(
        single
            .check_n_at(1, clock.now() + MAX_AHEAD)
            .unwrap()
            .is_allowed()
    );
    assert!(!single.check().is_allowed());
    clock.advance(MAX_AHEAD + Duration::from_secs(1));
    assert!(single.check().is_allowed());
}

/// A far-future check on the sketch raised its cells to the end of time,
/// denying every key sharing them forever (here one cell: every key).
#[test]
fn a_far_future_check_does_not_poison_sketch_cells() {
    use std::time::Duration;
    use weir_limits::Shape;
    use weir_rate::clock::{Clock, MAX_AHEAD, Timestamp};
    use weir_rate::{CheckAtError, SketchLimiter};
    let q = Quota::per_second(NonZeroU32::MIN);
    let clock = ManualClock::new();
    let sketch = SketchLimiter::with_clock(q, Shape::rows::<1, 1>(), clock.clone());
    for (key, cost, at) in [
        (1u32, 0, Timestamp::from_nanos(u64::MAX)),
        (2, 1, clock.now() + Duration::from_secs(1 << 40)),
        (3, 1, clock.now() + MAX_AHEAD + Duration::from_nanos(1)),
    ] {
        let attack = sketch.check_n_at(&key, cost, at);
        assert!(
            matches!(attack, Err(CheckAtError::AheadOfClock { .. })),
            "{attack:?}"
        );
    }
    assert!(sketch.check(&4u32).is_allowed());
    // Within the horizon a time holds the cell until then, and no longer.
    clock.advance(Duration::from_secs(1));
    assert!(
        sketch
            .check_n_at(&5u32, 1, clock.now() + MAX_AHEAD)
            .unwrap()
            .is_allowed()
    );
    assert!(!sketch.check(&6u32).is_allowed());
    clock.advance(MAX_AHEAD + Duration::from_secs(1));
    assert!(sketch.check(&6u32).is_allowed());
}
