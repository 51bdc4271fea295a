//! Tower and axum layers that put weir's limits in front of a service.
//!
//! The layers ask their limits only through weir-rate's seam traits
//! ([`CheckKeyAsync`](weir_rate::CheckKeyAsync),
//! [`SettleKey`](weir_rate::SettleKey)), so every keyed limiter works
//! behind them: weir-rate's in-process limiters and those kept on a shared
//! store (weir-redis).
//!
//! # Layers
//!
//! * [`RateLimitLayer`]: a rate limit per key; 429 (or 503) with
//!   `Retry-After` when denied, the IETF `RateLimit-Policy` / `RateLimit`
//!   fields on every response, cost-weighted requests, shadow mode, and
//!   charging by the response ([`Settle`]: bytes sent, 5xx only, tokens in
//!   a header or a [`Usage`]), settled when the body ends or is dropped
//!   ([`SettleBody`], [`SettleGuard`], [`Sent`]).
//! * [`InflightLayer`]: at most N requests per key in progress, 503 beyond
//!   (pingora's per-origin connection limit), counted exactly per key
//!   ([`InflightBody`], [`InflightPermit`]).
//! * [`AdaptiveInflightLayer`]: the same, with the limit learned from
//!   latency by a weir-adaptive algorithm, one for the whole service
//!   ([`shared`](AdaptiveInflightLayer::shared)) or one per key
//!   ([`AdaptiveBody`]; responses classified by [`classify_status`]).
//!
//! Each layer's service and future ([`RateLimitService`],
//! [`RateLimitFuture`], ...) are named for use in type signatures, with
//! what a request costs ([`Cost`]; [`UnitCost`] without a cost function);
//! the response body of every layer is a [`CountedBody`].
//!
//! # Keys
//!
//! A [`KeyExtractor`] decides whom a request is counted for:
//!
//! * [`PeerIp`] (the default): the connection's peer, found in a
//!   [`PeerAddr`] or `SocketAddr` request extension, or with the `axum`
//!   feature in axum's `ConnectInfo<SocketAddr>`, which
//!   `into_make_service_with_connect_info::<SocketAddr>()` inserts.
//! * [`ForwardedIp`]: the client named by `X-Forwarded-For` or RFC 7239
//!   `Forwarded` ([`ForwardedHeader`]), read from the right and only past
//!   proxies you trust ([`IpNet`]); its key is a [`ClientKey`].
//! * [`HeaderKey`]: a header's value, such as an API key (a client can
//!   send a new one with each request: see its docs for what to pair it
//!   with).
//! * [`KeyFn`]: any function of the request; [`GlobalKey`]: one key for
//!   all.
//! * `or` on each of them ([`HeaderKey::or`]): one extractor, else
//!   another ("the API key, else the address"), their keys tagged apart
//!   ([`Or`], [`OrKey`]); [`OrKeyTiers`] places such keys in tiers (the
//!   API keys by a directory, the addresses in one tier).
//!
//! Every key type but [`GlobalKey`]'s implements `Display`, so a store's
//! limiter (weir-redis, weir-memcached) takes it as it is.
//!
//! Both IP extractors key an IPv6 client by its /64 (configurable), since
//! one subscriber can rotate through a whole /64, and treat IPv4-mapped
//! addresses from dual-stack listeners as IPv4. A request without a key
//! (no peer address found, a [`KeyFn`] that says `None`) is refused
//! without calling the service: 500 by default (see `missing_key_status`
//! on each layer), a header naming the cause, and one `tracing` warning per
//! layer saying what the server lacks.
//!
//! The layers are generic over the request and response body types;
//! refusals carry an empty body (`ResBody: Default`, which axum's and
//! hyper's body types implement). With axum, apply several layers in one
//! `Router::layer` call through a `tower::ServiceBuilder`: axum boxes and
//! clones a route's service once per `layer` call on every request, so
//! composing first saves that work.
//!
//! # Several limits on one route
//!
//! Limits that share a key and a cost belong in **one layer over an
//! all-or-nothing set**: a tuple or [`AllOf`](weir_rate::AllOf) in
//! process, `.and(...)` on a store's builder. A request spends from every
//! limit or from none, and each limit is its own item of the
//! `RateLimit-Policy` and `RateLimit` fields (`"api-1s"`, `"api-1d"`), so
//! a client sees every quota it is under.
//!
//! Limits with different keys or costs (per address and per API key;
//! requests and bytes) are **layers stacked**, the outer one checked
//! first. Put the broadest limit outside: a per-address limit outside a
//! per-header one caps what a client gains by inventing header values.
//! When an inner weir layer refuses, an outer layer that settles (any
//! [`Settle`] rule, [`Settle::admitted`] to keep the check's cost) gives
//! back what it spent, and so it does when the client hangs up before the
//! request got past the layers inside (during a check's round trip to a
//! store, its own included): its limit is spent by exactly the requests
//! that reached the service. A plain outer layer keeps what it spent,
//! because it holds neither key nor decision past its check.
//!
//! ```
//! use std::net::IpAddr;
//! use weir_rate::{nonzero, FixedWindow, Gcra, KeyedLimiter, Quota};
//! use weir_tower::{HeaderKey, OrKey, PeerIp, RateLimitLayer, Settle};
//!
//! // 10 a second (bursts of 20) and 1000 a day per API key, all or nothing.
//! let per_key = KeyedLimiter::<OrKey<String, IpAddr>, _>::new((
//!     Gcra::new(Quota::per_second(nonzero!(10)).allow_burst(nonzero!(20))),
//!     FixedWindow::new(Quota::per_day(nonzero!(1000))),
//! ));
//! let api_key = HeaderKey::new(http::HeaderName::from_static("x-api-key")).or(PeerIp::new());
//! // Outside it, 100 a second per address, given back when the inner one refuses.
//! let per_ip = KeyedLimiter::<IpAddr, _>::new(Gcra::new(Quota::per_second(nonzero!(100))));
//! let layers = tower::ServiceBuilder::new()
//!     .layer(RateLimitLayer::new(per_ip, PeerIp::new()).policy_name("ip").settle(Settle::admitted()))
//!     .layer(RateLimitLayer::new(per_key, api_key).policy_name("api"));
//! # let _ = layers;
//! ```
//!
//! # Metrics
//!
//! With the `metrics` feature the layers count through the
//! [`metrics`](https://docs.rs/metrics) facade (install a recorder, an
//! exporter, before the first request: handles are registered on first
//! use):
//!
//! | metric | kind | labels |
//! |---|---|---|
//! | `weir_rate_decisions_total` | counter | `limiter` (the layer's policy name), `outcome`: `ok`, `over_limit`, `shadow_over_limit`, `error` (no key, or a cost never allowed) |
//! | `weir_rate_settlements_total` | counter | `limiter` (the layer's policy name), `outcome`: `refund`, `charge`, `error` (the settlement failed: the key keeps what its check charged) |
//! | `weir_adaptive_requests_total` | counter | `limiter` (the adaptive layer's [name](AdaptiveInflightLayer::name)), `outcome`: `admitted`, `rejected` |
//! | `weir_adaptive_limit` | gauge | `limiter`: a [shared](AdaptiveInflightLayer::shared) limit, as of the last request |
//! | `weir_adaptive_in_flight` | gauge | `limiter`: a shared limit's requests in flight, as of the last request |
//! | `weir_adaptive_no_load_seconds` | gauge | `limiter`: a shared limit's no-load latency estimate |
//!
//! A per-key adaptive layer exports its counts only: its limits are per
//! key (read them with [`keyed_limiter`](AdaptiveInflightLayer::keyed_limiter)).
//!
//! The rate-limit outcomes are envoy's rate-limit filter's; the adaptive
//! gauges are what envoy's adaptive concurrency filter exports.

mod adaptive;
mod body;
mod inflight;
mod key;
mod ratelimit;
mod response;
mod settle;
mod telemetry;

pub use adaptive::{
    AdaptiveBody, AdaptiveFuture, AdaptiveInflightLayer, AdaptiveInflightService, classify_status,
};
pub use body::CountedBody;
pub use inflight::{InflightBody, InflightFuture, InflightLayer, InflightPermit, InflightService};
pub use key::{
    ClientKey, ForwardedHeader, ForwardedIp, GlobalKey, HeaderKey, IpNet, IpNetParseError,
    KeyExtractor, KeyFn, Or, OrKey, OrKeyTiers, PeerAddr, PeerIp,
};
pub use ratelimit::{Cost, RateLimitFuture, RateLimitLayer, RateLimitService, UnitCost};
pub use settle::{Sent, Settle, SettleBody, SettleGuard, Usage};

/// The README's examples, run as doc tests so it cannot drift from the API.
#[cfg(all(doctest, feature = "axum"))]
#[doc = include_str!("../README.md")]
mod readme {}
