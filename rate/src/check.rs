//! "May this key spend `cost` units now?", asked the same way of every
//! keyed limiter.
//!
//! There are two forms because there are two kinds of answerer. An
//! in-process limiter ([`KeyedLimiter`], [`SketchLimiter`]) answers at
//! once: [`CheckKey`]. A distributed one (the Redis limiter) answers after
//! a round trip: [`CheckKeyAsync`], whose future is `'static` so a tower
//! service can hold it across polls. Every keyed limiter implements the
//! async form (the in-process ones with an already-completed future), so
//! code that takes a `CheckKeyAsync` — the tower layer — accepts all of
//! them; code that must not wait — the Redis limiter's local fallback while
//! Redis is down — takes a `CheckKey`.
//!
//! Both take the key by reference and `Q: ?Sized`, as `HashMap::get` does:
//! a `KeyedLimiter<String, _>` is asked with a `&str` without allocating.

use crate::clock::Clock;
use crate::decision::{Decision, NeverAllowed, Receipt};
use crate::keyed::KeyedLimiter;
use crate::limiter::Limiter;
use crate::sketch::SketchLimiter;
use std::borrow::Borrow;
use std::future::{Future, Ready, ready};
use std::hash::Hash;

/// A keyed limiter that decides at once, in process.
///
/// ```
/// use std::num::NonZeroU32;
/// use weir_rate::{CheckKey, Gcra, KeyedLimiter, Quota};
///
/// fn admit(limiter: &impl CheckKey<str>, user: &str) -> bool {
///     limiter.check_key(user, 1).is_ok_and(|d| d.is_allowed())
/// }
///
/// let per_user = KeyedLimiter::<String, _>::new(Gcra::new(Quota::per_second(NonZeroU32::MIN)));
/// assert!(admit(&per_user, "alice"));
/// assert!(!admit(&per_user, "alice"));
/// ```
pub trait CheckKey<Q: ?Sized>: Send + Sync {
    /// Decide `cost` units for `key`, spending them when allowed; an error
    /// when `cost` exceeds what the quota can ever allow at once.
    fn check_key(&self, key: &Q, cost: u32) -> Result<Decision, NeverAllowed>;

    /// Spend `cost` units for `key` unconditionally (see
    /// [`Limiter::charge`]), returning the receipt; `None` from a limiter
    /// that cannot charge (the default: a function of the key and cost
    /// only decides). The Redis limiter's failure policy charges its local
    /// limiter through this while Redis is down.
    fn charge_key(&self, key: &Q, cost: u32) -> Option<Receipt> {
        let _ = (key, cost);
        None
    }

    /// Give back what `receipt` (of a check or charge of `key` by this
    /// limiter) still counts for (see [`Limiter::refund`]); by default
    /// nothing (a limiter without refunds).
    fn refund_key(&self, key: &Q, receipt: Receipt) {
        let _ = (key, receipt);
    }
}

/// A keyed limiter whose decision may take a round trip.
///
/// ```
/// use std::num::NonZeroU32;
/// use weir_rate::{CheckKeyAsync, Gcra, KeyedLimiter, Quota};
///
/// async fn admit(limiter: &impl CheckKeyAsync<str>, user: &str) -> bool {
///     limiter.check_key_async(user, 1).await.is_ok_and(|d| d.is_allowed())
/// }
///
/// let per_user = KeyedLimiter::<String, _>::new(Gcra::new(Quota::per_second(NonZeroU32::MIN)));
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// assert!(admit(&per_user, "alice").await);
/// assert!(!admit(&per_user, "alice").await);
/// # });
/// ```
pub trait CheckKeyAsync<Q: ?Sized>: Send + Sync + 'static {
    /// The future of one decision: `Unpin` and `'static` (a boxed future or
    /// an already-completed one), so a service can keep it between polls.
    type Future: Future<Output = Result<Decision, NeverAllowed>> + Send + Unpin + 'static;

    /// Decide `cost` units for `key`, spending them when allowed.
    fn check_key_async(&self, key: &Q, cost: u32) -> Self::Future;
}

impl<K, Q, L, C> CheckKey<Q> for KeyedLimiter<K, L, C>
where
    K: Hash + Eq + Clone + Send + Borrow<Q>,
    Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    L: Limiter + Clone,
    C: Clock,
    Self: Send + Sync,
{
    fn check_key(&self, key: &Q, cost: u32) -> Result<Decision, NeverAllowed> {
        self.check_n(key, cost)
    }

    fn charge_key(&self, key: &Q, cost: u32) -> Option<Receipt> {
        Some(self.charge(key, cost))
    }

    fn refund_key(&self, key: &Q, receipt: Receipt) {
        self.refund(key, &receipt);
    }
}

/// In-process limiters answer the async form with a completed future.
impl<K, Q, L, C> CheckKeyAsync<Q> for KeyedLimiter<K, L, C>
where
    Q: ?Sized,
    L: Limiter,
    Self: CheckKey<Q> + 'static,
{
    type Future = Ready<Result<Decision, NeverAllowed>>;

    fn check_key_async(&self, key: &Q, cost: u32) -> Self::Future {
        ready(self.check_key(key, cost))
    }
}

/// Charges raise the key's cells; refunds give nothing back (the sketch
/// has none).
impl<Q: Hash + ?Sized, C: Clock> CheckKey<Q> for SketchLimiter<C> {
    fn check_key(&self, key: &Q, cost: u32) -> Result<Decision, NeverAllowed> {
        self.check_n(key, cost)
    }

    fn charge_key(&self, key: &Q, cost: u32) -> Option<Receipt> {
        Some(self.charge(key, cost))
    }
}

impl<Q: ?Sized, C> CheckKeyAsync<Q> for SketchLimiter<C>
where
    Self: CheckKey<Q> + 'static,
{
    type Future = Ready<Result<Decision, NeverAllowed>>;

    fn check_key_async(&self, key: &Q, cost: u32) -> Self::Future {
        ready(self.check_key(key, cost))
    }
}

/// A function of the key and cost decides too (a test double, or a policy
/// written inline).
impl<Q: ?Sized, F> CheckKey<Q> for F
where
    F: Fn(&Q, u32) -> Result<Decision, NeverAllowed> + Send + Sync,
{
    fn check_key(&self, key: &Q, cost: u32) -> Result<Decision, NeverAllowed> {
        self(key, cost)
    }
}
