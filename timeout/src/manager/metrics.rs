//! What a manager counts, read on demand ([`TimerManager::metrics`]) or
//! published through the `metrics` facade ([`TimerManager::publish_metrics`]):
//! the figures are the manager's own, so nothing is added to a timer's
//! path for them.

use super::{Inner, TimerManager};
use std::sync::atomic::Ordering;

/// Counters a user can read from a [`TimerManager`].
///
/// ```
/// use std::time::Duration;
/// use weir_timeout::TimerManager;
///
/// let manager = TimerManager::try_new(Duration::from_millis(1)).unwrap();
/// assert_eq!(manager.metrics().sweeper_threads_started, 0);
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// manager.sleep(Duration::from_millis(2)).await;
/// # });
/// let metrics = manager.metrics();
/// assert_eq!(metrics.fired, 1);
/// assert_eq!(metrics.waiters, 0);
/// assert_eq!(metrics.sweeper_threads_started, 1);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Metrics {
    /// Shared tick timers currently allocated (each thread may keep a few
    /// empty ones cached for reuse, one per recent duration).
    pub live_ticks: u64,
    /// Waiters currently armed.
    pub waiters: u64,
    /// Waiters woken because their tick fired.
    pub fired: u64,
    /// Waiters removed before their tick fired.
    pub cancelled: u64,
    /// Times the sweeper thread has woken up.
    pub sweeper_wakeups: u64,
    /// Sweeper threads started so far (0 until the first timer is armed).
    pub sweeper_threads_started: u64,
}

impl Metrics {
    /// Waiters armed so far: every one is waiting, has fired or was
    /// cancelled, so this is their sum. Timers that never waited on a
    /// shared tick are not in it: a future ready at its first poll, a
    /// deadline already past, a timer handed to tokio's paused clock.
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir_timeout::TimerManager;
    ///
    /// let manager = TimerManager::try_new(Duration::from_millis(1)).unwrap();
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// manager.sleep(Duration::from_millis(2)).await; // armed, then fired
    /// let cancelled = manager.timeout(Duration::from_secs(60), std::future::pending::<()>());
    /// let _ = manager.timeout(Duration::ZERO, cancelled).await; // armed, then dropped
    /// # });
    /// let m = manager.metrics();
    /// assert_eq!((m.armed(), m.fired, m.cancelled, m.waiters), (2, 1, 1, 0));
    /// ```
    pub fn armed(&self) -> u64 {
        self.fired
            .saturating_add(self.cancelled)
            .saturating_add(self.waiters)
    }
}

impl TimerManager {
    /// A snapshot of the manager's counters. Takes each thread's table lock
    /// briefly; meant for monitoring, not for hot paths.
    pub fn metrics(&self) -> Metrics {
        self.inner.metrics()
    }

    /// Publish [`metrics`](Self::metrics) through the
    /// [`metrics`](https://docs.rs/metrics) facade (feature `metrics`), to
    /// whatever recorder (exporter) is installed, and return the snapshot.
    /// Every series carries the label `manager` = `manager`:
    ///
    /// | metric | kind | what |
    /// |---|---|---|
    /// | `weir_timeout_timers_armed_total` | counter | [`Metrics::armed`] |
    /// | `weir_timeout_timers_fired_total` | counter | [`Metrics::fired`] |
    /// | `weir_timeout_timers_cancelled_total` | counter | [`Metrics::cancelled`] |
    /// | `weir_timeout_timers_pending` | gauge | [`Metrics::waiters`] |
    /// | `weir_timeout_ticks_live` | gauge | [`Metrics::live_ticks`] |
    /// | `weir_timeout_sweeper_wakeups_total` | counter | [`Metrics::sweeper_wakeups`] |
    /// | `weir_timeout_sweeper_starts_total` | counter | [`Metrics::sweeper_threads_started`] |
    ///
    /// Nothing is counted on a timer's path for this: the figures are the
    /// manager's own, read when you publish, so call it where the values
    /// are wanted (before rendering a scrape, or from a periodic task). It
    /// takes each thread's table lock briefly, like [`metrics`](Self::metrics).
    /// The counters are set to the manager's totals (`absolute`); give each
    /// manager its own name.
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir_timeout::TimerManager;
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
    /// // Publish the global manager's figures every 10 s (with an exporter
    /// // installed as the global recorder, e.g. metrics-exporter-prometheus).
    /// let publisher = tokio::spawn(async {
    ///     loop {
    ///         TimerManager::global().publish_metrics("global");
    ///         weir_timeout::sleep(Duration::from_secs(10)).await;
    ///     }
    /// });
    /// # publisher.abort();
    /// # });
    /// let fine = TimerManager::try_new(Duration::from_millis(1)).unwrap();
    /// let published = fine.publish_metrics("fine");
    /// assert_eq!(published.armed(), 0);
    /// ```
    #[cfg(feature = "metrics")]
    #[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
    pub fn publish_metrics(&self, manager: &str) -> Metrics {
        let m = self.metrics();
        publish(manager, &m);
        m
    }
}

impl Inner {
    /// The counters, summed over every table not abandoned by a fork.
    pub(super) fn metrics(&self) -> Metrics {
        let mut m = Metrics {
            live_ticks: u64::try_from(self.buckets.live().max(0)).unwrap_or(0),
            sweeper_wakeups: self.wakeups.load(Ordering::Relaxed),
            sweeper_threads_started: self.threads_started.load(Ordering::Relaxed),
            ..Metrics::default()
        };
        for table in self.all_tables() {
            if table.abandoned.load(Ordering::Relaxed) {
                continue;
            }
            let t = table.stats();
            m.fired += t.fired;
            m.cancelled += t.cancelled;
            m.waiters += t.waiters;
        }
        m
    }
}

// Through the `metrics` facade: everything comes from the snapshot
// `TimerManager::metrics` already takes, so arming, cancelling and firing
// a timer do no extra work; the cost is paid by whoever publishes, once
// per call. Handles are looked up on every call (a few map lookups in the
// recorder), so the recorder in force at the call is the one that counts,
// thread-local ones included.
/// Publish `m` as the metrics of the manager named `manager`.
#[cfg(feature = "metrics")]
fn publish(manager: &str, m: &Metrics) {
    let labels = [("manager", manager.to_owned())];
    // Counters: the snapshot holds totals since the manager was made, so
    // each is set (`absolute`), which recorders keep as a running maximum.
    metrics::counter!("weir_timeout_timers_armed_total", &labels).absolute(m.armed());
    metrics::counter!("weir_timeout_timers_fired_total", &labels).absolute(m.fired);
    metrics::counter!("weir_timeout_timers_cancelled_total", &labels).absolute(m.cancelled);
    metrics::counter!("weir_timeout_sweeper_wakeups_total", &labels).absolute(m.sweeper_wakeups);
    metrics::counter!("weir_timeout_sweeper_starts_total", &labels)
        .absolute(m.sweeper_threads_started);
    metrics::gauge!("weir_timeout_timers_pending", &labels).set(m.waiters as f64);
    metrics::gauge!("weir_timeout_ticks_live", &labels).set(m.live_ticks as f64);
}
