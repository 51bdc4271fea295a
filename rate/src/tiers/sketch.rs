//! [`TieredSketch`]: a sketch limiter whose rate for each key is its tier's.

use super::{LiveTiers, PerKeyQuota, Tier, TierOf};
use crate::algorithms::Gcra;
use crate::check::{CheckKey, CheckKeyAsync, SettleKey, Settlement};
use crate::clock::{Clock, MonotonicClock};
use crate::config::ConfigError;
use crate::decision::{Decision, NeverAllowed, Receipt};
use crate::mode::Mode;
use crate::sketch::SketchLimiter;
use std::convert::Infallible;
use std::future::{Ready, ready};
use std::hash::Hash;
use weir_limits::Shape;

/// A [`SketchLimiter`] whose GCRA rate for each key is its tier's: tiers
/// per key in fixed memory, for key spaces too large or too hostile to
/// keep exactly.
///
/// As in [`TieredLimiter`](super::TieredLimiter), tiers are [`Tier`]s
/// (GCRA quotas, or unlimited) placed by a [`TierOf`], a decision names
/// its tier ([`Decision::policy`]), and [`set_tiers`](Self::set_tiers),
/// [`set_resolver`](Self::set_resolver) and [`replace`](Self::replace)
/// change them while serving. A key's state is its arrival time in the
/// sketch's cells, so a key that changes tier keeps what it spent (as
/// time), read by its new tier's rate.
///
/// Keys of different tiers may share cells. Every cell stays at or above
/// the arrival time of each key on it, whatever rate raised it, so a
/// collision only makes a key stricter, never looser, as in the sketch
/// of one rate. Size the sketch for the tier whose keys spend the most
/// ([`SketchLimiter::shape_for_load`] with that tier's quota and the load
/// of all keys). Like the sketch, it has no refunds: a settlement only
/// charges.
///
/// ```
/// use weir_rate::{Gcra, Quota, Shape, Tier, TieredSketch, nonzero};
///
/// let per_second = |n| Gcra::new(Quota::per_second(n));
/// let limiter = TieredSketch::try_new(
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
///     Shape::rows::<4, 4096>(),
/// )?;
/// let free: Vec<bool> = (0..3).map(|_| limiter.check("anon").is_allowed()).collect();
/// assert_eq!(free, [true, true, false]);
/// assert!((0..50).all(|_| limiter.check("pk_42").is_allowed()));
/// assert_eq!(limiter.check("pk_42").policy(), Some("paid"));
/// assert!(limiter.check("ops").is_unlimited());
/// # Ok::<(), weir_rate::ConfigError>(())
/// ```
pub struct TieredSketch<R, C = MonotonicClock> {
    sketch: SketchLimiter<C>,
    tiers: LiveTiers<Gcra, R>,
}

impl<R, C> std::fmt::Debug for TieredSketch<R, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TieredSketch")
            .field("tiers", &self.tiers)
            .field("sketch", &self.sketch)
            .finish()
    }
}

impl<R> TieredSketch<R> {
    /// Tiers over a sketch of `shape` on the monotonic clock, keys in no
    /// tier (or one `resolver` names but `tiers` lacks) in the tier called
    /// `default`.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Tiers`] when no tier has a limit, two tiers share a
    /// name, or `default` names none of them.
    pub fn try_new(
        tiers: Vec<Tier<Gcra>>,
        default: &str,
        resolver: R,
        shape: Shape,
    ) -> Result<Self, ConfigError> {
        Self::try_with_clock(tiers, default, resolver, shape, MonotonicClock::new())
    }
}

impl<R, C: Clock> TieredSketch<R, C> {
    /// [`try_new`](TieredSketch::try_new) reading time from `clock`.
    ///
    /// # Errors
    ///
    /// As [`try_new`](TieredSketch::try_new).
    pub fn try_with_clock(
        tiers: Vec<Tier<Gcra>>,
        default: &str,
        resolver: R,
        shape: Shape,
        clock: C,
    ) -> Result<Self, ConfigError> {
        let tiers = LiveTiers::try_new(tiers, default, resolver, Gcra::same_layout)?;
        let first = tiers.now().set().layout().quota();
        Ok(Self {
            sketch: SketchLimiter::with_clock(first, shape, clock),
            tiers,
        })
    }

    /// Replace the tiers while serving: each key's spent time carries over.
    ///
    /// # Errors
    ///
    /// As [`try_new`](TieredSketch::try_new); the tiers are then unchanged.
    pub fn set_tiers(&self, tiers: Vec<Tier<Gcra>>, default: &str) -> Result<(), ConfigError> {
        self.tiers.set_tiers(tiers, default)
    }

    /// Place keys by `resolver` from now on.
    pub fn set_resolver(&self, resolver: R) {
        self.tiers.set_resolver(resolver);
    }

    /// Replace the tiers and the resolver together: every check sees the
    /// old pair or the new one.
    ///
    /// # Errors
    ///
    /// As [`set_tiers`](Self::set_tiers); nothing changes then.
    pub fn replace(
        &self,
        tiers: Vec<Tier<Gcra>>,
        default: &str,
        resolver: R,
    ) -> Result<(), ConfigError> {
        self.tiers.replace(tiers, default, resolver)
    }

    /// The names of the tiers, in their order.
    pub fn tiers(&self) -> Vec<String> {
        self.tiers.names()
    }

    /// Bytes of cell memory (fixed for the limiter's life).
    pub fn memory_bytes(&self) -> usize {
        self.sketch.memory_bytes()
    }

    /// Check one unit for `key` by its tier.
    #[must_use = "a decision not looked at lets a denied request through"]
    pub fn check<Q: Hash + ?Sized>(&self, key: &Q) -> Decision
    where
        R: TierOf<Q>,
    {
        self.check_n(key, 1)
            .unwrap_or_else(|_| Decision::deny_ns(0, 0, 0, 0, u64::MAX))
    }

    /// Check `cost` units for `key` by its tier, spending them if allowed.
    ///
    /// # Errors
    ///
    /// [`NeverAllowed`] when `cost` exceeds the burst of the key's tier; a
    /// denial is an `Ok` decision.
    #[must_use = "a decision not looked at lets a denied request through"]
    pub fn check_n<Q: Hash + ?Sized>(&self, key: &Q, cost: u32) -> Result<Decision, NeverAllowed>
    where
        R: TierOf<Q>,
    {
        self.decide(key, cost, Mode::Consume)
    }

    /// What [`check_n`](Self::check_n) would answer, without spending.
    ///
    /// # Errors
    ///
    /// As [`check_n`](Self::check_n).
    pub fn peek_n<Q: Hash + ?Sized>(&self, key: &Q, cost: u32) -> Result<Decision, NeverAllowed>
    where
        R: TierOf<Q>,
    {
        self.decide(key, cost, Mode::Peek)
    }

    fn decide<Q: Hash + ?Sized>(
        &self,
        key: &Q,
        cost: u32,
        mode: Mode,
    ) -> Result<Decision, NeverAllowed>
    where
        R: TierOf<Q>,
    {
        let table = self.tiers.now();
        let tier = table.tier_of(key);
        let decision = match tier.limit() {
            None => Decision::unlimited(),
            Some(gcra) => self.sketch.run_with(key, cost, mode, gcra)?,
        };
        Ok(tier.names(decision))
    }

    /// Spend `cost` units for `key` by its tier, unconditionally (see
    /// [`SketchLimiter::charge`]); `None` for a key in an unlimited tier.
    pub fn charge<Q: Hash + ?Sized>(&self, key: &Q, cost: u32) -> Option<Receipt>
    where
        R: TierOf<Q>,
    {
        let table = self.tiers.now();
        let gcra = table.tier_of(key).limit()?;
        Some(self.sketch.charge_by(key, cost, gcra))
    }
}

impl<Q, R, C> CheckKey<Q> for TieredSketch<R, C>
where
    Q: Hash + ?Sized,
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
}

/// In process: answered with a completed future.
impl<Q: ?Sized, R, C> CheckKeyAsync<Q> for TieredSketch<R, C>
where
    Self: CheckKey<Q> + 'static,
{
    type Future = Ready<Result<Decision, NeverAllowed>>;

    fn check_n_async(&self, key: &Q, cost: u32) -> Self::Future {
        ready(CheckKey::check_n(self, key, cost))
    }
}

/// Settles only upward, as the sketch does: a charge by the tier that
/// decided (by the key's tier now if that one was removed since), never a
/// refund.
impl<Q, R, C> SettleKey<Q> for TieredSketch<R, C>
where
    Q: Hash + ?Sized,
    R: TierOf<Q>,
    C: Clock,
    Self: CheckKeyAsync<Q>,
{
    type Error = Infallible;
    type Settling = Ready<Result<(), Infallible>>;

    fn settle(&self, key: &Q, admitted: &Decision, from: u32, to: u32) -> Self::Settling {
        if let Settlement::Charge(more) = Settlement::of(admitted, from, to) {
            let table = self.tiers.now();
            let decided = admitted.policy().and_then(|name| table.set().named(name));
            let tier = decided.unwrap_or_else(|| table.tier_of(key));
            if let Some(gcra) = tier.limit() {
                let _ = self.sketch.charge_by(key, more, gcra);
            }
        }
        ready(Ok(()))
    }
}
