//! What a limiter allows: `limit` units per `window`, with a `burst`.

/// A `NonZeroU32` from a literal or constant, checked when compiling: zero
/// is a compile error, so a quota needs no `unwrap`.
///
/// ```
/// use weir_rate::{Quota, nonzero};
///
/// let api = Quota::per_second(nonzero!(10)).allow_burst(nonzero!(20));
/// assert_eq!((api.limit(), api.burst()), (10, 20));
/// ```
///
/// ```compile_fail
/// let never = weir_rate::Quota::per_day(weir_rate::nonzero!(0)); // does not compile
/// ```
#[macro_export]
macro_rules! nonzero {
    ($n:expr) => {
        const {
            match ::core::num::NonZeroU32::new($n) {
                ::core::option::Option::Some(n) => n,
                ::core::option::Option::None => panic!("a quota's numbers are at least 1"),
            }
        }
    };
}

use crate::config::ConfigError;
use std::fmt;
use std::num::NonZeroU32;
use std::time::Duration;

/// `limit` units per `window`, of which up to `burst` may be spent at once.
///
/// Window-based algorithms (fixed window, sliding log, sliding-window
/// counter) allow `limit` units per window and ignore `burst`; rate-based
/// ones (token bucket, leaky bucket, GCRA) refill at `limit / window` and
/// hold at most `burst` units (by default `burst = limit`).
///
/// ```
/// use std::time::Duration;
/// use weir_rate::{Quota, nonzero};
///
/// let q = Quota::per_minute(nonzero!(100)).allow_burst(nonzero!(10));
/// assert_eq!((q.limit(), q.burst(), q.window()), (100, 10, Duration::from_secs(60)));
/// assert_eq!(Quota::try_new(5, Duration::from_millis(250)).unwrap().limit(), 5);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Quota {
    limit: NonZeroU32,
    burst: NonZeroU32,
    window_ns: u64,
}

impl Quota {
    const fn fixed(limit: NonZeroU32, window_ns: u64) -> Self {
        Self {
            limit,
            burst: limit,
            window_ns,
        }
    }

    /// `limit` units per second.
    pub const fn per_second(limit: NonZeroU32) -> Self {
        Self::fixed(limit, 1_000_000_000)
    }

    /// `limit` units per minute.
    pub const fn per_minute(limit: NonZeroU32) -> Self {
        Self::fixed(limit, 60_000_000_000)
    }

    /// `limit` units per hour.
    pub const fn per_hour(limit: NonZeroU32) -> Self {
        Self::fixed(limit, 3_600_000_000_000)
    }

    /// `limit` units per day (86 400 s).
    pub const fn per_day(limit: NonZeroU32) -> Self {
        Self::fixed(limit, 86_400_000_000_000)
    }

    /// A quota from raw parts known to be valid (zeros are raised to one).
    pub(crate) fn from_raw(limit: u32, burst: u32, window_ns: u64) -> Self {
        Self {
            limit: NonZeroU32::new(limit).unwrap_or(NonZeroU32::MIN),
            burst: NonZeroU32::new(burst).unwrap_or(NonZeroU32::MIN),
            window_ns: if window_ns == 0 { 1 } else { window_ns },
        }
    }

    /// `limit` units per `window`, checked at run time.
    ///
    /// # Errors
    ///
    /// [`ConfigError::ZeroRate`] for a zero limit,
    /// [`ConfigError::ZeroWindow`] for a zero window and
    /// [`ConfigError::WindowTooLong`] for one of 2⁶⁴ ns (584 years) or more.
    pub fn try_new(limit: u32, window: Duration) -> Result<Self, ConfigError> {
        let limit = NonZeroU32::new(limit).ok_or(ConfigError::ZeroRate)?;
        if window.is_zero() {
            return Err(ConfigError::ZeroWindow);
        }
        let window_ns = u64::try_from(window.as_nanos()).map_err(|_| ConfigError::WindowTooLong)?;
        Ok(Self::fixed(limit, window_ns))
    }

    /// One unit per `period` (governor's `with_period`): a burst of one,
    /// refilled every `period`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir_rate::{Quota, ConfigError};
    ///
    /// let q = Quota::try_with_period(Duration::from_millis(100)).unwrap();
    /// assert_eq!((q.limit(), q.burst(), q.window()), (1, 1, Duration::from_millis(100)));
    /// assert_eq!(Quota::try_with_period(Duration::ZERO), Err(ConfigError::ZeroWindow));
    /// ```
    ///
    /// # Errors
    ///
    /// As [`try_new`](Self::try_new) for a window of `period`.
    pub fn try_with_period(period: Duration) -> Result<Self, ConfigError> {
        Self::try_new(1, period)
    }

    /// The same rate with at most `burst` units at once.
    pub const fn allow_burst(self, burst: NonZeroU32) -> Self {
        Self { burst, ..self }
    }

    /// [`allow_burst`](Self::allow_burst) checked at run time.
    ///
    /// # Errors
    ///
    /// [`ConfigError::ZeroBurst`] for a zero burst.
    pub fn try_burst(self, burst: u32) -> Result<Self, ConfigError> {
        Ok(self.allow_burst(NonZeroU32::new(burst).ok_or(ConfigError::ZeroBurst)?))
    }

    /// Units per window.
    pub const fn limit(&self) -> u32 {
        self.limit.get()
    }

    /// Units that may be spent at once by rate-based algorithms.
    pub const fn burst(&self) -> u32 {
        self.burst.get()
    }

    /// The window.
    pub const fn window(&self) -> Duration {
        Duration::from_nanos(self.window_ns)
    }

    /// The time per unit, `window / limit`, rounded **up** to a whole
    /// nanosecond and at least 1, so a rate-based limiter built from it is
    /// never looser than the quota (stricter by under 1 ns per unit).
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use std::time::Duration;
    /// use weir_rate::Quota;
    ///
    /// let q = Quota::per_second(NonZeroU32::new(3).unwrap());
    /// assert_eq!(q.emission_interval(), Duration::from_nanos(333_333_334));
    /// ```
    pub const fn emission_interval(&self) -> Duration {
        Duration::from_nanos(self.emission_interval_nanos())
    }

    /// The window in nanoseconds (never zero).
    pub(crate) const fn window_nanos(&self) -> u64 {
        self.window_ns
    }

    /// [`emission_interval`](Self::emission_interval) in nanoseconds.
    pub(crate) const fn emission_interval_nanos(&self) -> u64 {
        let t = self.window_ns.div_ceil(self.limit.get() as u64);
        if t == 0 { 1 } else { t }
    }
}

impl fmt::Display for Quota {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} per {:?} (burst {})",
            self.limit,
            self.window(),
            self.burst
        )
    }
}
