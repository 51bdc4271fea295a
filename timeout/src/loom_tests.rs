//! Loom models of the shared-timer protocol: every interleaving (up to
//! `LOOM_MAX_PREEMPTIONS` preemptions) of a waiter and the sweeper. Run with
//! `cargo xtask loom`.
//!
//! The models drive the crate's own code through `loom_model.rs`:
//! a bucket (`bucket.rs`), a thread's table with its cache, unlink and fire
//! (`table.rs`, as the manager uses it), the sweeper's wake-up plan
//! (`planner.rs`) and the fork-pause handshake (`pause.rs`).

use crate::loom_model::{Bucket, PauseGate, Planner, Table};
use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use loom::sync::{Arc, Mutex};
use loom::thread;
use std::task::{Wake, Waker};

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

/// A task behind a waker: counts its wake-ups. Whoever holds a clone of the
/// waker holds the task (`Arc::strong_count` finds leaked clones).
struct Task(AtomicUsize);

impl Wake for Task {
    fn wake(self: std::sync::Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// (task, its waker); the test keeps `task` and hands out the waker.
fn task() -> (std::sync::Arc<Task>, Waker) {
    let t = std::sync::Arc::new(Task(AtomicUsize::new(0)));
    let w = Waker::from(t.clone());
    (t, w)
}

/// The sweeper's pass over one table: fire what is due at `due` and wake
/// the wakers once the table lock is released. Returns how many it woke.
fn sweep(table: &Table, due: u64) -> usize {
    let (wakers, _) = table.fire_due(due);
    let n = wakers.len();
    for w in wakers {
        w.wake();
    }
    n
}

/// [`sweep`] on a thread of its own, racing the caller.
fn spawn_sweep(table: &std::sync::Arc<Table>, due: u64) -> thread::JoinHandle<usize> {
    let table = std::sync::Arc::clone(table);
    thread::spawn(move || sweep(&table, due))
}

/// Everything released: no bucket left, no clone of the task's waker held.
fn all_released(table: &Table, task: &std::sync::Arc<Task>) {
    table.clear_cache();
    assert_eq!(table.live_buckets(), 0, "a bucket leaked");
    assert_eq!(std::sync::Arc::strong_count(task), 1, "a waker leaked");
}

/// The owner cancels its timer and then lets go of the bucket's cache hold
/// (the table changed owner) while the sweeper fires that bucket: the
/// bucket is freed once (a double free panics in the allocator), by
/// whichever side drops the last hold, and nothing leaks.
#[test]
fn a_cache_hold_released_while_the_sweeper_fires() {
    loom::model(|| {
        let table = Table::new();
        let (task, waker) = task();
        let r = table.arm(1, &waker).unwrap();
        drop(waker);
        let sweeper = spawn_sweep(&table, 1);
        r.cancel();
        table.clear_cache();
        let woke = sweeper.join().unwrap();
        // Woken if the fire came first, else released by the cancel.
        assert_eq!(task.0.load(Ordering::SeqCst), woke);
        assert!(woke <= 1);
        all_released(&table, &task);
    });
}

/// The owner's cache moves on to the next tick, so its timer's bucket is
/// held only by that timer; cancelling it then unlinks the bucket under
/// the table lock, racing the sweeper that fires it.
#[test]
fn the_cache_moves_on_and_unlink_races_the_fire() {
    loom::model(|| {
        let table = Table::new();
        let (task, waker) = task();
        let r1 = table.arm(1, &waker).unwrap();
        drop(waker);
        let sweeper = spawn_sweep(&table, 1);
        let r2 = table.arm(2, Waker::noop()).unwrap();
        r1.cancel();
        let woke = sweeper.join().unwrap();
        // Woken by the fire or released by the cancel, never both.
        assert_eq!(task.0.load(Ordering::SeqCst), woke);
        assert!(woke <= 1);
        r2.cancel();
        all_released(&table, &task);
    });
}

/// pingora's fault's cousin: cancelling while the tick fires. The waker is
/// woken once or released by the cancel, never both, never kept; the
/// bucket is freed once. The timer is dropped on a third thread (a
/// connection's future dropped elsewhere) while the owner's cache lets go.
#[test]
fn cancel_racing_the_fire_wakes_or_releases_once() {
    loom::model(|| {
        let table = Table::new();
        let (task, waker) = task();
        let r = table.arm(1, &waker).unwrap();
        drop(waker);
        let sweeper = {
            let table = std::sync::Arc::clone(&table);
            thread::spawn(move || {
                let (wakers, _) = table.fire_due_one_by_one(1);
                let n = wakers.len();
                wakers.into_iter().for_each(Waker::wake);
                n
            })
        };
        let canceller = thread::spawn(move || r.cancel());
        table.clear_cache();
        canceller.join().unwrap();
        let woke = sweeper.join().unwrap();
        assert_eq!(task.0.load(Ordering::SeqCst), woke);
        assert!(woke <= 1);
        all_released(&table, &task);
    });
}

/// A timer whose task a work-stealing runtime moved: it is re-polled and
/// cancelled on another thread (revoking the bucket's bias) while the owner
/// arms and cancels through the same cached bucket. Every access to the
/// bucket is ordered, nothing is woken, and nothing leaks.
#[test]
fn a_moved_timer_cancelled_while_the_owner_arms() {
    loom::model(|| {
        let table = Table::new();
        let (task, waker) = task();
        let moved = table.arm(1, &waker).unwrap();
        let other = thread::spawn(move || {
            assert!(!moved.poll(Waker::noop()));
            moved.cancel();
        });
        let mine = table.arm(1, &waker).unwrap();
        drop(waker);
        mine.cancel();
        other.join().unwrap();
        assert_eq!(task.0.load(Ordering::SeqCst), 0);
        all_released(&table, &task);
    });
}

/// A timer cancelled on another thread (revoking its bucket's bias) while
/// the sweeper gathers the due buckets for one shared barrier: a bucket
/// whose spin lock the canceller holds is left out of the shared
/// revocation and revoked as it is fired. The owner does nothing meanwhile.
/// Woken once or released by the cancel, never both; nothing leaks.
#[test]
fn a_cancel_elsewhere_races_the_shared_revocation() {
    loom::model(|| {
        let table = Table::new();
        let (task, waker) = task();
        let r = table.arm(1, &waker).unwrap();
        drop(waker);
        table.clear_cache();
        let canceller = thread::spawn(move || r.cancel());
        let woke = sweep(&table, 1);
        canceller.join().unwrap();
        assert_eq!(task.0.load(Ordering::SeqCst), woke);
        assert!(woke <= 1);
        all_released(&table, &task);
    });
}

/// A waiter re-arming through the cache while the sweeper fires the cached
/// bucket: it is either refused (the tick fired: its deadline passed) or
/// registered and then woken by that fire, or its bucket survives the
/// sweep unfired; never armed in a fired bucket and left asleep.
#[test]
fn arming_through_the_cache_races_the_fire() {
    loom::model(|| {
        let table = Table::new();
        // A first waiter puts tick 1's bucket in the cache.
        let r0 = table.arm(1, Waker::noop()).unwrap();
        r0.cancel();
        let (task, waker) = task();
        let sweeper = spawn_sweep(&table, 1);
        let r = table.arm(1, &waker);
        drop(waker);
        let woke = sweeper.join().unwrap();
        match r {
            None => assert_eq!(woke, 0),
            Some(r) => {
                // Registered before the fire took the wakers.
                assert_eq!(woke, 1, "armed in a fired bucket and never woken");
                assert!(r.poll(Waker::noop()));
                r.cancel();
            }
        }
        assert_eq!(task.0.load(Ordering::SeqCst), woke);
        all_released(&table, &task);
    });
}

/// The fork-pause handshake: once the pauser sees the acknowledgement, the
/// sweeper is in no sweep (it holds no lock the child could inherit) and
/// starts none until `resume`, even though an earlier pause left a stale
/// acknowledgement behind.
#[test]
fn an_acknowledged_pause_holds_no_sweep() {
    const PID: u32 = 7;
    loom::model(|| {
        let gate = Arc::new(PauseGate::new());
        gate.started();
        // An earlier pause, acknowledged and resumed.
        gate.request(PID);
        assert!(!gate.enter_sweep(PID));
        gate.resume();
        let sweeping = Arc::new(AtomicBool::new(false));
        let forked = Arc::new(AtomicBool::new(false));
        let sweeper = {
            let (gate, sweeping, forked) = (gate.clone(), sweeping.clone(), forked.clone());
            thread::spawn(move || {
                for _ in 0..2 {
                    if gate.enter_sweep(PID) {
                        sweeping.store(true, Ordering::SeqCst);
                        assert!(
                            !forked.load(Ordering::SeqCst),
                            "a sweep started after the pause was acknowledged"
                        );
                        sweeping.store(false, Ordering::SeqCst);
                        // Nothing armed: park until unparked, as the real
                        // sweeper does between sweeps.
                        gate.idle();
                    }
                }
            })
        };
        gate.request(PID);
        if gate.acknowledged() {
            forked.store(true, Ordering::SeqCst);
            assert!(
                !sweeping.load(Ordering::SeqCst),
                "acknowledged in the middle of a sweep"
            );
        }
        sweeper.join().unwrap();
        // A forked child's own sweeper ignores the parent's request.
        assert!(gate.enter_sweep(PID + 1));
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
