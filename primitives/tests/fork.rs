//! `on_fork_in_child`: the hook runs in a forked child, once however often
//! it was registered, and never in the parent; `forks` moves by one in the
//! child and not in the parent. (Its own binary: a forking
//! test must run alone.)
#![cfg(unix)]

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;
use weir_primitives::fork::{forks, on_fork_in_child};

static RUNS: AtomicU32 = AtomicU32::new(0);

fn count() {
    RUNS.fetch_add(1, Ordering::Relaxed);
}

#[test]
fn a_hook_runs_once_in_the_child_only() {
    assert!(on_fork_in_child(count));
    assert!(on_fork_in_child(count));
    let before = forks();
    let child = weir_test_support::fork::spawn(|| {
        if RUNS.load(Ordering::Relaxed) != 1 {
            return 1;
        }
        i32::from(forks() != before + 1) * 2
    });
    assert_eq!(
        child.wait(Duration::from_secs(10)),
        0,
        "1: the child saw the hook run not exactly once; 2: its fork count did not move by one"
    );
    assert_eq!(RUNS.load(Ordering::Relaxed), 0, "the parent ran it");
    assert_eq!(forks(), before, "the parent's fork count moved");
}
