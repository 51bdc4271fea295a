//! When the operating system refuses the sweeper thread, the first timer's
//! poll panics, as documented, and leaves nothing registered behind it: no
//! waiter counted, no task's waker kept.
//!
//! The refusal is made real in a forked child (so the limit binds nobody
//! else) by capping its address space just above what it uses, which no
//! thread stack fits in (root is not exempt, unlike the process-count
//! limit). One test in its own binary: no other test thread runs when it
//! forks.
#![cfg(target_os = "linux")]

use std::pin::pin;
use std::task::{Context, Waker};
use std::time::Duration;
use weir_timeout::TimerManager;

/// In the child: 0 if the poll panicked and left no waiter, 2 if a waiter
/// stayed registered, 4 if the poll did not panic, 5 if the limit failed.
fn child() -> i32 {
    let manager = TimerManager::try_new(Duration::from_millis(10)).unwrap();
    if weir_test_support::fork::refuse_new_threads().is_err() {
        return 5;
    }
    let polled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut cx = Context::from_waker(Waker::noop());
        let mut sleep = pin!(manager.sleep(Duration::from_secs(1)));
        let _ = sleep.as_mut().poll(&mut cx);
    }));
    match polled {
        Ok(()) => 4,
        Err(_) if manager.metrics().waiters == 0 => 0,
        Err(_) => 2,
    }
}

#[test]
fn a_refused_sweeper_leaves_no_waiter_behind() {
    let code = weir_test_support::fork::spawn(child).wait(Duration::from_secs(10));
    assert_eq!(
        code, 0,
        "child: 2 = a waiter stayed registered, 4 = no panic, 5 = no limit, 101 = panicked elsewhere"
    );
}
