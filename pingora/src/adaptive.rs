//! [`UpstreamAdaptive`]: a concurrency limit per upstream learned from its
//! latency (weir-adaptive), with the permit's outcome read from how the
//! request ended.

use crate::inflight::UpstreamFull;
use pingora::proxy::Session;
use pingora::upstreams::peer::{HttpPeer, Peer};
use pingora::{Error, ErrorSource, Result};
use std::sync::Arc;
use weir_adaptive::clock::{Clock, MonotonicClock};
use weir_adaptive::{AdaptiveGuard, Algorithm, KeyedAdaptiveLimiter, Outcome};

/// A learned concurrency limit per upstream address: each upstream's own
/// weir-adaptive algorithm (Gradient2, Vegas, AIMD) in bounded memory
/// ([`KeyedAdaptiveLimiter`]). Clones share the limits.
///
/// Take a permit in `upstream_peer` once the peer is chosen, keep it in the
/// request's context, and [`finish`](AdaptivePermit::finish) it in
/// `logging`: the request's latency and its outcome teach the upstream's
/// algorithm.
///
/// ```
/// use std::num::NonZeroUsize;
/// use pingora::upstreams::peer::HttpPeer;
/// use weir_adaptive::{Gradient2, KeyedAdaptiveLimiter};
/// use weir_pingora::UpstreamAdaptive;
///
/// let per_origin = UpstreamAdaptive::new(KeyedAdaptiveLimiter::new(
///     Gradient2::default(),
///     NonZeroUsize::new(1024).unwrap(),
/// ));
/// let peer = HttpPeer::new("127.0.0.1:8080", false, String::new());
/// let permit = per_origin.acquire(&peer).unwrap();
/// assert_eq!(per_origin.in_flight(&peer), 1);
/// drop(permit);
/// ```
pub struct UpstreamAdaptive<A, C = MonotonicClock> {
    limiter: Arc<KeyedAdaptiveLimiter<A, C>>,
}

impl<A, C> Clone for UpstreamAdaptive<A, C> {
    fn clone(&self) -> Self {
        Self {
            limiter: Arc::clone(&self.limiter),
        }
    }
}

/// A request admitted to its upstream by an [`UpstreamAdaptive`], in flight
/// until dropped.
#[must_use = "dropping the permit before `finish` reports a drop"]
pub struct AdaptivePermit<A: Algorithm, C: Clock = MonotonicClock> {
    guard: AdaptiveGuard<A, C>,
}

impl<A: Algorithm + Clone, C: Clock + Clone> UpstreamAdaptive<A, C> {
    /// One learned limit per upstream address, kept by `limiter`.
    pub fn new(limiter: KeyedAdaptiveLimiter<A, C>) -> Self {
        Self {
            limiter: Arc::new(limiter),
        }
    }

    /// A permit for a request to `peer`.
    ///
    /// # Errors
    ///
    /// At the upstream's learned limit: pingora's `HTTPStatus(503)` error,
    /// which `upstream_peer` returns so that pingora answers 503 (or the
    /// caller tries another peer).
    pub fn acquire(&self, peer: &HttpPeer) -> Result<AdaptivePermit<A, C>> {
        match self.limiter.try_acquire(peer.address()) {
            Ok(guard) => Ok(AdaptivePermit { guard }),
            Err(_) => Err(UpstreamFull::error(
                "the upstream has as many requests in flight as its learned limit",
            )),
        }
    }

    /// Requests in flight to `peer`.
    pub fn in_flight(&self, peer: &HttpPeer) -> u32 {
        self.limiter.in_flight(peer.address())
    }

    /// The learned limit of `peer`, once it has been used.
    pub fn limit(&self, peer: &HttpPeer) -> Option<u32> {
        self.limiter.limit(peer.address())
    }
}

impl<A: Algorithm, C: Clock> AdaptivePermit<A, C> {
    /// Report how the request ended, from `logging`'s session and error,
    /// and release the permit: the response's status classified as
    /// weir-adaptive's [`Outcome::of_status`] does (502, 503, 504 a drop;
    /// other server errors and 429 nothing; the rest a success); an
    /// upstream error (refused, reset, timed out) a drop; a client that
    /// hung up, or an error of the proxy itself, teaches nothing.
    pub fn finish(mut self, session: &Session, error: Option<&Error>) {
        self.guard.record(outcome(session, error));
    }
}

/// How a request ended, for the upstream's algorithm.
fn outcome(session: &Session, error: Option<&Error>) -> Outcome {
    match error.map(|e| &e.esource) {
        Some(ErrorSource::Upstream) => Outcome::Dropped,
        Some(_) => Outcome::Ignored,
        None => session
            .response_written()
            .map_or(Outcome::Ignored, |r| Outcome::of_status(r.status.as_u16())),
    }
}
