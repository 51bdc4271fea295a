//! Why a check was not decided: a cost that can never be allowed, a time
//! that is not a reading of the limiter's clock.

use std::fmt;
use std::time::Duration;

/// A cost that no amount of waiting could ever allow: it exceeds what the
/// limiter can hold at once. Distinct from a denial, which passes with time.
///
/// ```
/// use std::num::NonZeroU32;
/// use weir_rate::clock::ManualClock;
/// use weir_rate::{NeverAllowed, Quota, RateLimiter, TokenBucket};
///
/// let quota = Quota::per_second(NonZeroU32::new(5).unwrap());
/// let limiter = RateLimiter::with_clock(TokenBucket::new(quota), ManualClock::new());
/// assert_eq!(limiter.check_n(6), Err(NeverAllowed { cost: 6, max_cost: 5 }));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NeverAllowed {
    /// The cost asked for.
    pub cost: u32,
    /// The most the limiter can ever allow at once (its
    /// [`max_cost`](crate::Algorithm::max_cost)).
    pub max_cost: u32,
}

impl NeverAllowed {
    /// `Err` when `cost` exceeds `max_cost`: the one edge check every
    /// limiter makes before deciding (a limiter of your own, or on a
    /// store, makes it the same way).
    ///
    /// ```
    /// use weir_rate::NeverAllowed;
    ///
    /// assert!(NeverAllowed::check(5, 5).is_ok());
    /// assert_eq!(NeverAllowed::check(6, 5), Err(NeverAllowed { cost: 6, max_cost: 5 }));
    /// ```
    ///
    /// # Errors
    ///
    /// `NeverAllowed` when `cost > max_cost`.
    pub fn check(cost: u32, max_cost: u32) -> Result<(), NeverAllowed> {
        if cost > max_cost {
            Err(NeverAllowed { cost, max_cost })
        } else {
            Ok(())
        }
    }
}

impl fmt::Display for NeverAllowed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "a cost of {} can never be allowed: the limiter holds at most {}",
            self.cost, self.max_cost
        )
    }
}

impl std::error::Error for NeverAllowed {}

/// Why a check at a caller-supplied time (`check_n_at` on
/// [`RateLimiter`](crate::RateLimiter), [`KeyedLimiter`](crate::KeyedLimiter)
/// or [`SketchLimiter`](crate::SketchLimiter)) was not decided. Neither
/// case changes any state.
///
/// ```
/// use std::num::NonZeroU32;
/// use std::time::Duration;
/// use weir_rate::clock::{ManualClock, MAX_AHEAD};
/// use weir_rate::{CheckAtError, Gcra, NeverAllowed, Quota, RateLimiter};
///
/// let limiter = RateLimiter::with_clock(Gcra::new(Quota::per_second(NonZeroU32::MIN)), ManualClock::new());
/// let now = limiter.now();
/// assert_eq!(
///     limiter.check_n_at(2, now),
///     Err(CheckAtError::NeverAllowed(NeverAllowed { cost: 2, max_cost: 1 }))
/// );
/// let ahead = MAX_AHEAD + Duration::from_secs(1);
/// assert_eq!(limiter.check_n_at(1, now + ahead), Err(CheckAtError::AheadOfClock { ahead }));
/// assert!(limiter.check_n_at(1, now + MAX_AHEAD).unwrap().is_allowed());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckAtError {
    /// The cost exceeds what the limiter can ever allow at once.
    NeverAllowed(NeverAllowed),
    /// The time is more than [`MAX_AHEAD`](crate::clock::MAX_AHEAD) past
    /// the limiter's clock, so it is not a reading of that clock.
    AheadOfClock {
        /// How far past the clock's reading it was.
        ahead: Duration,
    },
}

impl CheckAtError {
    /// `Err` when `at_ns` lies more than
    /// [`MAX_AHEAD`](crate::clock::MAX_AHEAD) past `reading_ns`, a reading
    /// of the same clock.
    #[inline]
    pub(crate) fn check_ahead(at_ns: u64, reading_ns: u64) -> Result<(), Self> {
        let ahead = at_ns.saturating_sub(reading_ns);
        if ahead > crate::clock::MAX_AHEAD_NANOS {
            Err(Self::AheadOfClock {
                ahead: Duration::from_nanos(ahead),
            })
        } else {
            Ok(())
        }
    }
}

impl From<NeverAllowed> for CheckAtError {
    fn from(never: NeverAllowed) -> Self {
        Self::NeverAllowed(never)
    }
}

impl fmt::Display for CheckAtError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NeverAllowed(never) => never.fmt(f),
            Self::AheadOfClock { ahead } => write!(
                f,
                "a time {ahead:?} ahead of the limiter's clock is not a reading of it (at most {:?})",
                crate::clock::MAX_AHEAD
            ),
        }
    }
}

impl std::error::Error for CheckAtError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::NeverAllowed(never) => Some(never),
            Self::AheadOfClock { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_edge_check_refuses_only_past_the_max_cost() {
        assert_eq!(NeverAllowed::check(5, 5), Ok(()));
        assert_eq!(
            NeverAllowed::check(6, 5),
            Err(NeverAllowed {
                cost: 6,
                max_cost: 5
            })
        );
    }
}
