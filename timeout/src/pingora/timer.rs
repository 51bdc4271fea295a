//! pingora-timeout's `timer` module: a [`TimerManager`] to register timers
//! on directly, and the [`TimerStub`] to wait on.
//!
//! Users don't need this module; [`timeout`](super::timeout) and
//! [`sleep`](super::sleep) cover the common cases.

use std::time::{Duration, Instant};

/// A set of timers sharing 10 ms ticks, backed by its own weir
/// [`TimerManager`](crate::manager::TimerManager).
///
/// ```
/// use std::time::Duration;
/// use weir_timeout::pingora::timer::TimerManager;
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let manager = TimerManager::new();
/// manager.register_timer(Duration::from_millis(10)).poll().await;
/// # });
/// ```
///
/// # Differences from pingora
///
/// pingora's manager fires nothing unless its crate-private clock thread
/// is started for it, so timers registered on a `TimerManager` you create
/// never expire there. weir starts the manager's sweeper with its first
/// timer, so they do.
#[derive(Debug, Clone)]
pub struct TimerManager(crate::manager::TimerManager);

impl Default for TimerManager {
    fn default() -> Self {
        match crate::manager::TimerManager::try_new(crate::manager::DEFAULT_RESOLUTION) {
            Ok(manager) => Self(manager),
            Err(e) => unreachable!("the default resolution is valid: {e}"),
        }
    }
}

impl TimerManager {
    /// A manager with 10 ms ticks; its timer thread starts with its first
    /// timer.
    pub fn new() -> Self {
        Self::default()
    }

    /// A timer `duration` from now (rounded up to the next tick); wait for
    /// it with [`TimerStub::poll`].
    pub fn register_timer(&self, duration: Duration) -> TimerStub {
        TimerStub {
            manager: self.0.clone(),
            deadline: Instant::now().checked_add(duration),
        }
    }

    /// Call right before `fork()`: see
    /// [`fast_timeout::pause_for_fork`](super::fast_timeout::pause_for_fork),
    /// which does this for the global manager.
    pub fn pause_for_fork(&self) {
        while !self.0.pause_for_fork() {}
    }

    /// Call right after `fork()`, in parent and child.
    pub fn unpause(&self) {
        self.0.unpause()
    }
}

/// A registered timer, from [`TimerManager::register_timer`].
///
/// ```
/// use std::time::Duration;
/// use weir_timeout::pingora::timer::{TimerManager, TimerStub};
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let stub: TimerStub = TimerManager::new().register_timer(Duration::from_millis(2));
/// stub.poll().await;
/// # });
/// ```
#[derive(Debug)]
pub struct TimerStub {
    manager: crate::manager::TimerManager,
    /// `None`: beyond what `Instant` can represent, so never.
    deadline: Option<Instant>,
}

impl TimerStub {
    /// Wait until the timer expires (at once if it already has).
    pub async fn poll(self) {
        // Registration fixed the deadline; weir counts from the first poll,
        // so it is handed only what is left.
        let left = match self.deadline {
            Some(deadline) => deadline.saturating_duration_since(Instant::now()),
            None => Duration::MAX,
        };
        self.manager.sleep(left).await
    }
}
