//! The algorithms a limiter's script can run, named the way the
//! in-process limiters are, and what each makes of a [`Quota`]: the key
//! tag it is stored under and the largest cost it can ever allow.

use crate::quota::Quota;
use std::fmt;

/// Which algorithm the Redis script runs. All read the [`Quota`] the way
/// the in-process limiters do: window algorithms allow `limit` per
/// `window`; rate algorithms refill at `limit / window` up to `burst`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Algorithm {
    /// A bucket of `burst` tokens refilled continuously (fractional tokens
    /// kept). State: one time, when the bucket was empty.
    TokenBucket,
    /// The generic cell rate algorithm: one theoretical arrival time per
    /// key, as redis-cell and governor keep.
    Gcra,
    /// `limit` units per window of the server clock; up to 2× at a window
    /// boundary.
    FixedWindow,
    /// The sliding-window counter over `counters` counters (`2` is the
    /// classic current + weighted previous window).
    SlidingWindow {
        /// Number of counters, at least 2.
        counters: u32,
    },
}

impl Algorithm {
    pub(crate) fn tag(self) -> &'static str {
        match self {
            Self::TokenBucket => "tb",
            Self::Gcra => "gcra",
            Self::FixedWindow => "fw",
            Self::SlidingWindow { .. } => "sw",
        }
    }

    /// The largest cost that can ever be allowed at once.
    pub(crate) fn capacity(self, quota: &Quota) -> u32 {
        match self {
            Self::TokenBucket | Self::Gcra => quota.burst(),
            Self::FixedWindow | Self::SlidingWindow { .. } => quota.limit(),
        }
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TokenBucket => f.write_str("token bucket"),
            Self::Gcra => f.write_str("GCRA"),
            Self::FixedWindow => f.write_str("fixed window"),
            Self::SlidingWindow { counters } => {
                write!(f, "sliding-window counter ({counters} counters)")
            }
        }
    }
}
