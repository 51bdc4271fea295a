//! The algorithms, each a [`Limiter`](crate::Limiter).
//!
//! | algorithm | state per key | bound on units allowed in any interval of length `t` |
//! |---|---|---|
//! | [`FixedWindow`] | start + count | `≤ 2·limit` in any window-long interval (`limit` on each side of a boundary) |
//! | [`SlidingLog`] | one entry per allowed request (≤ limit), and per forced charge | `≤ limit` per window: exact |
//! | [`SlidingWindow`] (N counters) | N counters | `≤ 2·limit` per window in the worst case; under steady traffic error shrinks with N |
//! | [`TokenBucket`] | spent tokens + time | `≤ burst + limit·t/window` |
//! | [`LeakyBucket`] meter | water level + time | `≤ burst + limit·t/window` (the token bucket seen from the other side) |
//! | [`LeakyBucket`] shaper | time the queue drains | admitted `≤ (max_delay + t)/T + 1`, released `≤ t/T + 1` with `T = window/limit` |
//! | [`Gcra`] | one timestamp | `≤ burst + t/T` (`T` = window/limit rounded up to 1 ns) |
//!
//! These bounds hold with refunds too, counting refunded units as never
//! served: a refund names its spending by the [`Receipt`](crate::Receipt)
//! of its check and gives back only what that spending still counts for
//! (see [`Limiter::refund`](crate::Limiter::refund)).

mod fixed_window;
mod gcra;
mod leaky_bucket;
mod sliding_log;
mod sliding_window;
mod token_bucket;

// The algorithms' state types are public (each is its `Limiter::State`)
// but reached through the trait, `<FixedWindow as Limiter>::State`, so
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
