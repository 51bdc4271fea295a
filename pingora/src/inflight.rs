//! [`UpstreamInflight`]: a limit of requests in flight to each upstream.

use pingora::upstreams::peer::{HttpPeer, Peer};
use pingora::{BError, Error, ErrorType, Result};
use std::fmt;
use weir_limits::{ExactInflight, ExactInflightGuard};

/// At most `limit` requests in flight to each upstream address, counted
/// exactly ([`ExactInflight`]): memory grows with the upstreams that have
/// requests in flight, never with the clients.
///
/// Take a permit in `upstream_peer` once the peer is chosen and keep it in
/// the request's context: it is released when the context is dropped,
/// after `logging`, whether the request was answered, failed, or its
/// client hung up.
///
/// ```
/// use pingora::upstreams::peer::HttpPeer;
/// use weir_pingora::UpstreamInflight;
///
/// let per_origin = UpstreamInflight::new(1);
/// let peer = HttpPeer::new("127.0.0.1:8080", false, String::new());
/// let first = per_origin.acquire(&peer).unwrap();
/// assert!(per_origin.acquire(&peer).is_err(), "the second gets a 503");
/// drop(first);
/// assert_eq!(per_origin.in_flight(&peer), 0);
/// ```
#[derive(Debug, Clone)]
pub struct UpstreamInflight {
    table: ExactInflight,
    limit: usize,
}

/// A request counted in flight to its upstream until dropped.
#[derive(Debug)]
pub struct UpstreamPermit {
    _guard: ExactInflightGuard,
}

impl UpstreamInflight {
    /// At most `limit` requests in flight to each upstream (0 refuses all).
    pub fn new(limit: usize) -> Self {
        Self {
            table: ExactInflight::new(),
            limit,
        }
    }

    /// A permit for a request to `peer`.
    ///
    /// # Errors
    ///
    /// At the limit: pingora's `HTTPStatus(503)` error, which `upstream_peer`
    /// returns so that pingora answers 503 (or another peer is tried, if
    /// the caller picks one instead).
    pub fn acquire(&self, peer: &HttpPeer) -> Result<UpstreamPermit> {
        match self.table.try_enter(peer.address(), self.limit) {
            Some(guard) => Ok(UpstreamPermit { _guard: guard }),
            None => Err(UpstreamFull::error(
                "the upstream has as many requests in flight as its limit",
            )),
        }
    }

    /// Requests in flight to `peer`.
    pub fn in_flight(&self, peer: &HttpPeer) -> usize {
        self.table.get(peer.address())
    }
}

/// The cause of an upstream permit's 503, so that a settlement can tell a
/// request weir refused from one the upstream answered.
#[derive(Debug)]
pub(crate) struct UpstreamFull;

impl UpstreamFull {
    /// pingora's `HTTPStatus(503)` error explained by `why`.
    pub(crate) fn error(why: &'static str) -> BError {
        Error::because(ErrorType::HTTPStatus(503), why, Self)
    }
}

impl fmt::Display for UpstreamFull {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("refused by a weir upstream limit")
    }
}

impl std::error::Error for UpstreamFull {}
