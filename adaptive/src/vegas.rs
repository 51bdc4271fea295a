//! [`Vegas`]: keep a few requests queued at the origin, no more.

use super::ConfigError;
use super::builder::{AlgorithmBuilder, Own, sealed};
use super::window::{Summary, grow};
use super::windowed::{Rule, Windowed, windowed_algorithm};

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
    core: Windowed,
    rule: VegasRule,
}

/// Vegas' own settings.
#[derive(Debug, Clone, Copy, PartialEq)]
struct VegasRule {
    alpha: f64,
    beta: f64,
    backoff: f64,
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
    pub fn builder() -> AlgorithmBuilder<Vegas> {
        AlgorithmBuilder::with(Own {
            seed: 0x7665_6761,
            ..Own::default()
        })
    }
}

/// Decimal digits of the limit, at least 1 (Netflix's `log10` with a
/// floor of 1): non-decreasing, so a larger limit never gets a tighter band.
fn digits(estimate: f64) -> f64 {
    estimate.max(1.0).log10().floor().max(1.0)
}

impl Rule for VegasRule {
    fn backoff(&self) -> f64 {
        self.backoff
    }

    fn next_estimate(&self, window: &Summary, estimate: f64, no_load: f64) -> f64 {
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
    }
}

windowed_algorithm!(Vegas);

impl sealed::Probes for Vegas {}

impl AlgorithmBuilder<Vegas> {
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
    fn build(settings: AlgorithmBuilder<Self>) -> Result<Vegas, ConfigError> {
        let (core, backoff) = Windowed::build(&settings)?;
        if !(0 < settings.own.alpha && settings.own.alpha < settings.own.beta) {
            return Err(ConfigError::Thresholds {
                alpha: settings.own.alpha,
                beta: settings.own.beta,
            });
        }
        Ok(Vegas {
            core,
            rule: VegasRule {
                alpha: f64::from(settings.own.alpha),
                beta: f64::from(settings.own.beta),
                backoff,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Algorithm;

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
