//! [`Vegas`]: keep a few requests queued at the origin, no more.

use super::builder::{Builder, Own, sealed};
use super::window::{Baseline, Summary, Window, feed, grow, window_nanos};
use super::{Algorithm, Common, ConfigError, Outcome, Problem, Sample, factor};
use crate::clock::Timestamp;

/// Choose Vegas to keep an origin's own queue to a few requests: TCP
/// Vegas' rule, as Netflix's concurrency-limits applies it to requests,
/// estimates how many requests wait in the origin's queue and keeps that
/// between `alpha` and `beta`.
///
/// Each window (see the [module docs](super)) estimates the queue as
/// `in_flight × (1 − no_load / latency)` (mean requests in flight at start,
/// the window's latency), and with `d` the number of decimal digits of the limit
/// (so the band widens with the limit):
///
/// * queue ≤ `d`: grow by `beta × d` (nothing queues: find the capacity
///   fast);
/// * queue < `alpha × d`: grow by `d`;
/// * queue > `beta × d`: shrink by the excess (to `beta × d` queued), at
///   most by half;
/// * otherwise hold; a window with a drop multiplies the limit by
///   `backoff`.
///
/// Growth stops at twice the requests in flight. Netflix's Vegas moves by
/// `d` per sample; shrinking by the excess once per window reaches the
/// band in one step instead. Its no-load latency is a minimum that a probe
/// resets to one loaded sample; here probes drain the queue first (see the
/// module docs).
///
/// ```
/// use weir_adaptive::{Algorithm, Vegas};
///
/// let vegas = Vegas::builder().alpha(2).beta(4).build()?;
/// assert_eq!(vegas.limit(), 20);
/// # Ok::<(), weir_adaptive::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Vegas {
    common: Common,
    alpha: f64,
    beta: f64,
    backoff: f64,
    estimate: f64,
    window: Window,
    baseline: Baseline,
}

impl Default for Vegas {
    /// Limits 1 to 1000 starting at 20, alpha 3, beta 6, backoff 0.9,
    /// windows of at least 10 ms and 16 samples, a probe every 10 s.
    fn default() -> Self {
        match Vegas::builder().build() {
            Ok(vegas) => vegas,
            Err(e) => unreachable!("the default settings are valid: {e}"),
        }
    }
}

impl Vegas {
    /// Settings beyond the defaults.
    ///
    /// ```
    /// use weir_adaptive::Vegas;
    ///
    /// assert!(Vegas::builder().alpha(6).beta(3).build().is_err());
    /// ```
    pub fn builder() -> Builder<Vegas> {
        Builder::with(Own {
            seed: 0x7665_6761,
            ..Own::default()
        })
    }

    fn judge(&mut self, window: &Summary) {
        let estimate = self.estimate;
        let next = if window.drops > 0 {
            estimate * self.backoff
        } else {
            let no_load = self.baseline.no_load(window.latency);
            let queue = window.in_flight * (1.0 - no_load / window.latency).max(0.0);
            let digits = digits(estimate);
            if queue <= digits {
                grow(estimate, self.beta * digits, window.max_in_flight)
            } else if queue < self.alpha * digits {
                grow(estimate, digits, window.max_in_flight)
            } else if queue > self.beta * digits {
                (estimate - (queue - self.beta * digits)).max(estimate / 2.0)
            } else {
                estimate
            }
        };
        self.estimate = self.common.clamp(next);
    }
}

/// Decimal digits of the limit, at least 1 (Netflix's `log10` with a
/// floor of 1): non-decreasing, so a larger limit never gets a tighter band.
fn digits(estimate: f64) -> f64 {
    estimate.max(1.0).log10().floor().max(1.0)
}

impl Algorithm for Vegas {
    fn limit(&self) -> u32 {
        let limit = self.common.limit_of(self.estimate);
        self.baseline.pinned(limit, &self.common).unwrap_or(limit)
    }

    fn no_load(&self) -> Option<std::time::Duration> {
        self.baseline.known()
    }

    fn next_tick(&self) -> Option<u64> {
        self.baseline.next_tick()
    }

    fn tick<C>(&mut self, now: Timestamp<C>) {
        self.baseline.tick(&mut self.window, now.as_nanos());
    }

    fn update<C>(&mut self, now: Timestamp<C>, sample: Sample) {
        let now = now.as_nanos();
        let dropped = sample.outcome == Outcome::Dropped;
        if let Some(window) = feed(
            &mut self.baseline,
            &mut self.window,
            &self.common,
            now,
            &sample,
            dropped,
        ) {
            self.judge(&window);
        }
    }
}

impl sealed::Probes for Vegas {}

impl Builder<Vegas> {
    /// Grow while fewer requests than this (per decimal digit of the
    /// limit) are queued (default 3).
    pub fn alpha(mut self, alpha: u32) -> Self {
        self.own.alpha = alpha;
        self
    }

    /// Shrink while more than this (per digit) are queued (default 6).
    pub fn beta(mut self, beta: u32) -> Self {
        self.own.beta = beta;
        self
    }
}

impl sealed::Build for Vegas {
    fn build(settings: Builder<Self>) -> Result<Vegas, ConfigError> {
        let mut common = settings.common;
        common.check()?;
        common.window_ns = window_nanos(settings.window)?;
        if !(0 < settings.own.alpha && settings.own.alpha < settings.own.beta) {
            return Err(ConfigError::new(
                "alpha, beta",
                Problem::Thresholds {
                    alpha: settings.own.alpha,
                    beta: settings.own.beta,
                },
            ));
        }
        let backoff = factor("backoff", settings.backoff, |b| (0.5..1.0).contains(&b))?;
        let interval = settings
            .own
            .probe_interval
            .map(|i| super::nanos("probe_interval", i))
            .transpose()?;
        Ok(Vegas {
            common,
            alpha: f64::from(settings.own.alpha),
            beta: f64::from(settings.own.beta),
            backoff,
            estimate: f64::from(common.initial),
            window: Window::new(0, settings.own.seed),
            baseline: Baseline::new(
                interval,
                super::nanos("probe_timeout", settings.own.probe_timeout)?,
                settings.own.seed,
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::test_samples::{at, ok};

    fn unprobed() -> Vegas {
        Vegas::builder().probe_interval(None).build().unwrap()
    }

    #[test]
    fn grows_fast_while_nothing_queues() {
        let mut v = unprobed();
        for ms in 0..40 {
            v.update(at(ms), ok(1, 30));
        }
        // Two windows: +6 each, capped at 2 × 30.
        assert_eq!(v.limit(), 32);
    }

    #[test]
    fn shrinks_to_the_band_in_one_window() {
        let mut v = unprobed();
        // A window lasts three times the latency finishing in it: 30 ms.
        for ms in 0..=30 {
            v.update(at(ms), ok(10, 20));
        }
        assert_eq!(v.limit(), 26, "one window of no queue: +6");
        // Latency 20 ms at 20 in flight: 10 queued, beta 6: shrink by 4,
        // once the window has lasted 60 ms.
        for ms in 31..=89 {
            v.update(at(ms), ok(20, 20));
        }
        assert_eq!(v.limit(), 26);
        v.update(at(90), ok(20, 20));
        assert_eq!(v.limit(), 22);
    }

    #[test]
    fn digits_widen_the_band() {
        assert_eq!(digits(0.0), 1.0);
        assert_eq!(digits(99.9), 1.0);
        assert_eq!(digits(100.0), 2.0);
        assert_eq!(digits(5_000.0), 3.0);
    }
}
