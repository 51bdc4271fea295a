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
//!   under load arming is a counter read, a compare and a lock that the
//!   owning thread takes without a locked instruction (it is biased
//!   towards that thread; the sweeper, or a thread cancelling a timer that
//!   moved to it, revokes the bias once per tick's timer).
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
//!
//! # Platform
//!
//! Revoking a bias needs Linux's `membarrier(2)` (kernel 4.14 or later).
//! A [`TimerManager`] registers for it when built; where it is missing or
//! denied then, timers take an ordinary spin lock instead. A seccomp filter
//! that denies `membarrier` *after* a manager was built leaves no safe way
//! to revoke a bias: the process stops with a message the first time one is
//! needed. Allow `membarrier` in such a filter, or sandbox before building
//! a manager.
//!
//! # Metrics
//!
//! [`TimerManager::metrics`] is a snapshot of a manager's counters (timers
//! armed, fired, cancelled, pending). With the feature `metrics`,
//! `TimerManager::publish_metrics` publishes it through the
//! [`metrics`](https://docs.rs/metrics) facade (`weir_timeout_timers_*`,
//! labelled by `manager`); arming a timer does no extra work for it.

#![cfg_attr(docsrs, feature(doc_cfg))]

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
    ConfigError, DEFAULT_RESOLUTION, MAX_RESOLUTION, MIN_RESOLUTION, Metrics, TimerManager,
};

// The loom models (`cargo xtask loom`) live inside the crate, as tokio's
// do, so the code they drive needs no public door: `loom_model` adapts the
// protocol's pieces to a model's hands, `loom_tests` holds the models.
#[cfg(all(test, loom))]
mod loom_model;
#[cfg(all(test, loom))]
mod loom_tests;

// The README's examples run as doc tests.
#[cfg(all(doctest, not(loom)))]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
