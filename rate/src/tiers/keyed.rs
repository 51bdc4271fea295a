//! [`TieredLimiter`]: an exact keyed limiter whose quota for each key is
//! its tier's.

use super::{LiveTiers, PerKeyQuota, Tier, TierOf};
use crate::algorithm::Forgettable;
use crate::check::{CheckKey, CheckKeyAsync, SettleKey, Settlement};
use crate::clock::{Clock, MonotonicClock};
use crate::config::ConfigError;
use crate::decision::{Decision, NeverAllowed, Receipt};
use crate::keyed::KeyedLimiter;
use crate::mode::Mode;
use std::borrow::Borrow;
use std::convert::Infallible;
use std::future::{Ready, ready};
use std::hash::Hash;

/// A keyed limiter whose limit for each key is its tier's, looked up by a
/// [`TierOf`] the caller supplies.
///
/// A public API gives a free key 10 a second, a paid one 100, an internal
/// one no limit and an abusive one 1. Tiers are [`Tier`]s of one algorithm
/// with quotas of their own (and [`Tier::unlimited`]); each key keeps one
/// state, read by the quota of whatever tier the key is in at each check.
/// A decision names its tier ([`Decision::policy`]), so the `RateLimit`
/// fields and the metrics of a layer in front of the limiter carry it.
///
/// # A key that changes tier
///
/// What a key has spent carries over, as it does when a limiter's quota
/// changes ([`KeyedLimiter::set_limit`]): a GCRA key's stored time or a
/// window's count is read by the new tier's quota from the next check on,
/// never reset to a full quota. A key that moves from a paid tier to a free
/// one is therefore refused until what it spent fits the free quota; one
/// that moves up gets the larger quota's room at once. That is why the
/// tiers must share one layout ([`PerKeyQuota::same_layout`]): the same
/// windows, the same counters.
///
/// A refund or forced charge is settled by the tier that made the decision
/// it settles ([`SettleKey::settle`]), so a key that changed tier in
/// between gets back what its check spent, not what the new quota would
/// count. If that tier has since been removed, a charge is made by the
/// key's tier now and a refund is not made: never looser. [`CheckKey::refund`], given only a receipt, refunds by the key's
/// tier at the time.
///
/// ```
/// use weir_rate::{Gcra, Quota, Tier, TieredLimiter, nonzero};
///
/// let per_second = |n| Gcra::new(Quota::per_second(n));
/// let limiter = TieredLimiter::<String, _, _>::try_new(
///     vec![
///         Tier::limited("free", per_second(nonzero!(2))),
///         Tier::limited("paid", per_second(nonzero!(100))),
///         Tier::unlimited("internal"),
///     ],
///     "free",
///     |key: &str| match key {
///         k if k.starts_with("pk_") => Some("paid"),
///         "ops" => Some("internal"),
///         _ => None,
///     },
/// )?;
/// let free: Vec<bool> = (0..3).map(|_| limiter.check("anon").is_allowed()).collect();
/// assert_eq!(free, [true, true, false]);
/// assert!((0..50).all(|_| limiter.check("pk_42").is_allowed()));
/// let decision = limiter.check("pk_42");
/// assert_eq!(decision.policy(), Some("paid"));
/// assert_eq!(decision.headers("ignored")[0].1, "\"paid\";q=100;w=1");
/// assert!(limiter.check("ops").is_unlimited());
/// # Ok::<(), weir_rate::ConfigError>(())
/// ```
pub struct TieredLimiter<K: Send, L: Forgettable, R, C = MonotonicClock> {
    keys: KeyedLimiter<K, L, C>,
    tiers: LiveTiers<L, R>,
}

impl<K: Send, L, R, C> std::fmt::Debug for TieredLimiter<K, L, R, C>
where
    L: Forgettable + std::fmt::Debug,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TieredLimiter")
            .field("tiers", &self.tiers)
            .finish_non_exhaustive()
    }
}

impl<K, L, R> TieredLimiter<K, L, R>
where
    K: Hash + Eq + Clone + Send,
    L: PerKeyQuota,
{
    /// A limiter of `tiers`, keys in no tier (or one `resolver` names but
    /// `tiers` lacks) in the tier called `default`, on the monotonic clock
    /// with room for [`KeyedLimiter::DEFAULT_MAX_KEYS`] keys.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Tiers`] when no tier has a limit, two tiers share a
    /// name, `default` names none of them, or the limits' layouts differ.
    pub fn try_new(tiers: Vec<Tier<L>>, default: &str, resolver: R) -> Result<Self, ConfigError> {
        Self::try_with_clock(tiers, default, resolver, MonotonicClock::new())
    }
}

impl<K, L, R, C> TieredLimiter<K, L, R, C>
where
    K: Hash + Eq + Clone + Send,
    L: PerKeyQuota,
    C: Clock,
{
    /// [`try_new`](TieredLimiter::try_new) reading time from `clock`.
    ///
    /// # Errors
    ///
    /// As [`new`](TieredLimiter::try_new).
    pub fn try_with_clock(
        tiers: Vec<Tier<L>>,
        default: &str,
        resolver: R,
        clock: C,
    ) -> Result<Self, ConfigError> {
        Self::try_over(tiers, default, resolver, |limit| {
            KeyedLimiter::with_clock(limit, clock)
        })
    }

    /// A limiter of `tiers` over the keyed limiter `keys` builds from the
    /// first limit (its bound on keys, shards, clock: see
    /// [`KeyedLimiter::builder`]).
    ///
    /// ```
    /// use std::collections::HashMap;
    /// use std::num::NonZeroUsize;
    /// use weir_rate::{Gcra, KeyedLimiter, Quota, Tier, TieredLimiter, nonzero};
    ///
    /// let limiter = TieredLimiter::<u64, _, _>::try_over(
    ///     vec![Tier::limited("all", Gcra::new(Quota::per_second(nonzero!(5))))],
    ///     "all",
    ///     HashMap::<u64, String>::new(),
    ///     |limit| KeyedLimiter::builder(limit).max_keys(NonZeroUsize::new(1024).unwrap()).build(),
    /// )?;
    /// assert!(limiter.check(&7).is_allowed());
    /// # Ok::<(), weir_rate::ConfigError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`new`](TieredLimiter::try_new).
    pub fn try_over(
        tiers: Vec<Tier<L>>,
        default: &str,
        resolver: R,
        keys: impl FnOnce(L) -> KeyedLimiter<K, L, C>,
    ) -> Result<Self, ConfigError> {
        let tiers = LiveTiers::try_new(tiers, default, resolver, L::same_layout)?;
        let first = tiers.now().set().layout().clone();
        Ok(Self {
            keys: keys(first),
            tiers,
        })
    }

    /// Replace the tiers while serving: each key's spent state carries
    /// over, read by its new tier's quota (see [`TieredLimiter`]).
    ///
    /// # Errors
    ///
    /// As [`new`](TieredLimiter::try_new), and [`ConfigError::Tiers`] for
    /// limits of another layout than the limiter's; the tiers are then
    /// unchanged.
    pub fn set_tiers(&self, tiers: Vec<Tier<L>>, default: &str) -> Result<(), ConfigError> {
        self.tiers.set_tiers(tiers, default)
    }

    /// Replace the tiers and the resolver together while serving (a
    /// configuration file reloaded): every check sees the old pair or the
    /// new one, never new tiers placed by the old resolver. Each key's
    /// spent state carries over, as with [`set_tiers`](Self::set_tiers).
    ///
    /// ```
    /// use std::collections::HashMap;
    /// use weir_rate::{Gcra, Quota, Tier, TieredLimiter, nonzero};
    ///
    /// let per_minute = |n| Gcra::new(Quota::per_minute(n));
    /// let limiter = TieredLimiter::<String, _, _>::try_new(
    ///     vec![Tier::limited("free", per_minute(nonzero!(1)))],
    ///     "free",
    ///     HashMap::new(),
    /// )?;
    /// assert!(limiter.check("k-1").is_allowed());
    /// limiter.replace(
    ///     vec![Tier::limited("free", per_minute(nonzero!(1))), Tier::limited("paid", per_minute(nonzero!(60)))],
    ///     "free",
    ///     HashMap::from([("k-1".to_owned(), "paid".to_owned())]),
    /// )?;
    /// assert_eq!(limiter.check("k-1").policy(), Some("paid"));
    /// # Ok::<(), weir_rate::ConfigError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`set_tiers`](Self::set_tiers); the tiers and the resolver are
    /// then unchanged.
    pub fn replace(
        &self,
        tiers: Vec<Tier<L>>,
        default: &str,
        resolver: R,
    ) -> Result<(), ConfigError> {
        self.tiers.replace(tiers, default, resolver)
    }

    /// Place keys by `resolver` from now on (a directory of keys reloaded,
    /// say): each key's spent state carries over into its new tier.
    ///
    /// ```
    /// use std::collections::HashMap;
    /// use weir_rate::{Gcra, Quota, Tier, TieredLimiter, nonzero};
    ///
    /// let per_minute = |n| Gcra::new(Quota::per_minute(n));
    /// let directory = |pairs: &[(&str, &str)]| -> HashMap<String, String> {
    ///     pairs.iter().map(|(k, t)| (k.to_string(), t.to_string())).collect()
    /// };
    /// let limiter = TieredLimiter::<String, _, _>::try_new(
    ///     vec![Tier::limited("free", per_minute(nonzero!(1))), Tier::unlimited("internal")],
    ///     "free",
    ///     directory(&[]),
    /// )?;
    /// assert!(limiter.check("ops").is_allowed());
    /// assert!(!limiter.check("ops").is_allowed());
    /// limiter.set_resolver(directory(&[("ops", "internal")]));
    /// assert!(limiter.check("ops").is_allowed());
    /// # Ok::<(), weir_rate::ConfigError>(())
    /// ```
    pub fn set_resolver(&self, resolver: R) {
        self.tiers.set_resolver(resolver);
    }

    /// The names of the tiers, in their order.
    pub fn tiers(&self) -> Vec<String> {
        self.tiers.names()
    }

    /// The keyed limiter holding every key's state.
    pub fn keys(&self) -> &KeyedLimiter<K, L, C> {
        &self.keys
    }

    /// Check one unit for `key` by its tier.
    #[must_use = "a decision not looked at lets a denied request through"]
    pub fn check<Q>(&self, key: &Q) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
        R: TierOf<Q>,
    {
        self.check_n(key, 1)
            .unwrap_or_else(|_| Decision::deny_ns(0, 0, 0, 0, u64::MAX))
    }

    /// Check `cost` units for `key` by its tier, spending them if allowed.
    ///
    /// # Errors
    ///
    /// [`NeverAllowed`] when `cost` exceeds what the key's tier can ever
    /// allow at once; a denial is an `Ok` decision.
    #[must_use = "a decision not looked at lets a denied request through"]
    pub fn check_n<Q>(&self, key: &Q, cost: u32) -> Result<Decision, NeverAllowed>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
        R: TierOf<Q>,
    {
        self.decide(key, cost, Mode::Consume)
    }

    /// What [`check_n`](Self::check_n) would answer, without spending.
    ///
    /// # Errors
    ///
    /// As [`check_n`](Self::check_n).
    pub fn peek_n<Q>(&self, key: &Q, cost: u32) -> Result<Decision, NeverAllowed>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
        R: TierOf<Q>,
    {
        self.decide(key, cost, Mode::Peek)
    }

    fn decide<Q>(&self, key: &Q, cost: u32, mode: Mode) -> Result<Decision, NeverAllowed>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
        R: TierOf<Q>,
    {
        let table = self.tiers.now();
        let tier = table.tier_of(key);
        let decision = match tier.limit() {
            None => Decision::unlimited(),
            Some(limit) => self.keys.run_by(key, cost, mode, Some(limit))?,
        };
        Ok(tier.names(decision))
    }

    /// Spend `cost` units for `key` by its tier, unconditionally (see
    /// [`KeyedLimiter::charge`]); `None` for a key in an unlimited tier.
    pub fn charge<Q>(&self, key: &Q, cost: u32) -> Option<Receipt>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
        R: TierOf<Q>,
    {
        let table = self.tiers.now();
        let limit = table.tier_of(key).limit()?;
        Some(self.keys.charge_by(key, cost, Some(limit)))
    }

    /// Settle `admitted` (a check of `from` units of `key`) at `to` units,
    /// by the tier that made the decision (see [`Settlement`]). When that
    /// tier has since been removed, a charge is still made, by the key's
    /// tier now (the work was done: skipping it would loosen the limit),
    /// and a refund is not (stricter). Nothing for a decision of an
    /// unlimited tier.
    fn settle_by<Q>(&self, key: &Q, admitted: &Decision, from: u32, to: u32)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
        R: TierOf<Q>,
    {
        let table = self.tiers.now();
        let decided = admitted.policy().and_then(|name| table.set().named(name));
        match (Settlement::of(admitted, from, to), decided) {
            (Settlement::Keep, _) => {}
            (Settlement::Refund(surplus), Some(tier)) => {
                if let Some(limit) = tier.limit() {
                    self.keys.refund_by(key, surplus, Some(limit));
                }
            }
            (Settlement::Refund(_), None) => {}
            (Settlement::Charge(more), decided) => {
                let tier = decided.unwrap_or_else(|| table.tier_of(key));
                if let Some(limit) = tier.limit() {
                    let _ = self.keys.charge_by(key, more, Some(limit));
                }
            }
        }
    }
}

impl<K, Q, L, R, C> CheckKey<Q> for TieredLimiter<K, L, R, C>
where
    K: Hash + Eq + Clone + Send + Sync + Borrow<Q>,
    Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    L: PerKeyQuota,
    R: TierOf<Q>,
    C: Clock,
    Self: Send + Sync,
{
    fn check_n(&self, key: &Q, cost: u32) -> Result<Decision, NeverAllowed> {
        self.check_n(key, cost)
    }

    fn charge(&self, key: &Q, cost: u32) -> Option<Receipt> {
        self.charge(key, cost)
    }

    fn refund(&self, key: &Q, receipt: Receipt) {
        let table = self.tiers.now();
        if let Some(limit) = table.tier_of(key).limit() {
            self.keys.refund_by(key, receipt, Some(limit));
        }
    }
}

/// In process: answered with a completed future.
impl<K, Q, L, R, C> CheckKeyAsync<Q> for TieredLimiter<K, L, R, C>
where
    K: Send,
    L: Forgettable,
    Q: ?Sized,
    Self: CheckKey<Q> + 'static,
{
    type Future = Ready<Result<Decision, NeverAllowed>>;

    fn check_n_async(&self, key: &Q, cost: u32) -> Self::Future {
        ready(CheckKey::check_n(self, key, cost))
    }
}

impl<K, Q, L, R, C> SettleKey<Q> for TieredLimiter<K, L, R, C>
where
    K: Hash + Eq + Clone + Send + Borrow<Q>,
    Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    L: PerKeyQuota,
    R: TierOf<Q>,
    C: Clock,
    Self: CheckKeyAsync<Q>,
{
    type Error = Infallible;
    type Settling = Ready<Result<(), Infallible>>;

    fn settle(&self, key: &Q, admitted: &Decision, from: u32, to: u32) -> Self::Settling {
        self.settle_by(key, admitted, from, to);
        ready(Ok(()))
    }
}
