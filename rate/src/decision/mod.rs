//! The outcome of a check, with everything an HTTP response needs.

mod error;
mod headers;
pub(crate) mod policy;
mod receipt;

pub use error::{CheckAtError, NeverAllowed};
pub use headers::PolicyName;
use headers::TOO_MANY_REQUESTS;
pub use receipt::{Receipt, Spending};

use crate::mode::Mode;
use std::fmt;
use std::time::Duration;
use weir_primitives::time::duration_to_nanos;

/// The result of a check.
///
/// ```
/// use std::num::NonZeroU32;
/// use weir_rate::clock::ManualClock;
/// use weir_rate::{Gcra, Quota, RateLimiter};
///
/// let quota = Quota::per_minute(NonZeroU32::new(2).unwrap());
/// let limiter = RateLimiter::with_clock(Gcra::new(quota), ManualClock::new());
/// assert!(limiter.check().is_allowed());
/// let d = limiter.check();
/// assert_eq!(d.remaining(), 0);
/// let denied = limiter.check();
/// assert!(!denied.is_allowed());
/// assert_eq!(denied.retry_after(), Some(std::time::Duration::from_secs(30)));
/// for (name, value) in denied.headers("api") {
///     println!("{name}: {value}"); // RateLimit-Policy, RateLimit, Retry-After
/// }
/// ```
///
/// The checks that may deny are `#[must_use]`: a denial not looked at lets
/// the request through. A wait's decision is always an admission, and may
/// be dropped.
///
/// ```compile_fail
/// #![deny(unused_must_use)]
/// use std::num::NonZeroU32;
/// use weir_rate::{Gcra, Quota, RateLimiter};
///
/// let limiter = RateLimiter::new(Gcra::new(Quota::per_second(NonZeroU32::MIN)));
/// limiter.check(); // a denial would go unnoticed: an error here
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Decision {
    pub(crate) allowed: bool,
    pub(crate) conforming: bool,
    pub(crate) limit: u32,
    // Times in nanoseconds, made `Duration`s only when asked for: a check
    // that returns its decision then pays no division and moves a third
    // fewer bytes.
    pub(crate) window_ns: u64,
    pub(crate) remaining: Remaining,
    pub(crate) reset_after_ns: u64,
    /// Zero when the check conformed; a denial's is at least 1.
    pub(crate) retry_after_ns: u64,
    pub(crate) delay_ns: u64,
    pub(crate) receipt: Option<Receipt>,
    /// Each limit's own decision, when this one combines several (an
    /// all-or-nothing set); none for a single limit.
    pub(crate) parts: Option<Parts>,
    /// The policy that decided, when the limiter names one per key (a
    /// tier); none when the caller's own name applies. Interned: one thin
    /// reference, nothing to drop.
    pub(crate) policy: Option<&'static policy::Interned>,
}

/// The limits of a combined decision, in a canonical order. A pair, the
/// common case, is kept inline: a check of two limits then allocates
/// nothing (each all-or-nothing check combines twice, peek and consume).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Parts {
    Two([Part; 2]),
    Many(Box<[Part]>),
}

impl Parts {
    /// The parts of `a` and `b` (whose own parts are `own_a` and `own_b`),
    /// sorted so that combining does not depend on the order.
    fn of(a: &Decision, own_a: Part, b: &Decision, own_b: Part) -> Self {
        match (&a.parts, &b.parts) {
            (None, None) => {
                let mut two = [own_a, own_b];
                two.sort_unstable_by_key(Part::order);
                Self::Two(two)
            }
            (pa, pb) => {
                let len = |parts: &Option<Parts>| parts.as_ref().map_or(1, |p| p.as_slice().len());
                let mut many = Vec::with_capacity(len(pa) + len(pb));
                for (parts, own) in [(pa, own_a), (pb, own_b)] {
                    match parts {
                        Some(parts) => many.extend_from_slice(parts.as_slice()),
                        None => many.push(own),
                    }
                }
                many.sort_unstable_by_key(Part::order);
                Self::Many(many.into_boxed_slice())
            }
        }
    }

    pub(crate) fn as_slice(&self) -> &[Part] {
        match self {
            Self::Two(two) => two,
            Self::Many(many) => many,
        }
    }
}

/// One limit's share of a combined decision, as its headers need it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Part {
    pub(crate) limit: u32,
    pub(crate) window_ns: u64,
    pub(crate) remaining: u32,
    pub(crate) reset_after_ns: u64,
}

impl Part {
    /// The canonical order of a combined decision's parts.
    fn order(&self) -> (u64, u32, u32, u64) {
        (
            self.window_ns,
            self.limit,
            self.remaining,
            self.reset_after_ns,
        )
    }
}

impl fmt::Debug for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Decision")
            .field("allowed", &self.allowed)
            .field("conforming", &self.conforming)
            .field("limit", &self.limit)
            .field("window", &self.window())
            .field("remaining", &self.remaining)
            .field("reset_after", &self.reset_after())
            .field("retry_after", &self.retry_after())
            .field("delay", &self.delay())
            .field("receipt", &self.receipt)
            .field("policy", &self.policy())
            .finish()
    }
}

/// Units remaining as a quotient, divided only when asked for (the
/// division is the dearest step of a GCRA check).
#[derive(Clone, Copy)]
pub(crate) struct Remaining {
    num: u64,
    den: u64,
}

impl Remaining {
    #[inline]
    pub(crate) fn exact(n: u32) -> Self {
        Self {
            num: u64::from(n),
            den: 1,
        }
    }

    /// `⌊num / den⌋` units; `den` must be non-zero.
    #[inline]
    pub(crate) fn ratio(num: u64, den: u64) -> Self {
        Self { num, den }
    }

    #[inline]
    fn get(self) -> u32 {
        u32::try_from(self.num / self.den.max(1)).unwrap_or(u32::MAX)
    }
}

impl PartialEq for Remaining {
    fn eq(&self, other: &Self) -> bool {
        self.get() == other.get()
    }
}

impl Eq for Remaining {}

impl fmt::Debug for Remaining {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.get(), f)
    }
}

impl Decision {
    pub(crate) fn allow_ns(limit: u32, window_ns: u64, remaining: u32, reset_after: u64) -> Self {
        Self::allow_with(limit, window_ns, Remaining::exact(remaining), reset_after)
    }

    #[inline]
    pub(crate) fn allow_with(
        limit: u32,
        window_ns: u64,
        remaining: Remaining,
        reset_after: u64,
    ) -> Self {
        Self {
            allowed: true,
            conforming: true,
            limit,
            window_ns,
            remaining,
            reset_after_ns: reset_after,
            retry_after_ns: 0,
            delay_ns: 0,
            receipt: None,
            parts: None,
            policy: None,
        }
    }

    pub(crate) fn deny_ns(
        limit: u32,
        window_ns: u64,
        remaining: u32,
        reset_after: u64,
        retry_after: u64,
    ) -> Self {
        Self::deny_with(
            limit,
            window_ns,
            Remaining::exact(remaining),
            reset_after,
            retry_after,
        )
    }

    /// [`deny_ns`](Self::deny_ns) with the remaining units as a quotient, divided
    /// only when asked for.
    #[inline]
    pub(crate) fn deny_with(
        limit: u32,
        window_ns: u64,
        remaining: Remaining,
        reset_after: u64,
        retry_after: u64,
    ) -> Self {
        Self {
            allowed: false,
            conforming: false,
            limit,
            window_ns,
            remaining,
            reset_after_ns: reset_after,
            retry_after_ns: retry_after.max(1),
            delay_ns: 0,
            receipt: None,
            parts: None,
            policy: None,
        }
    }

    /// An allowing decision computed elsewhere (a limit kept on a shared
    /// store answers with one): `limit` units per `window`, `remaining`
    /// left, the quota full again after `reset_after`. It carries no
    /// receipt until one is given ([`with_receipt`](Self::with_receipt)).
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir_rate::Decision;
    ///
    /// let d = Decision::allow(10, Duration::from_secs(1), 9, Duration::from_millis(100));
    /// assert!(d.is_allowed() && d.is_conforming());
    /// assert_eq!(d.retry_after(), None);
    /// ```
    pub fn allow(limit: u32, window: Duration, remaining: u32, reset_after: Duration) -> Self {
        Self::allow_ns(
            limit,
            duration_to_nanos(window),
            remaining,
            duration_to_nanos(reset_after),
        )
    }

    /// A denial computed elsewhere: as [`allow`](Self::allow), and the
    /// same request would be allowed after `retry_after` (at least 1 ns).
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir_rate::Decision;
    ///
    /// let second = Duration::from_secs(1);
    /// let d = Decision::deny(10, second, 0, second, second);
    /// assert!(!d.is_allowed());
    /// assert_eq!(d.retry_after(), Some(second));
    /// ```
    pub fn deny(
        limit: u32,
        window: Duration,
        remaining: u32,
        reset_after: Duration,
        retry_after: Duration,
    ) -> Self {
        Self::deny_ns(
            limit,
            duration_to_nanos(window),
            remaining,
            duration_to_nanos(reset_after),
            duration_to_nanos(retry_after),
        )
    }

    /// The same decision naming `receipt` as what it spent, for a refund;
    /// a denial keeps none (it spent nothing).
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir_rate::{Decision, Receipt};
    ///
    /// let spent = Receipt::remote(1_700_000_000_000_000_000, 1);
    /// let d = Decision::allow(10, Duration::from_secs(1), 9, Duration::ZERO).with_receipt(spent);
    /// assert_eq!(d.receipt(), Some(spent));
    /// ```
    pub fn with_receipt(self, receipt: Receipt) -> Self {
        Self {
            receipt: self.allowed.then_some(receipt),
            ..self
        }
    }

    /// The same decision, made by the policy `name` (a key's tier).
    #[inline]
    pub(crate) fn with_policy(self, name: &'static policy::Interned) -> Self {
        Self {
            policy: Some(name),
            ..self
        }
    }

    /// The decision for a key under no limit (an unlimited tier): allowed,
    /// counted nowhere, with no header fields to send
    /// ([`headers`](Self::headers) is empty).
    ///
    /// ```
    /// use weir_rate::Decision;
    ///
    /// let d = Decision::unlimited();
    /// assert!(d.is_allowed() && d.is_unlimited());
    /// assert!(d.headers("internal").is_empty());
    /// ```
    pub fn unlimited() -> Self {
        Self::allow_ns(u32::MAX, 0, u32::MAX, 0)
    }

    /// Whether this is [`unlimited`](Self::unlimited)'s decision: no limit
    /// applies, and no `RateLimit` fields describe one.
    #[inline]
    pub fn is_unlimited(&self) -> bool {
        self.window_ns == 0 && self.limit == u32::MAX && self.allowed && self.parts.is_none()
    }

    /// The name of the policy that made this decision, if the limiter
    /// names one per key (see [`TieredLimiter`](crate::TieredLimiter));
    /// `None` when the caller's own name applies.
    #[inline]
    pub fn policy(&self) -> Option<&str> {
        self.policy.map(policy::Interned::as_str)
    }

    /// Whether the request should proceed. In shadow (dry-run) mode this is
    /// always true; [`is_conforming`](Self::is_conforming) tells whether the
    /// limit would have denied it.
    #[inline]
    pub fn is_allowed(&self) -> bool {
        self.allowed
    }

    /// Whether the request was within the limit (false for a denial, also in
    /// shadow mode where it is let through anyway).
    #[inline]
    pub fn is_conforming(&self) -> bool {
        self.conforming
    }

    /// The quota's units per window (`q` of `RateLimit-Policy`).
    #[inline]
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// The quota's window (`w` of `RateLimit-Policy`).
    #[inline]
    pub fn window(&self) -> Duration {
        Duration::from_nanos(self.window_ns)
    }

    /// Units that could still be spent now (`r` of `RateLimit`).
    #[inline]
    pub fn remaining(&self) -> u32 {
        self.remaining.get()
    }

    /// Time until the quota is fully available again if nothing more is
    /// spent (`t` of `RateLimit`).
    #[inline]
    pub fn reset_after(&self) -> Duration {
        Duration::from_nanos(self.reset_after_ns)
    }

    /// For a denial, the time after which the same request would be allowed
    /// if nothing else is spent meanwhile; `None` when it conformed.
    #[inline]
    pub fn retry_after(&self) -> Option<Duration> {
        (self.retry_after_ns > 0).then(|| Duration::from_nanos(self.retry_after_ns))
    }

    /// For a shaper ([`LeakyBucket::try_shaper`](crate::LeakyBucket::try_shaper)):
    /// how long the caller must wait before proceeding. Zero otherwise, and
    /// in shadow mode (a dry run holds nothing back).
    #[inline]
    pub fn delay(&self) -> Duration {
        Duration::from_nanos(self.delay_ns)
    }

    /// What this check spent, to name in a refund: `Some` only for an
    /// allowed check that consumed a non-zero cost (not for a peek, a
    /// denial, or a denial let through in shadow mode).
    #[inline]
    pub fn receipt(&self) -> Option<Receipt> {
        self.receipt
    }

    /// The decision of a check of `cost` in `mode`, charged (if it spent
    /// anything) at `at_ns`: with a receipt when allowed, consumed and
    /// `cost > 0`.
    #[inline]
    pub(crate) fn charged(self, mode: Mode, at_ns: u64, cost: u32) -> Self {
        let spent = self.allowed && mode == Mode::Consume && cost > 0;
        Self {
            receipt: spent.then_some(Receipt::new(at_ns, cost)),
            ..self
        }
    }

    /// The HTTP status to refuse the request with: `Some(429)` (Too Many
    /// Requests) when it must be refused, `None` when it may proceed.
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir_rate::Decision;
    ///
    /// let second = Duration::from_secs(1);
    /// assert_eq!(Decision::deny(1, second, 0, second, second).status(), Some(429));
    /// ```
    #[inline]
    pub fn status(&self) -> Option<u16> {
        (!self.allowed).then_some(TOO_MANY_REQUESTS)
    }

    /// The more restrictive of two decisions (for several limits checked
    /// together): allowed only if both are, the later reset and retry, and
    /// the limit, window and remaining of the binding limit — a denying one
    /// if any denies, otherwise the one with the least remaining. The result
    /// does not depend on the order of the two. It keeps a receipt only if
    /// both carry the same one (each limit charged the same instant); a
    /// refund could not name both spendings otherwise.
    ///
    /// The combined decision remembers each limit's own (limit, window,
    /// remaining, reset), so its headers list every quota the request is
    /// under, not only the binding one.
    pub fn combine(self, other: Decision) -> Decision {
        // One division each: a part's remaining is a quotient.
        let (own_a, own_b) = (self.own_part(), other.own_part());
        // Non-conforming first (false < true), then least remaining; the
        // limit and window only break exact ties, so the choice is symmetric.
        let binding =
            |d: &Decision, own: &Part| (d.conforming, own.remaining, d.limit, d.window_ns);
        let other_binds = binding(&other, &own_b) < binding(&self, &own_a);
        let parts = Parts::of(&self, own_a, &other, own_b);
        let allowed = self.allowed && other.allowed;
        let conforming = self.conforming && other.conforming;
        let reset_after_ns = self.reset_after_ns.max(other.reset_after_ns);
        // Zero (none) loses to any retry time.
        let retry_after_ns = self.retry_after_ns.max(other.retry_after_ns);
        let delay_ns = self.delay_ns.max(other.delay_ns);
        let receipt = match (self.receipt, other.receipt) {
            (Some(a), Some(b)) if a == b => Some(a),
            _ => None,
        };
        let first = if other_binds { other } else { self };
        Decision {
            allowed,
            conforming,
            reset_after_ns,
            retry_after_ns,
            delay_ns,
            receipt,
            parts: Some(parts),
            ..first
        }
    }

    /// This decision's own limit, window, remaining and reset.
    pub(crate) fn own_part(&self) -> Part {
        Part {
            limit: self.limit,
            window_ns: self.window_ns,
            remaining: self.remaining(),
            reset_after_ns: self.reset_after_ns,
        }
    }

    /// The same decision let through (shadow mode): allowed, but still
    /// marked non-conforming when it exceeded the limit.
    pub(crate) fn shadowed(self) -> Self {
        Self {
            allowed: true,
            // A dry run holds nothing back: not a denial, not a shaper's wait.
            delay_ns: 0,
            ..self
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn combining_does_not_depend_on_order() {
        let allowed_empty = Decision::allow_ns(10, 1_000_000_000, 0, 5);
        let denied = Decision::deny_ns(20, 60_000_000_000, 3, 7, 9);
        assert_eq!(
            allowed_empty.clone().combine(denied.clone()),
            denied.clone().combine(allowed_empty.clone())
        );
        let combined = denied.combine(allowed_empty);
        assert!(!combined.is_allowed());
        assert_eq!((combined.limit(), combined.remaining()), (20, 3));
    }

    use proptest::prelude::*;

    /// A decision of one limit: allowed or denied, with small figures so
    /// that ties (which the order must not decide either) are common.
    fn one_limit() -> impl Strategy<Value = Decision> {
        (any::<bool>(), 1..4u32, 1..4u64, 0..4u32, 0..4u64, 1..4u64).prop_map(
            |(allowed, limit, window_s, remaining, reset, retry)| {
                let window_ns = window_s * 1_000_000_000;
                if allowed {
                    Decision::allow_ns(limit, window_ns, remaining, reset)
                } else {
                    Decision::deny_ns(limit, window_ns, remaining, reset, retry)
                }
            },
        )
    }

    proptest! {
        /// Neither the order nor the grouping of the limits changes a
        /// combined decision, and it keeps every limit's own figures.
        #[test]
        fn combining_is_symmetric_and_associative_and_keeps_every_part(
            a in one_limit(), b in one_limit(), c in one_limit(), d in one_limit(),
        ) {
            prop_assert_eq!(a.clone().combine(b.clone()), b.clone().combine(a.clone()));
            let left = a.clone().combine(b.clone()).combine(c.clone());
            let right = a.clone().combine(b.clone().combine(c.clone()));
            prop_assert_eq!(&left, &right);
            prop_assert_eq!(left.parts.as_ref(), right.parts.as_ref());
            let pairs = a.clone().combine(b.clone()).combine(c.clone().combine(d.clone()));
            let chain = a.clone().combine(b.clone()).combine(c.clone()).combine(d.clone());
            prop_assert_eq!(pairs.parts.as_ref(), chain.parts.as_ref());
            let mut own: Vec<Part> = [&a, &b, &c, &d].map(|x| x.own_part()).to_vec();
            own.sort_unstable_by_key(Part::order);
            prop_assert_eq!(chain.parts.as_ref().map(Parts::as_slice), Some(&own[..]));
            prop_assert_eq!(
                chain.is_allowed(),
                [&a, &b, &c, &d].iter().all(|x| x.is_allowed())
            );
            // The binding limit: a non-conforming one if any, then the
            // least remaining.
            let binding = [&a, &b, &c, &d]
                .map(|x| (x.is_conforming(), x.remaining()))
                .into_iter()
                .min();
            prop_assert_eq!(Some((chain.is_conforming(), chain.remaining())), binding);
        }
    }
}
