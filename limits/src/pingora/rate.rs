//! pingora-limits' `rate` module: [`Rate`], [`RateComponents`] and
//! [`PROPORTIONAL_RATE_ESTIMATE_CALC_FN`].

use crate::clock::{Clock, MonotonicClock};
use std::hash::Hash;
use std::time::Duration;

/// What a custom rate function passed to [`Rate::rate_with`] sees, with
/// pingora-limits' field names.
///
/// `current_interval_fraction` is how far into the current interval the
/// reading was taken: 0.2 two seconds into a ten-second interval.
///
/// ```
/// use std::time::Duration;
/// use weir_limits::pingora::rate::{Rate, RateComponents};
///
/// let rate = Rate::new(Duration::from_secs(1));
/// rate.observe(&"k", 2);
/// let now = rate.rate_with(&"k", |c: RateComponents| c.curr_samples);
/// assert_eq!(now, 2);
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub struct RateComponents {
    /// Events of the key in the previous, complete interval.
    pub prev_samples: isize,
    /// Events of the key so far in the current interval.
    pub curr_samples: isize,
    /// The interval length.
    pub interval: Duration,
    /// Fraction of the current interval elapsed, in `[0, 1)`.
    pub current_interval_fraction: f64,
}

impl From<crate::rate::RateComponents> for RateComponents {
    fn from(c: crate::rate::RateComponents) -> Self {
        Self {
            prev_samples: c.previous,
            curr_samples: c.current,
            interval: c.interval,
            current_interval_fraction: c.elapsed_fraction,
        }
    }
}

/// The sliding estimate of events per second: the previous interval
/// weighted by the share of it still inside a sliding interval, plus the
/// current interval (Cloudflare's two-window approximation), over the
/// interval in seconds.
///
/// ```
/// use std::time::Duration;
/// use weir_limits::clock::ManualClock;
/// use weir_limits::pingora::rate::{Rate, PROPORTIONAL_RATE_ESTIMATE_CALC_FN};
///
/// let clock = ManualClock::new();
/// let rate = Rate::try_with_clock(Duration::from_secs(1), clock.clone()).unwrap();
/// rate.observe(&"k", 10);
/// clock.advance(Duration::from_millis(1250));
/// rate.observe(&"k", 4);
/// // 10 last second, 4 so far, a quarter in: 10 × 0.75 + 4.
/// assert_eq!(rate.rate_with(&"k", PROPORTIONAL_RATE_ESTIMATE_CALC_FN), 11.5);
/// ```
pub static PROPORTIONAL_RATE_ESTIMATE_CALC_FN: fn(RateComponents) -> f64 = proportional;

fn proportional(c: RateComponents) -> f64 {
    let weighted =
        c.prev_samples as f64 * (1.0 - c.current_interval_fraction) + c.curr_samples as f64;
    weighted / c.interval.as_secs_f64()
}

/// Per-key events per interval with pingora-limits' signatures, backed by
/// weir's [`Rate`](crate::rate::Rate) (three 4 × 1024 sketches by default).
///
/// ```
/// use std::time::Duration;
/// use weir_limits::pingora::rate::Rate;
///
/// let rate = Rate::new(Duration::from_secs(1));
/// assert_eq!(rate.observe(&"client", 3), 3);
/// assert_eq!(rate.observe(&"client", 2), 5);
/// assert_eq!(rate.rate(&"client"), 0.0); // nothing complete yet
/// ```
///
/// # Differences from pingora
///
/// * Intervals sit on a fixed grid starting when the `Rate` is created (as
///   pingora's first one does).
///   pingora starts a new interval at whichever call first notices the old
///   one expired, so after a quiet spell its intervals drift and the
///   "previous interval" can be longer than `interval`.
/// * Time is counted in nanoseconds: intervals below a millisecond work
///   (pingora panics with a remainder by zero in `rate_with`), and rates
///   divide by the exact interval (pingora truncates it to milliseconds).
/// * Racing timestamps and rotations cannot underflow or lose events
///   (pingora subtracts timestamps read by different threads).
/// * A zero interval, or one over 2⁶⁴ ns, panics in the constructor.
/// * It is generic over a [`Clock`], defaulting to weir's monotonic clock,
///   so that tests can drive time by hand ([`try_with_clock`](Self::try_with_clock));
///   `Rate` alone names the default.
pub struct Rate<C: Clock = MonotonicClock>(crate::rate::Rate<SinceCreated<C>>);

/// `clock` read from the moment the `Rate` was created, so that its
/// intervals start then, as pingora's do, rather than on the clock's grid.
struct SinceCreated<C> {
    clock: C,
    origin: u64,
}

impl<C: Clock> SinceCreated<C> {
    fn new(clock: C) -> Self {
        let origin = clock.now_nanos();
        Self { clock, origin }
    }
}

impl<C: Clock> Clock for SinceCreated<C> {
    #[inline]
    fn now_nanos(&self) -> u64 {
        self.clock.now_nanos().saturating_sub(self.origin)
    }
}

impl Rate<MonotonicClock> {
    /// A rate over `interval`, with 4 × 1024 sketches as pingora.
    ///
    /// # Panics
    ///
    /// If `interval` is zero or longer than 2⁶⁴ ns.
    pub fn new(interval: Duration) -> Self {
        match Self::try_with_clock(interval, MonotonicClock::new()) {
            Ok(rate) => rate,
            Err(e) => panic!("invalid Rate interval: {e}"),
        }
    }

    /// A rate over `interval` whose sketches have `hashes` rows of `slots`
    /// counters.
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir_limits::pingora::rate::Rate;
    ///
    /// let rate = Rate::new_with_estimator_config(Duration::from_millis(100), 2, 64);
    /// assert_eq!(rate.observe(&7u32, 1), 1);
    /// ```
    ///
    /// # Panics
    ///
    /// On a bad `interval` as [`new`](Self::new), and on bad dimensions as
    /// [`Estimator::new`](super::estimator::Estimator::new).
    pub fn new_with_estimator_config(interval: Duration, hashes: usize, slots: usize) -> Self {
        let built = crate::shape::Shape::try_new(hashes, slots, crate::shape::Layout::Rows)
            .map_err(|e| format!("invalid Estimator dimensions: {e}"))
            .and_then(|shape| {
                crate::rate::Rate::try_with_shape(
                    interval,
                    shape,
                    SinceCreated::new(MonotonicClock::new()),
                )
                .map_err(|e| format!("invalid Rate interval: {e}"))
            });
        match built {
            Ok(rate) => Self(rate),
            Err(message) => panic!("{message}"),
        }
    }
}

impl<C: Clock> Rate<C> {
    /// A rate over `interval` reading time from `clock` (not in pingora).
    ///
    /// # Errors
    ///
    /// [`ConfigError::ZeroWindow`](crate::error::ConfigError::ZeroWindow) for
    /// a zero `interval`,
    /// [`ConfigError::WindowTooLong`](crate::error::ConfigError::WindowTooLong)
    /// for one over 2⁶⁴ ns, where pingora's constructor panics.
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir_limits::clock::ManualClock;
    /// use weir_limits::pingora::rate::Rate;
    ///
    /// let clock = ManualClock::new();
    /// let rate = Rate::try_with_clock(Duration::from_secs(1), clock.clone()).unwrap();
    /// rate.observe(&"k", 5);
    /// clock.advance(Duration::from_secs(1));
    /// assert_eq!(rate.rate(&"k"), 5.0);
    /// ```
    pub fn try_with_clock(interval: Duration, clock: C) -> Result<Self, crate::error::ConfigError> {
        crate::rate::Rate::try_with_clock(interval, SinceCreated::new(clock)).map(Self)
    }

    /// Events per second of `key` in the latest complete interval; 0 when
    /// the key had none there (or that interval was skipped).
    pub fn rate<T: Hash>(&self, key: &T) -> f64 {
        self.0.rate(key)
    }

    /// Count `events` for `key`; returns the key's count so far in the
    /// current interval.
    pub fn observe<T: Hash>(&self, key: &T, events: isize) -> isize {
        self.0.observe(key, events)
    }

    /// Whatever `rate_calc_fn` makes of `key`'s [`RateComponents`]: the
    /// previous and current counts, the interval, and how far into the
    /// current interval this reading is.
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir_limits::pingora::rate::{Rate, RateComponents};
    ///
    /// let rate = Rate::new(Duration::from_secs(60));
    /// rate.observe(&"k", 3);
    /// let current = rate.rate_with(&"k", |c: RateComponents| c.curr_samples);
    /// assert_eq!(current, 3);
    /// ```
    pub fn rate_with<F, T, K>(&self, key: &K, mut rate_calc_fn: F) -> T
    where
        F: FnMut(RateComponents) -> T,
        K: Hash,
    {
        rate_calc_fn(self.0.components(key).into())
    }
}

impl<C: Clock> std::fmt::Debug for Rate<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}
