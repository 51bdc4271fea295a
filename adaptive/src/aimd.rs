//! [`Aimd`]: additive increase, multiplicative decrease, on drops and on
//! latency.

use super::builder::{AlgorithmBuilder, Own, sealed};
use super::window::{SPAN, Summary, grow};
use super::windowed::{Rule, Windowed, windowed_algorithm};
use super::{ConfigError, Outcome, Sample, factor};
use std::time::Duration;
use weir_primitives::time::duration_to_nanos;

/// Choose AIMD for an origin that says when it is overloaded (503s,
/// timeouts) and whose latency you would rather not read closely: the
/// simplest rule, TCP Reno's. Each window of samples (see the [module
/// docs](super)) adds one to the limit (but not beyond twice the requests
/// in flight); a window that saw a drop, or whose latency is beyond
/// `tolerance` times the no-load latency, multiplies it by `backoff`.
///
/// A drop is a sample with [`Outcome::Dropped`], or one slower than the
/// `timeout` if one is set. The latency test is what protects an origin
/// that queues instead of refusing: without it AIMD would let the queue
/// grow until requests time out. The no-load latency is measured by
/// probes, as [`Vegas`] and [`Gradient2`] measure it; those react to
/// latency earlier and more finely.
///
/// [`Vegas`]: super::Vegas
/// [`Gradient2`]: super::Gradient2
///
/// ```
/// use std::time::Duration;
/// use weir_adaptive::{Aimd, Algorithm, Outcome, Sample};
/// use weir_adaptive::clock::Timestamp;
///
/// let mut aimd = Aimd::builder().timeout(Duration::from_millis(100)).probe_interval(None).build()?;
/// for ms in 0..20u64 {
///     let now = Timestamp::<()>::from_nanos((600 + ms) * 1_000_000);
///     aimd.update(now, Sample::new(Duration::from_millis(150), Outcome::Success, 20));
/// }
/// // Too slow: a drop, once per window.
/// assert_eq!(aimd.limit(), 18);
/// # Ok::<(), weir_adaptive::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Aimd {
    core: Windowed,
    rule: AimdRule,
}

/// AIMD's own settings.
#[derive(Debug, Clone, Copy, PartialEq)]
struct AimdRule {
    backoff: f64,
    /// A request slower than this (ns) counts as a drop.
    timeout: u64,
    tolerance: f64,
}

impl Default for Aimd {
    /// Limits 1 to 1000 starting at 20, backoff 0.9, latency tolerance
    /// 1.5, no timeout, windows of at least 10 ms and 16 samples, a probe
    /// every 10 s.
    fn default() -> Self {
        match Aimd::builder().build() {
            Ok(aimd) => aimd,
            Err(e) => unreachable!("the default settings are valid: {e}"),
        }
    }
}

impl Aimd {
    /// Settings beyond the defaults.
    ///
    /// ```
    /// use weir_adaptive::Aimd;
    ///
    /// assert!(Aimd::builder().backoff(0.3).build().is_err(), "below 0.5");
    /// ```
    pub fn builder() -> AlgorithmBuilder<Aimd> {
        AlgorithmBuilder::with(Own {
            seed: 0x6169_6d64,
            tolerance: 1.5,
            ..Own::default()
        })
    }
}

impl Rule for AimdRule {
    fn backoff(&self) -> f64 {
        self.backoff
    }

    fn is_drop(&self, sample: &Sample) -> bool {
        sample.outcome == Outcome::Dropped || duration_to_nanos(sample.latency) > self.timeout
    }

    fn next_estimate(&self, window: &Summary, estimate: f64, no_load: f64) -> f64 {
        // How far the window is within the tolerance: below 1, too slow.
        let within = if window.latency.is_finite() {
            self.tolerance * no_load / window.latency
        } else {
            f64::INFINITY
        };
        // One more per latency the window lasted (TCP's one per round
        // trip): a window lasts several latencies (see the module docs).
        let latencies = (window.lasted as f64 / window.latency).floor().max(1.0);
        if within < 1.0 {
            // Far beyond the tolerance, as far down (but at most halved).
            estimate * self.backoff.min(within).max(0.5)
        } else {
            grow(estimate, latencies.min(SPAN), window.max_in_flight)
        }
    }
}

windowed_algorithm!(Aimd);

impl sealed::Probes for Aimd {}
impl sealed::Tolerates for Aimd {}

impl AlgorithmBuilder<Aimd> {
    /// A request slower than this counts as a drop (default: none).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.own.timeout = Some(timeout);
        self
    }
}

impl sealed::Build for Aimd {
    fn build(settings: AlgorithmBuilder<Self>) -> Result<Aimd, ConfigError> {
        let (core, backoff) = Windowed::build(&settings)?;
        let tolerance = factor("tolerance", settings.own.tolerance, |t| t >= 1.0)?;
        let timeout = match settings.own.timeout {
            Some(t) => super::nanos("timeout", t)?,
            None => u64::MAX,
        };
        Ok(Aimd {
            core,
            rule: AimdRule {
                backoff,
                timeout,
                tolerance,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Algorithm;
    use crate::test_samples::at;

    /// The defaults without probes: every sample goes to the windows.
    fn unprobed() -> Aimd {
        Aimd::builder().probe_interval(None).build().unwrap()
    }

    #[test]
    fn grows_one_per_latency_and_backs_off_once_per_window() {
        let mut aimd = unprobed();
        let ok = Sample::new(Duration::from_millis(1), Outcome::Success, 100);
        for ms in 1..=17 {
            aimd.update(at(ms), ok);
        }
        // A window of 16 ms, 16 latencies of 1 ms: at most three a window.
        assert_eq!(aimd.limit(), 23);
        let drop = Sample::new(Duration::from_millis(1), Outcome::Dropped, 100);
        for ms in 18..=34 {
            aimd.update(at(ms), drop);
        }
        assert_eq!(aimd.limit(), 20, "23 × 0.9, once");
    }

    #[test]
    fn a_window_grows_by_the_latencies_it_lasted() {
        let mut aimd = Aimd::builder()
            .probe_interval(None)
            .window(Duration::from_millis(10))
            .build()
            .unwrap();
        // 16 requests of 20 ms finishing within 60 ms (three latencies).
        for i in 0..=60 {
            aimd.update(
                at(100 + i),
                Sample::new(Duration::from_millis(20), Outcome::Success, 100),
            );
        }
        assert_eq!(aimd.limit(), 23, "60 ms of 20 ms latencies");
    }

    #[test]
    fn drops_of_requests_admitted_before_the_window_do_not_count_again() {
        let mut aimd = unprobed();
        let ok = Sample::new(Duration::from_millis(1), Outcome::Success, 100);
        for ms in 1..=17 {
            aimd.update(at(ms), ok);
        }
        // Started 50 ms ago, before the window opened at 17 ms.
        let old = Sample::new(Duration::from_millis(50), Outcome::Dropped, 100);
        for ms in 18..=40 {
            aimd.update(at(ms), old);
        }
        assert_eq!(aimd.limit(), 23);
    }

    #[test]
    fn a_window_beyond_the_tolerance_backs_off_like_a_drop() {
        let mut aimd = Aimd::default();
        // The probe: from the first sample, requests of 10 ms admitted
        // under its pin, for three times their latency.
        for ms in 100..=131 {
            aimd.update(
                at(ms),
                Sample::new(Duration::from_millis(10), Outcome::Success, 5),
            );
        }
        assert_eq!(aimd.no_load(), Some(Duration::from_millis(10)));
        // Windows at 14 ms (within 1.5×) grow, one a window; at 16 ms each
        // backs off.
        let mut limits = |ms: u64, from: u64| {
            (from..from + 200)
                .map(|t| {
                    let sample = Sample::new(Duration::from_millis(ms), Outcome::Success, 40);
                    aimd.update(at(t), sample);
                    aimd.limit()
                })
                .collect::<Vec<u32>>()
        };
        let calm = limits(14, 200);
        assert!(calm.windows(2).all(|w| w[1] >= w[0]), "{calm:?}");
        let grown = calm[calm.len() - 1];
        assert!(grown >= 23, "{calm:?}");
        let slow = limits(16, 400);
        let last = slow[slow.len() - 1];
        assert!(last <= grown * 9 / 10, "{grown} then {slow:?}");
    }

    #[test]
    fn bounds_are_checked() {
        let one = std::num::NonZeroU32::new(1).unwrap();
        assert!(Aimd::builder().initial_limit(one).build().is_ok());
        assert!(Aimd::builder().max_limit(one).build().is_err());
        assert!(Aimd::builder().timeout(Duration::ZERO).build().is_err());
    }
}
