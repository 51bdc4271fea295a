//! The one interface every algorithm implements.

use crate::decision::{Decision, NeverAllowed, Receipt};

/// Whether a check spends what it allows.
///
/// ```
/// use std::num::NonZeroU32;
/// use weir_rate::{Gcra, Limiter, Mode, Quota};
///
/// let gcra = Gcra::new(Quota::per_second(NonZeroU32::MIN));
/// let mut state = gcra.new_state(0);
/// assert!(gcra.check(&mut state, 0, 1, Mode::Peek).unwrap().is_allowed());
/// // The peek spent nothing: the one unit is still there.
/// assert!(gcra.check(&mut state, 0, 1, Mode::Consume).unwrap().is_allowed());
/// assert!(!gcra.check(&mut state, 0, 1, Mode::Consume).unwrap().is_allowed());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Spend the cost when the request is allowed (a normal check).
    #[default]
    Consume,
    /// Report what would happen without changing anything.
    Peek,
}

/// A rate-limiting algorithm: the configuration lives in `self`, the
/// per-key state in [`Limiter::State`], and time is passed in (nanoseconds
/// on the caller's [`Clock`](crate::clock::Clock)), so the same algorithm
/// serves a single limiter, an exact keyed map, several limits checked
/// together, and a simulation.
///
/// Every method is total: time going backwards counts as no time passing,
/// arithmetic saturates, and a `cost` the limiter could never allow is
/// reported as [`NeverAllowed`] rather than a denial. States are expressed
/// in units that do not depend on the configuration, so a container can
/// swap in a limiter with a different quota at run time and keep every
/// key's state: what was spent stays spent (no burst on a change).
///
/// ```
/// use std::num::NonZeroU32;
/// use weir_rate::{Limiter, Mode, Quota, TokenBucket};
///
/// let bucket = TokenBucket::new(Quota::per_second(NonZeroU32::new(2).unwrap()));
/// let mut state = bucket.new_state(0);
/// assert!(bucket.check(&mut state, 0, 2, Mode::Consume).unwrap().is_allowed());
/// assert!(!bucket.check(&mut state, 0, 1, Mode::Consume).unwrap().is_allowed());
/// // Half a second refills one token.
/// assert!(bucket.check(&mut state, 500_000_000, 1, Mode::Consume).unwrap().is_allowed());
/// ```
pub trait Limiter: Send + Sync {
    /// What the algorithm remembers per key.
    type State: Send;

    /// The largest cost this limiter can ever allow at once.
    fn capacity(&self) -> u32;

    /// The state of a key never seen before, at `now_ns`.
    fn new_state(&self, now_ns: u64) -> Self::State;

    /// Decide whether `cost` units may be spent at `now_ns`, spending them
    /// when allowed and `mode` is [`Mode::Consume`].
    ///
    /// # Errors
    ///
    /// [`NeverAllowed`] when `cost` exceeds [`capacity`](Self::capacity);
    /// a denial is an `Ok` decision.
    fn check(
        &self,
        state: &mut Self::State,
        now_ns: u64,
        cost: u32,
        mode: Mode,
    ) -> Result<Decision, NeverAllowed>;

    /// Whether `cost` units may be spent at `now_ns`, spending them if so:
    /// [`check`](Self::check) in [`Mode::Consume`] answering only the
    /// yes or no, for callers that send no headers. A cost above
    /// [`capacity`](Self::capacity) is never allowed (`false`).
    /// Algorithms override it to skip building the [`Decision`].
    #[inline]
    fn allows(&self, state: &mut Self::State, now_ns: u64, cost: u32) -> bool {
        self.check(state, now_ns, cost, Mode::Consume)
            .is_ok_and(|decision| decision.is_allowed())
    }

    /// Give back the spending `receipt` names (e.g. the request was not
    /// served after all), at `now_ns`. A refund returns capacity only where
    /// that spending is still counted, and never more than it still
    /// counts for, so that counting refunded units as never served, no
    /// window or interval serves more than the algorithm's bound:
    ///
    /// * [`FixedWindow`](crate::FixedWindow), [`SlidingLog`](crate::SlidingLog),
    ///   [`SlidingWindow`](crate::SlidingWindow): all of it while the
    ///   window, log entry or sub-window it was charged to still counts;
    ///   nothing once that has aged out.
    /// * [`TokenBucket`](crate::TokenBucket), the
    ///   [`LeakyBucket`](crate::LeakyBucket) meter, [`Gcra`](crate::Gcra):
    ///   a bucket does not know whose tokens it holds, so it returns the
    ///   part of the spending it cannot have earned back since it was
    ///   charged, however empty it was then: `cost − elapsed·limit/window`
    ///   units (GCRA: `cost·T − elapsed` of its schedule), nothing once
    ///   the spending is that old.
    /// * The [`LeakyBucket`](crate::LeakyBucket) shaper: nothing. Each
    ///   admitted request has been told when to leave; handing its
    ///   departure to a later request would send two at once.
    ///
    /// Never leaves the state with more than a fresh one holds.
    fn refund(&self, state: &mut Self::State, now_ns: u64, receipt: Receipt);

    /// Spend `cost` units at `now_ns` unconditionally, for work already
    /// done (response bytes, LLM tokens): a cost beyond the limit, even
    /// beyond [`capacity`](Self::capacity), is a debt, and later checks
    /// are refused until time has paid it back at the quota's rate (or,
    /// for the window algorithms, until the spending leaves the window).
    /// Arithmetic saturates: a debt past the clock's range holds the key
    /// until the end of time, never wraps.
    ///
    /// The returned [`Receipt`] refunds the charge by the rules of
    /// [`refund`](Self::refund): what it still counts for. How each
    /// algorithm keeps a debt:
    ///
    /// * [`Gcra`](crate::Gcra): `TAT = max(TAT, now) + cost·T`.
    /// * [`TokenBucket`](crate::TokenBucket), the
    ///   [`LeakyBucket`](crate::LeakyBucket) meter: the level (units spent)
    ///   goes past the burst, i.e. the bucket holds fewer than no tokens.
    /// * [`FixedWindow`](crate::FixedWindow),
    ///   [`SlidingWindow`](crate::SlidingWindow): counted in the current
    ///   window, sub-window, past the limit.
    /// * [`SlidingLog`](crate::SlidingLog): one log entry, as a check's.
    /// * The [`LeakyBucket`](crate::LeakyBucket) shaper: the charge takes
    ///   the next `cost·T` of the queue, delaying (or, past `max_delay`,
    ///   denying) the requests after it; as for its checks, a refund gives
    ///   none of it back.
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use weir_rate::{Gcra, Limiter, Mode, Quota};
    ///
    /// let gcra = Gcra::new(Quota::per_second(NonZeroU32::new(2).unwrap()));
    /// let mut tat = gcra.new_state(0);
    /// gcra.charge(&mut tat, 0, 5); // 5 units with a burst of 2: a debt of 3
    /// assert!(!gcra.check(&mut tat, 1_000_000_000, 1, Mode::Consume).unwrap().is_allowed());
    /// // At 2 s one of the 5 units is still unpaid (TAT 2.5 s): room for one.
    /// assert!(gcra.check(&mut tat, 2_000_000_000, 1, Mode::Consume).unwrap().is_allowed());
    /// ```
    fn charge(&self, state: &mut Self::State, now_ns: u64, cost: u32) -> Receipt;

    /// Whether the state is indistinguishable from a fresh one at `now_ns`
    /// (so a keyed limiter may forget the key): [`idle_at`](Self::idle_at)
    /// has come. The algorithms answer it without computing the time.
    #[doc(hidden)]
    fn is_idle(&self, state: &Self::State, now_ns: u64) -> bool {
        self.idle_at(state, now_ns) <= now_ns
    }

    /// When the state becomes idle: the earliest time, no earlier than
    /// `now_ns`, from which it is indistinguishable from a fresh one if
    /// nothing more is spent (`u64::MAX` if not within the clock's range),
    /// so that a keyed limiter may forget the key. A bounded
    /// [`KeyedLimiter`](crate::KeyedLimiter) forgets first the keys that
    /// become idle soonest.
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use weir_rate::{Gcra, Limiter, Mode, Quota};
    ///
    /// let gcra = Gcra::new(Quota::per_second(NonZeroU32::new(4).unwrap()));
    /// let mut state = gcra.new_state(0);
    /// assert_eq!(gcra.idle_at(&state, 0), 0);
    /// gcra.check(&mut state, 0, 2, Mode::Consume).unwrap();
    /// assert_eq!(gcra.idle_at(&state, 0), 500_000_000);
    /// ```
    fn idle_at(&self, state: &Self::State, now_ns: u64) -> u64;

    /// The state, at `now_ns`, of a key that spent all it could until
    /// `idle_at`: for unit costs it allows no more requests, in any
    /// sequence and any prefix of it, than a state whose
    /// [`idle_at`](Self::idle_at) is at most `idle_at` would, and it is a
    /// fresh state if `idle_at <= now_ns`. A bounded
    /// [`KeyedLimiter`](crate::KeyedLimiter) that has to forget a key before
    /// it is idle keeps only that time, and restores the key from it, so
    /// forgetting never loosens a limit.
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use weir_rate::{FixedWindow, Limiter, Mode, Quota};
    ///
    /// let window = FixedWindow::new(Quota::per_second(NonZeroU32::new(4).unwrap()));
    /// let mut state = window.new_state(0);
    /// window.check(&mut state, 0, 1, Mode::Consume).unwrap();
    /// let idle_at = window.idle_at(&state, 0);
    /// // Restored, the window is spent until it ends.
    /// let mut restored = window.spent_until(idle_at, 0);
    /// assert!(!window.check(&mut restored, 0, 1, Mode::Consume).unwrap().is_allowed());
    /// assert!(window.check(&mut restored, idle_at, 4, Mode::Consume).unwrap().is_allowed());
    /// ```
    fn spent_until(&self, idle_at: u64, now_ns: u64) -> Self::State;

    /// If the state refuses one unit at `now_ns`: a time before which it
    /// refuses every unit with the same decision, nothing remaining and
    /// its reset and retry times counted down, as long as it changes only
    /// by spending. `None` when it allows a unit at `now_ns`, or (the
    /// default) when the algorithm names no such time; a keyed limiter then
    /// asks the state every time.
    #[doc(hidden)]
    fn refused_until(&self, state: &Self::State, now_ns: u64) -> Option<u64> {
        let _ = (state, now_ns);
        None
    }
}

/// The all-or-nothing rule shared by [`AllOf`] and pairs: `check_each`
/// checks every limit in the given mode and combines their decisions
/// (`None`: there are no limits). Every limit is peeked first; only if the
/// combined decision allows, and the caller asked to consume, are they all
/// checked again consuming — which cannot then deny, since each allowed
/// from the state it is about to spend.
fn all_or_nothing(
    mode: Mode,
    mut check_each: impl FnMut(Mode) -> Result<Option<Decision>, NeverAllowed>,
) -> Result<Option<Decision>, NeverAllowed> {
    let peeked = check_each(Mode::Peek)?;
    match &peeked {
        Some(d) if mode == Mode::Consume && d.is_allowed() => {
            Ok(check_each(Mode::Consume)?.or(peeked))
        }
        _ => Ok(peeked),
    }
}

/// A state built for a different list of limits (after a run-time
/// change) extended with fresh states or cut to length.
fn fit<L: Limiter>(limits: &[L], state: &mut Vec<L::State>, now_ns: u64) {
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
    Decision::allow(u32::MAX, 0, u32::MAX, 0)
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
impl<A: Limiter, B: Limiter> Limiter for (A, B) {
    type State = (A::State, B::State);

    fn capacity(&self) -> u32 {
        self.0.capacity().min(self.1.capacity())
    }

    fn new_state(&self, now_ns: u64) -> Self::State {
        (self.0.new_state(now_ns), self.1.new_state(now_ns))
    }

    fn check(
        &self,
        state: &mut Self::State,
        now_ns: u64,
        cost: u32,
        mode: Mode,
    ) -> Result<Decision, NeverAllowed> {
        let capacity = self.capacity();
        NeverAllowed::check(cost, capacity)?;
        let decision = all_or_nothing(mode, |each| {
            let a = self.0.check(&mut state.0, now_ns, cost, each)?;
            let b = self.1.check(&mut state.1, now_ns, cost, each)?;
            Ok(Some(a.combine(b)))
        })?;
        Ok(decision.unwrap_or_else(allow_everything))
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
/// use weir_rate::{AllOf, Gcra, Limiter, Mode, Quota};
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

impl<L: Limiter> AllOf<L> {
    /// All of `limits` (an empty list allows everything).
    pub fn new(limits: Vec<L>) -> Self {
        Self { limits }
    }
}

impl<L: Limiter> Limiter for AllOf<L> {
    type State = Vec<L::State>;

    fn capacity(&self) -> u32 {
        self.limits
            .iter()
            .map(Limiter::capacity)
            .min()
            .unwrap_or(u32::MAX)
    }

    fn new_state(&self, now_ns: u64) -> Self::State {
        self.limits.iter().map(|l| l.new_state(now_ns)).collect()
    }

    fn check(
        &self,
        state: &mut Self::State,
        now_ns: u64,
        cost: u32,
        mode: Mode,
    ) -> Result<Decision, NeverAllowed> {
        let capacity = self.capacity();
        NeverAllowed::check(cost, capacity)?;
        fit(&self.limits, state, now_ns);
        let decision = all_or_nothing(mode, |each| {
            let mut combined: Option<Decision> = None;
            for (limit, s) in self.limits.iter().zip(state.iter_mut()) {
                let d = limit.check(s, now_ns, cost, each)?;
                combined = Some(combined.map_or(d, |c| c.combine(d)));
            }
            Ok(combined)
        })?;
        Ok(decision.unwrap_or_else(allow_everything))
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
