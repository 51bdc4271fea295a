//! Rate limits shared by every instance of a service through Memcached.
//!
//! A [`MemcachedLimiter`] answers what weir-rate's in-process limiters
//! answer — may this key spend `cost` units now? — with the same
//! [`Quota`](weir_rate::Quota) and [`Decision`](weir_rate::Decision), but
//! keeps the counts on Memcached, so every instance draws from one limit.
//! It is weir-store's [`StoreLimiter`](weir_store::StoreLimiter) over the
//! [`Memcached`] store: the failure policy, back-off, batching, leases and
//! metrics are weir-store's, the same as over Redis.
//!
//! # What Memcached can keep, and how
//!
//! Memcached has atomic counters but no transactions, so the algorithms
//! it keeps are the ones a counter or a compare-and-swap can decide:
//!
//! | algorithm | kept as | one decision |
//! |---|---|---|
//! | [`FixedWindow`](weir_rate::FixedWindow) | a counter per key and window | one round trip: increment (creating the counter with its TTL) |
//! | [`SlidingWindow`](weir_rate::SlidingWindow) (2 to 64 counters) | a counter per key and sub-window | one round trip: increment the current, read the older |
//! | [`Gcra`](weir_rate::Gcra), [`TokenBucket`](weir_rate::TokenBucket) | one time per key | read with its CAS value, write if unchanged: two round trips, more when writers collide |
//!
//! Every decision is weir-rate's own algorithm on the state the store
//! holds, so it is what the in-process limiter decides on the same counts.
//! A counter refuses by its own increment's result, so two instances never
//! both take the last unit; a compare-and-swap that keeps losing to other
//! writers of a key gives up after [`Servers::cas_attempts`] and the
//! request is refused (answered as [`Source::Shed`] with
//! [`StoreError::Contended`]), never let through.
//!
//! # Several limits all-or-nothing
//!
//! Windows combine: [`StoreLimiterBuilder::and`](weir_store::StoreLimiterBuilder::and)
//! with fixed and sliding windows (a per-second limit and a sliding day,
//! say) decides them all-or-nothing in the one round trip, with one list
//! of `RateLimit` fields, as on Redis. Memcached has no transaction, so
//! the check increments every limit's counter and, if any limit refuses,
//! gives every increment back before it answers. That is never looser than
//! the exact all-of: every admitted unit was counted by every limit's own
//! increment. Under concurrency it can be stricter: a check of a key that
//! arrives between another check's increments and their return counts
//! them, and may be refused where the exact set would allow it. That needs
//! two checks of one key in the same round trip's time while one of its
//! limits is refusing, so it touches keys already at a limit; the bench
//! suite's `memcached` section measures how often, beside Redis's exact
//! set. A set with a GCRA or token bucket in it needs a transaction across
//! keys and is refused at `connect` ([`ConfigError::Unsupported`]): keep
//! such a set on Redis.
//!
//! A daily window falls on UTC midnight (see Time below); for a day that
//! rolls with the client, make it a sliding window:
//!
//! ```no_run
//! use weir_memcached::{MemcachedLimiter, Servers};
//! use weir_rate::{FixedWindow, Quota, SlidingWindow, nonzero};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let second = FixedWindow::new(Quota::per_second(nonzero!(10)));
//! // 24 counters of an hour each: the day ends an hour at a time.
//! let day = SlidingWindow::try_new(Quota::per_day(nonzero!(10_000)), 24)?;
//! let limiter = MemcachedLimiter::builder(second)
//!     .and(day)
//!     .prefix("api")
//!     .connect(Servers::one("127.0.0.1:11211"))
//!     .await?;
//! let decision = limiter.check("customer-42").await;
//! // One field for both: "api-1s";q=10;w=1, "api-1d";q=10000;w=86400
//! let _ = decision.headers("api");
//! # Ok(())
//! # }
//! ```
//!
//! # Time
//!
//! Memcached has no clock to read, so time is each instance's wall clock
//! (nanoseconds since the Unix epoch). Windows fall on the epoch's grid, in
//! every instance and in the per-instance fallback alike (a daily window
//! starts at UTC midnight). Instances whose clocks disagree by `δ` see a
//! window boundary `δ` apart, and a GCRA or token-bucket key is judged `δ`
//! earlier or later: keep instances on NTP, and count `δ / (window / limit)`
//! units per key as the error it allows.
//!
//! # Debts
//!
//! A forced charge beyond the quota ([`StoreLimiter::charge`](weir_store::StoreLimiter::charge),
//! a settling layer's shortfall) is a debt later checks wait out. Memcached
//! keeps no item past 2038-01-19T03:14:07Z (an expiry is a signed 32-bit
//! Unix time), so a GCRA or token-bucket debt that would end later is kept
//! until then: the key is refused until that date, never forgotten.
//!
//! # Keys and servers
//!
//! A store key is `<prefix>:<limit>:<key>|<window>`: the prefix (1 to 48 of
//! `A-Z a-z 0-9 _ . -`), the algorithm with the parameters that lay out its
//! state, the limiter key percent-encoded (a key longer than 128 encoded
//! bytes is named by 128 bits of its SHA-256), and the window a counter
//! counts. In a set all-or-nothing, the first limit's counters are named
//! so, and the `i`-th limit's `<prefix>:<first>:<key>|<i>:<limit>:<window>`,
//! so a key's counters all live on one server. Different keys or prefixes never share a store key, nor do
//! windows of different lengths; a GCRA or token-bucket key is one time
//! whatever the quota, so that a quota changed for a key takes over what
//! it spent (as in process): two such limiters with different quotas need
//! different prefixes.
//! Keys are spread over several [`Servers`] by rendezvous hashing of all
//! but the window, the same in every instance; a key's counters all live on
//! one server, and one server down sends only its keys to the failure
//! policy. A configuration file names them in one address,
//! `memcached://host:port,host:port` ([`Servers::parse`]).
//!
//! # What a restart or eviction forgets
//!
//! Memcached keeps counts in memory only: a server restarted, or a counter
//! evicted to make room, forgets what the key spent, and the key may spend
//! its window again (a looser limit for that window). An instance that
//! saw the restart as an outage holds it back for a window (its fallback
//! counted what it let through; see
//! [`FailurePolicy::PerInstance`]),
//! but one that saw nothing does not, and an eviction is seen by none.
//! Size the servers so
//! nothing is evicted: every key that spends within a window holds, on its
//! server, one item per counter (one for a fixed window, `N` for a sliding
//! one of `N` counters, one for GCRA or a token bucket), each about
//! `60 + key length` bytes rounded up to Memcached's slab classes (96 to
//! 240 bytes for typical keys). Watch the servers' `evictions` statistic:
//! it must stay at zero.
//!
//! # Example
//!
//! ```no_run
//! use std::num::NonZeroU32;
//! use weir_memcached::{MemcachedLimiter, Servers};
//! use weir_rate::{Quota, SlidingWindow};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let quota = Quota::per_minute(NonZeroU32::new(100).unwrap());
//! let limiter = MemcachedLimiter::builder(SlidingWindow::try_new(quota, 2)?)
//!     .prefix("api")
//!     .connect(Servers::new(["10.0.0.1:11211", "10.0.0.2:11211"]))
//!     .await?;
//! if !limiter.check("customer-42").await.is_allowed() {
//!     // 429, with decision.headers("api")
//! }
//! # Ok(())
//! # }
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]

mod cas;
mod connection;
mod keys;
mod servers;
mod store;
mod windows;

pub use servers::Servers;
pub use store::Memcached;
pub use weir_store::{
    Answer, Batching, ConfigError, FailurePolicy, Limit, PreAggregation, Source, StoreError,
    StoreTiers,
};
#[cfg(feature = "serde")]
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
pub use weir_store::{FailurePolicySpec, StoreLimits};

/// A rate limit kept on Memcached: weir-store's limiter over the
/// [`Memcached`] store. See [`StoreLimiter`](weir_store::StoreLimiter) for
/// its methods.
pub type MemcachedLimiter = weir_store::StoreLimiter<Memcached>;

/// Configures and connects a [`MemcachedLimiter`]: from
/// [`MemcachedLimiter::builder`]; see [`StoreLimiterBuilder`](weir_store::StoreLimiterBuilder).
pub type MemcachedLimiterBuilder = weir_store::StoreLimiterBuilder<Memcached>;

/// The README's examples, run as doc tests so it cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
mod readme {}
