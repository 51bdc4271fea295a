//! [`Or`]: one extractor, and another for the requests it finds no key
//! for, with keys that can never collide.

use super::KeyExtractor;
use http::Request;
use std::fmt;

/// The key of the first extractor that finds one (from `or` on an
/// extractor, [`HeaderKey::or`](crate::HeaderKey::or)).
///
/// ```
/// use http::Request;
/// use weir_tower::{HeaderKey, KeyExtractor, KeyFn};
///
/// let anonymous = KeyFn::new(|_: &Request<()>| Some("anonymous"));
/// let key = HeaderKey::new(http::HeaderName::from_static("x-api-key")).or(anonymous);
/// let request = Request::builder().header("x-api-key", "k-1").body(()).unwrap();
/// assert_eq!(key.extract(&request).unwrap().to_string(), "1:k-1");
/// assert_eq!(key.extract(&Request::new(())).unwrap().to_string(), "2:anonymous");
/// ```
#[derive(Debug, Clone)]
pub struct Or<A, B> {
    first: A,
    then: B,
}

impl<A, B> Or<A, B> {
    pub(crate) fn new(first: A, then: B) -> Self {
        Self { first, then }
    }
}

/// A key found by one of two extractors, tagged with which: an API key of
/// `10.0.0.1` and the address `10.0.0.1` are two keys, in process and in a
/// store alike (its `Display` form, a store's key, starts `1:` or `2:`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum OrKey<A, B> {
    /// The first extractor's key.
    First(A),
    /// The fallback's key.
    Then(B),
}

impl<A: fmt::Display, B: fmt::Display> fmt::Display for OrKey<A, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::First(a) => write!(f, "1:{a}"),
            Self::Then(b) => write!(f, "2:{b}"),
        }
    }
}

impl<R, A: KeyExtractor<R>, B: KeyExtractor<R>> KeyExtractor<R> for Or<A, B> {
    type Key = OrKey<A::Key, B::Key>;

    fn extract(&self, request: &Request<R>) -> Option<Self::Key> {
        match self.first.extract(request) {
            Some(key) => Some(OrKey::First(key)),
            None => self.then.extract(request).map(OrKey::Then),
        }
    }
}
