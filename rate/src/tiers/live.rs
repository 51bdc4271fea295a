//! [`LiveTiers`]: the tiers in force and the resolver that places keys in
//! them, replaced whole while serving.

use super::{Tier, TierOf, TierSet};
use crate::config::ConfigError;
use std::sync::Arc;
use weir_primitives::sync::RwLock;

/// The tiers and the resolver in force at one moment: what one check
/// reads, whole, however the tiers change meanwhile.
#[derive(Debug)]
pub struct TierTable<L, R> {
    set: TierSet<L>,
    resolver: Arc<R>,
}

impl<L, R> TierTable<L, R> {
    /// The tier of `key`, as the resolver places it (the default for a key
    /// in none, or in a tier the set lacks).
    #[inline]
    pub fn tier_of<Q: ?Sized>(&self, key: &Q) -> &Tier<L>
    where
        R: TierOf<Q>,
    {
        self.set.tier(self.resolver.tier_of(key))
    }

    /// The tiers.
    pub fn set(&self) -> &TierSet<L> {
        &self.set
    }
}

/// Tiers and the resolver that places keys in them, for a container of
/// per-key limits to read on every check and replace while serving:
/// [`TieredLimiter`](super::TieredLimiter),
/// [`TieredSketch`](super::TieredSketch) and weir-store's `StoreTiers`
/// each keep one.
///
/// Every change is checked first (as [`TierSet::try_new`] checks, and of
/// the layout of the tiers in force, so that each key's spent state reads
/// alike after it), then swapped in whole: a check sees the table before
/// a change or after it, never tiers of one and a resolver of the other.
///
/// ```
/// use std::collections::HashMap;
/// use weir_rate::{Gcra, LiveTiers, PerKeyQuota, Quota, Tier, nonzero};
///
/// let per_second = |n| Gcra::new(Quota::per_second(n));
/// let live = LiveTiers::try_new(
///     vec![Tier::limited("free", per_second(nonzero!(10)))],
///     "free",
///     HashMap::from([("k-1".to_owned(), "paid".to_owned())]),
///     Gcra::same_layout,
/// )?;
/// // "paid" is not a tier yet: k-1 is free.
/// assert_eq!(live.now().tier_of("k-1").name(), "free");
/// live.set_tiers(
///     vec![Tier::limited("free", per_second(nonzero!(10))), Tier::unlimited("paid")],
///     "free",
/// )?;
/// assert_eq!(live.now().tier_of("k-1").name(), "paid");
/// # Ok::<(), weir_rate::ConfigError>(())
/// ```
pub struct LiveTiers<L, R> {
    table: RwLock<Arc<TierTable<L, R>>>,
    same_layout: fn(&L, &L) -> bool,
}

impl<L, R> std::fmt::Debug for LiveTiers<L, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveTiers")
            .field("tiers", &self.names())
            .finish_non_exhaustive()
    }
}

impl<L: Clone, R> LiveTiers<L, R> {
    /// `tiers`, keys in none of them (or in one `resolver` names but
    /// `tiers` lacks) in the one called `default`; `same_layout` judges
    /// whether two limits read a key's state alike.
    ///
    /// # Errors
    ///
    /// As [`TierSet::try_new`].
    pub fn try_new(
        tiers: Vec<Tier<L>>,
        default: &str,
        resolver: R,
        same_layout: fn(&L, &L) -> bool,
    ) -> Result<Self, ConfigError> {
        let set = TierSet::try_new(tiers, default, same_layout)?;
        Ok(Self {
            table: RwLock::new(Arc::new(TierTable {
                set,
                resolver: Arc::new(resolver),
            })),
            same_layout,
        })
    }

    /// The tiers and the resolver in force now.
    #[inline]
    pub fn now(&self) -> Arc<TierTable<L, R>> {
        Arc::clone(&self.table.read())
    }

    /// Replace the tiers, keeping the resolver.
    ///
    /// # Errors
    ///
    /// As [`try_new`](Self::try_new), and [`ConfigError::Tiers`] for
    /// limits of another layout than the tiers in force; nothing changes
    /// then.
    pub fn set_tiers(&self, tiers: Vec<Tier<L>>, default: &str) -> Result<(), ConfigError> {
        let set = self.checked(tiers, default)?;
        let mut table = self.table.write();
        *table = Arc::new(TierTable {
            set,
            resolver: Arc::clone(&table.resolver),
        });
        Ok(())
    }

    /// Place keys by `resolver` from now on.
    pub fn set_resolver(&self, resolver: R) {
        let mut table = self.table.write();
        *table = Arc::new(TierTable {
            set: table.set.clone(),
            resolver: Arc::new(resolver),
        });
    }

    /// Replace the tiers and the resolver together.
    ///
    /// # Errors
    ///
    /// As [`set_tiers`](Self::set_tiers); nothing changes then.
    pub fn replace(
        &self,
        tiers: Vec<Tier<L>>,
        default: &str,
        resolver: R,
    ) -> Result<(), ConfigError> {
        let set = self.checked(tiers, default)?;
        *self.table.write() = Arc::new(TierTable {
            set,
            resolver: Arc::new(resolver),
        });
        Ok(())
    }

    /// `tiers` checked, and of the layout of the tiers in force.
    fn checked(&self, tiers: Vec<Tier<L>>, default: &str) -> Result<TierSet<L>, ConfigError> {
        let set = TierSet::try_new(tiers, default, self.same_layout)?;
        if !(self.same_layout)(self.now().set.layout(), set.layout()) {
            return Err(ConfigError::Tiers(
                "new tiers of another layout than the tiers in force: a key's state must read alike",
            ));
        }
        Ok(set)
    }
}

impl<L, R> LiveTiers<L, R> {
    /// The names of the tiers in force, in their order.
    pub fn names(&self) -> Vec<String> {
        let table = self.table.read();
        table
            .set
            .tiers()
            .iter()
            .map(|t| t.name().to_owned())
            .collect()
    }
}
