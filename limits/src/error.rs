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
    /// A window (or interval) of zero length.
    ZeroWindow,
    /// A window (or interval) longer than 2⁶⁴ nanoseconds (584 years).
    WindowTooLong,
    /// A value that must lie strictly between 0 and 1 (an error target ε,
    /// a failure probability δ, a wrong-denial rate) does not: the value
    /// given (NaN included).
    InvalidFraction(f64),
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
            Self::ZeroWindow => f.write_str("the window must be longer than zero"),
            Self::WindowTooLong => {
                f.write_str("the window must be shorter than 2^64 ns (584 years)")
            }
            Self::InvalidFraction(x) => write!(
                f,
                "an error target, failure probability or wrong-denial rate must lie strictly between 0 and 1, got {x}"
            ),
        }
    }
}

impl std::error::Error for ConfigError {}
