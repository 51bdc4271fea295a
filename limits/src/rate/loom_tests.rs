//! A forked child's threads meeting a rotation that a thread of its
//! parent had claimed: every interleaving of a reader and a writer taking
//! it over.

use super::*;
use crate::clock::ManualClock;
use loom::sync::Arc;
use loom::thread;

/// A rate over 1 s windows with 3 events of key 1 in window 0.
fn counted() -> (Arc<Rate<ManualClock>>, ManualClock) {
    let clock = ManualClock::new();
    let shape = Shape::rows::<1, 4>().with_seed(1);
    let rate = Rate::try_with_shape(Duration::from_secs(1), shape, clock.clone()).unwrap();
    rate.observe(&1u8, 3);
    (Arc::new(rate), clock)
}

/// Leave `rate` as `fork()` does when it catches another thread between
/// claiming with `claimed` and releasing: the claim in the word, its
/// record from another process.
fn orphan(rate: &Rate<ManualClock>, claimed: u64) {
    let elsewhere = fork::forks().wrapping_add(1);
    rate.claimed_in.store(elsewhere, Ordering::Relaxed);
    rate.state.store(claimed, Ordering::Relaxed);
}

/// A reader and a writer of the clock's window, racing.
fn race(rate: &Arc<Rate<ManualClock>>) -> (RateComponents, isize) {
    let r = Arc::clone(rate);
    let reader = thread::spawn(move || r.components(&1u8));
    let written = rate.observe(&1u8, 1);
    (reader.join().unwrap(), written)
}

#[test]
fn a_next_window_claim_is_finished_once() {
    loom::model(|| {
        let (rate, clock) = counted();
        // Window 1 claimed (published with the claim), its spare not
        // yet zeroed; the child lives in window 2.
        orphan(&rate, 1 << SHIFT | ROTATING);
        clock.set(Duration::from_millis(2500));
        let (read, written) = race(&rate);
        assert_eq!(written, 1);
        assert_eq!(read.previous, 0, "window 1 counted nothing");
        assert!(read.current <= 1, "{read:?}");
        let c = rate.components(&1u8);
        assert_eq!((c.previous, c.current), (0, 1));
    });
}

#[test]
fn a_gap_claim_is_finished_with_every_sketch_zeroed() {
    loom::model(|| {
        let (rate, clock) = counted();
        // A claim skipping from window 0, which it still publishes,
        // towards window 5. Two readers whose clock reads window 0
        // (set back, or skewed) meet it: neither may read window 0's
        // sketch, which the claimer may have left half zeroed.
        orphan(&rate, SKIPPING | ROTATING);
        clock.set(Duration::from_millis(500));
        let r = Arc::clone(&rate);
        let other = thread::spawn(move || r.components(&1u8));
        let mine = rate.components(&1u8);
        let theirs = other.join().unwrap();
        for c in [mine, theirs] {
            assert_eq!((c.previous, c.current), (0, 0), "{c:?}");
        }
        clock.set(Duration::from_millis(5500));
        assert_eq!(rate.observe(&1u8, 1), 1);
    });
}
