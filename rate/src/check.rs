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
//!
//! [`SettleKey`] is the third question, asked after the fact: "the request
//! admitted at that cost turned out to cost this much", answered by a
//! refund of the difference or a charge of it ([`Settlement`]). The tower
//! layer asks it when a response has been sent (`RateLimitLayer::settle`).

use crate::clock::Clock;
use crate::decision::{Decision, NeverAllowed};
use crate::keyed::KeyedLimiter;
use crate::limiter::Limiter;
use crate::sketch::SketchLimiter;
use std::borrow::Borrow;
use std::convert::Infallible;
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

/// What settling an admission at its final cost comes to.
///
/// A check admitted a request at some cost `a` (its
/// [`receipt`](Decision::receipt)); the request turned out to cost `f`:
///
/// * `f = a`, or the check admitted nothing (a denial, or a denial let
///   through in shadow mode, spent nothing and is owed nothing):
///   [`Keep`](Self::Keep).
/// * `f > a`: [`Charge`](Self::Charge) `f − a` more, now, whether or not
///   the quota has room (a key may go into debt, which later checks pay).
/// * `f < a`: [`Refund`](Self::Refund) `a − f` of the admission's own
///   spending, charged at the admission's instant. This is exact, and
///   never loosens the limit: the admission is read as two spendings at
///   that instant, `f` kept and `a − f` given back, and a refund gives
///   back only what its spending still counts for
///   ([`Limiter::refund`](crate::Limiter::refund)), so the state is never
///   looser than if the check had asked for `f` in the first place. (A
///   full refund followed by a charge of `f` would, in two steps, let a
///   concurrent check see the whole refund, and would charge `f` at a
///   later instant than the spending it stands for.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settlement {
    /// Nothing to do.
    Keep,
    /// Refund this decision: the admission with a receipt for the surplus
    /// `a − f` only (pass it to the limiter's `refund`).
    Refund(Decision),
    /// Charge this many more units now.
    Charge(u32),
}

impl Settlement {
    /// Settle `admitted` (an allowed check's decision) at `cost` units.
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use weir_rate::clock::ManualClock;
    /// use weir_rate::{FixedWindow, KeyedLimiter, Quota, Settlement};
    ///
    /// let limiter = KeyedLimiter::<String, _, _>::with_clock(
    ///     FixedWindow::new(Quota::per_minute(NonZeroU32::new(10).unwrap())),
    ///     ManualClock::new(),
    /// );
    /// let admitted = limiter.check_n("k", 8)?;
    /// assert_eq!(Settlement::of(&admitted, 8), Settlement::Keep);
    /// assert_eq!(Settlement::of(&admitted, 11), Settlement::Charge(3));
    /// let Settlement::Refund(surplus) = Settlement::of(&admitted, 3) else { unreachable!() };
    /// assert_eq!(surplus.receipt().map(|r| r.cost()), Some(5));
    /// limiter.refund("k", &surplus);
    /// assert_eq!(limiter.check_n("k", 0)?.remaining(), 7, "as if it had cost 3");
    /// # Ok::<(), weir_rate::NeverAllowed>(())
    /// ```
    pub fn of(admitted: &Decision, cost: u32) -> Self {
        if !admitted.is_allowed() || !admitted.is_conforming() {
            return Self::Keep;
        }
        match admitted.receipt() {
            Some(spent) if cost < spent.cost() => {
                Self::Refund(admitted.with_receipt(spent.part(spent.cost() - cost)))
            }
            spent => match cost - spent.map_or(0, |r| r.cost()) {
                0 => Self::Keep,
                more => Self::Charge(more),
            },
        }
    }
}

/// A keyed limiter that settles an admitted request's cost once the
/// request's real cost is known (by its response: bytes sent, status,
/// tokens used), by the rule of [`Settlement`].
///
/// In-process limiters settle at once (an already-completed future that
/// cannot fail); a distributed one settles after a round trip, and may
/// fail, in which case the key keeps what its check charged.
///
/// ```
/// use std::num::NonZeroU32;
/// use weir_rate::{CheckKey, Gcra, KeyedLimiter, Quota, SettleKey};
///
/// let per_user = KeyedLimiter::<String, _>::new(Gcra::new(Quota::per_minute(NonZeroU32::new(10).unwrap())));
/// let admitted = per_user.check_key("alice", 5)?;
/// // The request turned out to cost 1: 4 of its 5 units come back.
/// let settled = per_user.settle_key("alice", &admitted, 1);
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// settled.await.unwrap();
/// # });
/// assert!(per_user.check_key("alice", 9)?.is_allowed());
/// # Ok::<(), weir_rate::NeverAllowed>(())
/// ```
pub trait SettleKey<Q: ?Sized>: CheckKeyAsync<Q> {
    /// Why a settlement failed (`Infallible` in process).
    type Error: std::error::Error + Send + Sync + 'static;

    /// The future of one settlement: `'static`, so it can finish after
    /// the response that prompted it is gone.
    type Settling: Future<Output = Result<(), Self::Error>> + Send + Unpin + 'static;

    /// Settle `admitted` (a decision this limiter took for `key`) at
    /// `cost` units: refund or charge the difference ([`Settlement`]).
    /// Settle each admission at most once.
    ///
    /// # Errors
    ///
    /// When the settlement could not be made (a backend unreachable); the
    /// key then keeps what its check charged.
    fn settle_key(&self, key: &Q, admitted: &Decision, cost: u32) -> Self::Settling;
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

impl<K, Q, L, C> SettleKey<Q> for KeyedLimiter<K, L, C>
where
    K: Hash + Eq + Clone + Send + Borrow<Q>,
    Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    L: Limiter + Clone,
    C: Clock,
    Self: CheckKeyAsync<Q>,
{
    type Error = Infallible;
    type Settling = Ready<Result<(), Infallible>>;

    fn settle_key(&self, key: &Q, admitted: &Decision, cost: u32) -> Self::Settling {
        match Settlement::of(admitted, cost) {
            Settlement::Keep => {}
            Settlement::Refund(surplus) => self.refund(key, &surplus),
            Settlement::Charge(more) => {
                // TODO(charge): KeyedLimiter::charge, from the other branch.
                let _ = more;
            }
        }
        ready(Ok(()))
    }
}

impl<Q: Hash + ?Sized, C: Clock> CheckKey<Q> for SketchLimiter<C> {
    fn check_key(&self, key: &Q, cost: u32) -> Result<Decision, NeverAllowed> {
        self.check_n(key, cost)
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

/// A sketch settles only upward: it has no refunds (lowering cells that
/// other keys share could loosen them), so a request that cost less than
/// it was admitted at keeps its admission, which is never looser.
impl<Q: Hash + ?Sized, C> SettleKey<Q> for SketchLimiter<C>
where
    Self: CheckKeyAsync<Q>,
{
    type Error = Infallible;
    type Settling = Ready<Result<(), Infallible>>;

    fn settle_key(&self, key: &Q, admitted: &Decision, cost: u32) -> Self::Settling {
        if let Settlement::Charge(more) = Settlement::of(admitted, cost) {
            // TODO(charge): SketchLimiter::charge, from the other branch.
            let _ = (key, more);
        }
        ready(Ok(()))
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
