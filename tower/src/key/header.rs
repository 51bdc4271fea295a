//! [`HeaderKey`]: a request's key from a header, such as an API key.

use super::KeyExtractor;
use http::{HeaderName, Request};

/// Keys a request by the value of one header (an API key, a tenant id),
/// or finds no key when it is missing, empty, not visible ASCII, or longer
/// than [`MAX_LEN`](Self::MAX_LEN) bytes. Pair it with a fallback for
/// requests without the header ([`or`](Self::or)).
///
/// **A header a client writes is a key the client chooses.** Unless the
/// value is authenticated before this layer (the API key checked against
/// your store), a client that sends a new value with each request gets a
/// fresh limit each time, and the limit holds nothing back. Limit by the header only
/// behind authentication, or also limit the client's address in a layer
/// of its own (an outer per-IP limit caps whatever keys it invents).
///
/// ```
/// use http::{HeaderName, Request};
/// use std::net::SocketAddr;
/// use weir_tower::{HeaderKey, KeyExtractor, OrKey, PeerIp};
///
/// let by_api_key = HeaderKey::new(HeaderName::from_static("x-api-key"));
/// let request = Request::builder().header("x-api-key", "k-1").body(()).unwrap();
/// assert_eq!(by_api_key.extract(&request), Some("k-1".to_owned()));
/// assert_eq!(by_api_key.extract(&Request::new(())), None);
///
/// // The API key, else the client's address.
/// let key = HeaderKey::new(HeaderName::from_static("x-api-key")).or(PeerIp::new());
/// let mut anonymous = Request::new(());
/// anonymous.extensions_mut().insert("192.0.2.7:4000".parse::<SocketAddr>().unwrap());
/// assert_eq!(key.extract(&anonymous), Some(OrKey::Then("192.0.2.7".parse().unwrap())));
/// ```
#[derive(Debug, Clone)]
pub struct HeaderKey {
    name: HeaderName,
}

impl HeaderKey {
    /// The longest value kept as a key: longer ones are no key at all (a
    /// limiter's memory is per key).
    pub const MAX_LEN: usize = 256;

    /// Keys by the header `name`: a constant such as
    /// `HeaderName::from_static("x-api-key")` (checked when compiling in a
    /// `const`), or one parsed from configuration.
    pub fn new(name: HeaderName) -> Self {
        Self { name }
    }
}

impl<B> KeyExtractor<B> for HeaderKey {
    type Key = String;

    fn extract(&self, request: &Request<B>) -> Option<String> {
        let value = request.headers().get(&self.name)?.to_str().ok()?.trim();
        (!value.is_empty() && value.len() <= Self::MAX_LEN).then(|| value.to_owned())
    }
}
