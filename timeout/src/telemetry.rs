//! Publishing a manager's [`Metrics`] through the
//! [`metrics`](https://docs.rs/metrics) facade (feature `metrics`).
//!
//! Everything comes from the snapshot [`TimerManager::metrics`] already
//! takes, so arming, cancelling and firing a timer do no extra work: the
//! cost is paid by whoever publishes, once per call. Handles are looked up
//! on every call (a few map lookups in the recorder), so the recorder in
//! force at the call is the one that counts, thread-local ones included.
//!
//! [`TimerManager::metrics`]: crate::TimerManager::metrics

use crate::Metrics;

/// Publish `m` as the metrics of the manager named `manager`.
pub(crate) fn publish(manager: &str, m: &Metrics) {
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
