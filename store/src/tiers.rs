//! [`StoreTiers`]: a limit per key on a store, a limiter per tier.

use crate::backend::Backend;
use crate::error::ConfigError;
use crate::limiter::StoreLimiter;
use crate::retune::same_layout;
use std::fmt;
use std::future::{Future, ready};
use std::pin::Pin;
use weir_rate::{
    CheckKeyAsync, Decision, LiveTiers, NeverAllowed, SettleKey, Settlement, Tier, TierOf,
};

use crate::error::StoreError;

/// weir-rate's error about tiers as the store's.
fn invalid(e: weir_rate::ConfigError) -> ConfigError {
    match e {
        weir_rate::ConfigError::Tiers(why) => ConfigError::Invalid(why),
        _ => ConfigError::Invalid("tiers that cannot be checked together"),
    }
}

/// Whether `b` reads the state `a` keeps: the same prefix, the same
/// algorithms in the same order, windows of the same lengths.
fn shares_state<B: Backend>(a: &StoreLimiter<B>, b: &StoreLimiter<B>) -> bool {
    a.prefix() == b.prefix()
        && same_layout(&a.inner.tuned.read().limits, &b.inner.tuned.read().limits).is_ok()
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
    tiers: LiveTiers<StoreLimiter<B>, R>,
}

impl<B: Backend, R> fmt::Debug for StoreTiers<B, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoreTiers")
            .field("tiers", &self.tiers.names())
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
        let tiers = LiveTiers::try_new(tiers, default, resolver, shares_state).map_err(invalid)?;
        Ok(Self { tiers })
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
        self.tiers.set_tiers(tiers, default).map_err(invalid)
    }

    /// Place keys by `resolver` from now on (each key's state carries
    /// over into its new tier).
    pub fn set_resolver(&self, resolver: R) {
        self.tiers.set_resolver(resolver);
    }

    /// Replace the tiers and the resolver together while serving: every
    /// check sees the old pair or the new one, never new tiers placed by
    /// the old resolver.
    ///
    /// # Errors
    ///
    /// As [`set_tiers`](Self::set_tiers); the tiers and the resolver are
    /// then unchanged.
    pub fn replace(
        &self,
        tiers: Vec<Tier<StoreLimiter<B>>>,
        default: &str,
        resolver: R,
    ) -> Result<(), ConfigError> {
        self.tiers
            .replace(tiers, default, resolver)
            .map_err(invalid)
    }

    /// The names of the tiers, in their order.
    pub fn tiers(&self) -> Vec<String> {
        self.tiers.names()
    }

    /// The limiter of the tier called `name` (a handle to the same
    /// limiter: its connection, its state), `None` for an unlimited tier
    /// or one there is not. A reload changes a tier's limits through it
    /// ([`StoreLimiter::set_limits`]) instead of connecting a new one.
    pub fn limiter(&self, name: &str) -> Option<StoreLimiter<B>> {
        self.tiers.now().set().named(name)?.limit().cloned()
    }

    /// Check `cost` units of `key` by its tier's limiter.
    ///
    /// # Errors
    ///
    /// [`NeverAllowed`] for a cost the key's tier can never allow.
    pub async fn check_n(&self, key: &str, cost: u32) -> Result<Decision, NeverAllowed>
    where
        R: TierOf<str> + 'static,
    {
        CheckKeyAsync::<str>::check_n_async(self, key, cost).await
    }
}

/// A decision of a key's tier, for the layers: the resolver places the
/// key as the layer found it (an API key, an `OrKey`), and the store keys
/// its text (`Display`).
impl<B: Backend, R: TierOf<Q> + 'static, Q: fmt::Display + ?Sized> CheckKeyAsync<Q>
    for StoreTiers<B, R>
{
    type Future = Pin<Box<dyn Future<Output = Result<Decision, NeverAllowed>> + Send>>;

    fn check_n_async(&self, key: &Q, cost: u32) -> Self::Future {
        // A tier is a name and a limiter, both shared: cheap to own.
        let tier = self.tiers.now().tier_of(key).clone();
        let key = key.to_string();
        Box::pin(async move {
            let decision = match tier.limit() {
                None => Decision::unlimited(),
                Some(limiter) => limiter.check_n(&key, cost).await?,
            };
            Ok(tier.names(decision))
        })
    }
}

/// Settled by the tier that made the decision: a key moved to another
/// tier meanwhile gets back what its check spent. If that tier has since
/// been removed, a charge is made by the key's tier now and a refund is
/// not made: never looser.
impl<B: Backend, R: TierOf<Q> + 'static, Q: fmt::Display + ?Sized> SettleKey<Q>
    for StoreTiers<B, R>
{
    type Error = StoreError;
    type Settling = Pin<Box<dyn Future<Output = Result<(), StoreError>> + Send>>;

    fn settle(&self, key: &Q, admitted: &Decision, from: u32, to: u32) -> Self::Settling {
        let table = self.tiers.now();
        let decided = admitted.policy().and_then(|name| table.set().named(name));
        let tier = match (decided, Settlement::of(admitted, from, to)) {
            (Some(tier), _) => tier,
            // The tier is gone: a charge by the key's tier now (skipping
            // it would loosen the limit), a refund not at all (stricter).
            (None, Settlement::Charge(_)) => table.tier_of(key),
            (None, _) => return Box::pin(ready(Ok(()))),
        };
        match tier.limit() {
            Some(limiter) => SettleKey::<Q>::settle(limiter, key, admitted, from, to),
            None => Box::pin(ready(Ok(()))),
        }
    }
}
