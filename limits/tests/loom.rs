//! Loom models of weir-limits' concurrent structures: every interleaving (up
//! to `LOOM_MAX_PREEMPTIONS` preemptions) of a few threads, checked for lost
//! updates. Run with `cargo xtask loom`.
#![cfg(loom)]

use loom::sync::Arc;
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::thread;
use std::num::{NonZeroU64, NonZeroUsize};
use std::time::Duration;
use weir_limits::clock::ManualClock;
use weir_limits::ewma::{Ewma, FixedRate};
use weir_limits::sketch::Locator;
use weir_limits::{
    Estimator, ExactInflight, HeavyHitters, Inflight, Observation, Rate, Shape, ShardedEstimator,
    Update,
};

fn every(updates: usize) -> NonZeroUsize {
    NonZeroUsize::new(updates).unwrap()
}

fn threshold(events: u64) -> NonZeroU64 {
    NonZeroU64::new(events).unwrap()
}

fn estimator(update: Update) -> Estimator {
    // Two slots, two hashes: the two keys below share counters, which is
    // where races could lose counts.
    Estimator::with_update(Shape::rows::<2, 2>().with_seed(1), update)
}

#[test]
fn plain_incr_never_loses_an_update() {
    loom::model(|| {
        let e = Arc::new(estimator(Update::Plain));
        let other = Arc::clone(&e);
        let t = thread::spawn(move || other.incr(&1u8, 1));
        let mine = e.incr(&1u8, 1);
        let theirs = t.join().unwrap();
        // Each sees its own increment. (Neither need see the other's: the
        // two can interleave row by row so that each one's minimum is the
        // row the other had not reached yet; this model found that.)
        assert!(mine >= 1 && theirs >= 1);
        assert!(e.get(&1u8) >= 2);
    });
}

#[test]
fn inflight_never_admits_two_racers_at_a_limit_of_one() {
    loom::model(|| {
        // Four rows, as in the audit's counterexample: each racer's
        // `fetch_add` minimum can come from a row the other had not reached.
        let inflight = Inflight::with_shape(Shape::rows::<4, 1>().with_seed(1));
        let other = inflight.clone();
        // The admission rule of `weir_rate::http::InflightLayer`: refused
        // when the returned estimate exceeds the limit. Guards are held
        // until both have decided, as in-flight requests would be.
        let t = thread::spawn(move || other.incr(&1u8, 1));
        let (_mine, mine) = inflight.incr(&1u8, 1);
        let (_theirs, theirs) = t.join().unwrap();
        assert!(
            mine > 1 || theirs > 1,
            "both racers admitted at limit 1: estimates {mine} and {theirs}"
        );
    });
}

#[test]
fn conservative_incr_never_loses_an_update_under_races() {
    loom::model(|| {
        let e = Arc::new(estimator(Update::Conservative));
        let a = Arc::clone(&e);
        let b = Arc::clone(&e);
        let ta = thread::spawn(move || a.incr(&1u8, 1));
        let tb = thread::spawn(move || b.incr(&1u8, 1));
        e.incr(&2u8, 1);
        ta.join().unwrap();
        tb.join().unwrap();
        assert!(e.get(&1u8) >= 2, "a racing conservative update was lost");
        assert!(e.get(&2u8) >= 1);
    });
}

#[test]
fn sharded_get_never_misses_a_flushing_delta() {
    loom::model(|| {
        let shape = Shape::blocked::<1, 1>().with_seed(1);
        // Flush after every update: the flush races with `get` below.
        let s = Arc::new(ShardedEstimator::with_flush_every(shape, every(1)));
        let writer = Arc::clone(&s);
        let t = thread::spawn(move || {
            writer.incr(&1u8, 1);
            writer.incr(&1u8, 1);
        });
        let seen = s.get(&1u8);
        assert!((0..=4).contains(&seen));
        t.join().unwrap();
        assert!(s.get(&1u8) >= 2);
    });
}

#[test]
fn rate_rotation_loses_no_event() {
    loom::model(|| {
        let clock = ManualClock::new();
        let shape = Shape::rows::<1, 4>().with_seed(1);
        let rate =
            Arc::new(Rate::try_with_shape(Duration::from_secs(1), shape, clock.clone()).unwrap());
        rate.observe(&1u8, 1);
        // Both threads race into window 1 and rotate.
        clock.set(Duration::from_millis(1500));
        let r = Arc::clone(&rate);
        let t = thread::spawn(move || r.observe(&1u8, 1));
        let mine = rate.observe(&1u8, 1);
        let theirs = t.join().unwrap();
        assert!(mine.max(theirs) == 2, "an event was lost: {mine}, {theirs}");
        let c = rate.components(&1u8);
        assert_eq!((c.previous, c.current), (1, 2));
    });
}

#[test]
fn rate_rotation_after_a_gap_loses_no_event() {
    loom::model(|| {
        let clock = ManualClock::new();
        let shape = Shape::rows::<1, 4>().with_seed(1);
        let rate =
            Arc::new(Rate::try_with_shape(Duration::from_secs(1), shape, clock.clone()).unwrap());
        rate.observe(&1u8, 5);
        clock.set(Duration::from_secs(7));
        let r = Arc::clone(&rate);
        let t = thread::spawn(move || r.observe(&1u8, 1));
        rate.observe(&1u8, 1);
        t.join().unwrap();
        let c = rate.components(&1u8);
        assert_eq!((c.previous, c.current), (0, 2));
    });
}

#[test]
fn heavy_hitters_admission_race_loses_no_event() {
    loom::model(|| {
        // Plain rule, two rows, threshold 1: two racing increments of a
        // fresh key can both return 1 (each its minimum from the row the
        // other had not reached), so both take the admission path with
        // the same estimate.
        let shape = Shape::rows::<2, 1>().with_seed(1);
        let heavy = Arc::new(HeavyHitters::with_sketch(
            threshold(1),
            shape,
            Update::Plain,
            HeavyHitters::<u8>::DEFAULT_CAPACITY,
        ));
        let other = Arc::clone(&heavy);
        let t = thread::spawn(move || {
            other.record(&1u8, 1);
        });
        heavy.record(&1u8, 1);
        t.join().unwrap();
        let count = heavy.get(&1u8).expect("a key at the threshold is admitted");
        assert!(count.total() >= 2, "an event was lost: {count:?}");
    });
}

#[test]
fn sharded_threads_count_through_their_own_shards_exactly_once() {
    // One row of two slots, with the first seed that puts keys 1 and 2 in
    // different slots: quiescent counts are exact, so any lost or doubled
    // event shows.
    let shape = (0..64)
        .map(|seed| Shape::rows::<1, 2>().with_seed(seed))
        .find(|&shape| {
            let l = Locator::new(shape);
            l.locate(&1u8).iter().ne(l.locate(&2u8).iter())
        })
        .expect("a seed that separates keys 1 and 2");
    loom::model(move || {
        // Flush every second update, so the writer's flush races the
        // reader; the writer says (release) when its first event is done.
        let s = Arc::new(ShardedEstimator::with_flush_every(shape, every(2)));
        let done = Arc::new(AtomicUsize::new(0));
        // The reader's own shard exists before the writer starts.
        assert_eq!(s.incr(&1u8, 0), 0);
        let (a, a_done) = (Arc::clone(&s), Arc::clone(&done));
        let writer = thread::spawn(move || {
            a.incr(&1u8, 1);
            a_done.store(1, Ordering::Release);
            a.incr(&2u8, 1); // flushes both
            a.incr(&1u8, 1) // stays in the writer's view
        });
        // An event done before `get` began is counted even while its
        // delta moves to the shared table (maybe twice, never zero times).
        let known = done.load(Ordering::Acquire) as isize;
        let racing = s.get(&1u8);
        assert!(racing >= known, "get saw {racing} of {known} done events");
        // Two events of key 1, plus at most the moving delta twice.
        assert!(racing <= 3, "{racing}");
        // Own updates are always visible to their thread.
        assert_eq!(writer.join().unwrap(), 2);
        // Quiescent: every event exactly once.
        assert_eq!((s.get(&1u8), s.get(&2u8)), (2, 1));
        // The reader's `incr` syncs its view with the shared table: the
        // writer's flushed events, not its buffered one. With one shard
        // for all model threads (loom runs them on one OS thread) it would
        // see all three.
        assert_eq!((s.incr(&1u8, 0), s.incr(&2u8, 0)), (1, 1));
    });
}

#[test]
fn sharded_get_never_misses_an_update_while_its_thread_syncs() {
    loom::model(|| {
        let shape = Shape::rows::<1, 1>().with_seed(1);
        let s = Arc::new(ShardedEstimator::with_flush_every(shape, every(2)));
        // This thread flushes two events; the writer's first update must
        // first sync its view with them, which races `get`.
        s.incr(&1u8, 1);
        s.incr(&1u8, 1);
        let b = Arc::clone(&s);
        let writer = thread::spawn(move || b.incr(&1u8, 1));
        // A view and base read half rewritten would count the two flushed
        // events negatively (or twice).
        let seen = s.get(&1u8);
        assert!((2..=3).contains(&seen), "{seen}");
        assert_eq!(writer.join().unwrap(), 3);
        assert_eq!(s.get(&1u8), 3);
    });
}

#[test]
fn sharded_reset_racing_a_flush_never_loses_later_events() {
    loom::model(|| {
        let shape = Shape::rows::<1, 1>().with_seed(1);
        let s = Arc::new(ShardedEstimator::with_flush_every(shape, every(2)));
        let reset_done = Arc::new(AtomicUsize::new(0));
        let (w, done) = (Arc::clone(&s), Arc::clone(&reset_done));
        let writer = thread::spawn(move || {
            w.incr(&1u8, 1);
            w.incr(&1u8, 1); // flushes: races the reset
            while done.load(Ordering::Acquire) == 0 {
                thread::yield_now();
            }
            // Two events after the reset returned: they must be counted.
            w.incr(&1u8, 1);
            w.incr(&1u8, 1)
        });
        s.reset();
        reset_done.store(1, Ordering::Release);
        let own = writer.join().unwrap();
        assert!(
            own >= 2,
            "the writer's own estimate {own} misses its updates"
        );
        let seen = s.get(&1u8);
        // At least the two later events; at most all four (a reset racing
        // updates may keep them).
        assert!((2..=4).contains(&seen), "get saw {seen}");
    });
}

/// The same race, with the later event alone on its cells and before the
/// next flush: a flush that ran after the reset but for a shard the reset
/// had not yet restarted used to leave the shard marked as synced, so the
/// later update stayed in a table `get` ignores, and the next flush
/// restarted it away.
#[test]
fn sharded_reset_racing_a_flush_never_hides_a_later_unflushed_event() {
    loom::model(|| {
        let s = Arc::new(ShardedEstimator::with_flush_every(apart(), every(2)));
        reset_while(&s, |w| {
            w.incr(&1u8, 1);
            w.incr(&1u8, 1); // flushes: races the reset
        });
    });
}

/// The same for a catch-up instead of a flush: a reset landing while the
/// writer's shard catches up with another thread's flush used to leave the
/// shard marked as synced past the reset with its tables of before it.
#[test]
fn sharded_reset_racing_a_catch_up_never_hides_a_later_unflushed_event() {
    loom::model(|| {
        let s = Arc::new(ShardedEstimator::with_flush_every(apart(), every(8)));
        // Another thread's flush: the writer's first update catches up.
        s.incr(&1u8, 1);
        s.flush();
        reset_while(&s, |w| {
            w.incr(&1u8, 1); // catches up: races the reset
        });
    });
}

/// Reset `s` while a writer runs `racing`; once the reset has returned,
/// the writer counts one event of key 2 (on cells of its own, see
/// [`apart`]) and flushes. That event must be counted.
fn reset_while(s: &Arc<ShardedEstimator>, racing: fn(&ShardedEstimator)) {
    let reset_done = Arc::new(AtomicUsize::new(0));
    let (w, done) = (Arc::clone(s), Arc::clone(&reset_done));
    let writer = thread::spawn(move || {
        racing(&w);
        while done.load(Ordering::Acquire) == 0 {
            thread::yield_now();
        }
        w.incr(&2u8, 1); // after the reset returned, not yet flushed
        w.flush();
    });
    s.reset();
    reset_done.store(1, Ordering::Release);
    writer.join().unwrap();
    assert_eq!(s.get(&2u8), 1, "an event after the reset was lost");
}

/// A one-row, two-slot shape on which keys 1u8 and 2u8 share no cell.
fn apart() -> Shape {
    (0..)
        .map(|seed| Shape::rows::<1, 2>().with_seed(seed))
        .find(|&shape| {
            let l = Locator::new(shape);
            l.locate(&1u8).iter().ne(l.locate(&2u8).iter())
        })
        .unwrap()
}

/// A thread that notices a reset while it is still running must not copy
/// counts from before it into its own view: once `reset` has returned,
/// that thread's `incr` reports only what came after.
#[test]
fn sharded_incr_racing_a_reset_keeps_no_count_from_before_it() {
    loom::model(|| {
        let shape = Shape::rows::<1, 1>().with_seed(1);
        let s = Arc::new(ShardedEstimator::with_flush_every(shape, every(1000)));
        {
            let w = Arc::clone(&s);
            thread::spawn(move || {
                w.incr(&1u8, 5);
                w.flush();
            })
            .join()
            .unwrap();
        }
        let r = Arc::clone(&s);
        let resetter = thread::spawn(move || r.reset());
        s.incr(&1u8, 1); // races the reset
        resetter.join().unwrap();
        let own = s.incr(&1u8, 0);
        assert!(own <= 1, "after the reset, incr still reports {own}");
    });
}

#[test]
fn heavy_hitters_events_racing_an_admission_are_not_lost() {
    for update in [Update::Plain, Update::Conservative] {
        loom::model(move || {
            // Two rows, threshold 2, three racers on a fresh key. Under the
            // plain rule two can each be first in one row and read 1
            // (light) while the third reads 2 in both rows and admits the
            // key with an estimate that misses one of them.
            let shape = Shape::rows::<2, 1>().with_seed(1);
            let heavy = Arc::new(HeavyHitters::with_sketch(
                threshold(2),
                shape,
                update,
                HeavyHitters::<u8>::DEFAULT_CAPACITY,
            ));
            let racers: Vec<_> = (0..2)
                .map(|_| {
                    let other = Arc::clone(&heavy);
                    thread::spawn(move || {
                        other.record(&1u8, 1);
                    })
                })
                .collect();
            heavy.record(&1u8, 1);
            for racer in racers {
                racer.join().unwrap();
            }
            let count = heavy
                .get(&1u8)
                .expect("a key past the threshold is admitted");
            assert!(
                count.total() >= 3,
                "{update:?}: an event was lost: {count:?}"
            );
        });
    }
}

/// A reader in the window being entered sees the window before it whole:
/// neither the instant between claiming a rotation and publishing it, nor
/// the zeroing of the spare sketch, reads as "nothing happened".
#[test]
fn rate_components_during_a_rotation_keep_the_previous_window() {
    loom::model(|| {
        let clock = ManualClock::new();
        let shape = Shape::rows::<1, 4>().with_seed(1);
        let rate =
            Arc::new(Rate::try_with_shape(Duration::from_secs(1), shape, clock.clone()).unwrap());
        rate.observe(&1u8, 1);
        clock.set(Duration::from_millis(1500));
        // The reader is the spawned thread: loom then runs the rotation
        // first and backtracks the reader into each of its steps.
        let r = Arc::clone(&rate);
        let reader = thread::spawn(move || r.components(&1u8));
        rate.observe(&1u8, 1);
        let c = reader.join().unwrap();
        assert_eq!(c.previous, 1, "window 0 read as {c:?} during its rotation");
        assert!((0..=1).contains(&c.current), "{c:?}");
    });
}

loom::thread_local! {
    static NOW: std::cell::Cell<u64> = std::cell::Cell::new(0);
}

/// A clock each model thread sets for itself, so that one thread's
/// reading can be older than another's.
struct ThreadClock;

impl weir_limits::clock::Clock for ThreadClock {
    fn now_nanos(&self) -> u64 {
        NOW.with(std::cell::Cell::get)
    }
}

/// A reader whose clock reading is older than a rotation across a gap
/// reads either the windows before it or the (empty) windows after it,
/// never one window from before the rotation beside a zeroed other.
#[test]
fn rate_components_racing_a_rotation_across_a_gap_are_never_torn() {
    const SECOND: u64 = 1_000_000_000;
    loom::model(|| {
        let shape = Shape::rows::<1, 4>().with_seed(1);
        let rate =
            Arc::new(Rate::try_with_shape(Duration::from_secs(1), shape, ThreadClock).unwrap());
        rate.observe(&1u8, 5);
        NOW.with(|now| now.set(SECOND + SECOND / 2));
        rate.observe(&1u8, 1);
        let r = Arc::clone(&rate);
        let reader = thread::spawn(move || {
            NOW.with(|now| now.set(SECOND + SECOND / 2));
            r.components(&1u8)
        });
        NOW.with(|now| now.set(7 * SECOND));
        rate.observe(&1u8, 2);
        let c = reader.join().unwrap();
        let seen = (c.previous, c.current);
        assert!(
            seen == (5, 1) || seen == (0, 0) || seen == (0, 2),
            "a torn read across the rotation: {seen:?}"
        );
    });
}

/// An eviction races an exact count of the key it evicts: the event is
/// either counted in the table before the eviction (and goes back to the
/// sketch with the rest) or in the sketch after it, never lost.
#[test]
fn heavy_hitters_eviction_racing_an_exact_count_loses_no_event() {
    let shape = (0..64)
        .map(|seed| Shape::rows::<1, 2>().with_seed(seed))
        .find(|&shape| {
            let l = Locator::new(shape);
            l.locate(&1u8).iter().ne(l.locate(&2u8).iter())
        })
        .expect("a seed that separates keys 1 and 2");
    for update in [Update::Plain, Update::Conservative] {
        loom::model(move || {
            let one = NonZeroUsize::new(1).unwrap();
            let heavy = Arc::new(HeavyHitters::with_sketch(threshold(1), shape, update, one));
            heavy.record(&1u8, 1);
            let other = Arc::clone(&heavy);
            let t = thread::spawn(move || {
                other.record(&1u8, 1);
            });
            // Heavier than key 1 can be: takes its place.
            heavy.record(&2u8, 5);
            t.join().unwrap();
            let total = |key: u8| match heavy.record(&key, 0) {
                Observation::Light(estimate) => estimate,
                Observation::Heavy(count) => count.total(),
            };
            assert!(
                total(1) >= 2,
                "{update:?}: key 1 lost an event: {}",
                total(1)
            );
            assert!(total(2) >= 5, "{update:?}: key 2 reads {}", total(2));
            assert!(heavy.admitted() <= 1);
        });
    }
}

#[test]
fn ewma_records_from_two_threads_are_both_counted() {
    loom::model(|| {
        let ewma =
            Arc::new(Ewma::try_with_clock(Duration::from_secs(1), ManualClock::new()).unwrap());
        let other = Arc::clone(&ewma);
        let t = thread::spawn(move || {
            other.record(3);
        });
        ewma.record(4);
        t.join().unwrap();
        assert_eq!(ewma.rate(), FixedRate::from_per_second(7));
    });
}

#[test]
fn exact_inflight_admits_one_of_two_racers_at_a_limit_of_one() {
    loom::model(|| {
        let inflight = ExactInflight::new();
        let other = inflight.clone();
        let t = thread::spawn(move || other.try_enter("origin", 1));
        let mine = inflight.try_enter("origin", 1);
        let theirs = t.join().unwrap();
        assert_eq!(
            usize::from(mine.is_some()) + usize::from(theirs.is_some()),
            1
        );
        drop((mine, theirs));
        assert_eq!((inflight.get("origin"), inflight.keys()), (0, 0));
    });
}
