//! "May this key spend `cost` units now?", asked the same way of every
//! keyed limiter.
//!
//! There are two forms because there are two kinds of answerer. An
//! in-process limiter ([`KeyedLimiter`](struct.KeyedLimiter.html),
//! [`SketchLimiter`](struct.SketchLimiter.html)) answers at
//! once: [`CheckKey`]. A distributed one (a limit kept on a shared store,
//! such as weir-redis's) answers after a round trip: [`CheckKeyAsync`],
//! whose future is `'static` so a tower service can hold it across polls. Every keyed limiter implements the
//! async form (the in-process ones with an already-completed future), so
//! code that takes a `CheckKeyAsync` (a tower layer) accepts all of them;
//! code that must not wait (a store's local fallback while the store is
//! down) takes a `CheckKey`.
//!
//! Both take the key by reference and `Q: ?Sized`, as `HashMap::get` does:
//! a `KeyedLimiter<String, _>` is asked with a `&str` without allocating.
//! Their methods are named as the containers' own methods of the same
//! operation (`check_n`, `charge`, `refund`); a container's own method is
//! what a call on the container finds, and the trait's what generic code
//! finds, with the same meaning.
//!
//! [`SettleKey`] is the third question, asked after the fact: "the request
//! admitted at that cost turned out to cost this much", answered by a
//! refund of the difference or a charge of it ([`Settlement`]). A tower
//! layer asks it when a response has been sent (weir-tower's
//! `RateLimitLayer::settle`).

use crate::decision::{Decision, NeverAllowed, Receipt};
// For the docs' links only. The containers sit above this module (they
// implement its traits), so their links are plain relative ones rather
// than imports, which would make a loop through the crate root.
#[cfg(doc)]
use crate::algorithm::Algorithm;
use std::future::Future;

/// A keyed limiter that decides at once, in process.
///
/// ```
/// use std::num::NonZeroU32;
/// use weir_rate::{CheckKey, Gcra, KeyedLimiter, Quota};
///
/// fn admit(limiter: &impl CheckKey<str>, user: &str) -> bool {
///     limiter.check_n(user, 1).is_ok_and(|d| d.is_allowed())
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
    #[must_use = "a decision not looked at lets a denied request through"]
    fn check_n(&self, key: &Q, cost: u32) -> Result<Decision, NeverAllowed>;

    /// Spend `cost` units for `key` unconditionally (see
    /// [`Algorithm::charge`]), returning the receipt; `None` from a limiter
    /// that cannot charge (the default: a function of the key and cost
    /// only decides). A store's failure policy charges its local limiter
    /// through this while the store is down.
    fn charge(&self, key: &Q, cost: u32) -> Option<Receipt> {
        let _ = (key, cost);
        None
    }

    /// Give back what `receipt` (of a check or charge of `key` by this
    /// limiter) still counts for (see [`Algorithm::refund`]); by default
    /// nothing (a limiter without refunds).
    fn refund(&self, key: &Q, receipt: Receipt) {
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
///     limiter.check_n_async(user, 1).await.is_ok_and(|d| d.is_allowed())
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
    fn check_n_async(&self, key: &Q, cost: u32) -> Self::Future;
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
///   ([`Algorithm::refund`](crate::Algorithm::refund)), so the state is never
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
/// let admitted = per_user.check_n("alice", 5)?;
/// // The request turned out to cost 1: 4 of its 5 units come back.
/// per_user.settle("alice", &admitted, 5, 1).into_inner().unwrap();
/// assert!(per_user.check_n("alice", 9)?.is_allowed());
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
    fn settle(&self, key: &Q, admitted: &Decision, from: u32, to: u32) -> Self::Settling;
}

/// A function of the key and cost decides too (a test double, or a policy
/// written inline).
impl<Q: ?Sized, F> CheckKey<Q> for F
where
    F: Fn(&Q, u32) -> Result<Decision, NeverAllowed> + Send + Sync,
{
    fn check_n(&self, key: &Q, cost: u32) -> Result<Decision, NeverAllowed> {
        self(key, cost)
    }
}
