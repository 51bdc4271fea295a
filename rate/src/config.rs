//! Why a configuration cannot work: one error type for every constructor
//! of this crate that can refuse its input.

use std::fmt;

/// Why a quota, or a limiter or rate built from one, cannot be made.
///
/// ```
/// use std::time::Duration;
/// use weir_rate::{Quota, ConfigError};
///
/// assert_eq!(Quota::try_new(0, Duration::from_secs(1)), Err(ConfigError::ZeroRate));
/// assert_eq!(Quota::try_new(10, Duration::ZERO), Err(ConfigError::ZeroWindow));
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ConfigError {
    /// A limit of zero units per window: nothing could ever pass.
    ZeroRate,
    /// A window of zero length.
    ZeroWindow,
    /// A window of 2⁶⁴ ns (584 years) or longer.
    WindowTooLong,
    /// A burst of zero: nothing could ever pass.
    ZeroBurst,
    /// A sliding-window counter needs 2 to
    /// [`SlidingWindow::MAX_COUNTERS`](crate::SlidingWindow::MAX_COUNTERS)
    /// counters, and each sub-window must last at least one nanosecond.
    BadSubWindows {
        /// Counters requested.
        counters: u32,
    },
    /// Tiers that cannot be checked together (see
    /// [`TieredLimiter::try_new`](crate::TieredLimiter::try_new)), and why.
    Tiers(&'static str),
    /// A sketch that cannot be sized as asked (weir-limits' error, for
    /// [`SketchLimiter::try_sized_for`](crate::SketchLimiter::try_sized_for)).
    Sketch(weir_limits::ConfigError),
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ZeroRate => f.write_str("a quota of zero units per window allows nothing"),
            Self::ZeroWindow => f.write_str("a quota window must be longer than zero"),
            Self::WindowTooLong => {
                f.write_str("a quota window must be shorter than 2^64 ns (584 years)")
            }
            Self::ZeroBurst => f.write_str("a burst of zero allows nothing"),
            Self::BadSubWindows { counters } => write!(
                f,
                "{counters} counters: a sliding-window counter needs at least 2, each covering at least 1 ns"
            ),
            Self::Tiers(why) => write!(f, "tiers that cannot be checked together: {why}"),
            Self::Sketch(e) => write!(f, "a sketch that cannot be made: {e}"),
        }
    }
}

impl std::error::Error for ConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Sketch(e) => Some(e),
            _ => None,
        }
    }
}

/// A [`Shape`](crate::Shape) that could not be made, in a function
/// building a limiter with `?`.
impl From<weir_limits::ConfigError> for ConfigError {
    fn from(e: weir_limits::ConfigError) -> Self {
        Self::Sketch(e)
    }
}
