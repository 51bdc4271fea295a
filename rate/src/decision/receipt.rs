//! Receipts: what a spending was, so a refund can name it.

use super::Decision;

/// What an allowed check spent: its cost and the instant (on the limiter's
/// clock, after the limiter's own clamping of time that went backwards) it
/// was charged to. A refund names the spending it gives back by its
/// receipt, so it can only return capacity where that spending was
/// counted; see [`Algorithm::refund`](crate::Algorithm::refund).
///
/// Allowed checks hand receipts out ([`Decision::receipt`]), and so do
/// forced charges ([`Algorithm::charge`](crate::Algorithm::charge) and the
/// containers' `charge`). Refund each one at most once, and only to the
/// limiter and key that issued it: another spending charged at the same
/// instant would be given back in its place.
///
/// ```
/// use std::num::NonZeroU32;
/// use weir_rate::clock::ManualClock;
/// use weir_rate::{Gcra, Quota, RateLimiter};
///
/// let quota = Quota::per_second(NonZeroU32::new(2).unwrap());
/// let limiter = RateLimiter::with_clock(Gcra::new(quota), ManualClock::new());
/// let receipt = limiter.check_n(2).unwrap().receipt().unwrap();
/// assert_eq!(receipt.cost(), 2);
/// assert!(!limiter.check().is_allowed());
/// limiter.refund(&receipt); // the work was never done
/// assert!(limiter.check().is_allowed());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Receipt {
    at_ns: u64,
    cost: u32,
    /// Charged on a remote store (the instant is the store's clock), not in
    /// process: a store's limiter refunds such a receipt on the store and
    /// any other on its local fallback, where that spending was counted.
    remote: bool,
    /// Of a remote receipt: the instant the same spending was also counted
    /// on the store limiter's local fallback ([`NOT_COUNTED`] if it was
    /// not), so that a refund gives it back there too.
    fallback_at_ns: u64,
}

/// [`Receipt::fallback_at_ns`] of a spending the fallback did not count.
const NOT_COUNTED: u64 = u64::MAX;

impl Receipt {
    /// A spending of `cost` charged at `at_ns`, in process.
    #[inline]
    pub(crate) fn new(at_ns: u64, cost: u32) -> Self {
        Self {
            at_ns,
            cost,
            remote: false,
            fallback_at_ns: NOT_COUNTED,
        }
    }

    /// A spending of `cost` that a remote store charged at `at_ns`
    /// nanoseconds of its own clock: what a store-backed limiter puts in
    /// the decisions it returns, so that a refund goes back to the store.
    ///
    /// ```
    /// use weir_rate::Receipt;
    ///
    /// let spent = Receipt::remote(1_700_000_000_000_000_000, 3);
    /// assert!(spent.is_remote());
    /// assert_eq!((spent.at_nanos(), spent.cost()), (1_700_000_000_000_000_000, 3));
    /// ```
    #[inline]
    pub fn remote(at_ns: u64, cost: u32) -> Self {
        Self {
            at_ns,
            cost,
            remote: true,
            fallback_at_ns: NOT_COUNTED,
        }
    }

    /// Whether a remote store charged it ([`remote`](Self::remote)), as
    /// opposed to an in-process limiter.
    #[inline]
    pub fn is_remote(self) -> bool {
        self.remote
    }

    /// The instant the spending was charged to, in nanoseconds of the
    /// limiter's clock (of a remote store's receipt, the store's clock).
    #[inline]
    pub fn at_nanos(self) -> u64 {
        self.at_ns
    }

    /// The units spent.
    #[inline]
    pub fn cost(self) -> u32 {
        self.cost
    }

    /// This remote spending, also counted on a local limiter by `local`
    /// (that limiter's receipt for the same units): what a store-backed
    /// limiter hands out when its fallback shadows the store, so that a
    /// refund gives the units back in both places. Of a receipt that is
    /// not remote, itself.
    ///
    /// ```
    /// use weir_rate::{nonzero, Gcra, Quota, RateLimiter, Receipt};
    ///
    /// let fallback = RateLimiter::new(Gcra::new(Quota::per_second(nonzero!(5))));
    /// let local = fallback.charge(2);
    /// let on_store = Receipt::remote(1_700_000_000_000_000_000, 2);
    /// assert_eq!(on_store.fallback(), None);
    /// assert_eq!(on_store.counted_locally(local).fallback(), Some(local));
    /// ```
    #[inline]
    pub fn counted_locally(self, local: Receipt) -> Self {
        if !self.remote || local.remote {
            return self;
        }
        Self {
            fallback_at_ns: local.at_ns,
            ..self
        }
    }

    /// The local limiter's receipt for this remote spending, if it was
    /// also counted there ([`counted_locally`](Self::counted_locally)),
    /// for the same units.
    #[inline]
    pub fn fallback(self) -> Option<Receipt> {
        (self.remote && self.fallback_at_ns != NOT_COUNTED)
            .then(|| Receipt::new(self.fallback_at_ns, self.cost))
    }

    /// `cost` units of this spending (at most all of it), charged at the
    /// same instant: what a refund of part of it names.
    #[inline]
    pub(crate) fn part(self, cost: u32) -> Self {
        Self {
            cost: cost.min(self.cost),
            ..self
        }
    }
}

/// What names a spending in a refund: a [`Decision`] (its receipt, if it
/// spent anything) or the [`Receipt`] itself, such as a forced charge
/// returns. Every container's `refund` takes either.
///
/// ```
/// use std::num::NonZeroU32;
/// use weir_rate::clock::ManualClock;
/// use weir_rate::{Gcra, Quota, RateLimiter};
///
/// let limiter = RateLimiter::with_clock(Gcra::new(Quota::per_second(NonZeroU32::new(2).unwrap())), ManualClock::new());
/// let charged = limiter.charge(5); // work already done: a debt of 3
/// assert!(!limiter.check().is_allowed());
/// limiter.refund(&charged); // at the same instant, all of it comes back
/// assert!(limiter.check().is_allowed());
/// ```
pub trait Spending {
    /// The receipt of the spending, if anything was spent.
    fn receipt(&self) -> Option<Receipt>;
}

impl Spending for Decision {
    #[inline]
    fn receipt(&self) -> Option<Receipt> {
        self.receipt
    }
}

impl Spending for Receipt {
    #[inline]
    fn receipt(&self) -> Option<Receipt> {
        Some(*self)
    }
}
