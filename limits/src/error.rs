//! The one error type of weir-limits: a configuration that cannot work.

use std::fmt;

/// Why a structure could not be built with the requested configuration.
///
/// ```
/// use weir_limits::{ConfigError, Layout, Shape};
///
/// assert_eq!(Shape::try_new(0, 1024, Layout::Rows), Err(ConfigError::ZeroHashes));
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ConfigError {
    /// A sketch needs at least one hash (row).
    ZeroHashes,
    /// More hashes than the layout supports.
    TooManyHashes {
        /// Hashes requested.
        requested: usize,
        /// Largest number the chosen layout supports.
        max: usize,
    },
    /// A sketch needs at least one slot (column) per hash.
    ZeroSlots,
    /// `hashes × slots` counters would not be addressable (over 2³² cells,
    /// or more 8-byte counters than one allocation holds on a 32-bit target).
    TooManyCells {
        /// Counters requested.
        requested: u128,
    },
    /// The error target ε or the failure probability δ is not in (0, 1).
    InvalidErrorBound {
        /// Requested ε.
        epsilon: f64,
        /// Requested δ.
        delta: f64,
    },
    /// A time interval of zero length.
    ZeroInterval,
    /// A time interval longer than 2⁶⁴ nanoseconds (584 years).
    IntervalTooLong,
    /// A target probability (such as a wrong-denial rate) not in (0, 1).
    InvalidProbability(f64),
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ZeroHashes => f.write_str("a sketch needs at least one hash"),
            Self::TooManyHashes { requested, max } => {
                write!(
                    f,
                    "{requested} hashes requested, this layout supports at most {max}"
                )
            }
            Self::ZeroSlots => f.write_str("a sketch needs at least one slot per hash"),
            Self::TooManyCells { requested } => {
                write!(
                    f,
                    "{requested} counters requested, at most 2^32 are addressable"
                )
            }
            Self::InvalidErrorBound { epsilon, delta } => write!(
                f,
                "error target epsilon={epsilon} and failure probability delta={delta} must both lie in (0, 1)"
            ),
            Self::ZeroInterval => f.write_str("the interval must be longer than zero"),
            Self::IntervalTooLong => {
                f.write_str("the interval must be shorter than 2^64 ns (584 years)")
            }
            Self::InvalidProbability(p) => write!(f, "the probability must lie in (0, 1), got {p}"),
        }
    }
}

impl std::error::Error for ConfigError {}
