//! Loom models of the shared-timer protocol: every interleaving (up to
//! `LOOM_MAX_PREEMPTIONS` preemptions) of a waiter and the sweeper. Run with
//! `cargo xtask loom`.
#![cfg(loom)]

use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::{Arc, Mutex};
use loom::thread;
use std::task::{Wake, Waker};
use weir_timeout::loom_model::{Bucket, Release};

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
        match registered {
            None => assert_eq!(woke, 0),
            Some(slot) => {
                // Registered before the fire: it must be woken exactly once,
                // and a later poll must see the fire.
                assert_eq!(woke, 1);
                assert_eq!(woken.0.load(Ordering::SeqCst), 1);
                assert!(bucket.poll_slot(slot, &waker));
                let _ = fired_now;
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
