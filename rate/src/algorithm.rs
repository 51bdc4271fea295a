//! The one interface every algorithm implements, and what a keyed
//! container needs besides to forget keys.

use crate::decision::{Decision, NeverAllowed, Receipt};
use crate::mode::Mode;

/// A rate-limiting algorithm: the configuration lives in `self`, the
/// per-key state in [`Algorithm::State`], and time is passed in (nanoseconds
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
/// use weir_rate::{Algorithm, Mode, Quota, TokenBucket};
///
/// let bucket = TokenBucket::new(Quota::per_second(NonZeroU32::new(2).unwrap()));
/// let mut state = bucket.new_state(0);
/// assert!(bucket.check(&mut state, 0, 2, Mode::Consume).unwrap().is_allowed());
/// assert!(!bucket.check(&mut state, 0, 1, Mode::Consume).unwrap().is_allowed());
/// // Half a second refills one token.
/// assert!(bucket.check(&mut state, 500_000_000, 1, Mode::Consume).unwrap().is_allowed());
/// ```
pub trait Algorithm: Send + Sync {
    /// What the algorithm remembers per key.
    type State: Send;

    /// The largest cost this limiter can ever allow at once.
    fn max_cost(&self) -> u32;

    /// The state of a key never seen before, at `now_ns`.
    fn new_state(&self, now_ns: u64) -> Self::State;

    /// Decide whether `cost` units may be spent at `now_ns`, spending them
    /// when allowed and `mode` is [`Mode::Consume`]: the cost is checked
    /// against [`max_cost`](Self::max_cost), then the algorithm
    /// [`decide`](Self::decide)s.
    ///
    /// # Errors
    ///
    /// [`NeverAllowed`] when `cost` exceeds [`max_cost`](Self::max_cost);
    /// a denial is an `Ok` decision.
    #[must_use = "a decision not looked at lets a denied request through"]
    #[inline]
    fn check(
        &self,
        state: &mut Self::State,
        now_ns: u64,
        cost: u32,
        mode: Mode,
    ) -> Result<Decision, NeverAllowed> {
        NeverAllowed::check(cost, self.max_cost())?;
        Ok(self.decide(state, now_ns, cost, mode))
    }

    /// The algorithm's step: [`check`](Self::check) for a `cost` already
    /// known to be at most [`max_cost`](Self::max_cost), which is what
    /// each algorithm implements. Given a larger cost it stays total (no
    /// panic, no overflow) but its answer is unspecified: call `check`.
    #[must_use = "a decision not looked at lets a denied request through"]
    fn decide(&self, state: &mut Self::State, now_ns: u64, cost: u32, mode: Mode) -> Decision;

    /// Whether `cost` units may be spent at `now_ns`, spending them if so:
    /// [`check`](Self::check) in [`Mode::Consume`] answering only the
    /// yes or no, for callers that send no headers. A cost above
    /// [`max_cost`](Self::max_cost) is never allowed (`false`).
    #[inline]
    fn allows(&self, state: &mut Self::State, now_ns: u64, cost: u32) -> bool {
        cost <= self.max_cost() && self.allows_within(state, now_ns, cost)
    }

    /// [`allows`](Self::allows) for a cost within
    /// [`max_cost`](Self::max_cost), as [`decide`](Self::decide) is for
    /// `check`. Algorithms override it to skip building the [`Decision`].
    #[inline]
    fn allows_within(&self, state: &mut Self::State, now_ns: u64, cost: u32) -> bool {
        self.decide(state, now_ns, cost, Mode::Consume).is_allowed()
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
    /// beyond [`max_cost`](Self::max_cost), is a debt, and later checks
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
    /// use weir_rate::{Gcra, Algorithm, Mode, Quota};
    ///
    /// let gcra = Gcra::new(Quota::per_second(NonZeroU32::new(2).unwrap()));
    /// let mut tat = gcra.new_state(0);
    /// gcra.charge(&mut tat, 0, 5); // 5 units with a burst of 2: a debt of 3
    /// assert!(!gcra.check(&mut tat, 1_000_000_000, 1, Mode::Consume).unwrap().is_allowed());
    /// // At 2 s one of the 5 units is still unpaid (TAT 2.5 s): room for one.
    /// assert!(gcra.check(&mut tat, 2_000_000_000, 1, Mode::Consume).unwrap().is_allowed());
    /// ```
    fn charge(&self, state: &mut Self::State, now_ns: u64, cost: u32) -> Receipt;
}

/// What a keyed container needs of an algorithm to forget a key's state
/// and restore it without loosening the limit, and to answer a refused
/// key from memory: when a state turns idle, a state spent until a given
/// time, and how long a refusal lasts. [`KeyedLimiter`](crate::KeyedLimiter)
/// asks it of its algorithm (and a store may keep a key's state as the
/// time it turns idle); a single limit does not. Every algorithm of
/// weir-rate implements it beside [`Algorithm`].
///
/// ```
/// use weir_rate::{Forgettable, Gcra, Algorithm, Mode, Quota, nonzero};
///
/// let gcra = Gcra::new(Quota::per_second(nonzero!(2)));
/// let mut tat = gcra.new_state(0);
/// gcra.check(&mut tat, 0, 1, Mode::Consume).unwrap();
/// // Forgotten now, restored from its idle time: as spent as before.
/// let mut restored = gcra.spent_until(gcra.idle_at(&tat, 0), 0);
/// assert!(gcra.is_idle(&restored, 500_000_000));
/// assert!(!gcra.check(&mut restored, 0, 2, Mode::Consume).unwrap().is_allowed());
/// ```
pub trait Forgettable: Algorithm {
    /// Whether the state is indistinguishable from a fresh one at `now_ns`
    /// (so a keyed limiter may forget the key): [`idle_at`](Self::idle_at)
    /// has come. The default asks `idle_at`; an algorithm overrides it
    /// when it can answer without computing the time (a keyed limiter's
    /// sweeps ask it of every key).
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use weir_rate::{FixedWindow, Forgettable, Algorithm, Mode, Quota};
    ///
    /// let window = FixedWindow::new(Quota::per_second(NonZeroU32::new(4).unwrap()));
    /// let mut state = window.new_state(0);
    /// window.check(&mut state, 0, 1, Mode::Consume).unwrap();
    /// assert!(!window.is_idle(&state, 0));
    /// assert!(window.is_idle(&state, 1_000_000_000));
    /// ```
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
    /// use weir_rate::{Forgettable, Gcra, Algorithm, Mode, Quota};
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
    /// use weir_rate::{FixedWindow, Forgettable, Algorithm, Mode, Quota};
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
    /// asks the state every time. A [`KeyedLimiter`](crate::KeyedLimiter)
    /// flooded by many threads answers a refused key from each thread's
    /// memory until then, instead of taking the key's lock.
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use weir_rate::{Forgettable, Gcra, Algorithm, Mode, Quota};
    ///
    /// let gcra = Gcra::new(Quota::per_second(NonZeroU32::MIN));
    /// let mut tat = gcra.new_state(0);
    /// assert_eq!(gcra.refused_until(&tat, 0), None);
    /// gcra.check(&mut tat, 0, 1, Mode::Consume).unwrap();
    /// assert_eq!(gcra.refused_until(&tat, 0), Some(1_000_000_000));
    /// ```
    fn refused_until(&self, state: &Self::State, now_ns: u64) -> Option<u64> {
        let _ = (state, now_ns);
        None
    }
}
