//! What every store-backed rate limiter of weir shares, written once:
//! weir-redis and weir-memcached implement [`Backend`] for their store and
//! get everything else here.
//!
//! A limit kept on a store answers the question weir-rate's in-process
//! limiters answer — may this key spend `cost` units now? — with the same
//! [`Quota`](weir_rate::Quota) and [`Decision`](weir_rate::Decision), but
//! every instance of a service draws from one limit. What that takes
//! beyond the store's own protocol is the same for every store, and lives
//! here.
//!
//! # The limiter
//!
//! * [`StoreLimiter`]: checks, charges, refunds and waits on a store,
//!   through weir-rate's seam traits too
//!   ([`CheckKeyAsync`](weir_rate::CheckKeyAsync),
//!   [`SettleKey`](weir_rate::SettleKey)), so tower layers work over it.
//! * [`StoreLimiterBuilder`] (from [`StoreLimiter::builder`]): limits, prefix, name,
//!   timeout, back-off, failure policy, batching, leases.
//! * [`StoreTiers`]: a limit per key, a limiter per tier on one prefix
//!   (weir-rate's [`Tier`](weir_rate::Tier) and [`TierOf`](weir_rate::TierOf)),
//!   each decision naming its tier.
//! * [`Answer`] and [`Source`]: a decision and who made it.
//! * Feature `serde`: `FailurePolicySpec` (the failure policy by name),
//!   `Limit::try_from_spec` (the limits of weir-rate's `spec::LimitsSpec`)
//!   and `StoreLimits` (a tier's limits, and its limiter's builder), for
//!   limits kept in a configuration file.
//! * [`StoreError`]: why the store could not decide; [`ConfigError`]: why
//!   a limiter could not be built.
//!
//! # A bad day
//!
//! * [`FailurePolicy`]: what callers get while the store is slow, down or
//!   failing. The default keeps the quota on each instance; no default
//!   switches a limit off. Every call has a deadline, and after a failure
//!   the store is skipped for a back-off, but for one probe call.
//! * Local overload is not a store failure: a caller that finds the
//!   batching queue full, or whose deadline passes while it waits behind
//!   this instance's own load, is shed ([`Source::Shed`]), whatever the
//!   policy, and the store is not taken for down.
//! * An outage is logged through `tracing`: once, as a warning, when the
//!   store stops answering (with the server and the policy in force), and
//!   once when it has answered again for a second without failing (with
//!   the number of calls that failed in between): a store that flaps,
//!   answering between stalls, is one outage, not a pair of lines a stall. A store that answers but refuses the
//!   limiter's calls ([`StoreError::Refused`]: credentials or permissions)
//!   is logged as an error saying so instead, since only a fix of its
//!   configuration ends it.
//!
//! # Throughput
//!
//! * [`Batching`]: concurrent callers' decisions share store calls, with
//!   each caller still answered by its own deadline.
//! * [`PreAggregation`]: hot keys answered from leases taken in blocks,
//!   within a stated error bound.
//!
//! # For store crates
//!
//! * [`Backend`]: connect, place keys ([`Placement`]: name, back-off cell,
//!   batching group), decide, charge, refund.
//! * [`Plan`]: what the builder settled for the store: limits, prefix,
//!   timeout.
//! * [`StoreAlgorithm`], [`Limit`], [`Kind`]: the algorithms a store can
//!   keep (GCRA, token bucket, fixed window, sliding window), taken from
//!   weir-rate's own values.
//!
//! # Testing
//!
//! * [`memory`] (feature `test-util`): a store in this process's memory
//!   that a test can fail, refuse, stall or slow down, one cell or all,
//!   on tokio's clock, so that code built on [`StoreLimiter`] is tested
//!   without a server.
//!
//! # Metrics
//!
//! With the `metrics` feature, through the
//! [`metrics`](https://docs.rs/metrics) facade (install the recorder
//! before the first request: handles are registered on first use):
//!
//! | metric | kind | labels |
//! |---|---|---|
//! | `weir_store_decisions_total` | counter | `limiter` (the limiter's [name](StoreLimiterBuilder::name)), `store` (`redis`, `memcached`), `source` ([`Source::label`]: `store`, `lease`, `fail_open`, `fail_closed`, `local`, `shed`), `allowed` (`true`, `false`) |
//! | `weir_store_call_seconds` | histogram | `limiter`, `store`: the time of each call to the store, answered or not |
//!
//! envoy's rate-limit service counts `failure_mode_allowed`: here, the
//! decisions from `fail_open` or `local` that allowed.

#![cfg_attr(docsrs, feature(doc_cfg))]

mod answer;
mod backend;
mod batch;
mod builder;
mod caller;
mod error;
mod failure;
mod health;
mod leases;
mod limit;
mod limiter;
#[cfg(feature = "test-util")]
#[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
pub mod memory;
mod retune;
#[cfg(feature = "serde")]
mod spec;
mod telemetry;
mod tiers;

pub use answer::{Answer, Source};
pub use backend::{Backend, Placement, Plan};
pub use batch::Batching;
pub use builder::{MAX_LIMITS, StoreLimiterBuilder};
pub use error::{ConfigError, StoreError};
pub use failure::FailurePolicy;
pub use leases::PreAggregation;
pub use limit::{Kind, Limit, StoreAlgorithm};
pub use limiter::StoreLimiter;
#[cfg(feature = "serde")]
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
pub use spec::{FailurePolicySpec, StoreLimits};
pub use tiers::StoreTiers;

/// The README's examples, run as doc tests so it cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
mod readme {}
