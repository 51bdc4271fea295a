//! A fork while another thread rotates a `Rate`'s window leaves the child a
//! claimed rotation that no thread of the child will finish (only the
//! forking thread survives). The child's readers and writers must not
//! wait for it forever: the child finishes the rotation itself.
//!
//! One test in its own binary: no other test thread runs when it forks.
#![cfg(target_os = "linux")]

use std::sync::Arc;
use std::time::{Duration, Instant};
use weir_limits::clock::{Clock, ManualClock};
use weir_limits::{Layout, Rate, Shape};
use weir_test_support::fork;

type Shared = Arc<Rate<ManualClock>>;

/// Fork while another thread's `observe(&"k", events)` rotates `rate`'s
/// window (claimed, as its `Debug` shows, and zeroing); the child runs
/// `child` only if the fork caught the rotation (code 4 otherwise).
/// Returns the child's exit code, after checking the rotating thread's
/// count in the parent.
fn fork_mid_rotation(rate: &Shared, events: isize, child: impl FnOnce() -> i32) -> i32 {
    let rotating = std::thread::spawn({
        let rate = rate.clone();
        move || rate.observe(&"k", events)
    });
    let waited = Instant::now();
    while !format!("{rate:?}").contains("rotating: true") {
        assert!(waited.elapsed() < Duration::from_secs(10), "never claimed");
        std::hint::spin_loop();
    }
    let code = fork::spawn(|| {
        if !format!("{rate:?}").contains("rotating: true") {
            return 4;
        }
        child()
    })
    .wait(Duration::from_secs(10));
    assert_eq!(rotating.join().expect("the rotating thread"), events);
    code
}

#[test]
fn a_child_forked_mid_rotation_finishes_the_rotation() -> Result<(), Box<dyn std::error::Error>> {
    // Sketches large enough that zeroing one takes tens of milliseconds
    // (every page of it faulted in), so the fork lands inside a rotation.
    let shape = Shape::try_new(4, 1 << 22, Layout::Rows)?;
    let clock = ManualClock::new();
    let second = Duration::from_secs(1);
    let rate: Shared = Arc::new(Rate::try_with_shape(second, shape, clock.clone())?);
    rate.observe(&"k", 3);
    clock.advance(second);
    rate.observe(&"k", 5);
    clock.advance(second);
    // The rotating thread claims window 2 (published with the claim),
    // zeroes the spare sketch, then counts its 7.
    let code = fork_mid_rotation(&rate, 7, || {
        // The parent's 7 never arrived here; window 1's 5 is the previous.
        let c = rate.components(&"k");
        if (c.previous, c.current) != (5, 0) {
            return 2;
        }
        // Writers of a later window find the rotation finished too.
        clock.advance(second);
        if rate.observe(&"k", 1) != 1 {
            return 3;
        }
        0
    });
    assert_eq!(
        code, 0,
        "child: 2 = wrong counts, 3 = wrong count after, 4 = forked after the rotation"
    );

    // After a quiet spell the claim keeps the old window published while
    // every sketch is zeroed; a child forked then starts from nothing.
    clock.advance(second * 3);
    let code = fork_mid_rotation(&rate, 11, || {
        let c = rate.components(&"k");
        if (c.previous, c.current) != (0, 0) {
            return 2;
        }
        // Nor does a clock set back to the windows the claim was zeroing
        // read what the parent left of them.
        let now = Duration::from_nanos(clock.now_nanos());
        clock.set(second * 2);
        let c = rate.components(&"k");
        if (c.previous, c.current) != (0, 0) {
            return 5;
        }
        clock.set(now);
        if rate.observe(&"k", 1) != 1 || rate.components(&"k").current != 1 {
            return 3;
        }
        0
    });
    assert_eq!(
        code, 0,
        "after a gap, child: 2 = stale counts, 3 = wrong count after, \
         4 = forked after the rotation, 5 = half-zeroed windows"
    );
    Ok(())
}
