//! The sweeper: one thread per manager that fires due ticks.
//!
//! One thread per manager, started by the first timer ever armed (linking the
//! crate or creating a manager starts nothing). It sleeps until the start of
//! the earliest armed tick, not on a fixed 10 ms beat, so a timer is late by
//! at most the rounding to its tick plus the thread's wake-up latency
//! (pingora sleeps a full tick after each sweep, which adds up to a second
//! tick). When no timer is armed it parks with no timeout: an idle process
//! sees no wake-ups at all.
//!
//! Waking it is cheap and cannot be lost: see [`Planner`](crate::planner::Planner). Only a thread
//! that creates a new bucket (about once per tick per thread) touches the
//! shared plan, and only one that moves the plan earlier unparks the sweeper.

use super::Inner;
use crate::clock;
use crate::sync::Revocation;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::thread::{self, Thread};
use std::time::Duration;

/// The running sweeper, for unparking it (`None` before the first timer).
#[derive(Debug, Default)]
pub(super) struct SweeperHandle {
    pub(super) thread: Option<Thread>,
}

impl Inner {
    pub(super) fn unpark_sweeper(&self) {
        if let Some(thread) = &self.sweeper.lock().thread {
            thread.unpark();
        }
    }

    /// Start the sweeper if this process has none (first timer ever, or
    /// first new tick in a forked child).
    pub(super) fn ensure_sweeper(self: &Arc<Self>) {
        let pid = std::process::id();
        if self.sweeper_pid.load(Ordering::Acquire) == pid {
            return;
        }
        self.start_sweeper(pid);
    }

    #[cold]
    pub(super) fn start_sweeper(self: &Arc<Self>, pid: u32) {
        let mut handle = self.sweeper.lock();
        let previous = self.sweeper_pid.load(Ordering::Acquire);
        if previous == pid {
            return;
        }
        if previous != 0 {
            // A forked child: only this thread survived.
            self.adopt_after_fork();
        }
        let weak = Arc::downgrade(self);
        let spawned = thread::Builder::new()
            .name("weir-timeout".into())
            .spawn(move || sweeper_main(weak, pid));
        match spawned {
            Ok(join) => {
                handle.thread = Some(join.thread().clone());
                self.pause.started();
                self.threads_started.fetch_add(1, Ordering::Relaxed);
                self.sweeper_forks
                    .store(super::fork::forks(), Ordering::Relaxed);
                self.sweeper_pid.store(pid, Ordering::Release);
            }
            Err(e) => panic!("weir-timeout: cannot start the sweeper thread: {e}"),
        }
    }

    /// One pass of the sweeper of process `pid`. Returns how long to park
    /// (`None`: until unparked).
    pub(super) fn sweep(&self, pid: u32) -> Option<Duration> {
        if !self.pause.enter_sweep(pid) {
            return None;
        }
        self.planned.reset();
        let now = self.clock.now_ns();
        let due = clock::due_tick(now, self.resolution_ns);
        let mut earliest = u64::MAX;
        // Woken once no table lock is held (see `Bucket::fire`).
        let mut wakers = Vec::new();
        // One barrier revokes the biases of every bucket this sweep fires.
        let mut revocation = Revocation::new();
        for table in self.all_tables() {
            if !table.abandoned.load(Ordering::Relaxed) {
                // SAFETY: dropped right below, before any bucket is fired.
                unsafe { table.revoke_due(due, &mut revocation) };
            }
        }
        drop(revocation);
        for table in self.all_tables() {
            if table.abandoned.load(Ordering::Relaxed) {
                continue;
            }
            earliest = earliest.min(table.fire_due(&self.buckets, due, &mut wakers));
        }
        for w in wakers {
            // A panicking waker must not take the sweeper (and with it every
            // timer of the manager) down with it.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| w.wake()));
        }
        let next = self.planned.settle(earliest);
        if next == u64::MAX {
            self.pause.idle();
            return None;
        }
        let wake_at = clock::tick_start_ns(next, self.resolution_ns);
        Some(Duration::from_nanos(
            wake_at
                .saturating_sub(self.clock.now_ns())
                .min(3_600_000_000_000),
        ))
    }
}

/// The sweeper thread of process `pid` (it never survives a fork, so the
/// process id is read once).
fn sweeper_main(weak: Weak<Inner>, pid: u32) {
    loop {
        let Some(inner) = weak.upgrade() else {
            return;
        };
        let park = inner.sweep(pid);
        drop(inner);
        match park {
            None => thread::park(),
            Some(d) if d.is_zero() => {}
            Some(d) => thread::park_timeout(d),
        }
        match weak.upgrade() {
            Some(inner) => {
                inner.wakeups.fetch_add(1, Ordering::Relaxed);
            }
            None => return,
        }
    }
}
