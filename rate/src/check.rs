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
use crate::decision::{Decision, NeverAllowed, Receipt};
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
    /// Decide `cost` units for `key`, spending them when allowed.
    ///
    /// # Errors
    ///
    /// [`NeverAllowed`] when `cost` exceeds what the quota can ever allow
    /// at once; a denial is an `Ok` decision.
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

/// What settling an admission at its final cost comes to.
///
/// A check of `from` units admitted a request; the request turned out to
/// cost `to`:
///
/// * `to = from`, or the check admitted nothing (a denial, or a denial
///   let through in shadow mode, spent nothing and is owed nothing):
///   [`Keep`](Self::Keep).
/// * `to > from`: [`Charge`](Self::Charge) `to − from` more, now, whether
///   or not the quota has room (a key may go into debt, which later checks
///   pay).
/// * `to < from`: [`Refund`](Self::Refund) `from − to` of the admission's
///   own spending, charged at the admission's instant. This is exact, and
///   never loosens the limit: the admission is read as two spendings at
///   that instant, `to` kept and `from − to` given back, and a refund
///   gives back only what its spending still counts for
///   ([`Limiter::refund`](crate::Limiter::refund)), so the state is never
///   looser than if the check had asked for `to` in the first place. (A
///   full refund followed by a charge of `to` would, in two steps, let a
///   concurrent check see the whole refund, and would charge `to` at a
///   later instant than the spending it stands for.) A decision without a
///   [`receipt`](Decision::receipt) (a limiter without refunds, such as
///   the sketch) keeps what it spent.
///
/// ```
/// use std::num::NonZeroU32;
/// use weir_rate::clock::ManualClock;
/// use weir_rate::{FixedWindow, Quota, RateLimiter, Settlement};
///
/// let quota = Quota::per_minute(NonZeroU32::new(10).unwrap());
/// let limiter = RateLimiter::with_clock(FixedWindow::new(quota), ManualClock::new());
/// let admitted = limiter.check_n(8).unwrap(); // 8 expected, 5 used
/// let Settlement::Refund(surplus) = Settlement::of(&admitted, 8, 5) else { unreachable!() };
/// limiter.refund(&surplus);
/// assert!(limiter.check_n(5).unwrap().is_allowed());
/// assert!(!limiter.check().is_allowed());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settlement {
    /// Nothing to do.
    Keep,
    /// Refund this: the surplus `from − to` of the admission's spending,
    /// at its instant (pass it to the limiter's `refund`).
    Refund(Receipt),
    /// Charge this many more units now.
    Charge(u32),
}

impl Settlement {
    /// Settle `admitted`, the decision of a check of `from` units, at
    /// `to` units.
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
    /// assert_eq!(Settlement::of(&admitted, 8, 8), Settlement::Keep);
    /// assert_eq!(Settlement::of(&admitted, 8, 11), Settlement::Charge(3));
    /// let Settlement::Refund(surplus) = Settlement::of(&admitted, 8, 3) else { unreachable!() };
    /// assert_eq!(surplus.cost(), 5);
    /// limiter.refund("k", &surplus);
    /// assert_eq!(limiter.check_n("k", 0)?.remaining(), 7, "as if it had cost 3");
    /// # Ok::<(), weir_rate::NeverAllowed>(())
    /// ```
    pub fn of(admitted: &Decision, from: u32, to: u32) -> Self {
        if !admitted.is_allowed() || !admitted.is_conforming() {
            return Self::Keep;
        }
        match to.checked_sub(from) {
            Some(0) => Self::Keep,
            Some(more) => Self::Charge(more),
            None => admitted
                .receipt()
                .map_or(Self::Keep, |spent| Self::Refund(spent.part(from - to))),
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
/// per_user.settle_key("alice", &admitted, 5, 1).into_inner().unwrap();
/// assert!(per_user.check_key("alice", 9)?.is_allowed());
/// # Ok::<(), weir_rate::NeverAllowed>(())
/// ```
pub trait SettleKey<Q: ?Sized>: CheckKeyAsync<Q> {
    /// Why a settlement failed (`Infallible` in process).
    type Error: std::error::Error + Send + Sync + 'static;

    /// The future of one settlement: `'static`, so it can finish after
    /// the response that prompted it is gone.
    type Settling: Future<Output = Result<(), Self::Error>> + Send + Unpin + 'static;

    /// Settle `admitted`, the decision this limiter took on a check of
    /// `from` units for `key`, at `to` units: refund or charge the
    /// difference ([`Settlement`]). Settle each admission at most once.
    ///
    /// # Errors
    ///
    /// When the settlement could not be made (a backend unreachable); the
    /// key then keeps what its check charged.
    fn settle_key(&self, key: &Q, admitted: &Decision, from: u32, to: u32) -> Self::Settling;
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
    K: Send,
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

    fn settle_key(&self, key: &Q, admitted: &Decision, from: u32, to: u32) -> Self::Settling {
        match Settlement::of(admitted, from, to) {
            Settlement::Keep => {}
            Settlement::Refund(surplus) => self.refund(key, &surplus),
            Settlement::Charge(more) => {
                let _ = self.charge(key, more);
            }
        }
        ready(Ok(()))
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

/// A sketch settles only upward: it has no refunds (lowering cells that
/// other keys share could loosen them), so a request that cost less than
/// it was admitted at keeps its admission, which is never looser.
impl<Q: Hash + ?Sized, C: Clock> SettleKey<Q> for SketchLimiter<C>
where
    Self: CheckKeyAsync<Q>,
{
    type Error = Infallible;
    type Settling = Ready<Result<(), Infallible>>;

    fn settle_key(&self, key: &Q, admitted: &Decision, from: u32, to: u32) -> Self::Settling {
        // Its decisions carry no receipt: a refund comes out as `Keep`.
        if let Settlement::Charge(more) = Settlement::of(admitted, from, to) {
            let _ = self.charge(key, more);
        }
        ready(Ok(()))
    }
}

/// The Redis limiter settles on Redis, after a round trip, against the
/// server's clock: a refund of the surplus by its receipt, a charge of the
/// shortfall ([`RedisLimiter::refund`](crate::redis::RedisLimiter::refund),
/// [`RedisLimiter::charge`](crate::redis::RedisLimiter::charge)), for the
/// key's `Display` form as its checks use. While Redis is down a charge
/// goes to the failure policy's local limiter if it has one; otherwise the
/// settlement fails and the key keeps what its check charged.
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
impl<Q: std::fmt::Display + ?Sized> SettleKey<Q> for crate::redis::RedisLimiter {
    type Error = crate::redis::RedisLimitError;
    type Settling = std::pin::Pin<Box<dyn Future<Output = Result<(), Self::Error>> + Send>>;

    fn settle_key(&self, key: &Q, admitted: &Decision, from: u32, to: u32) -> Self::Settling {
        let settlement = Settlement::of(admitted, from, to);
        if settlement == Settlement::Keep {
            return Box::pin(ready(Ok(())));
        }
        let limiter = self.clone();
        let key = key.to_string();
        Box::pin(async move {
            match settlement {
                Settlement::Keep => Ok(()),
                Settlement::Refund(surplus) => limiter.refund(&key, &surplus).await,
                Settlement::Charge(more) => limiter.charge(&key, more).await.map(|_| ()),
            }
        })
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::{FixedWindow, Gcra, LeakyBucket, Quota, SlidingLog, SlidingWindow, TokenBucket};
    use std::num::NonZeroU32;
    use std::task::{Context, Poll, Waker};
    use std::time::Duration;

    fn settled<F: Future<Output = Result<(), Infallible>> + Unpin>(mut f: F) {
        let mut cx = Context::from_waker(Waker::noop());
        assert!(matches!(
            std::pin::Pin::new(&mut f).poll(&mut cx),
            Poll::Ready(Ok(()))
        ));
    }

    /// Units the key can still take one at a time (at most 100).
    fn left<L: Limiter + Clone>(limiter: &KeyedLimiter<u8, L, ManualClock>) -> u32 {
        (0..100)
            .take_while(|_| limiter.check_n(&1, 1).is_ok_and(|d| d.is_allowed()))
            .count() as u32
    }

    /// Admitting at `a` then settling at `f` after `elapsed` leaves the key
    /// exactly as a check of `f` would have at the same instant, and never
    /// looser than one at the admission's instant when time has passed.
    fn settles_as_if_checked_at_the_final_cost<L: Limiter + Clone + std::fmt::Debug + 'static>(
        algorithm: L,
    ) {
        for (a, f) in [(6, 2), (6, 0), (2, 6), (3, 3), (0, 4), (7, 1)] {
            for elapsed in [0, 1, 7, 30] {
                let clock = ManualClock::new();
                let settling = KeyedLimiter::with_clock(algorithm.clone(), clock.clone());
                let reference = KeyedLimiter::with_clock(algorithm.clone(), clock.clone());
                // Earlier spending on the key, so refunds and charges meet
                // a state that is neither fresh nor full.
                for limiter in [&settling, &reference] {
                    assert!(limiter.check_n(&1, 3).unwrap().is_allowed());
                }
                let admitted = settling.check_n(&1, a).unwrap();
                assert!(admitted.is_allowed(), "{a}");
                let reference_allowed = reference.check_n(&1, f).unwrap().is_allowed();
                clock.advance(Duration::from_secs(elapsed));
                settled(settling.settle_key(&1, &admitted, a, f));
                let (settled_left, reference_left) = (left(&settling), left(&reference));
                let case = format!("{algorithm:?}: {a} settled at {f} after {elapsed} s");
                assert!(
                    settled_left <= reference_left,
                    "looser: {settled_left} > {reference_left}; {case}"
                );
                if elapsed == 0 && reference_allowed {
                    assert_eq!(settled_left, reference_left, "{case}");
                }
            }
        }
    }

    #[test]
    fn every_algorithm_settles_exactly_and_never_looser() {
        let quota = Quota::per_minute(NonZeroU32::new(10).unwrap());
        settles_as_if_checked_at_the_final_cost(FixedWindow::new(quota));
        settles_as_if_checked_at_the_final_cost(SlidingLog::new(quota));
        settles_as_if_checked_at_the_final_cost(SlidingWindow::try_new(quota, 4).unwrap());
        settles_as_if_checked_at_the_final_cost(TokenBucket::new(quota));
        settles_as_if_checked_at_the_final_cost(Gcra::new(quota));
        settles_as_if_checked_at_the_final_cost(LeakyBucket::meter(quota));
    }

    #[test]
    fn denials_settle_nothing() {
        let quota = Quota::per_minute(NonZeroU32::new(2).unwrap());
        let limiter = KeyedLimiter::with_clock(FixedWindow::new(quota), ManualClock::new());
        assert!(limiter.check_n(&1u8, 2).unwrap().is_allowed());
        let denied = limiter.check_n(&1, 1).unwrap();
        assert!(!denied.is_allowed());
        assert_eq!(Settlement::of(&denied, 1, 0), Settlement::Keep);
        assert_eq!(Settlement::of(&denied, 1, 50), Settlement::Keep);
        settled(limiter.settle_key(&1, &denied, 1, 50));
        limiter.set_shadow(true);
        let let_through = limiter.check_n(&1, 1).unwrap();
        assert!(let_through.is_allowed() && !let_through.is_conforming());
        assert_eq!(Settlement::of(&let_through, 1, 0), Settlement::Keep);
        limiter.set_shadow(false);
        assert_eq!(left(&limiter), 0, "still spent, never more");
    }

    #[test]
    fn a_sketch_settles_upward_only() {
        let quota = Quota::per_minute(NonZeroU32::new(10).unwrap());
        let sketch = || {
            SketchLimiter::with_clock(quota, crate::Shape::rows::<4, 1024>(), ManualClock::new())
        };
        let left = |s: &SketchLimiter<ManualClock>| {
            (0..100).take_while(|_| s.check(&"k").is_allowed()).count()
        };
        let checked_at = |cost| {
            let s = sketch();
            assert!(s.check_n(&"k", cost).unwrap().is_allowed());
            left(&s)
        };
        let settled_at = |cost| {
            let s = sketch();
            let admitted = s.check_n(&"k", 4).unwrap();
            settled(s.settle_key(&"k", &admitted, 4, cost));
            left(&s)
        };
        assert_eq!(settled_at(1), checked_at(4), "no refund in a sketch");
        assert_eq!(settled_at(7), checked_at(7), "charged 3 more");
        assert!(checked_at(7) < checked_at(4));
    }
}
