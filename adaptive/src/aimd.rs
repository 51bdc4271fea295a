//! [`Aimd`]: additive increase, multiplicative decrease, on drops.

use super::builder::{Builder, Own, sealed};
use super::window::{Window, grow, window_nanos};
use super::{Algorithm, Common, ConfigError, Outcome, Sample, factor};
use crate::clock::Timestamp;
use std::time::Duration;
use weir_primitives::time::duration_to_nanos;

/// Loss-based limit, as TCP Reno's window: each window of samples (see the
/// [module docs](super)) without a drop adds one to the limit (but not
/// beyond twice the requests in flight); a window with one multiplies it by
/// `backoff`. A drop is a sample with [`Outcome::Dropped`], or one slower
/// than the `timeout` if one is set.
///
/// AIMD reacts only once the origin fails or answers beyond the timeout,
/// so it keeps the origin's queue as long as the timeout allows; [`Vegas`]
/// and [`Gradient2`] react to latency before that.
///
/// [`Vegas`]: super::Vegas
/// [`Gradient2`]: super::Gradient2
///
/// ```
/// use std::time::Duration;
/// use weir_adaptive::{Aimd, Algorithm, Outcome, Sample};
/// use weir_adaptive::clock::Timestamp;
///
/// let mut aimd = Aimd::builder().timeout(Duration::from_millis(100)).build()?;
/// for ms in 0..20u64 {
///     let now = Timestamp::<()>::from_nanos((100 + ms) * 1_000_000);
///     aimd.update(now, Sample::new(Duration::from_millis(150), Outcome::Success, 20));
/// }
/// // Too slow: a drop, once per window.
/// assert_eq!(aimd.limit(), 18);
/// # Ok::<(), weir_adaptive::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Aimd {
    common: Common,
    backoff: f64,
    timeout: u64,
    estimate: f64,
    window: Window,
}

impl Default for Aimd {
    /// Limits 1 to 1000 starting at 20, backoff 0.9, no timeout, windows
    /// of at least 10 ms and 16 samples.
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
    pub fn builder() -> Builder<Aimd> {
        Builder::with(Own::default())
    }
}

impl Algorithm for Aimd {
    fn limit(&self) -> u32 {
        self.common.limit_of(self.estimate)
    }

    fn update<C>(&mut self, now: Timestamp<C>, sample: Sample) {
        if sample.outcome == Outcome::Ignored {
            return;
        }
        let dropped =
            sample.outcome == Outcome::Dropped || duration_to_nanos(sample.latency) > self.timeout;
        let Some(window) = self
            .window
            .add(now.as_nanos(), &sample, dropped, &self.common)
        else {
            return;
        };
        let next = if window.drops > 0 {
            self.estimate * self.backoff
        } else {
            grow(self.estimate, 1.0, window.max_in_flight)
        };
        self.estimate = self.common.clamp(next);
    }
}

impl Builder<Aimd> {
    /// A request slower than this counts as a drop (default: none).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.own.timeout = Some(timeout);
        self
    }
}

impl sealed::Build for Aimd {
    fn build(settings: Builder<Self>) -> Result<Aimd, ConfigError> {
        let mut common = settings.common;
        common.check()?;
        common.window_ns = window_nanos(settings.window)?;
        let backoff = factor("backoff", settings.backoff, |b| (0.5..1.0).contains(&b))?;
        let timeout = match settings.own.timeout {
            Some(t) => super::nanos("timeout", t)?,
            None => u64::MAX,
        };
        Ok(Aimd {
            common,
            backoff,
            timeout,
            estimate: f64::from(common.initial),
            window: Window::new(0),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Timestamp<()> {
        Timestamp::from_nanos(ms * 1_000_000)
    }

    #[test]
    fn grows_one_per_window_and_backs_off_once_per_window() {
        let mut aimd = Aimd::default();
        let ok = Sample::new(Duration::from_millis(1), Outcome::Success, 100);
        for ms in 1..=17 {
            aimd.update(at(ms), ok);
        }
        assert_eq!(aimd.limit(), 21);
        let drop = Sample::new(Duration::from_millis(1), Outcome::Dropped, 100);
        for ms in 18..=34 {
            aimd.update(at(ms), drop);
        }
        assert_eq!(aimd.limit(), 18, "21 × 0.9, once");
    }

    #[test]
    fn drops_of_requests_admitted_before_the_window_do_not_count_again() {
        let mut aimd = Aimd::default();
        let ok = Sample::new(Duration::from_millis(1), Outcome::Success, 100);
        for ms in 1..=17 {
            aimd.update(at(ms), ok);
        }
        // Started 50 ms ago, before the window opened at 17 ms.
        let old = Sample::new(Duration::from_millis(50), Outcome::Dropped, 100);
        for ms in 18..=40 {
            aimd.update(at(ms), old);
        }
        assert_eq!(aimd.limit(), 21);
    }

    #[test]
    fn bounds_are_checked() {
        let one = std::num::NonZeroU32::new(1).unwrap();
        assert!(Aimd::builder().initial_limit(one).build().is_ok());
        assert!(Aimd::builder().max_limit(one).build().is_err());
        assert!(Aimd::builder().timeout(Duration::ZERO).build().is_err());
    }
}
