//! fork(): pausing the sweeper before it, adopting the tables after it.
//!
//! [`TimerManager::pause_for_fork`](crate::TimerManager::pause_for_fork) stops the sweeper at a point where it
//! holds no lock and waits for it to say so. In the child only the forking
//! thread exists: its first timer (a `pthread_atfork` hook makes the child's
//! thread a stranger to its own tables, so that arm takes the cold adoption
//! path) or [`TimerManager::unpause`](crate::TimerManager::unpause) marks every other thread's table
//! abandoned, so nothing ever waits on a lock a vanished thread held, and
//! starts a fresh sweeper at once. A child that arms nothing but goes on
//! waiting for a timer armed before the fork starts its sweeper on that
//! timer's next poll: the same `pthread_atfork` handler counts forks, and a
//! poll that finds its manager's sweeper started before the latest one
//! starts this process's (see [`forks`]). The pause belongs to the parent's
//! sweeper: the child's never honours it, so the child need not unpause.
//! pingora's child instead waits for a 2 s watchdog. Timers armed during
//! the pause are kept and fire when due after `unpause`, never early.
//!
//! `pause_for_fork` is required, not a courtesy: a sweeper caught by
//! `fork()` in the middle of a sweep holds the forking thread's table lock
//! or one of its buckets' locks, and a child that inherits that lock
//! deadlocks on its first timer there. Restarting the sweeper does not
//! release it.

use super::Inner;
use crate::table::ThreadTable;
use std::ptr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::Duration;

std::thread_local! {
    /// This thread's [`thread_serial`], 0 until first asked. `const` and
    /// without `Drop`: readable even from TLS destructors and from the
    /// fork handler.
    static SERIAL: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// [`thread_serial`] of a thread whose thread-local storage is being torn
/// down: its timers go to the manager's shared late table.
pub(super) const TORN_DOWN: u64 = u64::MAX;

/// Dropped with its thread's thread-local storage; from then on the thread
/// is [`TORN_DOWN`]. Registered on a thread's first arm, after
/// `thread_local`'s own thread state (destructors run in reverse order of
/// registration), so a timer armed by any destructor that runs after this
/// one never asks `thread_local` for the thread's table: it would panic,
/// and a panic in a thread-local destructor aborts the process.
struct TearDown;

impl Drop for TearDown {
    fn drop(&mut self) {
        let _ = SERIAL.try_with(|s| s.set(TORN_DOWN));
    }
}

std::thread_local! {
    static TEAR_DOWN: TearDown = const { TearDown };
}

/// See [`TearDown`].
pub(super) fn watch_tear_down() {
    let _ = TEAR_DOWN.try_with(|_| {});
}

/// Forks this process descends through ([`weir_primitives::fork::forks`]):
/// a manager whose sweeper was started at another count than the current
/// one has no sweeper in this process.
pub(super) use weir_primitives::fork::forks;

/// A number unique to the current thread (0: never). Unlike
/// `thread_local`'s ids these are never reused, and in a forked child the
/// thread that survived gets a new one (see [`watch_forks`]).
#[inline]
pub(super) fn thread_serial() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    SERIAL.with(|s| {
        let v = s.get();
        if v != 0 {
            return v;
        }
        let v = NEXT.fetch_add(1, Ordering::Relaxed);
        s.set(v);
        v
    })
}

/// Make every forked child give its one thread a new [`thread_serial`].
///
/// Each table remembers the serial of the thread that owns its cache, and
/// [`Inner::arm`] already compares it with the caller's on every arm. So in
/// the child the first arm on any manager finds a stranger's table and takes
/// the cold [`Inner::adopt_table`], which drops the inherited cache, notices
/// the fork and starts the child's sweeper: nothing is added to the hot path
/// (a `getpid` there would cost more than the rest of it), and the child
/// need not call [`TimerManager::unpause`](crate::TimerManager::unpause).
///
/// Forks through `libc::fork` (or anything else that runs `pthread_atfork`
/// handlers) are seen; a raw `clone` system call is not. If the hook cannot
/// be registered (no memory), a child still starts its sweeper when it
/// calls `unpause` or arms a new tick.
pub(super) fn watch_forks() {
    fn in_child() {
        // Async-signal-safe: one store to this thread's own `const`
        // thread-local. (The fork count moves before the hooks run.)
        let _ = SERIAL.try_with(|s| s.set(0));
    }
    let _ = weir_primitives::fork::on_fork_in_child(in_child);
}

impl Inner {
    /// In a forked child: forget every table but this thread's.
    pub(super) fn adopt_after_fork(&self) {
        let mine = self
            .tables
            .get()
            .map_or(ptr::null(), |t| t as *const ThreadTable);
        for table in self.tables.iter() {
            if !ptr::eq(table, mine) {
                table.abandoned.store(true, Ordering::SeqCst);
            }
        }
        self.planned.reset();
    }

    pub(super) fn pause_for_fork(&self) -> bool {
        let pid = std::process::id();
        self.pause.request(pid);
        if self.sweeper_pid.load(Ordering::Acquire) != pid {
            return true;
        }
        self.unpark_sweeper();
        // The sweeper acknowledges at its next loop turn, a few microseconds
        // away unless it is busy waking a large tick (see `PauseGate`).
        let start = std::time::Instant::now();
        while !self.pause.acknowledged() {
            if start.elapsed() > Duration::from_secs(2) {
                return false;
            }
            thread::sleep(Duration::from_micros(50));
            self.unpark_sweeper();
        }
        true
    }

    pub(super) fn unpause(self: &Arc<Self>) {
        self.pause.resume();
        let pid = std::process::id();
        let started = self.sweeper_pid.load(Ordering::Acquire);
        if started != 0 && started != pid {
            self.start_sweeper(pid);
        }
        self.unpark_sweeper();
    }
}
