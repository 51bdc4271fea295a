//! Loom models of the shared-timer protocol: every interleaving (up to
//! `LOOM_MAX_PREEMPTIONS` preemptions) of a waiter and the sweeper. Run with
//! `cargo xtask loom`.
#![cfg(loom)]

use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::{Arc, Mutex};
use loom::thread;
use std::task::{Wake, Waker};
use weir_timeout::loom_model::{Bucket, Planner, Release};

struct Flag(AtomicUsize);

impl Wake for Flag {
    fn wake(self: std::sync::Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn flag() -> (std::sync::Arc<Flag>, Waker) {
    let f = std::sync::Arc::new(Flag(AtomicUsize::new(0)));
    let w = Waker::from(f.clone());
    (f, w)
}

/// pingora's fault: a tick fired between "is it fired?" and "arm the
/// notification" is never seen. Here a waiter that registers while the tick
/// fires is either refused (it sees the deadline passed) or woken.
#[test]
fn no_lost_wakeup_when_the_tick_fires_while_arming() {
    loom::model(|| {
        let bucket = Arc::new(Bucket::new());
        let (woken, waker) = flag();
        let sweeper = {
            let bucket = bucket.clone();
            thread::spawn(move || {
                let (wakers, _free) = bucket.fire();
                let n = wakers.len();
                for w in wakers {
                    w.wake();
                }
                n
            })
        };
        let registered = bucket.register(&waker);
        let fired_now = match registered {
            None => true,
            Some(slot) => bucket.poll_slot(slot, &waker),
        };
        let woke = sweeper.join().unwrap();
        // The property itself: a waiter that saw no fire when it last looked
        // (and so returns `Pending`) is woken once the tick fires.
        if !fired_now {
            assert_eq!(woken.0.load(Ordering::SeqCst), 1, "lost wake-up");
        }
        match registered {
            None => {
                assert!(fired_now);
                assert_eq!(woke, 0);
                assert_eq!(woken.0.load(Ordering::SeqCst), 0);
            }
            Some(slot) => {
                // Registered before the fire: it must be woken exactly once,
                // and a later poll must see the fire.
                assert_eq!(woke, 1);
                assert_eq!(woken.0.load(Ordering::SeqCst), 1);
                assert!(bucket.poll_slot(slot, &waker));
            }
        }
    });
}

/// A waiter that re-polls with a new waker while the tick fires is woken
/// through one of them (the one stored when the fire took the wakers), and
/// then sees the fire.
#[test]
fn repoll_with_a_new_waker_races_the_fire() {
    loom::model(|| {
        let bucket = Arc::new(Bucket::new());
        let (first, w1) = flag();
        let (second, w2) = flag();
        let slot = bucket.register(&w1).unwrap();
        let sweeper = {
            let bucket = bucket.clone();
            thread::spawn(move || {
                let (wakers, _) = bucket.fire();
                for w in wakers {
                    w.wake();
                }
            })
        };
        let fired = bucket.poll_slot(slot, &w2);
        sweeper.join().unwrap();
        let wakes = first.0.load(Ordering::SeqCst) + second.0.load(Ordering::SeqCst);
        if !fired {
            // It went back to sleep on w2: w2 must have been woken.
            assert_eq!(second.0.load(Ordering::SeqCst), 1);
        }
        assert_eq!(wakes, 1);
        assert!(bucket.poll_slot(slot, &w2));
    });
}

/// Cancelling while the tick fires: the bucket is freed exactly once, by
/// whichever side drops the last hold. The table is modelled as a lock over
/// "is the bucket still in it": the sweeper fires only what it takes out of
/// the table, and the last waiter unlinks under the same lock.
#[test]
fn cancel_racing_the_fire_frees_once() {
    loom::model(|| {
        let bucket = Arc::new(Bucket::new());
        let table = Arc::new(Mutex::new(true));
        let (_woken, waker) = flag();
        let slot = bucket.register(&waker).unwrap();
        let sweeper = {
            let bucket = bucket.clone();
            let table = table.clone();
            thread::spawn(move || {
                let mut in_table = table.lock().unwrap();
                if *in_table {
                    *in_table = false;
                    bucket.fire().1
                } else {
                    false
                }
            })
        };
        let frees_by_cancel = match bucket.cancel(slot) {
            Release::Free => 1,
            Release::Keep => 0,
            // Last waiter of a bucket still in its table: the table lock
            // decides; the sweeper may have fired it meanwhile.
            Release::Unlink => {
                let mut in_table = table.lock().unwrap();
                usize::from(bucket.finish_unlink(|| *in_table = false))
            }
        };
        let frees_by_sweeper = usize::from(sweeper.join().unwrap());
        // The bucket is not cached, so once both are done someone frees it.
        assert_eq!(frees_by_cancel + frees_by_sweeper, 1);
    });
}

/// The sweeper scans a table while a worker enters a new bucket in it: either
/// the scan sees the bucket, or the sweeper plans to wake no later than the
/// bucket's tick, or the worker unparks it.
#[test]
fn no_lost_sweeper_wakeup() {
    loom::model(|| {
        let planner = Arc::new(Planner::new());
        // The previous pass planned to wake at tick 2 (now past): a worker
        // that sees that stale plan must not conclude the sweeper is coming.
        planner.settle(2);
        // The table: the earliest tick entered, if any.
        let table = Arc::new(Mutex::new(None::<u64>));
        let tick = 5u64;
        let worker = {
            let planner = planner.clone();
            let table = table.clone();
            thread::spawn(move || {
                *table.lock().unwrap() = Some(tick);
                planner.lower(tick)
            })
        };
        // One sweeper pass.
        planner.reset();
        let seen = *table.lock().unwrap();
        let next = planner.settle(seen.unwrap_or(u64::MAX));
        let unparked = worker.join().unwrap();
        assert!(
            seen == Some(tick) || next <= tick || unparked,
            "lost: seen {seen:?}, next {next}, unparked {unparked}"
        );
    });
}

/// Two workers enter buckets while the sweeper scans: each is covered.
#[test]
fn no_lost_sweeper_wakeup_two_workers() {
    loom::model(|| {
        let planner = Arc::new(Planner::new());
        let tables = Arc::new([Mutex::new(None::<u64>), Mutex::new(None::<u64>)]);
        let workers: Vec<_> = [(0usize, 7u64), (1, 3)]
            .into_iter()
            .map(|(i, tick)| {
                let planner = planner.clone();
                let tables = tables.clone();
                thread::spawn(move || {
                    *tables[i].lock().unwrap() = Some(tick);
                    (tick, planner.lower(tick))
                })
            })
            .collect();
        planner.reset();
        let mut earliest = u64::MAX;
        let mut seen = [None, None];
        for (i, t) in tables.iter().enumerate() {
            seen[i] = *t.lock().unwrap();
            earliest = earliest.min(seen[i].unwrap_or(u64::MAX));
        }
        let next = planner.settle(earliest);
        let results: Vec<_> = workers.into_iter().map(|w| w.join().unwrap()).collect();
        let any_unpark = results.iter().any(|(_, u)| *u);
        for (i, (tick, _)) in results.iter().enumerate() {
            assert!(
                seen[i] == Some(*tick) || next <= *tick || any_unpark,
                "lost tick {tick}: seen {seen:?}, next {next}"
            );
        }
    });
}
