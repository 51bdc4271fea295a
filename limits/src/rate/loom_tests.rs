//! A forked child's threads meeting a rotation that a thread of its
//! parent had claimed: every interleaving of a reader and a writer taking
//! it over.

use super::*;
use crate::clock::ManualClock;
use loom::sync::Arc;
use loom::thread;

/// A rate over 1 s windows with `counts[w]` events of key 1 in window `w`;
/// its clock is left in the last of them.
fn counted(counts: &[isize]) -> (Arc<Rate<ManualClock>>, ManualClock) {
    let clock = ManualClock::new();
    let shape = Shape::rows::<1, 4>().with_seed(1);
    let rate = Rate::try_with_shape(Duration::from_secs(1), shape, clock.clone()).unwrap();
    for (w, &n) in counts.iter().enumerate() {
        clock.set(Duration::from_secs(w as u64));
        rate.observe(&1u8, n);
    }
    (Arc::new(rate), clock)
}

/// Leave `rate` as `fork()` does when it catches another thread between
/// claiming with `claimed` and releasing: the claim in the word, its
/// record from another process, nothing of its zeroing done yet.
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
        // 3 in window 0, 5 in window 1; window 2 claimed (published with
        // the claim), its spare (window 0's sketch, for window 3) not yet
        // zeroed. The child lives in window 3, which counts there.
        let (rate, clock) = counted(&[3, 5]);
        orphan(&rate, 2 << SHIFT | ROTATING);
        clock.set(Duration::from_millis(3500));
        let (read, written) = race(&rate);
        assert_eq!(written, 1, "window 3 began with window 0's count");
        assert_eq!(read.previous, 0, "window 2 counted nothing");
        assert!(read.current <= 1, "{read:?}");
        let c = rate.components(&1u8);
        assert_eq!((c.previous, c.current), (0, 1));
    });
}

#[test]
fn a_gap_claim_is_finished_with_every_sketch_zeroed() {
    loom::model(|| {
        // A claim skipping from window 0 (which it still publishes),
        // nothing zeroed yet. A reader and a writer whose clock reads
        // window 0 (set back, or skewed) meet it: neither may use window
        // 0's sketch before the takeover has zeroed it.
        let (rate, clock) = counted(&[3]);
        orphan(&rate, SKIPPING | ROTATING);
        clock.set(Duration::from_millis(500));
        let (read, written) = race(&rate);
        assert_eq!(written, 1, "counted into a sketch being zeroed");
        assert!(read.previous == 0 && read.current <= 1, "{read:?}");
        let c = rate.components(&1u8);
        assert_eq!((c.previous, c.current), (0, 1));
    });
}
