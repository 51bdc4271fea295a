//! weir's limits inside a [pingora](https://docs.rs/pingora) proxy: the
//! calls a `ProxyHttp` makes from its filters, so that a weir limit sits in
//! front of an upstream without hand-written keys, refusals or guards.
//!
//! # Rate limits
//!
//! * [`RateLimit`]: any weir keyed limiter (in process, a sketch, or one
//!   kept on a store, through weir-rate's async seam), checked in
//!   `request_filter`: a refused request gets a 429 with `Retry-After` and
//!   the IETF `RateLimit-Policy` / `RateLimit` fields, on a connection that
//!   stays open; an allowed one carries the fields on its response
//!   (`response_filter`). [`Passage`] holds the decisions in the request's
//!   context between the two.
//! * Keys ([`RequestKey`]): the client's address ([`ClientIp`], by the same
//!   rule as weir's other integrations), the client trusted proxies report
//!   ([`ForwardedIp`], [`IpNet`], [`ForwardedHeader`]: weir-rate's shared
//!   parsing, as strict as weir-tower's), a header with a fallback
//!   ([`HeaderKey`], [`NoKey`]), or any `Fn(&Session) -> Option<String>`.
//! * Settling by the response ([`Settle`], [`Sent`]): a limit that charges
//!   by the bytes sent, by server errors only, or by a count the upstream
//!   reports in a header, settled in `logging` against the request's
//!   check.
//!
//! # Upstreams
//!
//! * [`UpstreamInflight`]: at most so many requests in flight to each
//!   upstream address, counted exactly in memory bounded by the requests in
//!   flight; the [`UpstreamPermit`] taken in `upstream_peer` is kept in the
//!   request's context and released when the context is dropped, after
//!   `logging` (a client that hangs up releases it too).
//! * [`UpstreamAdaptive`]: the same with each upstream's limit learned
//!   from its latency by a weir-adaptive algorithm; its [`AdaptivePermit`]
//!   is finished in `logging`, where the response's status, an upstream
//!   failure or a client gone says what the request teaches.

mod adaptive;
mod inflight;
mod key;
mod rate;
mod settle;

pub use adaptive::{AdaptivePermit, UpstreamAdaptive};
pub use inflight::{UpstreamInflight, UpstreamPermit};
pub use key::{ClientIp, ForwardedIp, HeaderKey, NoKey, RequestKey};
pub use rate::{Passage, RateLimit};
pub use settle::{Sent, Settle};
pub use weir_rate::client::{ForwardedHeader, IpNet};

/// The README's example, run as a doc test so it cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
mod readme {}
