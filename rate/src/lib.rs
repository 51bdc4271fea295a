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
//!   `weir_rate_redis_decisions_total`, `weir_rate_redis_call_seconds`).
//! * [`wait`] (feature `wait`): `until_ready` / `until_key_ready` wait until
//!   a limit allows, with jitter, on weir-timeout's cheap sleeps.
//! * One way to ask any keyed limiter, in process or on Redis, for a key:
//!   [`CheckKey`] (answers at once) and [`CheckKeyAsync`] (answers with a
//!   future); the tower layer and the Redis fallback take these.
//!
//! * [`adaptive`] — concurrency limits learned from latency (AIMD, Vegas,
//!   Gradient2), per origin or per key, with an RAII guard.
//!
//! The algorithms' error bounds are listed in [`algorithms`].
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

pub mod adaptive;
pub mod algorithms;
mod check;
pub mod decision;
pub mod ewma;
#[cfg(feature = "tower")]
pub mod http;
pub mod keyed;
mod limiter;
mod quota;
#[cfg(feature = "redis")]
pub mod redis;
mod single;
pub mod sketch;
mod sync;
#[cfg(any(feature = "tower", feature = "redis"))]
mod telemetry;
#[cfg(feature = "wait")]
pub mod wait;

/// The injectable clock, shared with `weir-limits`, and how far ahead of
/// it a caller-supplied time may be.
pub mod clock {
    pub use weir_limits::clock::{
        Clock, ManualClock, MonotonicClock, RecentClock, StdClock, Timestamp,
    };
    pub use weir_primitives::time::duration_to_nanos;

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
pub use check::{CheckKey, CheckKeyAsync};
pub use decision::{CheckAtError, Decision, NeverAllowed, PolicyName, Receipt, TOO_MANY_REQUESTS};
pub use keyed::KeyedLimiter;
pub use limiter::{AllOf, Limiter, Mode};
pub use quota::{Quota, QuotaError};
pub use single::RateLimiter;
pub use sketch::SketchLimiter;
pub use weir_limits::ConfigError;
