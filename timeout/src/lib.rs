//! Cheap async timeouts for services that arm millions of them a second and
//! cancel almost all of them.
//!
//! ```
//! use std::time::Duration;
//! # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
//! match weir_timeout::timeout(Duration::from_secs(5), async { 42 }).await {
//!     Ok(v) => assert_eq!(v, 42),
//!     Err(elapsed) => panic!("{elapsed}"),
//! }
//! # });
//! ```
//!
//! # Design
//!
//! A proxy's timeouts are almost never reached: a read, a write, a handshake
//! each arm one, the I/O completes, the timer is thrown away. So everything is
//! arranged to make arming and cancelling cheap and to push the cost into
//! the rare firing:
//!
//! - **Lazy.** A [`Timeout`] polls its future first and arms nothing if it is
//!   ready. Time is looked at only when a timer is armed.
//! - **Quantised and shared.** Deadlines are rounded *up* to a tick (10 ms by
//!   default, per [`TimerManager`] otherwise), so never early, and every
//!   waiter of one tick on one thread shares one timer: arming stores a waker
//!   in that tick's slot vector, cancelling clears the slot. Each thread
//!   caches, per recent duration, the bucket it used last and how long that
//!   bucket stays the right answer (checked with the TSC, not the clock), so
//!   under load arming is a counter read, a compare and one short
//!   uncontended lock.
//! - **Per-thread tables, one sweeper.** Each worker has its own table, so
//!   arming never waits on another worker. One sweeper thread per manager
//!   sleeps until the earliest armed tick starts, fires what is due, and
//!   parks with no timeout when nothing is armed.
//!
//! It fixes pingora-timeout's known faults (each has a test): no lost
//! wake-up between checking and arming (the fired flag and the wakers share
//! a lock, modelled with loom), tokio's paused test clock is honoured (the
//! timer defers to tokio's when the runtime's clock is paused, and only
//! then, so a runtime without `enable_time()` works too), lateness is
//! at most one tick plus wake-up noise (the sweeper wakes at tick starts, not
//! on a fixed beat), no wake-ups and no thread while idle, a tick's timer is
//! freed as soon as its last waiter goes, `Duration::MAX` saturates and zero
//! fires at once, and a forked child gets a working sweeper at once.
//!
//! Below roughly a hundred timeouts a second none of this matters and
//! `tokio::time::timeout` is just as good.

#[cfg(not(loom))]
mod clock;
#[cfg(not(loom))]
mod future;
#[cfg(not(loom))]
mod manager;
#[cfg(not(loom))]
pub mod pingora;

mod bucket;
mod pause;
mod planner;
mod sync;
mod table;

#[cfg(not(loom))]
pub use future::{Elapsed, Sleep, Timeout, sleep, sleep_until, timeout, timeout_at};
#[cfg(not(loom))]
pub use manager::{
    DEFAULT_RESOLUTION, InvalidResolution, MAX_RESOLUTION, MIN_RESOLUTION, Metrics, TimerManager,
};

/// Stop the global manager's sweeper before `fork()`; `false` if it did not
/// stop in time (then do not fork). See [`TimerManager::pause_for_fork`].
#[cfg(not(loom))]
pub fn pause_for_fork() -> bool {
    TimerManager::global().pause_for_fork()
}

/// Resume the global manager after `fork()` (in the child it is optional);
/// see [`TimerManager::unpause`].
#[cfg(not(loom))]
pub fn unpause() {
    TimerManager::global().unpause();
}

/// The shared-timer protocol, exposed only to the loom models.
#[cfg(loom)]
#[doc(hidden)]
pub mod loom_model {
    pub use crate::bucket::Release;

    /// The sweeper's wake-up plan.
    #[derive(Debug)]
    pub struct Planner(crate::planner::Planner);

    impl Planner {
        /// Nothing planned.
        pub fn new() -> Self {
            Self(crate::planner::Planner::new())
        }
        /// A bucket was entered: `true` if the sweeper must be unparked.
        pub fn lower(&self, tick: u64) -> bool {
            self.0.lower(tick)
        }
        /// The sweeper starts a scan.
        pub fn reset(&self) {
            self.0.reset()
        }
        /// The sweeper found `earliest`: returns when to wake.
        pub fn settle(&self, earliest: u64) -> u64 {
            self.0.settle(earliest)
        }
    }

    impl Default for Planner {
        fn default() -> Self {
            Self::new()
        }
    }

    /// A tick's shared timer.
    #[derive(Debug)]
    pub struct Bucket(crate::bucket::Bucket);

    impl Bucket {
        /// A bucket in its table, not cached.
        pub fn new() -> Self {
            Self(crate::bucket::Bucket::new(1, false))
        }
        /// Subscribe; `None` if already fired.
        pub fn register(&self, waker: &std::task::Waker) -> Option<usize> {
            self.0.register(waker)
        }
        /// Re-poll: `true` if fired.
        pub fn poll_slot(&self, slot: usize, waker: &std::task::Waker) -> bool {
            self.0.poll_slot(slot, waker)
        }
        /// Cancel.
        pub fn cancel(&self, slot: usize) -> Release {
            self.0.cancel(slot)
        }
        /// Second half of an unlink; `remove` takes the bucket out of its
        /// table (the caller holds the table's lock). Returns whether to free.
        pub fn finish_unlink(&self, remove: impl FnOnce()) -> bool {
            self.0.finish_unlink(remove).1
        }
        /// Fire; returns the wakers and whether to free.
        pub fn fire(&self) -> (Vec<std::task::Waker>, bool) {
            let (w, _, free) = self.0.fire();
            (w, free)
        }
    }

    impl Default for Bucket {
        fn default() -> Self {
            Self::new()
        }
    }

    /// One thread's timer table, driven the way the manager drives it: one
    /// owner thread arms (through the cache when the tick is the cached
    /// one), any thread cancels, a sweeper fires. Every bucket is allocated
    /// and freed through the table's allocator, which under loom panics on
    /// a double free; [`Table::live_buckets`] finds leaks.
    #[derive(Debug, Default)]
    pub struct Table {
        table: crate::table::ThreadTable,
        buckets: crate::table::Buckets,
    }

    /// The one duration the models arm (the cache is keyed by duration).
    const DURATION: u64 = 1;

    impl Table {
        /// An empty table (shared with its registrations, which keep it
        /// alive).
        pub fn new() -> std::sync::Arc<Self> {
            std::sync::Arc::new(Self::default())
        }

        /// Owner only: arm `waker` for `tick`, through the cached bucket if
        /// it is `tick`'s (as when the cache window is still open), else
        /// through the map, which moves the cache entry on. `None`: the
        /// tick already fired.
        pub fn arm(
            self: &std::sync::Arc<Self>,
            tick: u64,
            waker: &std::task::Waker,
        ) -> Option<Registration> {
            let cached = self
                .table
                .cached(DURATION, 0)
                // SAFETY: the cache's hold keeps the bucket alive, and only
                // this (the owner) thread releases it.
                .filter(|b| unsafe { b.as_ref() }.tick == tick);
            let bucket = match cached {
                Some(b) => b,
                None => {
                    let (b, _, to_free) = self.table.enter(&self.buckets, tick, DURATION, 0, 1);
                    if let Some(old) = to_free {
                        // SAFETY: that was the last hold.
                        unsafe { self.buckets.free(old) };
                    }
                    b
                }
            };
            // SAFETY: the cache's hold keeps the bucket alive; the
            // registration keeps the table alive.
            let armed = unsafe { crate::table::Armed::register(&self.table, bucket, waker) }?;
            Some(Registration {
                armed,
                table: self.clone(),
            })
        }

        /// Owner only: forget the cache (the table changed owner).
        pub fn clear_cache(&self) {
            for b in self.table.clear_cache() {
                // SAFETY: that was the last hold.
                unsafe { self.buckets.free(b) };
            }
        }

        /// The sweeper: fire every tick up to `due`; returns the wakers to
        /// wake (the table lock is released) and the earliest tick left.
        pub fn fire_due(&self, due: u64) -> (Vec<std::task::Waker>, u64) {
            let mut wakers = Vec::new();
            let earliest = self.table.fire_due(&self.buckets, due, &mut wakers);
            (wakers, earliest)
        }

        /// Buckets allocated and not yet freed.
        pub fn live_buckets(&self) -> i64 {
            self.buckets.live()
        }
    }

    impl Drop for Table {
        fn drop(&mut self) {
            for b in self.table.drain() {
                // SAFETY: every registration kept the table alive, so none
                // is left; the table and cache held the last holds.
                unsafe { self.buckets.free(b) };
            }
        }
    }

    /// A waiter armed in a [`Table`].
    #[derive(Debug)]
    pub struct Registration {
        armed: crate::table::Armed,
        table: std::sync::Arc<Table>,
    }

    impl Registration {
        /// Re-poll: `true` once the tick has fired.
        pub fn poll(&self, waker: &std::task::Waker) -> bool {
            self.armed.poll(waker)
        }

        /// Drop the registration (cancel, or done after the fire), from any
        /// thread.
        pub fn cancel(self) {
            self.armed.disarm(&self.table.buckets);
        }
    }

    /// The fork-pause handshake between a pauser and the sweeper.
    #[derive(Debug)]
    pub struct PauseGate(crate::pause::PauseGate);

    impl PauseGate {
        /// No sweeper yet, no request.
        pub fn new() -> Self {
            Self(crate::pause::PauseGate::new())
        }
        /// A sweeper was started.
        pub fn started(&self) {
            self.0.started()
        }
        /// Ask the sweeper of `pid` to stop.
        pub fn request(&self, pid: u32) {
            self.0.request(pid)
        }
        /// Whether the sweeper has stopped.
        pub fn acknowledged(&self) -> bool {
            self.0.acknowledged()
        }
        /// Withdraw the request.
        pub fn resume(&self) {
            self.0.resume()
        }
        /// The sweeper of `pid` is about to sweep: `false` means park.
        pub fn enter_sweep(&self, pid: u32) -> bool {
            self.0.enter_sweep(pid)
        }
        /// The sweeper parks with nothing armed.
        pub fn idle(&self) {
            self.0.idle()
        }
    }

    impl Default for PauseGate {
        fn default() -> Self {
            Self::new()
        }
    }
}
