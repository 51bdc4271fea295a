//! HTTP middleware: tower layers that put weir's limits in front of a
//! service (feature `tower`).
//!
//! * [`RateLimitLayer`] — a rate limit per key: 429 (or 503) with
//!   `Retry-After` when denied, the IETF `RateLimit-Policy` / `RateLimit`
//!   fields on every response, cost-weighted requests, shadow mode, and
//!   charging by the response ([`Settle`]: bytes sent, 5xx only, tokens
//!   in a header or a [`Usage`]) settled when the body ends or is dropped.
//! * [`InflightLayer`] — at most N requests per key in progress, 503 beyond
//!   (pingora's per-origin connection limit), counted exactly per key.
//! * [`AdaptiveInflightLayer`] — the same, with each key's limit learned
//!   from latency by an [`adaptive`](crate::adaptive) algorithm.
//! * Key extractors decide whom a request is counted for: [`PeerIp`] (the
//!   default), [`ForwardedIp`] (only behind proxies you trust), [`KeyFn`],
//!   [`GlobalKey`]. Both IP extractors key an IPv6 client by its /64
//!   (configurable), since one subscriber can rotate through a whole /64,
//!   and treat IPv4-mapped addresses from dual-stack listeners as IPv4.
//!   They find the peer in a [`PeerAddr`] or `SocketAddr` request
//!   extension, and with the `axum` feature in axum's
//!   `ConnectInfo<SocketAddr>`, which
//!   `into_make_service_with_connect_info::<SocketAddr>()` inserts.
//! * A request without a key (no peer address found, a [`KeyFn`] that says
//!   `None`) is refused without calling the service: 500 by default (see
//!   `missing_key_status` on each layer), a header naming the cause, and
//!   one `tracing` warning per layer saying what the server lacks.
//!
//! The layers are generic over the request and response body types; refusals
//! carry an empty body (`ResBody: Default`, which axum's and hyper's body
//! types implement).
//!
//! With axum, apply both layers in one `Router::layer` call through a
//! `tower::ServiceBuilder`: axum boxes and clones a route's service once per
//! `layer` call on every request, so composing first saves that work. What
//! each layer costs a request is in the benchmark report's HTTP section
//! (`cargo xtask bench --only http`).

mod adaptive;
mod body;
mod inflight;
mod key;
mod ratelimit;
mod response;
mod settle;

pub use adaptive::{
    AdaptiveBody, AdaptiveFuture, AdaptiveInflightLayer, AdaptiveInflightService, overload_status,
};
pub use body::CountedBody;
pub use inflight::{InflightBody, InflightFuture, InflightLayer, InflightPermit, InflightService};
pub use key::{
    ClientKey, ForwardedHeader, ForwardedIp, GlobalKey, IpNet, IpNetParseError, KeyExtractor,
    KeyFn, PeerAddr, PeerIp,
};
pub use ratelimit::{RateLimitFuture, RateLimitLayer, RateLimitService};
pub use settle::{Sent, Settle, SettleBody, SettleGuard, Usage};
