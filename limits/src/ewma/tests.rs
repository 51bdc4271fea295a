use super::*;
use crate::clock::ManualClock;
use crate::error::ConfigError;
use proptest::prelude::*;
use std::sync::Arc;

const ULP: f64 = 1.0 / 65536.0;

#[test]
fn windows_are_validated() {
    assert_eq!(
        EwmaWindow::try_new(Duration::ZERO),
        Err(ConfigError::ZeroWindow)
    );
    assert_eq!(
        EwmaWindow::try_new(Duration::MAX),
        Err(ConfigError::WindowTooLong)
    );
    let max = EwmaWindow::try_new(Duration::from_nanos(u64::MAX)).unwrap();
    assert_eq!(max.window_nanos(), u64::MAX);
    let one = EwmaWindow::try_new(Duration::from_nanos(1)).unwrap();
    assert_eq!(one.window(), Duration::from_nanos(1));
}

#[test]
fn extremes_never_panic() {
    for w in [1, 7, 1_000_000_000, u64::MAX] {
        let ewma = EwmaWindow::try_new(Duration::from_nanos(w)).unwrap();
        for old in [FixedRate::ZERO, FixedRate::EPSILON, FixedRate::MAX] {
            for elapsed in [0, 1, w / 2, w.saturating_sub(1), w, u64::MAX] {
                for events in [0, 1, u64::MAX] {
                    let r = ewma.update_fixed(old, elapsed, events);
                    let f = ewma.update(old.as_f64(), elapsed, events as f64);
                    assert!(f.is_finite());
                    if events == 0 && elapsed < w {
                        assert!(r <= old);
                    }
                }
            }
        }
    }
}

#[test]
fn reset_after_a_full_window() {
    let w = EwmaWindow::try_new(Duration::from_secs(1)).unwrap();
    let r = w.update_fixed(FixedRate::from_per_second(1000), 4_000_000_000, 8);
    assert_eq!(r, FixedRate::from_per_second(2));
    assert_eq!(
        w.decay_fixed(FixedRate::MAX, 1_000_000_000),
        FixedRate::ZERO
    );
}

#[test]
fn steady_traffic_converges_to_its_rate() {
    let w = EwmaWindow::try_new(Duration::from_secs(1)).unwrap();
    let (mut f, mut x) = (0.0, FixedRate::ZERO);
    // 250 events/s in bursts of 5 every 20 ms.
    for _ in 0..2000 {
        f = w.update(f, 20_000_000, 5.0);
        x = w.update_fixed(x, 20_000_000, 5);
    }
    assert!((f - 250.0).abs() < 1e-6, "{f}");
    assert!((x.as_f64() - 250.0).abs() < 0.01, "{x}");
}

#[test]
fn stateful_ewma_treats_backwards_time_as_no_time() {
    let clock = ManualClock::new();
    let ewma = Ewma::try_with_clock(Duration::from_secs(1), clock.clone()).unwrap();
    clock.set(Duration::from_millis(500));
    let a = ewma.record(10);
    clock.set(Duration::from_millis(100));
    let b = ewma.record(10);
    assert_eq!(a, FixedRate::from_per_second(10));
    assert_eq!(b, FixedRate::from_per_second(20));
    assert_eq!(ewma.rate(), b);
}

/// One record at a wild time far beyond the clock must not freeze the
/// estimator: the honest records after it decay as usual.
#[test]
fn a_far_future_record_does_not_freeze_the_rate() {
    for wild in [Duration::from_secs(86_400), Duration::MAX] {
        let clock = ManualClock::new();
        let ewma = Ewma::try_with_clock(Duration::from_secs(1), clock.clone()).unwrap();
        clock.set(Duration::from_secs(1));
        let _ = ewma.record_at(clock.now() + wild, 1);
        // 100 events a second for 10 s.
        for _ in 0..1000 {
            clock.advance(Duration::from_millis(10));
            ewma.record(1);
        }
        let rate = ewma.rate().as_f64();
        assert!((rate - 100.0).abs() < 1.0, "after {wild:?}: {rate}");
    }
}

/// A record at a time a window or more old on a clock that has not
/// gone back (a thread that read the clock, then was preempted) is a
/// time in the past, not a sign of a wild stored time: it counts as no
/// time passing, and the rate carries on from where it was instead of
/// restarting from one event.
#[test]
fn a_stale_record_does_not_wipe_the_rate() {
    for stale_ms in [99, 100, 101, 150, 5_000] {
        let clock = ManualClock::new();
        let ewma = Ewma::try_with_clock(Duration::from_millis(100), clock.clone()).unwrap();
        clock.set(Duration::from_secs(10));
        // 1000 events a second for 1 s.
        for _ in 0..1000 {
            clock.advance(Duration::from_millis(1));
            ewma.record(1);
        }
        let before = ewma.rate().as_f64();
        assert!((before - 1000.0).abs() < 10.0, "{before}");
        let stale = clock.now().as_nanos() - stale_ms * 1_000_000;
        let at_stale = ewma.record_at(Timestamp::from_nanos(stale), 1).as_f64();
        // One event more at no time passing: 1/window = 10 a second.
        assert!(
            (at_stale - (before + 10.0)).abs() < 0.01,
            "{stale_ms} ms stale: {at_stale} after {before}"
        );
        let mut lowest = f64::MAX;
        for _ in 0..300 {
            clock.advance(Duration::from_millis(1));
            lowest = lowest.min(ewma.record(1).as_f64());
        }
        assert!(
            lowest > 990.0,
            "{stale_ms} ms stale: the rate fell to {lowest} (true 1000)"
        );
    }
}

#[test]
fn stateful_ewma_counts_every_event_across_threads() {
    let clock = ManualClock::new();
    let ewma = Arc::new(Ewma::try_with_clock(Duration::from_secs(1), clock).unwrap());
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let ewma = Arc::clone(&ewma);
            std::thread::spawn(move || {
                for _ in 0..1000 {
                    ewma.record(1);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    // No time passed: every event adds exactly 1/window.
    assert_eq!(ewma.rate(), FixedRate::from_per_second(2000));
}

/// A step of nearly a whole (very long) window: `1 − elapsed/window`
/// computed in floating point cancels to a few significant bits, so the
/// float rate drifted from the exact one by more than the fixed point's
/// two units (a case the proptest below found).
#[test]
fn a_step_of_nearly_a_window_keeps_the_old_rates_share_exact() {
    let w = EwmaWindow::try_new(Duration::from_nanos(17_153_382_579_369_364_644)).unwrap();
    let old = FixedRate::from_bits(95_142_507_002_201_597);
    let (elapsed, events) = (17_152_947_659_954_996_860, 220_852_293_181);
    let fixed = w.update_fixed(old, elapsed, events).as_f64();
    let float = w.update(old.as_f64(), elapsed, events as f64);
    assert!((float - fixed).abs() <= 2.0 * ULP, "{float} vs {fixed}");
}

proptest! {
    #[test]
    fn fixed_matches_float_within_the_bound(
        window in 1u64..=u64::MAX,
        old in 0u64..(1u64 << 60),
        elapsed: u64,
        events in 0u64..(1u64 << 40),
    ) {
        let w = EwmaWindow::try_new(Duration::from_nanos(window)).unwrap();
        let old = FixedRate::from_bits(old);
        let fixed = w.update_fixed(old, elapsed, events);
        let float = w.update(old.as_f64(), elapsed, events as f64);
        prop_assume!(fixed != FixedRate::MAX);
        let slack = float.abs() * 2f64.powi(-40);
        prop_assert!(fixed.as_f64() <= float + slack, "{} > {}", fixed.as_f64(), float);
        prop_assert!(fixed.as_f64() >= float - 2.0 * ULP - slack, "{} < {}", fixed.as_f64(), float);
    }

    #[test]
    fn fixed_error_stays_bounded_over_a_sequence(
        steps in proptest::collection::vec((0u64..3_000_000_000, 0u64..1000), 1..50),
    ) {
        let w = EwmaWindow::try_new(Duration::from_secs(1)).unwrap();
        let (mut f, mut x) = (0.0f64, FixedRate::ZERO);
        for (k, &(elapsed, events)) in steps.iter().enumerate() {
            f = w.update(f, elapsed, events as f64);
            x = w.update_fixed(x, elapsed, events);
            let bound = 2.0 * ULP * (k + 1) as f64 + f * 2f64.powi(-40);
            prop_assert!(x.as_f64() <= f + f * 2f64.powi(-40));
            prop_assert!(f - x.as_f64() <= bound, "step {k}: {f} vs {}", x.as_f64());
        }
    }

    #[test]
    fn decay_never_raises_the_rate(old: u64, elapsed: u64, window in 1u64..=u64::MAX) {
        let w = EwmaWindow::try_new(Duration::from_nanos(window)).unwrap();
        let old = FixedRate::from_bits(old);
        prop_assert!(w.decay_fixed(old, elapsed) <= old);
    }
}

proptest! {
    #[test]
    fn one_event_update_tracks_the_exact_one(
        window in 1u64..(1u64 << 42),
        old: u64,
        elapsed in 0u64..(1u64 << 43),
    ) {
        let ewma = EwmaWindow::try_new(Duration::from_nanos(window)).unwrap();
        let fast = ewma.one_event().update(old, elapsed);
        let exact = ewma.update_fixed(FixedRate::from_bits(old), elapsed, 1).to_bits();
        prop_assert!(fast <= exact, "{fast} > {exact}");
        // old·(2⁻³² + window/2⁶⁴) + 2, in exact integer arithmetic.
        let slack = ((u128::from(old) * (u128::from(window) + (1u128 << 32))) >> 64) as u64 + 2;
        prop_assert!(exact - fast <= slack, "{exact} - {fast} > {slack}");
    }
}

#[test]
fn one_event_update_handles_power_of_two_windows() {
    for shift in 0..63 {
        let window = 1u64 << shift;
        let ewma = EwmaWindow::try_new(Duration::from_nanos(window)).unwrap();
        let fast = ewma.one_event();
        for old in [0, 1 << 16, 1 << 40, u64::MAX >> 1] {
            // No time passing keeps (almost) all of the old rate.
            let exact = ewma.update_fixed(FixedRate::from_bits(old), 0, 1).to_bits();
            let got = fast.update(old, 0);
            let slack = ((u128::from(old) * (u128::from(window) + (1u128 << 32))) >> 64) as u64 + 2;
            assert!(
                got <= exact && exact - got <= slack,
                "{window} {old}: {got} vs {exact}"
            );
        }
    }
}
