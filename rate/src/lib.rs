//! weir-rate: measuring and limiting request rates.
//!
//! * [`ewma`] — rakelimit's exponentially weighted moving-average rate, in
//!   float and integer-only fixed point, stateless ([`ewma::EwmaWindow`]) or
//!   shared between threads ([`ewma::Ewma`]).
//! * One [`Limiter`] trait over every classic algorithm: [`FixedWindow`],
//!   [`SlidingLog`], [`SlidingWindow`] (N sub-window counters; N = 2 is
//!   Cloudflare's), [`TokenBucket`], [`LeakyBucket`] (meter or shaper) and
//!   [`Gcra`]; all take a [`Quota`] and answer with a [`Decision`] that
//!   renders the `RateLimit-Policy`, `RateLimit` and `Retry-After` headers.
//!   Pairs of limiters and [`AllOf`] check several limits all-or-nothing.
//! * Containers: [`RateLimiter`] (one shared limit), [`KeyedLimiter`] (any
//!   algorithm per key, sharded, exact up to a capacity of keys and never
//!   looser beyond it, idle keys evicted) and [`SketchLimiter`] (GCRA per key
//!   in fixed memory, never looser than exact). All offer peek, cost-weighted checks,
//!   run-time quota changes without a burst and a shadow (dry-run) mode;
//!   time comes from an injectable [`Clock`](clock::Clock).
//! * Feature `metrics`: decisions by outcome and limiter, and Redis
//!   answers by source with the script calls' latency, through the
//!   `metrics` facade (names and labels: `weir_rate_decisions_total`,
//!   `weir_rate_settlements_total`, `weir_rate_redis_decisions_total`,
//!   `weir_rate_redis_call_seconds`).
//! * [`wait`] (feature `wait`): `until_ready` / `until_key_ready` wait until
//!   a limit allows, with jitter, on weir-timeout's cheap sleeps.
//! * One way to ask any keyed limiter, in process or on Redis, for a key:
//!   [`CheckKey`] (answers at once) and [`CheckKeyAsync`] (answers with a
//!   future); the tower layer and the Redis fallback take these. After the
//!   fact, [`SettleKey`] refunds or charges the difference once a request's
//!   real cost is known ([`Settlement`]).
//!
//! * [`adaptive`] — concurrency limits learned from latency (AIMD, Vegas,
//!   Gradient2), per origin or per key, with an RAII guard.
//!
//! # The algorithms' bounds
//!
//! | algorithm | state per key | bound on units allowed in any interval of length `t` |
//! |---|---|---|
//! | [`FixedWindow`] | start + count | `≤ 2·limit` in any window-long interval (`limit` on each side of a boundary) |
//! | [`SlidingLog`] | one entry per allowed request (≤ limit) | `≤ limit` per window: exact |
//! | [`SlidingWindow`] (N counters) | N counters | `≤ 2·limit` per window in the worst case; under steady traffic error shrinks with N |
//! | [`TokenBucket`] | spent tokens + time | `≤ burst + limit·t/window` |
//! | [`LeakyBucket`] meter | water level + time | `≤ burst + limit·t/window` (the token bucket seen from the other side) |
//! | [`LeakyBucket`] shaper | time the queue drains | admitted `≤ (max_delay + t)/T + 1`, released `≤ t/T + 1` with `T = window/limit` |
//! | [`Gcra`] | one timestamp | `≤ burst + t/T` (`T` = window/limit rounded up to 1 ns) |
//!
//! These bounds hold with refunds too, counting refunded units as never
//! served: a refund names its spending by the [`Receipt`]
//! of its check and gives back only what that spending still counts for
//! (see [`Limiter::refund`]).
//!
//! # Example
//!
//! ```
//! use std::num::NonZeroU32;
//! use weir_rate::{Gcra, KeyedLimiter, Quota};
//!
//! let per_client = KeyedLimiter::new(Gcra::new(Quota::per_second(NonZeroU32::new(10).unwrap())));
//! let decision = per_client.check(&"203.0.113.7");
//! assert!(decision.is_allowed());
//! for (name, value) in decision.headers("per-client") {
//!     println!("{name}: {value}");
//! }
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod adaptive;
mod algorithms;
mod check;
mod decision;
pub mod ewma;
#[cfg(feature = "tower")]
#[cfg_attr(docsrs, doc(cfg(feature = "tower")))]
pub mod http;
mod keyed;
mod limiter;
mod quota;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub mod redis;
mod single;
mod sketch;
mod sync;
#[cfg(any(feature = "tower", feature = "redis"))]
mod telemetry;
#[cfg(feature = "wait")]
#[cfg_attr(docsrs, doc(cfg(feature = "wait")))]
pub mod wait;

/// The injectable clock, shared with `weir-limits`, and how far ahead of
/// it a caller-supplied time may be.
pub mod clock {
    pub use weir_limits::clock::{
        Clock, ManualClock, MonotonicClock, RecentClock, StdClock, Timestamp,
    };

    /// How far past a limiter's clock a time given to `check_n_at` may
    /// lie; a later one is refused with
    /// [`CheckAtError::AheadOfClock`](crate::CheckAtError::AheadOfClock).
    ///
    /// Readings of one clock type share an epoch, so a live reading taken
    /// before the call is never ahead of the limiter's own by more than
    /// the cores' disagreement (nanoseconds). A time further ahead is a
    /// replay on a [`ManualClock`] left standing, or a mistake such as
    /// `now + Duration::MAX`. Replays may run this far ahead of their
    /// clock (advance it with the trace to go further); past it, a single
    /// time would be judged at for the rest of its key's checks, or of a
    /// [`RateLimiter`](crate::RateLimiter)'s, until the clock caught up.
    ///
    /// ```
    /// use std::time::Duration;
    /// assert_eq!(weir_rate::clock::MAX_AHEAD, Duration::from_secs(60));
    /// ```
    pub const MAX_AHEAD: std::time::Duration = std::time::Duration::from_secs(60);

    pub(crate) const MAX_AHEAD_NANOS: u64 = MAX_AHEAD.as_secs() * 1_000_000_000;
}

pub use algorithms::{FixedWindow, Gcra, LeakyBucket, SlidingLog, SlidingWindow, TokenBucket};
pub use check::{CheckKey, CheckKeyAsync, SettleKey, Settlement};
pub use decision::{CheckAtError, Decision, NeverAllowed, Receipt, Spending};
pub use keyed::KeyedLimiter;
pub use limiter::{AllOf, Limiter, Mode};
pub use quota::{Quota, QuotaError};
pub use single::RateLimiter;
pub use sketch::SketchLimiter;
pub use weir_limits::{ConfigError, Layout, Shape};

/// The README's examples, run as doc tests so it cannot drift from the API.
#[cfg(all(doctest, feature = "axum"))]
#[doc = include_str!("../README.md")]
mod readme {}
