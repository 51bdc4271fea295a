//! Several limits checked all-or-nothing: pairs of limiters and [`AllOf`].
//! A check spends from every limit only if all of them allow, so a
//! refusal by one spends nothing of the others.

use crate::algorithm::{Algorithm, Forgettable};
use crate::decision::{Decision, Receipt};
use crate::mode::Mode;

/// The all-or-nothing rule shared by [`AllOf`] and pairs: `check_each`
/// checks every limit in the given mode and combines their decisions.
/// Every limit is peeked first; only if the combined decision allows, and
/// the caller asked to consume, are they all checked again consuming —
/// which cannot then deny, since each allowed from the state it is about
/// to spend.
///
/// A `Decision` passes through here by value twice per allowed check, so
/// it is returned as it is, not wrapped in an `Option` for the empty set
/// (its callers answer that case first): each wrapping layer was a copy.
///
/// A denial spends nothing, so the limits that would have allowed report
/// what they have left, not what they would have left after the request:
/// `check_each(mode, true)` checks those at no cost ([`part`]).
#[inline]
fn all_or_nothing(mode: Mode, mut check_each: impl FnMut(Mode, bool) -> Decision) -> Decision {
    let peeked = check_each(Mode::Peek, false);
    if peeked.is_allowed() {
        if mode == Mode::Consume {
            drop(peeked);
            return check_each(Mode::Consume, false);
        }
        return peeked;
    }
    drop(peeked);
    check_each(Mode::Peek, true)
}

/// One limit's part of an all-or-nothing check, for a cost within the
/// set's max cost (so within each limit's); with `unspent` (the set
/// refuses), a limit that allows is peeked at no cost instead, for what
/// it has left.
#[inline]
fn part<L: Algorithm>(
    limit: &L,
    state: &mut L::State,
    now_ns: u64,
    (cost, mode, unspent): (u32, Mode, bool),
) -> Decision {
    let decision = limit.decide(state, now_ns, cost, mode);
    if unspent && decision.is_allowed() {
        limit.decide(state, now_ns, 0, Mode::Peek)
    } else {
        decision
    }
}

/// A state built for a different list of limits (after a run-time
/// change) extended with fresh states or cut to length.
fn fit<L: Algorithm>(limits: &[L], state: &mut Vec<L::State>, now_ns: u64) {
    state.truncate(limits.len());
    while state.len() < limits.len() {
        let fresh = limits[state.len()].new_state(now_ns);
        state.push(fresh);
    }
}

/// The receipt of two charges of one cost: the earlier instant, which
/// refunds no more than either still counts.
fn earlier(a: Receipt, b: Receipt) -> Receipt {
    if b.at_nanos() < a.at_nanos() { b } else { a }
}

/// What an empty set of limits answers: everything is allowed.
fn allow_everything() -> Decision {
    Decision::allow_ns(u32::MAX, 0, u32::MAX, 0)
}

/// Two limits checked all-or-nothing: allowed only if both allow, and then
/// both are spent; otherwise neither is. Nest pairs for more.
///
/// ```
/// use std::num::NonZeroU32;
/// use weir_rate::clock::ManualClock;
/// use weir_rate::{FixedWindow, Gcra, Quota, RateLimiter};
///
/// let per_second = Gcra::new(Quota::per_second(NonZeroU32::new(10).unwrap()));
/// let per_hour = FixedWindow::new(Quota::per_hour(NonZeroU32::new(3).unwrap()));
/// let limiter = RateLimiter::with_clock((per_second, per_hour), ManualClock::new());
/// assert_eq!((0..5).filter(|_| limiter.check().is_allowed()).count(), 3);
/// ```
impl<A: Algorithm, B: Algorithm> Algorithm for (A, B) {
    type State = (A::State, B::State);

    fn max_cost(&self) -> u32 {
        self.0.max_cost().min(self.1.max_cost())
    }

    fn new_state(&self, now_ns: u64) -> Self::State {
        (self.0.new_state(now_ns), self.1.new_state(now_ns))
    }

    fn decide(&self, state: &mut Self::State, now_ns: u64, cost: u32, mode: Mode) -> Decision {
        all_or_nothing(mode, |each, unspent| {
            let a = part(&self.0, &mut state.0, now_ns, (cost, each, unspent));
            let b = part(&self.1, &mut state.1, now_ns, (cost, each, unspent));
            a.combine(b)
        })
    }

    fn refund(&self, state: &mut Self::State, now_ns: u64, receipt: Receipt) {
        self.0.refund(&mut state.0, now_ns, receipt);
        self.1.refund(&mut state.1, now_ns, receipt);
    }

    /// Both limits charged; the receipt names the earlier of their
    /// instants (they differ only for a state judged later than `now_ns`),
    /// so a refund never returns more than either still counts.
    fn charge(&self, state: &mut Self::State, now_ns: u64, cost: u32) -> Receipt {
        let a = self.0.charge(&mut state.0, now_ns, cost);
        let b = self.1.charge(&mut state.1, now_ns, cost);
        earlier(a, b)
    }
}

impl<A: Forgettable, B: Forgettable> Forgettable for (A, B) {
    fn is_idle(&self, state: &Self::State, now_ns: u64) -> bool {
        self.0.is_idle(&state.0, now_ns) && self.1.is_idle(&state.1, now_ns)
    }

    fn idle_at(&self, state: &Self::State, now_ns: u64) -> u64 {
        let a = self.0.idle_at(&state.0, now_ns);
        a.max(self.1.idle_at(&state.1, now_ns))
    }

    /// Each limit spent until then: each is at least as strict as the
    /// limit of a pair whose later limit turns idle then.
    fn spent_until(&self, idle_at: u64, now_ns: u64) -> Self::State {
        (
            self.0.spent_until(idle_at, now_ns),
            self.1.spent_until(idle_at, now_ns),
        )
    }
}

/// Any number of limits of one kind, checked all-or-nothing.
///
/// ```
/// use std::num::NonZeroU32;
/// use std::time::Duration;
/// use weir_rate::{AllOf, Gcra, Algorithm, Mode, Quota};
///
/// let limits = AllOf::new(vec![
///     Gcra::new(Quota::per_second(NonZeroU32::new(5).unwrap())),
///     Gcra::new(Quota::per_minute(NonZeroU32::new(7).unwrap())),
/// ]);
/// let mut state = limits.new_state(0);
/// // Twenty requests 10 ms apart: the per-second burst of 5 binds first.
/// let allowed = (0..20u64)
///     .filter(|i| limits.check(&mut state, i * 10_000_000, 1, Mode::Consume).unwrap().is_allowed())
///     .count();
/// assert_eq!(allowed, 5);
/// ```
#[derive(Debug, Clone)]
pub struct AllOf<L> {
    limits: Vec<L>,
}

impl<L: Algorithm> AllOf<L> {
    /// All of `limits` (an empty list allows everything).
    pub fn new(limits: Vec<L>) -> Self {
        Self { limits }
    }
}

impl<L: Algorithm> Algorithm for AllOf<L> {
    type State = Vec<L::State>;

    fn max_cost(&self) -> u32 {
        self.limits
            .iter()
            .map(Algorithm::max_cost)
            .min()
            .unwrap_or(u32::MAX)
    }

    fn new_state(&self, now_ns: u64) -> Self::State {
        self.limits.iter().map(|l| l.new_state(now_ns)).collect()
    }

    fn decide(&self, state: &mut Self::State, now_ns: u64, cost: u32, mode: Mode) -> Decision {
        fit(&self.limits, state, now_ns);
        // `fit` made the states as many as the limits.
        let (Some((first, rest)), Some((first_state, rest_state))) =
            (self.limits.split_first(), state.split_first_mut())
        else {
            return allow_everything();
        };
        all_or_nothing(mode, |each, unspent| {
            let how = (cost, each, unspent);
            let mut combined = part(first, first_state, now_ns, how);
            for (limit, s) in rest.iter().zip(rest_state.iter_mut()) {
                combined = combined.combine(part(limit, s, now_ns, how));
            }
            combined
        })
    }

    fn refund(&self, state: &mut Self::State, now_ns: u64, receipt: Receipt) {
        for (limit, s) in self.limits.iter().zip(state.iter_mut()) {
            limit.refund(s, now_ns, receipt);
        }
    }

    /// Every limit charged (an empty list charges nothing); the receipt
    /// names the earliest of their instants, as for a pair.
    fn charge(&self, state: &mut Self::State, now_ns: u64, cost: u32) -> Receipt {
        fit(&self.limits, state, now_ns);
        self.limits
            .iter()
            .zip(state.iter_mut())
            .map(|(limit, s)| limit.charge(s, now_ns, cost))
            .reduce(earlier)
            .unwrap_or_else(|| Receipt::new(now_ns, cost))
    }
}

impl<L: Forgettable> Forgettable for AllOf<L> {
    fn is_idle(&self, state: &Self::State, now_ns: u64) -> bool {
        self.limits
            .iter()
            .zip(state.iter())
            .all(|(l, s)| l.is_idle(s, now_ns))
    }

    fn idle_at(&self, state: &Self::State, now_ns: u64) -> u64 {
        self.limits
            .iter()
            .zip(state.iter())
            .map(|(l, s)| l.idle_at(s, now_ns))
            .fold(now_ns, u64::max)
    }

    fn spent_until(&self, idle_at: u64, now_ns: u64) -> Self::State {
        self.limits
            .iter()
            .map(|l| l.spent_until(idle_at, now_ns))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::AllOf;
    use crate::clock::ManualClock;
    use crate::{Decision, FixedWindow, Quota, RateLimiter, nonzero};

    /// The `r=` of the daily limit's `RateLimit` field.
    fn day_left(decision: &Decision) -> String {
        let fields = decision.headers("p");
        let field = fields
            .iter()
            .find(|(name, _)| *name == "RateLimit")
            .map(|(_, v)| v.clone())
            .unwrap_or_default();
        field.split(',').nth(1).unwrap_or_default().to_owned()
    }

    /// A refusal spends nothing: the limit that did not bind reports what
    /// it has left, as its RateLimit field tells the client.
    #[test]
    fn a_refusal_reports_what_the_other_limits_have_left() {
        let per_second = FixedWindow::new(Quota::per_second(nonzero!(1)));
        let per_day = FixedWindow::new(Quota::per_day(nonzero!(1000)));
        let pair =
            RateLimiter::with_clock((per_second.clone(), per_day.clone()), ManualClock::new());
        let all =
            RateLimiter::with_clock(AllOf::new(vec![per_second, per_day]), ManualClock::new());
        let checks: [&dyn Fn() -> Decision; 2] = [&|| pair.check(), &|| all.check()];
        for check in checks {
            let first = check();
            assert!(first.is_allowed());
            assert!(day_left(&first).contains("r=999"), "{}", day_left(&first));
            let refused = check();
            assert!(!refused.is_allowed());
            assert!(
                day_left(&refused).contains("r=999"),
                "nothing spent, 999 left: {}",
                day_left(&refused)
            );
        }
    }
}
