//! `on_fork_in_child`: the hook runs in a forked child, once however often
//! it was registered, and never in the parent. (Its own binary: a forking
//! test must run alone.)
#![cfg(unix)]

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;
use weir_primitives::fork::on_fork_in_child;

static RUNS: AtomicU32 = AtomicU32::new(0);

fn count() {
    RUNS.fetch_add(1, Ordering::Relaxed);
}

#[test]
fn a_hook_runs_once_in_the_child_only() {
    assert!(on_fork_in_child(count));
    assert!(on_fork_in_child(count));
    let child = weir_test_support::fork::spawn(|| i32::from(RUNS.load(Ordering::Relaxed) != 1));
    assert_eq!(
        child.wait(Duration::from_secs(10)),
        0,
        "the child saw the hook run not exactly once"
    );
    assert_eq!(RUNS.load(Ordering::Relaxed), 0, "the parent ran it");
}
