//! `ShardedEstimator` used from a thread-local destructor, after the
//! thread has given its thread-local slot back.
//!
//! A thread's tables live in a slot indexed by a small thread id, which is
//! handed to the next new thread once the old one's thread-locals are torn
//! down. A destructor that runs later on the old thread must not keep
//! writing the slot the new thread now owns.
//!
//! Each scenario runs in a child process of this test binary, so that no
//! other test's threads take or free thread ids meanwhile, and so that an
//! abort inside a destructor fails one test instead of the whole binary.

use std::cell::RefCell;
use std::num::NonZeroUsize;
use std::process::Command;
use std::sync::mpsc;
use std::sync::{Arc, Barrier};
use weir_limits::{Shape, ShardedEstimator};

const CHILD: &str = "WEIR_SHARDED_EXIT_CHILD";

/// Run `scenario` in a fresh process (this binary, filtered to `name`).
fn in_child(name: &str, scenario: fn()) {
    if std::env::var(CHILD).as_deref() == Ok(name) {
        scenario();
        return;
    }
    let output = Command::new(std::env::current_exe().unwrap())
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, name)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{name} failed in its child process ({}):\n{}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
    // A filter that matches nothing passes too: the child must have run
    // this very test.
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("test result: ok. 1 passed"),
        "{name}: the child ran no test: {stdout}"
    );
}

fn sketch() -> Arc<ShardedEstimator> {
    // No flush in these tests: every update stays in its thread's view, so
    // two writers of one view lose updates instead of merely racing flushes.
    let never = NonZeroUsize::new(usize::MAX).unwrap();
    Arc::new(ShardedEstimator::with_flush_every(
        Shape::rows::<1, 1>().with_seed(1),
        never,
    ))
}

/// What a thread-local destructor does on its way out.
struct Late(Option<Box<dyn FnOnce()>>);

impl Drop for Late {
    fn drop(&mut self) {
        if let Some(run) = self.0.take() {
            run();
        }
    }
}

thread_local! {
    static LATE: RefCell<Late> = const { RefCell::new(Late(None)) };
}

/// Set `run` to happen in this thread's thread-local teardown, after that
/// of every thread-local first used later than now (destructors run in
/// reverse order of registration).
fn at_teardown(run: impl FnOnce() + 'static) {
    LATE.with(|late| late.borrow_mut().0 = Some(Box::new(run)));
}

const EVENTS: isize = 2_000_000;

fn recycled_thread_id_scenario() {
    let sketch = sketch();
    let (released, on_release) = mpsc::channel();
    let together = Arc::new(Barrier::new(2));
    let old = {
        let (sketch, together) = (Arc::clone(&sketch), Arc::clone(&together));
        std::thread::spawn(move || {
            let late = Arc::clone(&sketch);
            at_teardown(move || {
                // The thread id is free by now: a new thread may take it.
                released.send(()).unwrap();
                together.wait();
                for _ in 0..EVENTS {
                    late.incr(&1u8, 1);
                }
            });
            // First use of the sketch on this thread: takes a thread id
            // (and a table) after the teardown hook above was registered.
            sketch.incr(&1u8, 1);
        })
    };
    on_release.recv().unwrap();
    let one_table = sketch.memory_bytes();
    let new = {
        let sketch = Arc::clone(&sketch);
        std::thread::spawn(move || {
            together.wait();
            for _ in 0..EVENTS {
                sketch.incr(&1u8, 1);
            }
        })
    };
    old.join().unwrap();
    new.join().unwrap();
    // The scenario is what it says: the new thread took the old one's slot
    // rather than a table of its own.
    assert_eq!(sketch.memory_bytes(), one_table, "no slot was recycled");
    // One key in a one-cell sketch: its estimate is exact.
    assert_eq!(
        sketch.get(&1u8),
        1 + 2 * EVENTS,
        "two threads wrote one table and lost updates"
    );
}

#[test]
fn a_late_destructor_does_not_share_a_recycled_threads_table() {
    in_child(
        "a_late_destructor_does_not_share_a_recycled_threads_table",
        recycled_thread_id_scenario,
    );
}

fn first_use_in_a_late_destructor_scenario() {
    let (used, unused) = (sketch(), sketch());
    let late = Arc::clone(&unused);
    std::thread::spawn({
        let used = Arc::clone(&used);
        move || {
            // This sketch's first use on the thread comes after the thread
            // has given its thread id back.
            at_teardown(move || {
                assert_eq!(late.incr(&1u8, 3), 3);
                late.flush();
            });
            used.incr(&1u8, 1);
        }
    })
    .join()
    .unwrap();
    assert_eq!((used.get(&1u8), unused.get(&1u8)), (1, 3));
}

#[test]
fn a_sketch_first_used_in_a_late_destructor_counts() {
    in_child(
        "a_sketch_first_used_in_a_late_destructor_counts",
        first_use_in_a_late_destructor_scenario,
    );
}
