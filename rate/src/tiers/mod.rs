//! A limit per key, from the key's tier: [`Tier`]s placed by a
//! [`TierOf`], checked together as a [`TierSet`], kept live (replaced
//! while serving) as [`LiveTiers`], and the containers that decide by
//! them: [`TieredLimiter`] (exact) and [`TieredSketch`] (fixed memory).
//! [`CachedTierOf`] puts a bounded cache in front of a slow lookup.

mod cached;
mod keyed;
mod live;
mod sketch;

pub use cached::CachedTierOf;
pub use keyed::TieredLimiter;
pub use live::{LiveTiers, TierTable};
pub use sketch::TieredSketch;

use crate::algorithm::Forgettable;
use crate::algorithms::{FixedWindow, Gcra, SlidingWindow};
use crate::config::ConfigError;
use crate::decision::Decision;
use crate::decision::policy::{Interned, intern};
use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hash};

/// An algorithm whose quota may differ from key to key in one container:
/// every quota of the same layout reads a key's state alike, and a key
/// turns idle (and is forgotten) at a time that does not depend on the
/// quota. GCRA (its state is one time), and fixed and sliding windows
/// (counts per window) are; a bucket is not (when it is full again depends
/// on its size), nor is the sliding log (it keeps as many times as the
/// limit).
pub trait PerKeyQuota: Forgettable + Clone + Send + Sync {
    /// Whether `other` reads this algorithm's states: the same windows and
    /// counters, whatever the quota.
    fn same_layout(&self, other: &Self) -> bool;
}

impl PerKeyQuota for Gcra {
    fn same_layout(&self, _: &Self) -> bool {
        true
    }
}

impl PerKeyQuota for FixedWindow {
    fn same_layout(&self, other: &Self) -> bool {
        self.quota().window() == other.quota().window()
    }
}

impl PerKeyQuota for SlidingWindow {
    fn same_layout(&self, other: &Self) -> bool {
        self.counters() == other.counters() && self.sub_window() == other.sub_window()
    }
}

impl<A: PerKeyQuota, B: PerKeyQuota> PerKeyQuota for (A, B) {
    fn same_layout(&self, other: &Self) -> bool {
        self.0.same_layout(&other.0) && self.1.same_layout(&other.1)
    }
}

/// One tier: a name (the policy name its decisions carry) and a limit, or
/// none for a tier without a limit.
///
/// ```
/// use weir_rate::{Gcra, Quota, Tier, nonzero};
///
/// let paid = Tier::limited("paid", Gcra::new(Quota::per_second(nonzero!(100))));
/// let internal = Tier::<Gcra>::unlimited("internal");
/// assert_eq!((paid.name(), internal.name()), ("paid", "internal"));
/// ```
#[derive(Debug, Clone)]
pub struct Tier<L> {
    name: &'static Interned,
    limit: Option<L>,
}

impl<L> Tier<L> {
    /// A tier called `name` whose keys are limited by `limit`. Its
    /// decisions name it by reference: each distinct tier name is kept for
    /// the life of the process (the names a configuration gives, not
    /// anything a client sends).
    pub fn limited(name: &str, limit: L) -> Self {
        Self {
            name: intern(name),
            limit: Some(limit),
        }
    }

    /// A tier called `name` whose keys are never limited (nor counted); its
    /// name kept as [`limited`](Self::limited)'s.
    pub fn unlimited(name: &str) -> Self {
        Self {
            name: intern(name),
            limit: None,
        }
    }

    /// The tier's name.
    pub fn name(&self) -> &str {
        self.name.as_str()
    }

    /// The tier's limit; `None` for an unlimited tier.
    pub fn limit(&self) -> Option<&L> {
        self.limit.as_ref()
    }

    /// `decision`, naming this tier as the policy that made it (see
    /// [`Decision::policy`]); the name is shared, not copied.
    #[inline]
    ///
    /// ```
    /// use weir_rate::{Decision, Gcra, Tier};
    ///
    /// let internal = Tier::<Gcra>::unlimited("internal");
    /// assert_eq!(internal.names(Decision::unlimited()).policy(), Some("internal"));
    /// ```
    pub fn names(&self, decision: Decision) -> Decision {
        decision.with_policy(self.name)
    }
}

/// Which tier a key is in: a closure of the key's text returning the
/// tier's name, a map from keys to tier names, or a lookup of the caller's
/// own. `None`, or a name
/// no tier has, is the default tier. Asked on every check: keep it cheap
/// (a lookup in memory, refreshed elsewhere).
///
/// ```
/// use std::collections::HashMap;
/// use weir_rate::TierOf;
///
/// let by_prefix = |key: &str| key.starts_with("pk_").then_some("paid");
/// assert_eq!(by_prefix.tier_of("pk_42"), Some("paid"));
///
/// let by_key = HashMap::from([("k-7".to_owned(), "abusive".to_owned())]);
/// assert_eq!(TierOf::<str>::tier_of(&by_key, "k-7"), Some("abusive"));
/// ```
pub trait TierOf<Q: ?Sized>: Send + Sync {
    /// The name of `key`'s tier, or `None` for the default one.
    fn tier_of<'a>(&'a self, key: &Q) -> Option<&'a str>;
}

/// A closure of a key's text, for keys that are text (`str`, `String`):
/// keys of other types take a map or a [`TierOf`] of their own.
impl<Q, F> TierOf<Q> for F
where
    Q: AsRef<str> + ?Sized,
    F: Fn(&str) -> Option<&'static str> + Send + Sync,
{
    fn tier_of<'a>(&'a self, key: &Q) -> Option<&'a str> {
        self(key.as_ref())
    }
}

impl<K, Q, S> TierOf<Q> for HashMap<K, String, S>
where
    K: Borrow<Q> + Hash + Eq + Send + Sync,
    Q: Hash + Eq + ?Sized,
    S: BuildHasher + Send + Sync,
{
    fn tier_of<'a>(&'a self, key: &Q) -> Option<&'a str> {
        self.get(key).map(String::as_str)
    }
}

/// Tiers checked together: names unique and not empty, the default among
/// them, at least one with a limit, and every limit of one layout (as
/// `same_layout` judges it against the first), so that a key's state reads
/// alike in every tier. What [`TieredLimiter`] and a store's tiers look
/// keys up in.
///
/// ```
/// use weir_rate::{Gcra, Quota, Tier, TierSet, nonzero};
///
/// let set = TierSet::try_new(
///     vec![
///         Tier::limited("free", Gcra::new(Quota::per_second(nonzero!(10)))),
///         Tier::unlimited("internal"),
///     ],
///     "free",
///     |_, _| true,
/// )?;
/// assert_eq!(set.tier(Some("internal")).name(), "internal");
/// assert_eq!(set.tier(Some("no-such-tier")).name(), "free");
/// assert_eq!(set.tier(None).name(), "free");
/// # Ok::<(), weir_rate::ConfigError>(())
/// ```
#[derive(Debug, Clone)]
pub struct TierSet<L> {
    tiers: Vec<Tier<L>>,
    by_name: HashMap<&'static str, usize>,
    default: usize,
    /// The first tier's limit: the layout of them all.
    layout: L,
}

impl<L: Clone> TierSet<L> {
    /// `tiers` with the one called `default` for keys in no tier (or in one
    /// the set lacks).
    ///
    /// # Errors
    ///
    /// [`ConfigError::Tiers`] when no tier has a limit, a tier has no name,
    /// two share a name, `default` names none, or a limit is not of the
    /// first limit's layout by `same_layout`.
    pub fn try_new(
        tiers: Vec<Tier<L>>,
        default: &str,
        same_layout: impl Fn(&L, &L) -> bool,
    ) -> Result<Self, ConfigError> {
        let layout = tiers
            .iter()
            .find_map(|t| t.limit.clone())
            .ok_or(ConfigError::Tiers("no tier with a limit"))?;
        let mut by_name = HashMap::with_capacity(tiers.len());
        for (i, tier) in tiers.iter().enumerate() {
            if tier.name().is_empty() {
                return Err(ConfigError::Tiers("a tier without a name"));
            }
            if by_name.insert(tier.name.as_str(), i).is_some() {
                return Err(ConfigError::Tiers("two tiers of one name"));
            }
            if tier
                .limit
                .as_ref()
                .is_some_and(|l| !same_layout(&layout, l))
            {
                return Err(ConfigError::Tiers(
                    "tiers whose limits cannot share a key's state (other windows or counters, or on a store another prefix)",
                ));
            }
        }
        let default = *by_name.get(default).ok_or(ConfigError::Tiers(
            "the default tier is not among the tiers",
        ))?;
        Ok(Self {
            tiers,
            by_name,
            default,
            layout,
        })
    }
}

impl<L> TierSet<L> {
    /// The tier called `name`; the default for `None` or a name no tier
    /// has.
    pub fn tier(&self, name: Option<&str>) -> &Tier<L> {
        let place = name.and_then(|n| self.by_name.get(n)).copied();
        &self.tiers[place.unwrap_or(self.default)]
    }

    /// The tier called `name`, if the set has one.
    pub fn named(&self, name: &str) -> Option<&Tier<L>> {
        self.by_name.get(name).map(|&i| &self.tiers[i])
    }

    /// The tiers, in their order.
    pub fn tiers(&self) -> &[Tier<L>] {
        &self.tiers
    }

    /// The first limit: every limit of the set has its layout.
    pub fn layout(&self) -> &L {
        &self.layout
    }
}
