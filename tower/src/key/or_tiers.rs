//! [`OrKeyTiers`]: tiers for the keys of an [`Or`](super::Or) extractor.

use super::or::OrKey;
use weir_rate::TierOf;

/// The tier of an [`OrKey`]: a key the first extractor found (an API key)
/// placed by `first`, a key of the fallback (a client's address) in one
/// tier for all of them, or the default's.
///
/// ```
/// use std::collections::HashMap;
/// use std::net::IpAddr;
/// use weir_rate::TierOf;
/// use weir_tower::{OrKey, OrKeyTiers};
///
/// let directory = HashMap::from([("pk_1".to_owned(), "paid".to_owned())]);
/// let tiers = OrKeyTiers::new(directory).fallback_tier("anonymous");
/// let api_key: OrKey<String, IpAddr> = OrKey::First("pk_1".to_owned());
/// let address: OrKey<String, IpAddr> = OrKey::Then("192.0.2.7".parse().unwrap());
/// assert_eq!(tiers.tier_of(&api_key), Some("paid"));
/// assert_eq!(tiers.tier_of(&address), Some("anonymous"));
/// ```
#[derive(Debug, Clone)]
pub struct OrKeyTiers<R> {
    first: R,
    fallback: Option<Box<str>>,
}

impl<R> OrKeyTiers<R> {
    /// First keys placed by `first` (a map, a closure of the key's text, a
    /// [`CachedTierOf`](weir_rate::CachedTierOf)); fallback keys in the
    /// default tier.
    pub fn new(first: R) -> Self {
        Self {
            first,
            fallback: None,
        }
    }

    /// Every fallback key in the tier called `name` (the default tier if
    /// the limiter has none of that name).
    pub fn fallback_tier(mut self, name: &str) -> Self {
        self.fallback = Some(name.into());
        self
    }
}

impl<A, B, R> TierOf<OrKey<A, B>> for OrKeyTiers<R>
where
    R: TierOf<A>,
{
    fn tier_of<'a>(&'a self, key: &OrKey<A, B>) -> Option<&'a str> {
        match key {
            OrKey::First(first) => self.first.tier_of(first),
            OrKey::Then(_) => self.fallback.as_deref(),
        }
    }
}
