//! A forked child's `RecentClock`s keep time though the parent's upkeep
//! thread did not survive the fork, without the child making a new clock;
//! and where the child cannot start a thread, they read the monotonic clock
//! themselves.
//!
//! One test in its own binary: no other test thread runs when it forks.
#![cfg(target_os = "linux")]

use std::time::Duration;
use weir_limits::clock::{Clock, MonotonicClock, RecentClock};
use weir_test_support::fork;

/// 0 if `clock` moves at least as far as the time slept and never runs
/// ahead of the monotonic clock; 2 if it stood still, 3 if it ran ahead.
fn keeps_time(clock: &RecentClock) -> i32 {
    let monotonic = MonotonicClock::new();
    let before = clock.now_nanos();
    std::thread::sleep(Duration::from_millis(20));
    let after = clock.now_nanos();
    if after > monotonic.now_nanos() {
        return 3;
    }
    if after < before + 15_000_000 {
        return 2;
    }
    0
}

#[test]
fn recent_clocks_keep_time_in_a_forked_child() {
    let clock = RecentClock::new();
    assert_eq!(keeps_time(&clock), 0, "in the parent");
    // The child uses only the clock made before the fork.
    let code = fork::spawn(|| keeps_time(&clock)).wait(Duration::from_secs(10));
    assert_eq!(code, 0, "child: 2 = stood still, 3 = ran ahead");
    // A child that cannot start the upkeep thread (no room for its stack)
    // reads the monotonic clock instead.
    let code = fork::spawn(|| {
        if fork::refuse_new_threads().is_err() {
            return 5;
        }
        keeps_time(&clock)
    })
    .wait(Duration::from_secs(10));
    assert_eq!(
        code, 0,
        "child without threads: 2 = stood still, 3 = ran ahead, 5 = no limit"
    );
    assert_eq!(keeps_time(&clock), 0, "in the parent afterwards");
}
