//! The algorithms a limiter's script can run: weir-rate's own algorithm
//! values ([`Gcra`], [`TokenBucket`], [`FixedWindow`], [`SlidingWindow`]),
//! each carrying its [`Quota`], and what the script takes from it: the
//! value's own step (GCRA's emission interval, the sliding window's
//! sub-window) and capacity, so Redis and in-process limiting cannot drift
//! apart.

use crate::Limiter;
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
        fn script(&self) -> super::Script;
    }
}

macro_rules! runs_on_redis {
    ($($ty:ident => |$value:ident| $kind:expr),* $(,)?) => {$(
        impl sealed::Sealed for $ty {
            fn script(&self) -> Script {
                let $value = self;
                Script {
                    algorithm: $kind,
                    quota: $value.quota(),
                    capacity: Limiter::capacity($value),
                }
            }
        }
        impl RedisAlgorithm for $ty {}
    )*};
}

runs_on_redis! {
    TokenBucket => |_a| Algorithm::TokenBucket,
    Gcra => |a| Algorithm::Gcra { interval_nanos: a.interval_nanos() },
    FixedWindow => |_a| Algorithm::FixedWindow,
    SlidingWindow => |a| Algorithm::SlidingWindow {
        counters: a.counters(),
        sub_window_nanos: a.sub_window_nanos(),
    },
}

/// What a limiter's script is built from: taken from the algorithm value.
#[derive(Debug, Clone, Copy)]
pub struct Script {
    pub(crate) algorithm: Algorithm,
    pub(crate) quota: Quota,
    /// The largest cost the algorithm can ever allow at once.
    pub(crate) capacity: u32,
}

/// The script `algorithm` runs.
pub(crate) fn script_of(algorithm: &impl RedisAlgorithm) -> Script {
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
    Gcra {
        /// [`Gcra::interval_nanos`].
        interval_nanos: u64,
    },
    /// `limit` units per window of the server clock; up to 2× at a window
    /// boundary.
    FixedWindow,
    /// The sliding-window counter over `counters` counters (`2` is the
    /// classic current + weighted previous window).
    SlidingWindow {
        /// Number of counters, at least 2.
        counters: u32,
        /// [`SlidingWindow::sub_window_nanos`].
        sub_window_nanos: u64,
    },
}

impl Algorithm {
    pub(crate) fn tag(self) -> &'static str {
        match self {
            Self::TokenBucket => "tb",
            Self::Gcra { .. } => "gcra",
            Self::FixedWindow => "fw",
            Self::SlidingWindow { .. } => "sw",
        }
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TokenBucket => f.write_str("token bucket"),
            Self::Gcra { .. } => f.write_str("GCRA"),
            Self::FixedWindow => f.write_str("fixed window"),
            Self::SlidingWindow { counters, .. } => {
                write!(f, "sliding-window counter ({counters} counters)")
            }
        }
    }
}
