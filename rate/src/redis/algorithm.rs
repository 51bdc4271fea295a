//! The algorithms a limiter's script can run: weir-rate's own algorithm
//! values ([`Gcra`], [`TokenBucket`], [`FixedWindow`], [`SlidingWindow`]),
//! each carrying its [`Quota`], and what each makes of it: the key tag it
//! is stored under and the largest cost it can ever allow.

use crate::algorithms::{FixedWindow, Gcra, SlidingWindow, TokenBucket};
use crate::quota::Quota;
use std::fmt;

/// An algorithm the Redis limiter can run, given as the same value an
/// in-process limiter takes, so the quota reads the same way in both:
/// window algorithms allow `limit` per `window`; rate algorithms refill at
/// `limit / window` up to `burst`. Implemented by [`Gcra`],
/// [`TokenBucket`], [`FixedWindow`] and [`SlidingWindow`] (2 to 1024
/// counters); the others have no script.
///
/// ```
/// use std::num::NonZeroU32;
/// use weir_rate::redis::RedisLimiter;
/// use weir_rate::{Quota, SlidingWindow};
///
/// let quota = Quota::per_second(NonZeroU32::new(10).unwrap());
/// let builder = RedisLimiter::builder(SlidingWindow::try_new(quota, 2)?);
/// # let _ = builder;
/// # Ok::<(), weir_rate::QuotaError>(())
/// ```
pub trait RedisAlgorithm: sealed::Sealed {}

mod sealed {
    /// What the builder needs from an algorithm value; sealed so that only
    /// algorithms with a script implement [`RedisAlgorithm`](super::RedisAlgorithm).
    pub trait Sealed {
        fn script(&self) -> (super::Algorithm, super::Quota);
    }
}

macro_rules! runs_on_redis {
    ($($ty:ident => |$value:ident| $kind:expr),* $(,)?) => {$(
        impl sealed::Sealed for $ty {
            fn script(&self) -> (Algorithm, Quota) {
                let $value = self;
                ($kind, $value.quota())
            }
        }
        impl RedisAlgorithm for $ty {}
    )*};
}

runs_on_redis! {
    TokenBucket => |_a| Algorithm::TokenBucket,
    Gcra => |_a| Algorithm::Gcra,
    FixedWindow => |_a| Algorithm::FixedWindow,
    SlidingWindow => |a| Algorithm::SlidingWindow { counters: a.counters() },
}

/// The script `algorithm` runs, and its quota.
pub(crate) fn script_of(algorithm: &impl RedisAlgorithm) -> (Algorithm, Quota) {
    sealed::Sealed::script(algorithm)
}

/// Which script runs, with the parameters the quota does not hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
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
