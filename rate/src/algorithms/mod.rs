//! The algorithms, each a [`Algorithm`](crate::Algorithm). Each one's state
//! per key and bound on the units it allows are tabulated once, in the
//! crate documentation's [bounds table](crate#the-algorithms-bounds).

mod fixed_window;
mod gcra;
mod leaky_bucket;
mod sliding_log;
mod sliding_window;
mod token_bucket;

// The algorithms' state types are public (each is its `Algorithm::State`)
// but reached through the trait, `<FixedWindow as Algorithm>::State`, so
// they add nothing to the crate's paths.
pub use fixed_window::{FixedWindow, FixedWindowState};
pub use gcra::Gcra;
pub use leaky_bucket::{LeakyBucket, LeakyBucketState};
pub use sliding_log::{SlidingLog, SlidingLogState};
pub use sliding_window::{SlidingWindow, SlidingWindowState};
pub use token_bucket::{TokenBucket, TokenBucketState};

pub(crate) use gcra::{Step, gcra_step};

/// `⌈a / b⌉` for `b > 0`.
#[inline]
pub(crate) fn ceil_div(a: u128, b: u128) -> u128 {
    a / b + u128::from(!a.is_multiple_of(b))
}

/// A `u128` count of nanoseconds clamped into `u64`.
#[inline]
pub(crate) fn clamp_ns(ns: u128) -> u64 {
    u64::try_from(ns).unwrap_or(u64::MAX)
}

/// A `u128` count clamped into `u32`.
#[inline]
pub(crate) fn clamp_u32(n: u128) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}
