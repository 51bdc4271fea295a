//! Settling an admission at its final cost (`SettleKey`): exact, and never
//! looser than a check of the final cost, for every algorithm and container.

use std::convert::Infallible;
use std::future::Future;
use std::num::NonZeroU32;
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use weir_rate::clock::ManualClock;
use weir_rate::{
    FixedWindow, Forgettable, Gcra, KeyedLimiter, LeakyBucket, Quota, SettleKey, Settlement,
    SketchLimiter, SlidingLog, SlidingWindow, TokenBucket,
};

fn settled<F: Future<Output = Result<(), Infallible>> + Unpin>(mut f: F) {
    let mut cx = Context::from_waker(Waker::noop());
    assert!(matches!(
        std::pin::Pin::new(&mut f).poll(&mut cx),
        Poll::Ready(Ok(()))
    ));
}

/// Units the key can still take one at a time (at most 100).
fn left<L: Forgettable + Clone>(limiter: &KeyedLimiter<u8, L, ManualClock>) -> u32 {
    (0..100)
        .take_while(|_| limiter.check_n(&1, 1).is_ok_and(|d| d.is_allowed()))
        .count() as u32
}

/// Admitting at `a` then settling at `f` after `elapsed` leaves the key
/// exactly as a check of `f` would have at the same instant, and never
/// looser than one at the admission's instant when time has passed.
fn settles_as_if_checked_at_the_final_cost<L: Forgettable + Clone + std::fmt::Debug + 'static>(
    algorithm: L,
) {
    for (a, f) in [(6, 2), (6, 0), (2, 6), (3, 3), (0, 4), (7, 1)] {
        for elapsed in [0, 1, 7, 30] {
            let clock = ManualClock::new();
            let settling = KeyedLimiter::with_clock(algorithm.clone(), clock.clone());
            let reference = KeyedLimiter::with_clock(algorithm.clone(), clock.clone());
            // Earlier spending on the key, so refunds and charges meet
            // a state that is neither fresh nor full.
            for limiter in [&settling, &reference] {
                assert!(limiter.check_n(&1, 3).unwrap().is_allowed());
            }
            let admitted = settling.check_n(&1, a).unwrap();
            assert!(admitted.is_allowed(), "{a}");
            let reference_allowed = reference.check_n(&1, f).unwrap().is_allowed();
            clock.advance(Duration::from_secs(elapsed));
            settled(settling.settle(&1, &admitted, a, f));
            let (settled_left, reference_left) = (left(&settling), left(&reference));
            let case = format!("{algorithm:?}: {a} settled at {f} after {elapsed} s");
            assert!(
                settled_left <= reference_left,
                "looser: {settled_left} > {reference_left}; {case}"
            );
            if elapsed == 0 && reference_allowed {
                assert_eq!(settled_left, reference_left, "{case}");
            }
        }
    }
}

#[test]
fn every_algorithm_settles_exactly_and_never_looser() {
    let quota = Quota::per_minute(NonZeroU32::new(10).unwrap());
    settles_as_if_checked_at_the_final_cost(FixedWindow::new(quota));
    settles_as_if_checked_at_the_final_cost(SlidingLog::new(quota));
    settles_as_if_checked_at_the_final_cost(SlidingWindow::try_new(quota, 4).unwrap());
    settles_as_if_checked_at_the_final_cost(TokenBucket::new(quota));
    settles_as_if_checked_at_the_final_cost(Gcra::new(quota));
    settles_as_if_checked_at_the_final_cost(LeakyBucket::meter(quota));
}

#[test]
fn denials_settle_nothing() {
    let quota = Quota::per_minute(NonZeroU32::new(2).unwrap());
    let limiter = KeyedLimiter::with_clock(FixedWindow::new(quota), ManualClock::new());
    assert!(limiter.check_n(&1u8, 2).unwrap().is_allowed());
    let denied = limiter.check_n(&1, 1).unwrap();
    assert!(!denied.is_allowed());
    assert_eq!(Settlement::of(&denied, 1, 0), Settlement::Keep);
    assert_eq!(Settlement::of(&denied, 1, 50), Settlement::Keep);
    settled(limiter.settle(&1, &denied, 1, 50));
    limiter.set_shadow(true);
    let let_through = limiter.check_n(&1, 1).unwrap();
    assert!(let_through.is_allowed() && !let_through.is_conforming());
    assert_eq!(Settlement::of(&let_through, 1, 0), Settlement::Keep);
    limiter.set_shadow(false);
    assert_eq!(left(&limiter), 0, "still spent, never more");
}

#[test]
fn a_sketch_settles_upward_only() {
    let quota = Quota::per_minute(NonZeroU32::new(10).unwrap());
    let sketch = || {
        SketchLimiter::with_clock(
            quota,
            weir_rate::Shape::rows::<4, 1024>(),
            ManualClock::new(),
        )
    };
    let left = |s: &SketchLimiter<ManualClock>| {
        (0..100).take_while(|_| s.check(&"k").is_allowed()).count()
    };
    let checked_at = |cost| {
        let s = sketch();
        assert!(s.check_n(&"k", cost).unwrap().is_allowed());
        left(&s)
    };
    let settled_at = |cost| {
        let s = sketch();
        let admitted = s.check_n(&"k", 4).unwrap();
        settled(s.settle(&"k", &admitted, 4, cost));
        left(&s)
    };
    assert_eq!(settled_at(1), checked_at(4), "no refund in a sketch");
    assert_eq!(settled_at(7), checked_at(7), "charged 3 more");
    assert!(checked_at(7) < checked_at(4));
}
