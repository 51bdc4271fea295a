//! Which client a request belongs to: the key a limiter counts it under.
//!
//! The default is the peer's IP address. Forwarded headers are trusted only
//! when the peer itself is one of the proxies the operator says it trusts:
//! anyone can write `X-Forwarded-For`, so reading it from an untrusted peer
//! would let every client pick its own key and escape its limit.

mod forwarded;
mod header;
mod or;
mod or_tiers;
mod peer;

pub use forwarded::ForwardedIp;
pub use header::HeaderKey;
pub use or::{Or, OrKey};
pub use or_tiers::OrKeyTiers;
pub use peer::{PeerAddr, PeerIp};
pub use weir_rate::client::{ClientKey, ForwardedHeader};
pub use weir_rate::client::{IpNet, IpNetParseError};

use http::Request;
use std::hash::Hash;

/// Extracts the key a request is limited under.
///
/// ```
/// use http::Request;
/// use weir_tower::{KeyExtractor, KeyFn};
///
/// let by_api_key = KeyFn::new(|req: &Request<()>| {
///     req.headers().get("x-api-key").and_then(|v| v.to_str().ok()).map(str::to_owned)
/// });
/// let req = Request::builder().header("x-api-key", "k-1").body(()).unwrap();
/// assert_eq!(by_api_key.extract(&req), Some("k-1".to_string()));
/// ```
pub trait KeyExtractor<B>: Clone + Send + Sync + 'static {
    /// The key type.
    type Key: Hash + Eq + Clone + Send + Sync + 'static;

    /// The request's key, or `None` if it cannot be determined. The layers
    /// then refuse the request without calling the service (500 unless set
    /// otherwise, naming the cause in a header, and logged once through
    /// `tracing`): a server that cannot tell clients apart is misconfigured,
    /// and letting such requests through unlimited would hide it.
    fn extract(&self, request: &Request<B>) -> Option<Self::Key>;
}

/// Gives extractors an inherent `or` (a trait method would leave the
/// request body type to annotate at every call).
macro_rules! with_fallback {
    ($($ty:ident $(<$p:ident>)?),*) => {$(
        impl$(<$p>)? $ty$(<$p>)? {
            /// This extractor's key, or `fallback`'s for the requests this
            /// one finds none for ("the API key, else the address"), the
            /// two kinds of keys tagged apart ([`OrKey`]).
            pub fn or<F>(self, fallback: F) -> Or<Self, F> {
                Or::new(self, fallback)
            }
        }
    )*};
}

with_fallback!(HeaderKey, PeerIp, ForwardedIp, KeyFn<T>);

/// Keys requests with a closure.
///
/// ```
/// use http::Request;
/// use weir_tower::{KeyExtractor, KeyFn};
///
/// let by_tenant = KeyFn::new(|req: &Request<()>| req.uri().path().split('/').nth(1).map(str::to_owned));
/// let req = Request::builder().uri("/acme/orders").body(()).unwrap();
/// assert_eq!(by_tenant.extract(&req), Some("acme".to_string()));
/// ```
#[derive(Clone)]
pub struct KeyFn<F>(F);

impl<F> KeyFn<F> {
    /// Wrap `f`, which returns the request's key or `None`. A panic in `f`
    /// reaches the caller (hyper drops the connection) before anything is
    /// checked or spent.
    pub fn new(f: F) -> Self {
        Self(f)
    }
}

impl<F> std::fmt::Debug for KeyFn<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeyFn")
    }
}

impl<B, K, F> KeyExtractor<B> for KeyFn<F>
where
    F: Fn(&Request<B>) -> Option<K> + Clone + Send + Sync + 'static,
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    type Key = K;

    fn extract(&self, request: &Request<B>) -> Option<K> {
        (self.0)(request)
    }
}

/// One key for every request: a global limit.
///
/// ```
/// use http::Request;
/// use weir_tower::{GlobalKey, KeyExtractor};
///
/// let req = Request::builder().body(()).unwrap();
/// assert_eq!(KeyExtractor::<()>::extract(&GlobalKey, &req), Some(()));
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct GlobalKey;

impl<B> KeyExtractor<B> for GlobalKey {
    type Key = ();

    fn extract(&self, _: &Request<B>) -> Option<()> {
        Some(())
    }
}

#[cfg(test)]
mod tests;
