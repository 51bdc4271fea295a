//! Adaptive concurrency limits: learn how many requests an origin can
//! take at once from the latency it answers with, the way TCP learns a
//! congestion window, instead of a threshold chosen by hand.
//!
//! * The algorithms are small deterministic state machines fed one
//!   [`Sample`] per finished request (its latency, its [`Outcome`] and how
//!   many requests were in flight when it started) and the time it
//!   finished, as a [`Timestamp`] of the caller's clock, so a test replays
//!   an exact sequence. Each keeps its [`limit`](Algorithm::limit) within
//!   its `[min, max]`:
//!   * [`Gradient2`] — the default choice: scales the limit by how much
//!     slower than at no load the origin answers, and holds latency within
//!     a tolerance of it.
//!   * [`Vegas`] — for an origin whose queue you want kept to a few
//!     requests: estimates the requests queued at the origin as
//!     `in_flight × (1 − no_load / latency)` and keeps that in a band.
//!   * [`Aimd`] — the simplest rule, for an origin that signals overload
//!     itself: grow by one each window, multiply down after a drop or a
//!     window too far beyond the no-load latency.
//!   * [`Constant`] — a static limit, for comparison and for keys whose limit
//!     is known; [`AnyAlgorithm`] — any of them, chosen at run time.
//! * [`AdaptiveLimiter`] (one origin) and [`KeyedAdaptiveLimiter`] (one
//!   learned limit per key, in bounded memory) admit a request if fewer
//!   than the limit are in flight and hand out an [`AdaptiveGuard`]: it
//!   reports latency and outcome to the algorithm when the request is
//!   done, and a guard dropped without an outcome reports a drop.
//! * weir-tower's `AdaptiveInflightLayer` puts a limiter in front of a
//!   tower or axum service: 503 beyond the limit, never a queue.
//!
//! # How the algorithms see latency
//!
//! All three aggregate samples in windows rather than reacting to each:
//! a window counts only requests that *started* after it opened, so each
//! decision is based on requests admitted under the previous one (TCP
//! reacts once per round trip for the same reason), and a burst of slow
//! requests from before a decrease does not decrease the limit again. A
//! window closes once it holds its minimum number of samples, has lasted
//! its minimum duration, and has lasted three times the latency of the
//! requests finishing in it (their 90th percentile): judged sooner, it
//! would hold only the requests fast enough to finish in it, and a mix of
//! cheap and expensive requests would look like cheap ones.
//!
//! A window's latency is the **third quartile** of its requests'
//! latencies (read from a uniform sample of 64 of them), not their mean.
//! Requests differ in cost — cache hits and misses, 404s and searches — and
//! a mean follows the mix; a quartile stays among the latencies of the
//! requests that make up most of the traffic. The rule and its bound: a
//! kind of request that is a share `c` of a window's samples and faster
//! than all others leaves the window's latency at the others' `(¾ − c) /
//! (1 − c)` quantile while `c < ¾`; one that is a share `s` and slower
//! than all others leaves it at their `¾ / (1 − s)` quantile while
//! `s < ¼`. So one client's cheap requests, or a route's, move the
//! latency the limit is judged by only within the spread of everyone
//! else's latencies (from their median, at half the traffic, to their
//! third quartile), however cheap they are; slow ones, within the others'
//! quantiles from ¾ to 1 while they are under a quarter of the traffic.
//! Requests that never finish teach nothing (they hold their places in
//! flight until they end); requests cancelled by their client should be
//! released with [`AdaptiveGuard::ignore`], as the tower layer does.
//!
//! [`Vegas`], [`Gradient2`] and [`Aimd`] compare a window's latency with
//! the origin's *no-load* latency. A minimum over the past drifts upwards
//! while the origin is always a little queued (every request then waits),
//! and never learns that the origin got slower per request; Netflix's
//! Gradient2 uses a long-term average instead, which follows the queueing
//! it should detect. Here the no-load latency is measured by a *probe*, as
//! envoy's adaptive concurrency filter does: at the first sample and then
//! every `probe_interval` (jittered by ±25 %, from a seeded generator),
//! the limit is pinned to half its value for one window, whose latency
//! (the same third quartile, of requests admitted under the pin) is the
//! new no-load latency. Pinning to half (rather than to a floor) drains
//! the origin's queue within about one latency while keeping half the
//! throughput, so a probe costs about three latencies' worth of half the
//! traffic. Between probes the no-load latency does not move: a window of
//! cheap requests, however fast, cannot teach the limit that every other
//! request is slow. The bound above holds for a probe too, so moving the
//! no-load latency takes more than three quarters of a probe's requests
//! being cheap (or a quarter being slow).
//!
//! A probe ends in bounded time whatever the clients hold: when its window
//! closes, or at the latest once it has run for `probe_timeout` (default
//! 250 ms) or four times as long as the last window took to close,
//! whichever is longer. Responses held open (downloads read slowly,
//! server-sent events, long polls) can fill every place a probe pins, and
//! then no sample arrives to close it; at the bound the probe ends
//! unmeasured (the no-load latency stays as it was, the next probe is an
//! interval away), released by the first request refused after it. So
//! the limit is never pinned below what is already in flight for longer
//! than that bound.
//!
//! ```
//! use std::time::Duration;
//! use weir_adaptive::{Algorithm, Gradient2, Outcome, Sample};
//! use weir_adaptive::clock::{ManualClock, Timestamp};
//!
//! let mut gradient = Gradient2::default();
//! let before = gradient.limit();
//! // Replay 2 s of an origin answering in 10 ms, 40 requests in flight.
//! for ms in 0..2_000u64 {
//!     let now = Timestamp::<ManualClock>::from_nanos(ms * 1_000_000);
//!     let sample = Sample::new(Duration::from_millis(10), Outcome::Success, 40);
//!     for _ in 0..4 {
//!         gradient.update(now, sample);
//!     }
//! }
//! assert!(gradient.limit() > before, "no queueing: the limit grows");
//! ```

mod aimd;
mod any;
mod builder;
mod gradient;
mod keyed;
mod limiter;
mod sync;
mod vegas;
mod window;
mod windowed;

/// What the algorithms' unit tests feed them: instants and samples in
/// milliseconds (or microseconds, for latencies between two).
#[cfg(test)]
mod test_samples {
    use crate::clock::Timestamp;
    use crate::{Outcome, Sample};
    use std::time::Duration;

    pub(crate) fn at(ms: u64) -> Timestamp<()> {
        Timestamp::from_nanos(ms * 1_000_000)
    }

    pub(crate) fn ok(ms: u64, in_flight: u32) -> Sample {
        ok_us(ms * 1_000, in_flight)
    }

    pub(crate) fn ok_us(us: u64, in_flight: u32) -> Sample {
        Sample::new(Duration::from_micros(us), Outcome::Success, in_flight)
    }
}

/// The injectable clock the limiters time requests on, shared with
/// weir-limits and weir-rate.
pub mod clock {
    pub use weir_limits::clock::{
        Clock, ManualClock, MonotonicClock, RecentClock, StdClock, Timestamp, WallClock,
    };
}

pub use aimd::Aimd;
pub use any::AnyAlgorithm;
pub use builder::AlgorithmBuilder;
pub use gradient::Gradient2;
pub use keyed::KeyedAdaptiveLimiter;
pub use limiter::{AdaptiveGuard, AdaptiveLimiter, Overloaded};
pub use vegas::Vegas;

use crate::clock::Timestamp;
use std::fmt;
use std::num::NonZeroU32;
use std::time::Duration;

/// How a request ended, as far as the origin's load is concerned.
///
/// ```
/// use weir_adaptive::Outcome;
///
/// assert_ne!(Outcome::Success, Outcome::Dropped);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// The origin answered: its latency is a measurement of its load.
    Success,
    /// An overload signal: the origin refused (503, 429), timed out or
    /// could not be reached. The loss-based reaction applies.
    Dropped,
    /// Says nothing about the origin's load (a client error, a request
    /// cancelled for reasons of its own): not used.
    Ignored,
}

impl Outcome {
    /// What an HTTP response of `status` says about the origin's load:
    /// the statuses an overloaded origin or gateway answers with (502, 503,
    /// 504) are drops; other server errors, and 429 (a client over its own
    /// limit, not the origin over capacity), say nothing; everything else
    /// is a success. Every weir integration classifies responses by it.
    ///
    /// ```
    /// use weir_adaptive::Outcome;
    ///
    /// assert_eq!(Outcome::of_status(503), Outcome::Dropped);
    /// assert_eq!(Outcome::of_status(429), Outcome::Ignored);
    /// assert_eq!(Outcome::of_status(500), Outcome::Ignored);
    /// assert_eq!(Outcome::of_status(404), Outcome::Success);
    /// ```
    pub fn of_status(status: u16) -> Self {
        match status {
            502..=504 => Self::Dropped,
            429 | 500..=599 => Self::Ignored,
            _ => Self::Success,
        }
    }
}

/// One finished request, as an [`Algorithm`] learns from it.
///
/// ```
/// use std::time::Duration;
/// use weir_adaptive::{Outcome, Sample};
///
/// let sample = Sample::new(Duration::from_millis(12), Outcome::Success, 7);
/// assert_eq!(sample.in_flight, 7);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    /// From admission to the answer.
    pub latency: Duration,
    /// How it ended.
    pub outcome: Outcome,
    /// Requests in flight when it was admitted, itself included.
    pub in_flight: u32,
}

impl Sample {
    /// A sample of a request that took `latency`, ended with `outcome`,
    /// and was admitted with `in_flight` requests in flight (itself
    /// included).
    pub const fn new(latency: Duration, outcome: Outcome, in_flight: u32) -> Self {
        Self {
            latency,
            outcome,
            in_flight,
        }
    }
}

/// A concurrency-limit algorithm: a state machine from samples to a limit.
///
/// Implementations are deterministic (time comes in with each sample) and
/// keep [`limit`](Self::limit) at least 1. The limiters call `update` under
/// a per-key lock, once per finished request.
///
/// ```
/// use std::time::Duration;
/// use weir_adaptive::{Algorithm, Outcome, Sample};
/// use weir_adaptive::clock::Timestamp;
///
/// /// Halves on every drop, never grows: a toy.
/// struct Halving(u32);
///
/// impl Algorithm for Halving {
///     fn limit(&self) -> u32 {
///         self.0
///     }
///     fn update<C>(&mut self, _now: Timestamp<C>, sample: Sample) {
///         if sample.outcome == Outcome::Dropped {
///             self.0 = (self.0 / 2).max(1);
///         }
///     }
/// }
///
/// let mut toy = Halving(8);
/// let drop = Sample::new(Duration::from_millis(1), Outcome::Dropped, 8);
/// toy.update(Timestamp::<()>::from_nanos(0), drop);
/// assert_eq!(toy.limit(), 4);
/// ```
pub trait Algorithm: Send + 'static {
    /// The most requests to admit at once, now (at least 1).
    fn limit(&self) -> u32;

    /// Learn from one finished request; `now` is when it finished.
    fn update<C>(&mut self, now: Timestamp<C>, sample: Sample);

    /// The origin's latency at no load as the algorithm estimates it, if
    /// it estimates one (for metrics and logs; default `None`).
    fn no_load(&self) -> Option<Duration> {
        None
    }

    /// When the limit next changes with time alone, though no request
    /// finishes (a probe that must end), in nanoseconds of the clock the
    /// samples are timed on; default never. The limiters then call
    /// [`tick`](Self::tick) at the first refusal from that time on.
    fn next_tick(&self) -> Option<u64> {
        None
    }

    /// Time has come to `now` with no sample (see
    /// [`next_tick`](Self::next_tick)); default nothing.
    fn tick<C>(&mut self, now: Timestamp<C>) {
        let _ = now;
    }
}

/// Choose a static limit when the origin's capacity is known and steady:
/// the same number whatever the samples say.
///
/// ```
/// use std::num::NonZeroU32;
/// use weir_adaptive::{Algorithm, Constant};
///
/// assert_eq!(Constant::new(NonZeroU32::new(32).unwrap()).limit(), 32);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Constant(NonZeroU32);

impl Constant {
    /// Always `limit`.
    pub const fn new(limit: NonZeroU32) -> Self {
        Self(limit)
    }
}

impl Algorithm for Constant {
    fn limit(&self) -> u32 {
        self.0.get()
    }

    fn update<C>(&mut self, _now: Timestamp<C>, _sample: Sample) {}
}

/// Why an algorithm's builder (or its name, parsed) refused its settings.
///
/// ```
/// use std::num::NonZeroU32;
/// use weir_adaptive::{Aimd, ConfigError};
///
/// let err = Aimd::builder().min_limit(NonZeroU32::new(50).unwrap()).build().unwrap_err();
/// assert!(matches!(err, ConfigError::Bounds { min: 50, .. }));
/// assert_eq!(err.setting(), "min_limit, initial_limit, max_limit");
/// assert!(err.to_string().contains("50"));
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ConfigError {
    /// The limits do not satisfy `min ≤ initial ≤ max`.
    Bounds {
        /// The minimum limit given.
        min: u32,
        /// The initial limit given.
        initial: u32,
        /// The maximum limit given.
        max: u32,
    },
    /// A factor outside the range its setting allows (NaN included).
    Factor {
        /// The builder setting.
        setting: &'static str,
        /// The value given.
        value: f64,
    },
    /// A duration of zero where a positive one is needed.
    ZeroDuration {
        /// The builder setting.
        setting: &'static str,
    },
    /// A duration of 2⁶⁴ ns (584 years) or more.
    DurationTooLong {
        /// The builder setting.
        setting: &'static str,
    },
    /// Vegas needs `0 < alpha < beta`.
    Thresholds {
        /// The `alpha` given.
        alpha: u32,
        /// The `beta` given.
        beta: u32,
    },
    /// No algorithm has this name (see
    /// [`AnyAlgorithm`]'s `FromStr`).
    UnknownAlgorithm(String),
}

impl ConfigError {
    /// The builder setting (or settings, comma-separated) refused.
    pub fn setting(&self) -> &'static str {
        match self {
            Self::Bounds { .. } => "min_limit, initial_limit, max_limit",
            Self::Factor { setting, .. }
            | Self::ZeroDuration { setting }
            | Self::DurationTooLong { setting } => setting,
            Self::Thresholds { .. } => "alpha, beta",
            Self::UnknownAlgorithm(_) => "algorithm",
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Bounds { min, initial, max } => write!(
                f,
                "limits must satisfy min <= initial <= max, got {min} <= {initial} <= {max}"
            ),
            Self::Factor { setting, value } => write!(f, "{setting} out of range: {value}"),
            Self::ZeroDuration { setting } => write!(f, "{setting} must be longer than zero"),
            Self::DurationTooLong { setting } => {
                write!(f, "{setting} must be shorter than 2^64 ns (584 years)")
            }
            Self::Thresholds { alpha, beta } => {
                write!(f, "Vegas needs 0 < alpha < beta, got {alpha} and {beta}")
            }
            Self::UnknownAlgorithm(name) => write!(
                f,
                "no algorithm is named {name:?} (aimd, vegas, gradient2, constant:<limit>)"
            ),
        }
    }
}

impl std::error::Error for ConfigError {}

/// The settings every algorithm shares, checked by its builder.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Common {
    pub(crate) min: u32,
    pub(crate) max: u32,
    pub(crate) initial: u32,
    /// A window lasts at least this long (ns)...
    pub(crate) window_ns: u64,
    /// ...and holds at least this many samples.
    pub(crate) window_samples: u32,
}

impl Default for Common {
    fn default() -> Self {
        Self {
            min: 1,
            max: 1000,
            initial: 20,
            window_ns: 10_000_000,
            window_samples: 16,
        }
    }
}

impl Common {
    fn check(&self) -> Result<(), ConfigError> {
        if !(self.min <= self.initial && self.initial <= self.max) {
            return Err(ConfigError::Bounds {
                min: self.min,
                initial: self.initial,
                max: self.max,
            });
        }
        Ok(())
    }

    /// `value` clamped to `[min, max]`.
    pub(crate) fn clamp(&self, value: f64) -> f64 {
        value.clamp(f64::from(self.min), f64::from(self.max))
    }

    /// The integer limit of an estimate.
    pub(crate) fn limit_of(&self, estimate: f64) -> u32 {
        // `as` saturates and maps NaN to 0; the clamp restores the bounds.
        (estimate as u32).clamp(self.min, self.max)
    }
}

/// Checks a duration setting: positive and representable in nanoseconds.
fn nanos(setting: &'static str, d: Duration) -> Result<u64, ConfigError> {
    match u64::try_from(d.as_nanos()) {
        Ok(0) => Err(ConfigError::ZeroDuration { setting }),
        Err(_) => Err(ConfigError::DurationTooLong { setting }),
        Ok(n) => Ok(n),
    }
}

/// Checks a factor setting lies in `range` (and is a number).
fn factor(
    setting: &'static str,
    value: f64,
    ok: impl FnOnce(f64) -> bool,
) -> Result<f64, ConfigError> {
    if value.is_finite() && ok(value) {
        Ok(value)
    } else {
        Err(ConfigError::Factor { setting, value })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_ignores_samples() {
        let mut fixed = Constant::new(NonZeroU32::new(3).unwrap());
        let drop = Sample::new(Duration::from_secs(9), Outcome::Dropped, 3);
        fixed.update(Timestamp::<()>::from_nanos(1), drop);
        assert_eq!(fixed.limit(), 3);
    }

    #[test]
    fn limits_of_wild_estimates_stay_in_bounds() {
        let common = Common {
            min: 2,
            max: 9,
            ..Common::default()
        };
        assert_eq!(common.limit_of(f64::NAN), 2);
        assert_eq!(common.limit_of(-5.0), 2);
        assert_eq!(common.limit_of(1e30), 9);
        assert_eq!(common.limit_of(4.99), 4);
    }

    #[test]
    fn durations_and_factors_are_checked() {
        assert!(nanos("w", Duration::ZERO).is_err());
        assert!(nanos("w", Duration::MAX).is_err());
        assert_eq!(nanos("w", Duration::from_millis(1)), Ok(1_000_000));
        assert!(factor("f", f64::NAN, |_| true).is_err());
        assert!(factor("f", 0.5, |v| v < 1.0).is_ok());
    }
}

/// The README's examples, run as doc tests so it cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
mod readme {}
