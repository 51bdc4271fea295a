//! A forked child that never calls `unpause` still gets working timers,
//! even when its first timer lands in a bucket inherited from the parent
//! (found through the thread's still-valid cache, so no new tick is armed),
//! and when it arms none at all but goes on waiting for one the forking
//! thread armed before the fork.
//!
//! One test in its own binary: no other test thread runs (and holds locks)
//! when it forks.
#![cfg(unix)]

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};
use weir_timeout::TimerManager;

struct Unpark(Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

/// Run `f` on this thread for at most `limit`; `None` if it did not finish.
fn block_on_for<F: Future>(f: F, limit: Duration) -> Option<F::Output> {
    let waker = Waker::from(Arc::new(Unpark(thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut f = pin!(f);
    let start = Instant::now();
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return Some(v);
        }
        thread::park_timeout(limit.checked_sub(start.elapsed())?);
    }
}

/// In the child: sleep `d` and report by exit code.
fn child_sleeps(manager: &TimerManager, d: Duration) -> i32 {
    let start = Instant::now();
    match block_on_for(manager.sleep(d), Duration::from_secs(5)) {
        None => 2,
        Some(()) if start.elapsed() < d => 3,
        Some(()) => 0,
    }
}

/// Fork (after `pause_for_fork`, as documented); the child never calls
/// `unpause` and sleeps `d`. Returns the child's exit code.
fn fork_and_sleep_in_child(manager: &TimerManager, d: Duration) -> i32 {
    fork_and_run_in_child(manager, || child_sleeps(manager, d))
}

/// Fork (after `pause_for_fork`); the child runs `child`, never calling
/// `unpause`, and exits with what it returns. Returns the child's exit code.
fn fork_and_run_in_child(manager: &TimerManager, child: impl FnOnce() -> i32) -> i32 {
    assert!(manager.pause_for_fork(), "the sweeper stopped");
    let child = weir_test_support::fork::spawn(child);
    manager.unpause();
    // Bounded wait: a hung child is killed and reported.
    child.wait(Duration::from_secs(10))
}

#[test]
fn a_child_that_never_unpauses_fires_its_timers() {
    // Half-second ticks: a 20 ms sleep armed now belongs to tick 1, and the
    // thread's cache keeps answering "tick 1" for almost half a second.
    let manager = TimerManager::try_new(Duration::from_millis(500)).unwrap();
    let d = Duration::from_millis(20);
    let noop = Waker::noop();
    let mut cx = Context::from_waker(noop);
    // The first arm starts the sweeper and opens the cache entry; the second,
    // after the counter's calibration (20 ms), makes the entry valid.
    for _ in 0..2 {
        let mut s = pin!(manager.sleep(d));
        assert!(s.as_mut().poll(&mut cx).is_pending());
        thread::sleep(Duration::from_millis(25));
    }
    assert_eq!(manager.metrics().sweeper_threads_started, 1);
    // The child's first timer: the cached bucket of tick 1, inherited.
    assert_eq!(
        fork_and_sleep_in_child(&manager, d),
        0,
        "child: 2 = never fired, 3 = early, 101 = panicked"
    );
    // The child's first timer: a new tick.
    assert_eq!(
        fork_and_sleep_in_child(&manager, Duration::from_millis(1_700)),
        0,
        "child: 2 = never fired, 3 = early, 101 = panicked"
    );
    // A sleep the forking thread armed before the fork: the child arms
    // nothing new (so no arm adopts the table), it only goes on polling it.
    let before = Duration::from_millis(300);
    let start = Instant::now();
    let mut armed = Box::pin(manager.sleep(before));
    assert!(armed.as_mut().poll(&mut cx).is_pending());
    let code = fork_and_run_in_child(&manager, move || {
        match block_on_for(armed, Duration::from_secs(5)) {
            None => 2,
            Some(()) if start.elapsed() < before => 3,
            Some(()) => 0,
        }
    });
    assert_eq!(
        code, 0,
        "child, armed before the fork: 2 = never fired, 3 = early, 101 = panicked"
    );
    // The parent's timers still work.
    let start = Instant::now();
    block_on_for(manager.sleep(d), Duration::from_secs(5)).expect("parent's sleep fired");
    assert!(start.elapsed() >= d);
}
