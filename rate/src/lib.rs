//! Rate limits in process: the classic algorithms behind one trait, the
//! containers that hold their state per key, and decisions that carry
//! what an HTTP response needs.
//!
//! weir-rate knows nothing of HTTP middleware, remote stores or adaptive
//! concurrency: those are weir-tower, weir-redis and weir-adaptive, which
//! reach the limits here through the seam traits below.
//!
//! # Algorithms
//!
//! Each takes a [`Quota`] and implements [`Algorithm`], a step function over
//! state the caller holds (time passed in), so the same value serves every
//! container and a replay.
//!
//! * [`Gcra`]: one timestamp per key, as governor and redis-cell keep.
//! * [`TokenBucket`], [`LeakyBucket`] (a meter, or a shaper that delays).
//! * [`FixedWindow`], [`SlidingWindow`] (N sub-window counters; N = 2 is
//!   Cloudflare's), [`SlidingLog`] (exact).
//! * [`AllOf`] and pairs of limiters: several limits, all-or-nothing.
//!
//! Their per-key states ([`FixedWindowState`], [`SlidingWindowState`],
//! [`SlidingLogState`], [`TokenBucketState`], [`LeakyBucketState`]; GCRA's
//! is one `u64`) are named for code that holds state itself.
//!
//! # Containers
//!
//! * [`RateLimiter`]: one limit shared by every caller.
//! * [`KeyedLimiter`]: any algorithm per key, exact up to a bound on keys
//!   ([`KeyedLimiterBuilder`]) and never looser beyond it.
//! * [`SketchLimiter`]: GCRA per key in fixed memory, never looser than
//!   exact.
//! * [`TieredLimiter`]: a limit per key, from the key's [`Tier`] (looked up
//!   by a [`TierOf`] in a [`TierSet`]; algorithms that allow it are
//!   [`PerKeyQuota`]), each decision naming its tier; [`TieredSketch`],
//!   the same over a sketch in fixed memory. Both keep their tiers as
//!   [`LiveTiers`] (a [`TierTable`] read whole by each check), replaced
//!   while serving; [`CachedTierOf`] caches a slow lookup of keys' tiers
//!   in bounded memory.
//!
//! All of them peek, weigh checks by cost, take refunds ([`Receipt`],
//! [`Spending`]) and forced charges, change their quota at run time without
//! a burst, run in shadow mode, and read time from an injectable
//! [`Clock`](clock::Clock).
//!
//! # Decisions
//!
//! * [`Decision`]: allowed or not, limit, remaining, reset, retry-after, a
//!   shaper's delay; rendered as the IETF `RateLimit-Policy` / `RateLimit`
//!   fields and `Retry-After` ([`Decision::headers`], [`PolicyName`]).
//! * [`NeverAllowed`]: a cost beyond what the quota can ever allow;
//!   [`CheckAtError`]: a caller's time the limiter refuses.
//! * [`Mode`]: a check or a peek.
//!
//! # Seams
//!
//! How code above the containers asks any keyed limiter, in process or on
//! a store, without knowing which: [`CheckKey`] (answers at once),
//! [`CheckKeyAsync`] (answers with a future) and [`SettleKey`] (refund or
//! charge once a request's real cost is known, by [`Settlement`]).
//! [`AnyLimiter`] is any of them as one type (its futures [`AnyCheck`] and
//! [`AnySettling`], its error [`SettleError`]), for a limiter chosen from
//! configuration at run time.
//!
//! # Modules
//!
//! * [`client`]: a client's address as a limit key ([`client::ClientPrefixes`]:
//!   IPv6 networks, NAT64, mapped IPv4) and trusted proxy networks
//!   ([`client::IpNet`]), shared by every integration.
//! * [`spec`] (feature `serde`): limits, all-or-nothing sets and tiers as a
//!   configuration file gives them, checked into the typed values.
//! * [`wait`] (feature `wait`): `until_ready` / `until_key_ready`, which
//!   sleep until a limit allows, with jitter, on weir-timeout.
//! * [`clock`]: the clocks, shared with weir-limits.
//!
//! # The algorithms' bounds
//!
//! | algorithm | state per key | bound on units allowed in any interval of length `t` |
//! |---|---|---|
//! | [`FixedWindow`] | start + count | `≤ 2·limit` in any window-long interval (`limit` on each side of a boundary) |
//! | [`SlidingLog`] | one entry per allowed request (≤ limit), and per forced charge | `≤ limit` per window: exact |
//! | [`SlidingWindow`] (N counters) | N counters | `≤ 2·limit` per window in the worst case; under steady traffic error shrinks with N (Cloudflare measured 0.003 % wrong decisions with N = 2) |
//! | [`TokenBucket`] | spent tokens + time | `≤ burst + limit·t/window` |
//! | [`LeakyBucket`] meter | water level + time | `≤ burst + limit·t/window` (the token bucket seen from the other side) |
//! | [`LeakyBucket`] shaper | time the queue drains | admitted `≤ (max_delay + t)/T + 1`, released `≤ t/T + 1` with `T = window/limit`; no caller delayed more than `max_delay` |
//! | [`Gcra`] | one timestamp | `≤ burst + t/T` (`T` = window/limit rounded up to 1 ns) |
//!
//! Rates never round in the caller's favour (refills round down, emission
//! intervals round up), time going backwards counts as no time passing,
//! and each bound is a property test (`rate/tests/limiters/bounds/`).
//!
//! These bounds hold with refunds too, counting refunded units as never
//! served: a refund names its spending by the [`Receipt`]
//! of its check and gives back only what that spending still counts for
//! (see [`Algorithm::refund`]).
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

mod algorithm;
mod algorithms;
mod all_of;
mod any;
mod cells;
mod check;
pub mod client;
mod config;
mod decision;
mod keyed;
mod mode;
mod quota;
mod single;
mod sketch;
#[cfg(feature = "serde")]
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
pub mod spec;
mod sync;
mod tiers;
#[cfg(feature = "wait")]
#[cfg_attr(docsrs, doc(cfg(feature = "wait")))]
pub mod wait;

/// The injectable clock, shared with `weir-limits`, and how far ahead of
/// it a caller-supplied time may be.
pub mod clock {
    pub use weir_limits::clock::{
        Clock, ManualClock, MonotonicClock, RecentClock, StdClock, Timestamp, WallClock,
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

pub use algorithm::{Algorithm, Forgettable};
pub use algorithms::{
    FixedWindow, FixedWindowState, Gcra, LeakyBucket, LeakyBucketState, SlidingLog,
    SlidingLogState, SlidingWindow, SlidingWindowState, TokenBucket, TokenBucketState,
};
pub use all_of::AllOf;
pub use any::{AnyCheck, AnyLimiter, AnySettling, SettleError};
pub use check::{CheckKey, CheckKeyAsync, SettleKey, Settlement};
pub use config::ConfigError;
pub use decision::{CheckAtError, Decision, NeverAllowed, PolicyName, Receipt, Spending};
pub use keyed::{KeyedLimiter, KeyedLimiterBuilder};
pub use mode::Mode;
pub use quota::Quota;
pub use single::RateLimiter;
pub use sketch::SketchLimiter;
pub use tiers::{
    CachedTierOf, LiveTiers, PerKeyQuota, Tier, TierOf, TierSet, TierTable, TieredLimiter,
    TieredSketch,
};
pub use weir_limits::{Layout, Shape};

/// The README's examples, run as doc tests so it cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
mod readme {}
