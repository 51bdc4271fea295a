//! The errors of weir-hhh: a configuration that cannot work.

use std::fmt;

/// Why a [`Classifier`](crate::Classifier) could not be built.
///
/// ```
/// use weir_hhh::{Classifier, ConfigError};
///
/// assert_eq!(Classifier::try_new(0).unwrap_err(), ConfigError::ZeroLimit);
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ConfigError {
    /// A limit of zero packets per second would drop everything.
    ZeroLimit,
    /// A window growth factor of zero (use 1 for equal windows).
    ZeroWindowGrowth,
    /// A source prefix is longer than the address, or the subnet prefix is
    /// longer than the "exact" one.
    InvalidPrefix {
        /// `"IPv4"` or `"IPv6"`.
        family: &'static str,
        /// The prefix length used for "exact" source addresses.
        exact: u8,
        /// The prefix length used for source subnets.
        subnet: u8,
    },
    /// The sketch shape or an EWMA window was rejected by weir-limits
    /// (zero hashes or slots, too many cells, a zero or too long window,
    /// ...); its error is re-exported as
    /// [`sketch::ConfigError`](crate::sketch::ConfigError).
    Limits(weir_limits::ConfigError),
}

impl From<weir_limits::ConfigError> for ConfigError {
    fn from(e: weir_limits::ConfigError) -> Self {
        Self::Limits(e)
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ZeroLimit => f.write_str("the limit must be at least one packet per second"),
            Self::ZeroWindowGrowth => f.write_str("the window growth factor must be at least 1"),
            Self::InvalidPrefix {
                family,
                exact,
                subnet,
            } => write!(
                f,
                "{family} source prefixes /{exact} (exact) and /{subnet} (subnet) must satisfy subnet <= exact <= address length"
            ),
            Self::Limits(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for ConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Limits(e) => Some(e),
            _ => None,
        }
    }
}
