//! Extreme durations, costs and dimensions at every public entry point of
//! weir-limits: each gets a typed error, saturates, or has the documented
//! outcome (plain-rule counters wrap, so that decrements undo increments
//! exactly); none panics. Tests run in debug builds, where an unchecked
//! `+` would panic on overflow.

use std::num::{NonZeroU64, NonZeroUsize};
use std::time::Duration;
use weir_limits::clock::{Clock, ManualClock, MonotonicClock, RecentClock, StdClock, Timestamp};
use weir_limits::sketch::Locator;
use weir_limits::{
    ConfigError, Estimator, HeavyHitters, Inflight, Layout, Observation, Rate, Shape,
    ShardedEstimator, Update,
};
use weir_primitives::time::duration_to_nanos;

/// Costs a caller might pass on purpose or by a bug.
const COSTS: [isize; 6] = [isize::MAX, isize::MAX, isize::MIN, isize::MIN, -1, 1];

/// Durations from nothing to the largest `Duration`.
const DURATIONS: [Duration; 6] = [
    Duration::ZERO,
    Duration::from_nanos(1),
    Duration::from_nanos(u64::MAX),
    Duration::from_secs(u64::MAX),
    Duration::MAX,
    Duration::from_millis(1),
];

#[test]
fn shapes_reject_impossible_dimensions_with_typed_errors() {
    let errors = [
        (Shape::try_new(0, 1, Layout::Rows), ConfigError::ZeroHashes),
        (Shape::try_new(1, 0, Layout::Rows), ConfigError::ZeroSlots),
        (
            Shape::try_new(usize::MAX, 1, Layout::Rows),
            ConfigError::TooManyHashes {
                requested: usize::MAX,
                max: 16,
            },
        ),
        (
            Shape::try_new(usize::MAX, 1, Layout::Blocked),
            ConfigError::TooManyHashes {
                requested: usize::MAX,
                max: 8,
            },
        ),
    ];
    for (got, expected) in errors {
        assert_eq!(got.unwrap_err(), expected);
    }
    for layout in [Layout::Rows, Layout::Blocked] {
        assert!(matches!(
            Shape::try_new(4, usize::MAX, layout),
            Err(ConfigError::TooManyCells { .. })
        ));
    }
    // Error targets: out of (0, 1), not numbers, or so small that the
    // sketch would not fit.
    for (epsilon, delta) in [
        (0.0, 0.5),
        (1.0, 0.5),
        (f64::NAN, 0.5),
        (0.5, f64::NAN),
        (f64::INFINITY, 0.5),
        (-0.1, 0.5),
        (0.5, f64::NEG_INFINITY),
    ] {
        assert!(matches!(
            Shape::try_for_error(epsilon, delta),
            Err(ConfigError::InvalidFraction(_))
        ));
    }
    assert!(matches!(
        Shape::try_for_error(f64::MIN_POSITIVE, 0.5),
        Err(ConfigError::TooManyCells { .. })
    ));
    assert!(matches!(
        Shape::try_for_error(0.5, f64::MIN_POSITIVE),
        Err(ConfigError::TooManyHashes { .. })
    ));
    assert!(Shape::try_new(0, usize::MAX, Layout::Rows).is_err());
    assert!(Shape::try_new(usize::MAX, 0, Layout::Rows).is_err());
}

#[test]
fn estimators_take_extreme_costs_without_panicking() {
    for update in [Update::Plain, Update::Conservative] {
        let e = Estimator::with_update(Shape::rows::<2, 64>().with_seed(1), update);
        for cost in COSTS {
            e.incr(&"k", cost);
            e.decr(&"k", cost);
            e.get(&"k");
        }
    }
    // Conservative increments saturate; plain ones wrap (documented), and
    // a plain decrement then undoes its increment exactly.
    let conservative =
        Estimator::with_update(Shape::rows::<2, 64>().with_seed(1), Update::Conservative);
    conservative.incr(&"k", isize::MAX);
    assert_eq!(conservative.incr(&"k", isize::MAX), isize::MAX);
    let plain = Estimator::new(Shape::rows::<2, 64>().with_seed(1));
    plain.incr(&"k", isize::MAX);
    plain.incr(&"k", isize::MAX);
    plain.decr(&"k", isize::MAX);
    assert_eq!(plain.get(&"k"), isize::MAX);
}

#[test]
fn sharded_estimators_take_extreme_costs_and_intervals() {
    // (The default interval's saturation for huge sketches is checked
    // beside it: `sharded::tests::the_default_flush_interval_saturates`.)
    for every in [1, usize::MAX] {
        let s = ShardedEstimator::with_flush_every(
            Shape::blocked::<2, 64>().with_seed(1),
            NonZeroUsize::new(every).unwrap(),
        );
        for cost in COSTS {
            s.incr(&"k", cost);
            s.decr(&"k", cost);
        }
        s.flush();
        // Deltas are modular: what went in and out again leaves nothing.
        assert_eq!(s.get(&"k"), 0, "flush every {every}");
        std::thread::scope(|scope| {
            scope.spawn(|| s.incr(&"k", isize::MAX));
        });
        assert_eq!(s.get(&"k"), isize::MAX);
    }
}

#[test]
fn inflight_guards_undo_extreme_costs_exactly() {
    let inflight = Inflight::with_shape(Shape::rows::<2, 64>().with_seed(1));
    let mut guards = Vec::new();
    for cost in COSTS {
        let (mut guard, _) = inflight.incr(&"origin", cost);
        guard.incr(cost);
        guard.get();
        guards.push(guard);
    }
    drop(guards);
    // Whatever wrapped on the way up unwraps on the way down.
    assert_eq!(inflight.get(&"origin"), 0);
    let pingora = weir_limits::pingora::inflight::Inflight::new();
    let (guard, _) = pingora.incr("origin", isize::MAX);
    guard.incr();
    drop(guard);
    assert_eq!(pingora.incr("origin", 1).1, 1);
}

#[test]
fn rates_reject_impossible_intervals_and_survive_any_clock() {
    assert_eq!(
        Rate::try_new(Duration::ZERO).unwrap_err(),
        ConfigError::ZeroWindow
    );
    for too_long in [
        Duration::from_nanos(u64::MAX) + Duration::from_nanos(1),
        Duration::from_secs(u64::MAX),
        Duration::MAX,
    ] {
        assert_eq!(
            Rate::try_new(too_long).unwrap_err(),
            ConfigError::WindowTooLong
        );
        assert!(
            weir_limits::pingora::rate::Rate::try_with_clock(too_long, ManualClock::new()).is_err()
        );
    }
    for interval in [Duration::from_nanos(1), Duration::from_nanos(u64::MAX)] {
        let clock = ManualClock::new();
        let rate = Rate::try_with_clock(interval, clock.clone()).unwrap();
        let pingora =
            weir_limits::pingora::rate::Rate::try_with_clock(interval, clock.clone()).unwrap();
        // Forwards to the end of time, backwards, and past the end.
        for at in DURATIONS.into_iter().chain([Duration::from_secs(1)]) {
            clock.set(at);
            clock.advance(Duration::MAX);
            for cost in COSTS {
                rate.observe(&"k", cost);
                pingora.observe(&"k", cost);
            }
            let c = rate.components(&"k");
            assert!((0.0..1.0).contains(&c.elapsed_fraction), "{c:?}");
            assert!(
                !rate.rate(&"k").is_nan() && !rate.components(&"k").sliding_per_second().is_nan()
            );
            pingora.rate(&"k");
            pingora.rate_with(
                &"k",
                weir_limits::pingora::rate::PROPORTIONAL_RATE_ESTIMATE_CALC_FN,
            );
            clock.set(at);
            rate.observe(&"k", 1);
        }
    }
}

#[test]
fn heavy_hitters_saturate_extreme_costs() {
    for update in [Update::Plain, Update::Conservative] {
        for capacity in [1, usize::MAX] {
            let heavy = HeavyHitters::with_sketch(
                NonZeroU64::MAX,
                Shape::rows::<2, 64>().with_seed(1),
                update,
                NonZeroUsize::new(capacity).unwrap(),
            );
            assert_eq!(heavy.threshold(), isize::MAX);
            for cost in COSTS {
                for key in [1u32, 2] {
                    heavy.record(&key, cost);
                    heavy.get(&key);
                }
            }
            heavy.heavy_hitters();
            heavy.memory_bytes();
            assert!(heavy.admitted() <= capacity);
        }
    }
    // Once admitted, a key's exact count saturates instead of overflowing.
    let heavy = HeavyHitters::new(NonZeroU64::new(1).unwrap());
    for _ in 0..3 {
        heavy.record(&"k", isize::MAX);
    }
    let Observation::Heavy(count) = heavy.record(&"k", isize::MAX) else {
        panic!("an admitted key reads light");
    };
    assert_eq!(
        (count.since_admission, count.total()),
        (isize::MAX, isize::MAX)
    );
    // Negative costs count as nothing.
    assert_eq!(heavy.record(&"other", isize::MIN), Observation::Light(0));
}

#[test]
fn clocks_and_timestamps_saturate() {
    for d in DURATIONS {
        let nanos = duration_to_nanos(d);
        assert_eq!(u128::from(nanos), d.as_nanos().min(u128::from(u64::MAX)));
        let clock = ManualClock::new();
        clock.set(d);
        clock.advance(d);
        clock.advance(Duration::MAX);
        assert_eq!(clock.now_nanos(), u64::MAX);
        let now: Timestamp<ManualClock> = clock.now();
        assert_eq!((now + d).as_nanos(), u64::MAX);
        let start = Timestamp::<ManualClock>::from_nanos(0);
        assert_eq!(start.saturating_duration_since(now), Duration::ZERO);
        assert_eq!(
            (start + d).saturating_duration_since(start),
            Duration::from_nanos(nanos)
        );
    }
    // Clocks without an input still read, whatever the process's uptime.
    let readings = [
        MonotonicClock::new().now_nanos(),
        StdClock::new().now_nanos(),
        RecentClock::new().now_nanos(),
    ];
    assert!(readings.iter().all(|&r| r < u64::MAX));
    // Locators hash any key without a size limit.
    let locator = Locator::new(Shape::rows::<16, 1>());
    assert_eq!(locator.locate(&vec![0u8; 1 << 16]).len(), 16);
}
