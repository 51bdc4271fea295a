//! Rate limits shared by every instance of a service through Redis or
//! Redis Cluster.
//!
//! A [`RedisLimiter`] answers what weir-rate's in-process limiters answer
//! — may this key spend `cost` units now? — with the same
//! [`Quota`](weir_rate::Quota) and [`Decision`](weir_rate::Decision), but
//! keeps the state in Redis, so every instance draws from one limit. It
//! is weir-store's [`StoreLimiter`](weir_store::StoreLimiter) over the
//! [`Redis`] store: the failure policy, back-off, batching, leases and
//! metrics are weir-store's, documented there.
//!
//! # How a decision is made
//!
//! * **One script per decision.** Each algorithm ([`Gcra`](weir_rate::Gcra),
//!   [`TokenBucket`](weir_rate::TokenBucket), [`FixedWindow`](weir_rate::FixedWindow),
//!   [`SlidingWindow`](weir_rate::SlidingWindow)) is one Lua script that
//!   reads the key, decides and writes it back, atomically: two instances
//!   never both spend the last unit. Scripts go as `EVALSHA` and are
//!   loaded again on `NOSCRIPT`.
//! * **The server's clock.** Time is the server's `TIME`, read inside the
//!   script, to the microsecond: client clocks never matter, and with the
//!   same request times each script decides exactly as the in-process
//!   algorithm of the same name (`remaining`, `reset_after` and
//!   `retry_after` included).
//! * **Keys.** One Redis key per limiter key and limit,
//!   `<prefix>:<alg>:{<key>}`, hash-tagged so that a key's state lives in
//!   one Cluster slot, passed in `KEYS[]`. Every key expires once its
//!   state equals a fresh one (at most two seconds later), so idle keys
//!   vanish on their own. A fixed or sliding window's state is laid out
//!   by its window: give a new window length a new prefix.
//! * **All-or-nothing** ([`StoreLimiterBuilder::and`](weir_store::StoreLimiterBuilder::and)):
//!   several limits of one key decided in one script, spent only if all
//!   allow (`<prefix>:all:{<prefix>:<key>}:<i>:<alg>`).
//! * **Refunds and charges** ([`StoreLimiter::refund`](weir_store::StoreLimiter::refund),
//!   [`StoreLimiter::charge`](weir_store::StoreLimiter::charge)): by a
//!   script against the server's clock, on every limit; on a Cluster a
//!   refund gives back once even when the client resends it.
//!
//! Needs Redis 6.2 or later (7 or later for a demoted server to be
//! noticed). The design and its reasons, refund marks and slot migration
//! included, are in the repository's `docs/redis.md`.
//!
//! # Deployments
//!
//! * **Where** ([`Target`]): one server ([`Target::server`]), a Cluster
//!   ([`Target::cluster`]; a slot being migrated is followed to the node
//!   importing it, key by key, so resharding does not reach the failure
//!   policy), or the master a set of Sentinels names
//!   ([`Target::sentinel`]; found again after a failover, with the failure
//!   policy deciding until the Sentinels promote a replica; a master that
//!   is down when the service starts is an outage too, followed once the
//!   Sentinels name one, while a name no Sentinel knows is a
//!   [`ConfigError::Target`]). Each has one address syntax
//!   ([`Target::parse`]: `redis://`, `redis+cluster://`,
//!   `redis+sentinel://…/master`), so a configuration file names any of
//!   them, and [`AnyLimiter`](weir_rate::AnyLimiter) holds the limiter
//!   whichever store the file picks.
//! * **One connection for several limiters**: limiters connected with
//!   clones of one `Target` share its multiplexed connection.
//! * **TLS** (feature `tls`): `rediss://` URLs, with a private certificate
//!   authority or client certificates through [`Target::tls`].
//! * **Authentication**: `redis://user:password@host/`. The least an ACL
//!   user needs is the prefix's keys and the commands the scripts run:
//!
//!   ```text
//!   ACL SETUSER weir on >password resetkeys ~<prefix>:* resetchannels -@all
//!       +evalsha +script|load +mget +set +setrange +time
//!   ```
//!
//!   plus `+cluster|slots +asking` on a Cluster and `+role` on a
//!   Sentinel-named master. `connect` proves it: it loads the scripts and
//!   runs one that calls each of these commands, reading and writing keys
//!   of the limiter's own shapes (`…}:probe`, which no limiter key is,
//!   gone a millisecond later). A wrong password, a user without these commands
//!   or without the prefix's keys (for reading and writing), or a
//!   certificate either side does not trust, or a plain `redis://`
//!   address whose server speaks only TLS, is a
//!   [`ConfigError::Rejected`] from `connect`, never a limiter that
//!   quietly decides by its failure policy. A permission taken away while
//!   the limiter serves (an ACL changed, a password rotated) is a
//!   [`StoreError::Refused`]: the failure
//!   policy answers, the log says the store refused the limiter with what
//!   it lacks (an error, not an outage's warning), and Redis decides again
//!   once the permission is back.
//! * **When the store fails**: the [`FailurePolicy`] decides, and the
//!   outage is logged (`tracing`): one warning naming the server and the
//!   policy when it starts, one line (with the calls that failed) once Redis
//!   has decided again for a second without failing.
//!
//! # What a restart forgets
//!
//! Redis keeps every count in memory. A server restarted without
//! persistence comes back empty: every key may spend its window or burst
//! again, so one restart can let through up to one more limit's worth per
//! key. To keep counts across restarts, run Redis with `appendonly yes`
//! and `appendfsync always` (nothing spent is forgotten);
//! `appendfsync everysec` forgets at most the last second's spending, and
//! RDB snapshots alone everything since the last one. A failover to a
//! replica forgets what had not yet been replicated (replication is
//! asynchronous), usually milliseconds of spending.
//!
//! # Items
//!
//! * [`RedisLimiter`], [`RedisLimiterBuilder`]: the limiter and its
//!   builder ([`RedisLimiter::builder`]).
//! * [`Target`]: a server, a Cluster or a Sentinel-named master, and the
//!   connection its clones share; [`Tls`] (feature `tls`): its
//!   certificates; [`cluster_slot`]: where a key lives in a Cluster.
//! * [`Redis`]: the store (its Redis keys: [`Redis::redis_keys`]).
//! * Re-exported from weir-store: [`FailurePolicy`], [`Batching`],
//!   [`PreAggregation`], [`Answer`], [`Source`], [`StoreError`],
//!   [`ConfigError`].
//!
//! # Example
//!
//! ```no_run
//! use std::num::NonZeroU32;
//! use std::time::Duration;
//! use weir_rate::{Gcra, Quota};
//! use weir_redis::{RedisLimiter, Target};
//!
//! # async fn demo() -> Result<(), weir_redis::ConfigError> {
//! let quota = Quota::per_minute(NonZeroU32::new(100).unwrap());
//! let limiter = RedisLimiter::builder(Gcra::new(quota))
//!     .prefix("api")
//!     .timeout(Duration::from_millis(50))
//!     .connect(Target::server("redis://127.0.0.1:6379/"))
//!     .await?;
//! let decision = limiter.check("customer-42").await;
//! if !decision.is_allowed() {
//!     // 429 with decision.headers("api")
//! }
//! # Ok(())
//! # }
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]

mod call;
mod handshake;
mod link;
mod params;
mod scripts;
mod slot;
mod spec;
mod store;
mod target;

pub use slot::cluster_slot;
#[cfg(feature = "tls")]
pub use spec::Tls;
pub use store::Redis;
pub use target::Target;
pub use weir_store::{
    Answer, Batching, ConfigError, FailurePolicy, Limit, MAX_LIMITS, PreAggregation, Source,
    StoreError, StoreTiers,
};
#[cfg(feature = "serde")]
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
pub use weir_store::{FailurePolicySpec, StoreLimits};

/// A rate limit kept on Redis: weir-store's limiter over the [`Redis`]
/// store. See [`StoreLimiter`](weir_store::StoreLimiter) for its methods.
pub type RedisLimiter = weir_store::StoreLimiter<Redis>;

/// Configures and connects a [`RedisLimiter`]: from
/// [`RedisLimiter::builder`]; see [`StoreLimiterBuilder`](weir_store::StoreLimiterBuilder).
pub type RedisLimiterBuilder = weir_store::StoreLimiterBuilder<Redis>;

/// The README's examples, run as doc tests so it cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
mod readme {}
