use super::clamp_ns;
use crate::algorithm::{Algorithm, Forgettable};
use crate::decision::{Decision, Receipt, Remaining};
use crate::mode::Mode;
use crate::quota::Quota;
use std::time::Duration;

/// The generic cell rate algorithm (virtual scheduling), as governor and
/// redis-cell use it: the whole state is one timestamp, the theoretical
/// arrival time (TAT) at which the key's spending would be fully paid off.
///
/// With emission interval `T = window / limit` (rounded up to whole
/// nanoseconds) and tolerance `τ = burst·T`, a request of `cost` at `now` is
/// allowed iff `max(TAT, now) + cost·T ≤ now + τ`, and then TAT advances to
/// that value. Mathematically the same limiter as a token bucket of `burst`
/// tokens refilled every `T`; it allows at most `burst + t/T` units in any
/// interval of length `t`.
///
/// A refund moves TAT back by the part of the spending's `cost·T` that has
/// not elapsed since it was charged, so never by more than that spending
/// still holds of the schedule. A forced charge moves TAT forward by
/// `cost·T` past the tolerance if need be ([`Algorithm::charge`]).
///
/// ```
/// use std::num::NonZeroU32;
/// use weir_rate::{Gcra, Algorithm, Mode, Quota};
///
/// let gcra = Gcra::new(Quota::per_second(NonZeroU32::new(4).unwrap()));
/// let mut tat = gcra.new_state(0);
/// assert_eq!((0..10).filter(|_| gcra.check(&mut tat, 0, 1, Mode::Consume).unwrap().is_allowed()).count(), 4);
/// let denied = gcra.check(&mut tat, 0, 1, Mode::Consume).unwrap();
/// assert_eq!(denied.retry_after(), Some(std::time::Duration::from_millis(250)));
/// ```
#[derive(Debug, Clone)]
pub struct Gcra {
    quota: Quota,
    interval: u64,
    tolerance: u64,
}

/// [`Gcra`]'s state: the theoretical arrival time, in clock nanoseconds.
pub(crate) type GcraState = u64;

/// What one GCRA step decided.
pub(crate) enum Step {
    /// Allowed: the new TAT.
    Allow(u64),
    /// Denied: the TAT in force (at least `now`).
    Deny(u64),
}

/// How far a refund of `receipt` at `now` may move the TAT back: the part
/// of the spending's `cost·interval` not yet elapsed since it was charged.
/// Wherever the spending sits in the schedule (earlier refunds move it
/// forward), its slot started no earlier than that instant, so at least
/// this much of it is still ahead of `now`.
#[inline]
fn unelapsed(receipt: Receipt, now: u64, interval: u64) -> u64 {
    let whole = u128::from(receipt.cost()) * u128::from(interval);
    let ends = u128::from(receipt.at_nanos()) + whole;
    clamp_ns(ends.saturating_sub(u128::from(now)).min(whole))
}

/// The GCRA test shared by [`Gcra`] and the sketch-backed keyed limiter.
#[inline]
pub(crate) fn gcra_step(tat: u64, now: u64, cost: u32, interval: u64, tolerance: u64) -> Step {
    let start = tat.max(now);
    let new = u128::from(start) + u128::from(cost) * u128::from(interval);
    // A TAT past the clock's range cannot be kept: saturating it would
    // forget the cost, so at the end of time the limiter denies instead.
    match u64::try_from(new) {
        Ok(new) if u128::from(new) <= u128::from(now) + u128::from(tolerance) => Step::Allow(new),
        _ => Step::Deny(start),
    }
}

impl Gcra {
    /// A GCRA for `quota` (rate `limit / window`, burst `burst`).
    pub fn new(quota: Quota) -> Self {
        let interval = quota.emission_interval_nanos();
        let tolerance = interval.saturating_mul(u64::from(quota.burst()));
        Self {
            quota,
            interval,
            tolerance,
        }
    }

    /// The quota it enforces.
    #[inline]
    pub fn quota(&self) -> Quota {
        self.quota
    }

    /// The emission interval `T = window / limit`, rounded up to a whole
    /// nanosecond: a unit comes back every `T`.
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use std::time::Duration;
    /// use weir_rate::{Gcra, Quota};
    ///
    /// let gcra = Gcra::new(Quota::per_second(NonZeroU32::new(3).unwrap()));
    /// assert_eq!(gcra.emission_interval(), Duration::from_nanos(333_333_334));
    /// ```
    pub fn emission_interval(&self) -> Duration {
        Duration::from_nanos(self.interval)
    }

    /// The tolerance `τ = burst·T`: how far ahead of now a key's schedule
    /// may run.
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use std::time::Duration;
    /// use weir_rate::{Gcra, Quota};
    ///
    /// let gcra = Gcra::new(Quota::per_second(NonZeroU32::new(4).unwrap()));
    /// assert_eq!(gcra.tolerance(), Duration::from_secs(1));
    /// ```
    pub fn tolerance(&self) -> Duration {
        Duration::from_nanos(self.tolerance)
    }

    /// `T` in nanoseconds.
    #[inline]
    pub(crate) fn interval_nanos(&self) -> u64 {
        self.interval
    }

    /// `τ` in nanoseconds.
    #[inline]
    pub(crate) fn tolerance_nanos(&self) -> u64 {
        self.tolerance
    }

    /// A GCRA with precomputed parameters (for the sketch limiter).
    pub(crate) fn from_parts(quota: Quota, interval: u64, tolerance: u64) -> Self {
        Self {
            quota,
            interval,
            tolerance,
        }
    }

    /// The decision for a step. Divisions are on `u64` (the hot path).
    #[inline]
    pub(crate) fn decision(&self, now: u64, cost: u32, step: &Step) -> Decision {
        let (limit, window) = (self.quota.limit(), self.quota.window_nanos());
        let horizon = u128::from(now) + u128::from(self.tolerance);
        let t = self.interval;
        match *step {
            Step::Allow(new) => {
                // new ≤ horizon, and horizon − new ≤ τ fits in u64.
                let slack = (horizon - u128::from(new)) as u64;
                Decision::allow_with(limit, window, Remaining::ratio(slack, t), new - now)
            }
            Step::Deny(start) => {
                let slack = clamp_ns(horizon.saturating_sub(u128::from(start)));
                let new = u128::from(start) + u128::from(cost) * u128::from(t);
                let retry = clamp_ns(new.saturating_sub(horizon));
                Decision::deny_with(
                    limit,
                    window,
                    Remaining::ratio(slack, t),
                    start - now,
                    retry,
                )
            }
        }
    }
}

impl Algorithm for Gcra {
    type State = GcraState;

    fn max_cost(&self) -> u32 {
        self.quota.burst()
    }

    fn new_state(&self, _now_ns: u64) -> Self::State {
        0
    }

    fn decide(&self, tat: &mut Self::State, now_ns: u64, cost: u32, mode: Mode) -> Decision {
        let step = gcra_step(*tat, now_ns, cost, self.interval, self.tolerance);
        if let (Step::Allow(new), Mode::Consume) = (&step, mode) {
            *tat = *new;
        }
        self.decision(now_ns, cost, &step)
            .charged(mode, now_ns, cost)
    }

    #[inline]
    fn allows_within(&self, tat: &mut Self::State, now_ns: u64, cost: u32) -> bool {
        match gcra_step(*tat, now_ns, cost, self.interval, self.tolerance) {
            Step::Allow(new) => {
                *tat = new;
                true
            }
            Step::Deny(_) => false,
        }
    }

    fn refund(&self, tat: &mut Self::State, now_ns: u64, receipt: Receipt) {
        let back = unelapsed(receipt, now_ns, self.interval);
        *tat = tat.saturating_sub(back).max(now_ns.min(*tat));
    }

    /// `TAT = max(TAT, now) + cost·T`, saturating at the end of the
    /// clock's range (which then denies the key for good).
    fn charge(&self, tat: &mut Self::State, now_ns: u64, cost: u32) -> Receipt {
        let debt = u128::from(cost) * u128::from(self.interval);
        *tat = clamp_ns(u128::from((*tat).max(now_ns)) + debt);
        Receipt::new(now_ns, cost)
    }
}

impl Forgettable for Gcra {
    fn is_idle(&self, tat: &Self::State, now_ns: u64) -> bool {
        *tat <= now_ns
    }

    fn idle_at(&self, tat: &Self::State, now_ns: u64) -> u64 {
        (*tat).max(now_ns)
    }

    /// `TAT + T − τ`: a unit is refused while `TAT + T > now + τ`, and
    /// spending only moves the TAT later.
    fn refused_until(&self, tat: &Self::State, now_ns: u64) -> Option<u64> {
        let until = u128::from(*tat) + u128::from(self.interval);
        let until = u64::try_from(until.saturating_sub(u128::from(self.tolerance))).ok()?;
        (until > now_ns).then_some(until)
    }

    /// The TAT itself: it is the time the key's spending is paid off.
    fn spent_until(&self, idle_at: u64, now_ns: u64) -> Self::State {
        if idle_at <= now_ns {
            self.new_state(now_ns)
        } else {
            idle_at
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::num::NonZeroU32;

    const SEC: u64 = 1_000_000_000;

    /// 2 per second with a burst of 2: A spends 2 at 0 s, B spends 2 at
    /// 1 s (earned back by then). A refund for A at 1 s returns nothing:
    /// A has been paid off, and handing its units back again would let a
    /// third and fourth unit pass at 1 s beside B's two. A refund for B at
    /// once returns both of B's units.
    #[test]
    fn a_refund_of_a_paid_off_spending_returns_nothing() {
        let gcra = Gcra::new(Quota::per_second(NonZeroU32::new(2).unwrap()));
        let mut tat = gcra.new_state(0);
        let a = gcra.check(&mut tat, 0, 2, Mode::Consume).unwrap();
        let b = gcra.check(&mut tat, SEC, 2, Mode::Consume).unwrap();
        assert!(a.is_allowed() && b.is_allowed());
        gcra.refund(&mut tat, SEC, a.receipt().unwrap());
        assert!(
            !gcra
                .check(&mut tat, SEC, 2, Mode::Consume)
                .unwrap()
                .is_allowed(),
            "4 units at one instant with a burst of 2"
        );
        gcra.refund(&mut tat, SEC, b.receipt().unwrap());
        assert!(
            gcra.check(&mut tat, SEC, 2, Mode::Consume)
                .unwrap()
                .is_allowed()
        );
    }
}
