//! [`StoreTiers`]: a limit per key on a store, a limiter per tier.

use crate::backend::Backend;
use crate::error::ConfigError;
use crate::limiter::StoreLimiter;
use crate::retune::same_layout;
use std::collections::HashMap;
use std::fmt;
use std::future::{Future, ready};
use std::pin::Pin;
use std::sync::Arc;
use weir_primitives::sync::RwLock;
use weir_rate::{CheckKeyAsync, Decision, NeverAllowed, SettleKey, Tier, TierOf};

use crate::error::StoreError;

/// The tiers as checked: by name, with the default's place.
struct Table<B: Backend> {
    tiers: Vec<Tier<StoreLimiter<B>>>,
    by_name: HashMap<Arc<str>, usize>,
    default: usize,
}

impl<B: Backend> Table<B> {
    fn new(tiers: Vec<Tier<StoreLimiter<B>>>, default: &str) -> Result<Self, ConfigError> {
        let first = tiers
            .iter()
            .find_map(Tier::limit)
            .ok_or(ConfigError::Invalid("no tier with a limit"))?;
        let layout = first.inner.tuned.read().limits.clone();
        let mut by_name = HashMap::with_capacity(tiers.len());
        for (i, tier) in tiers.iter().enumerate() {
            if tier.name().is_empty() {
                return Err(ConfigError::Invalid("a tier without a name"));
            }
            if by_name.insert(Arc::from(tier.name()), i).is_some() {
                return Err(ConfigError::Invalid("two tiers of one name"));
            }
            if let Some(limiter) = tier.limit() {
                if limiter.prefix() != first.prefix() {
                    return Err(ConfigError::Invalid(
                        "tiers on different key prefixes: a key's state must be one for every tier",
                    ));
                }
                same_layout(&layout, &limiter.inner.tuned.read().limits).map_err(|_| {
                    ConfigError::Invalid(
                        "tiers of different layouts (algorithms, their order, windows): a key's state must read alike in every tier",
                    )
                })?;
            }
        }
        let default = *by_name.get(default).ok_or(ConfigError::Invalid(
            "the default tier is not among the tiers",
        ))?;
        Ok(Self {
            tiers,
            by_name,
            default,
        })
    }

    fn tier(&self, name: Option<&str>) -> &Tier<StoreLimiter<B>> {
        let place = name.and_then(|n| self.by_name.get(n)).copied();
        &self.tiers[place.unwrap_or(self.default)]
    }

    fn named(&self, name: &str) -> Option<&Tier<StoreLimiter<B>>> {
        self.by_name.get(name).map(|&i| &self.tiers[i])
    }
}

/// A limit per key on a store: each key decided by its tier's
/// [`StoreLimiter`] (chosen by a [`TierOf`]), every decision naming its
/// tier ([`Decision::policy`]).
///
/// Each limited tier is a [`StoreLimiter`] of its own (its connection, its
/// failure policy, its metrics), built with the same prefix and the same
/// layout (algorithms in the same order, windows of the same lengths) as
/// the others, so that every tier reads the same state of a key on the
/// store: a key that changes tier keeps what it spent, read by the new
/// tier's quota, exactly as [`StoreLimiter::set_limits`] reads it for
/// every key. [`try_new`](Self::try_new) refuses tiers whose prefixes or
/// layouts differ. A settlement is made by the tier that decided.
///
/// While the store is down each tier's failure policy answers for the
/// keys in it. A [`FailurePolicy::PerInstance`](crate::FailurePolicy::PerInstance)
/// fallback counts in that tier's own limiter, so a key moved to another
/// tier during an outage starts that tier's fallback afresh: at most one
/// more of its limit per instance and change.
///
/// ```no_run
/// use weir_rate::{Gcra, Quota, Tier, nonzero};
/// use weir_store::memory::{MemoryBackend, MemoryStore};
/// use weir_store::{StoreLimiter, StoreTiers};
///
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let store = MemoryStore::new();
/// let tier = |per_second| {
///     StoreLimiter::<MemoryBackend>::builder(Gcra::new(Quota::per_second(per_second)))
///         .prefix("api")
///         .connect(store.clone())
/// };
/// let tiers = StoreTiers::try_new(
///     vec![
///         Tier::limited("free", tier(nonzero!(10)).await?),
///         Tier::limited("paid", tier(nonzero!(100)).await?),
///         Tier::unlimited("internal"),
///     ],
///     "free",
///     |key: &str| key.starts_with("pk_").then_some("paid"),
/// )?;
/// let decision = tiers.check_n("pk_42", 1).await?;
/// assert_eq!(decision.policy(), Some("paid"));
/// # Ok(())
/// # }
/// ```
pub struct StoreTiers<B: Backend, R> {
    table: RwLock<Arc<Table<B>>>,
    resolver: R,
}

impl<B: Backend, R> fmt::Debug for StoreTiers<B, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let table = self.table.read();
        let names: Vec<&str> = table.tiers.iter().map(Tier::name).collect();
        f.debug_struct("StoreTiers")
            .field("tiers", &names)
            .finish_non_exhaustive()
    }
}

impl<B: Backend, R> StoreTiers<B, R> {
    /// Tiers of store limiters, keys in no tier (or one `resolver` names
    /// but `tiers` lacks) in the tier called `default`.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Invalid`] when no tier has a limit, two tiers share a
    /// name, `default` names none, or the limiters' prefixes or layouts
    /// differ.
    pub fn try_new(
        tiers: Vec<Tier<StoreLimiter<B>>>,
        default: &str,
        resolver: R,
    ) -> Result<Self, ConfigError> {
        Ok(Self {
            table: RwLock::new(Arc::new(Table::new(tiers, default)?)),
            resolver,
        })
    }

    /// Replace the tiers while serving (each key's state carries over).
    ///
    /// # Errors
    ///
    /// As [`try_new`](Self::try_new), and for limiters of another prefix or layout
    /// than the tiers in force; the tiers are then unchanged.
    pub fn set_tiers(
        &self,
        tiers: Vec<Tier<StoreLimiter<B>>>,
        default: &str,
    ) -> Result<(), ConfigError> {
        let table = Table::new(tiers, default)?;
        let current = self.table();
        if let (Some(old), Some(new)) = (
            current.tiers.iter().find_map(Tier::limit),
            table.tiers.iter().find_map(Tier::limit),
        ) {
            if old.prefix() != new.prefix() {
                return Err(ConfigError::Invalid(
                    "new tiers on another key prefix than the tiers in force",
                ));
            }
            same_layout(
                &old.inner.tuned.read().limits,
                &new.inner.tuned.read().limits,
            )?;
        }
        *self.table.write() = Arc::new(table);
        Ok(())
    }

    /// The names of the tiers, in their order.
    pub fn tiers(&self) -> Vec<String> {
        let table = self.table();
        table.tiers.iter().map(|t| t.name().to_owned()).collect()
    }

    fn table(&self) -> Arc<Table<B>> {
        Arc::clone(&self.table.read())
    }

    /// Check `cost` units of `key` by its tier's limiter.
    ///
    /// # Errors
    ///
    /// [`NeverAllowed`] for a cost the key's tier can never allow.
    pub async fn check_n(&self, key: &str, cost: u32) -> Result<Decision, NeverAllowed>
    where
        R: TierOf<str>,
    {
        let table = self.table();
        let tier = table.tier(self.resolver.tier_of(key));
        let name: Arc<str> = Arc::from(tier.name());
        let decision = match tier.limit() {
            None => Decision::unlimited(),
            Some(limiter) => limiter.check_n(key, cost).await?,
        };
        Ok(decision.with_policy(name))
    }
}

/// A decision of a key's tier, for the layers.
impl<B: Backend, R: TierOf<str> + 'static, Q: fmt::Display + ?Sized> CheckKeyAsync<Q>
    for StoreTiers<B, R>
{
    type Future = Pin<Box<dyn Future<Output = Result<Decision, NeverAllowed>> + Send>>;

    fn check_n_async(&self, key: &Q, cost: u32) -> Self::Future {
        let key = key.to_string();
        let table = self.table();
        let tier = table.tier(self.resolver.tier_of(&key));
        let name: Arc<str> = Arc::from(tier.name());
        let Some(limiter) = tier.limit().cloned() else {
            return Box::pin(ready(Ok(Decision::unlimited().with_policy(name))));
        };
        Box::pin(async move {
            limiter
                .check_n(&key, cost)
                .await
                .map(|d| d.with_policy(name))
        })
    }
}

/// Settled by the tier that made the decision: a key moved to another
/// tier meanwhile gets back what its check spent.
impl<B: Backend, R: TierOf<str> + 'static, Q: fmt::Display + ?Sized> SettleKey<Q>
    for StoreTiers<B, R>
{
    type Error = StoreError;
    type Settling = Pin<Box<dyn Future<Output = Result<(), StoreError>> + Send>>;

    fn settle(&self, key: &Q, admitted: &Decision, from: u32, to: u32) -> Self::Settling {
        let table = self.table();
        let limiter = admitted
            .policy()
            .and_then(|name| table.named(name))
            .and_then(Tier::limit);
        match limiter {
            Some(limiter) => SettleKey::<Q>::settle(limiter, key, admitted, from, to),
            None => Box::pin(ready(Ok(()))),
        }
    }
}
