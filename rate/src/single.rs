//! One limit shared by every caller (a whole service, one upstream, ...).

use crate::algorithm::Algorithm;
use crate::clock::{Clock, MonotonicClock, Timestamp};
use crate::decision::{CheckAtError, Decision, NeverAllowed, Receipt, Spending};
use crate::mode::Mode;
use crate::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// A single rate limit over any [`Algorithm`], safe to share between threads
/// (the state sits behind a short lock), with peek, refunds, run-time
/// reconfiguration and a shadow (dry-run) mode.
///
/// ```
/// use std::num::NonZeroU32;
/// use std::time::Duration;
/// use weir_rate::clock::ManualClock;
/// use weir_rate::{Gcra, Quota, RateLimiter};
///
/// let clock = ManualClock::new();
/// let limiter = RateLimiter::with_clock(
///     Gcra::new(Quota::per_second(NonZeroU32::new(2).unwrap())),
///     clock.clone(),
/// );
/// assert!(limiter.check().is_allowed());
/// assert!(limiter.peek_n(1).unwrap().is_allowed()); // peeking spends nothing
/// let last = limiter.check();
/// assert!(last.is_allowed());
/// assert!(!limiter.check().is_allowed());
/// limiter.refund(&last); // the last request was not served after all
/// assert!(limiter.check().is_allowed());
/// clock.advance(Duration::from_millis(500));
/// assert!(limiter.check().is_allowed());
/// ```
#[derive(Debug)]
pub struct RateLimiter<L: Algorithm, C = MonotonicClock> {
    clock: C,
    /// The algorithm, its state, and the latest time it has judged at:
    /// nothing is judged earlier (a thread that read the clock before
    /// waiting for the lock, or an earlier caller-supplied time, counts as
    /// no time passing), so every limit of a pair or [`AllOf`](crate::AllOf)
    /// charges a check to the same instant and one receipt refunds them all.
    /// A caller's time raises it only within
    /// [`MAX_AHEAD`](crate::clock::MAX_AHEAD) of the clock: this one state
    /// is every caller's, and a time at the end of the clock's range would
    /// leave it judged there for good.
    inner: Mutex<(L, L::State, u64)>,
    shadow: AtomicBool,
}

impl<L: Algorithm> RateLimiter<L, MonotonicClock> {
    /// A limiter on the monotonic clock.
    pub fn new(limiter: L) -> Self {
        Self::with_clock(limiter, MonotonicClock::new())
    }
}

impl<L: Algorithm, C: Clock> RateLimiter<L, C> {
    /// A limiter reading time from `clock`.
    pub fn with_clock(limiter: L, clock: C) -> Self {
        let now = clock.now_nanos();
        let state = limiter.new_state(now);
        Self {
            clock,
            inner: Mutex::new((limiter, state, now)),
            shadow: AtomicBool::new(false),
        }
    }

    /// Check one unit. One unit is always within a limiter's max cost.
    #[must_use = "a decision not looked at lets a denied request through"]
    pub fn check(&self) -> Decision {
        match self.run(1, Mode::Consume) {
            Ok(d) => d,
            // Capacity is at least 1 for every algorithm (quotas are
            // non-zero); answer a denial rather than panic regardless.
            Err(_) => Decision::deny_ns(0, 0, 0, 0, u64::MAX),
        }
    }

    /// Check `cost` units, spending them if allowed.
    ///
    /// # Errors
    ///
    /// [`NeverAllowed`] when `cost` exceeds what the limiter can ever allow
    /// at once (its max cost); a denial is an `Ok` decision.
    #[must_use = "a decision not looked at lets a denied request through"]
    pub fn check_n(&self, cost: u32) -> Result<Decision, NeverAllowed> {
        self.run(cost, Mode::Consume)
    }

    /// The time on this limiter's clock, for [`check_n_at`](Self::check_n_at).
    pub fn now(&self) -> Timestamp<C> {
        self.clock.now()
    }

    /// [`check_n`](Self::check_n) at a time read from this limiter's clock
    /// (e.g. once for a batch of requests, or replayed from a trace). A
    /// time earlier than one already judged at counts as no time passing.
    /// The clock is read only when `now` is later than every time judged
    /// at so far.
    ///
    /// # Errors
    ///
    /// [`CheckAtError::NeverAllowed`] for a cost above the limiter's
    /// max cost; [`CheckAtError::AheadOfClock`] for a time more than
    /// [`MAX_AHEAD`](crate::clock::MAX_AHEAD) past the clock. Neither
    /// changes the state.
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use std::time::Duration;
    /// use weir_rate::{CheckAtError, Gcra, Quota, RateLimiter};
    ///
    /// let limiter = RateLimiter::new(Gcra::new(Quota::per_second(NonZeroU32::MIN)));
    /// let now = limiter.now();
    /// assert!(matches!(limiter.check_n_at(1, now + Duration::MAX), Err(CheckAtError::AheadOfClock { .. })));
    /// assert!(limiter.check_n_at(1, now).unwrap().is_allowed());
    /// ```
    #[must_use = "a decision not looked at lets a denied request through"]
    pub fn check_n_at(&self, cost: u32, now: Timestamp<C>) -> Result<Decision, CheckAtError> {
        let at = now.as_nanos();
        self.run_at(cost, Mode::Consume, |latest| {
            if at > latest {
                CheckAtError::check_ahead(at, self.clock.now_nanos())?;
            }
            Ok(at.max(latest))
        })
    }

    /// What [`check_n`](Self::check_n) would answer, without spending.
    ///
    /// # Errors
    ///
    /// [`NeverAllowed`] when `cost` exceeds what the limiter can ever allow
    /// at once (its max cost); a denial is an `Ok` decision.
    pub fn peek_n(&self, cost: u32) -> Result<Decision, NeverAllowed> {
        self.run(cost, Mode::Peek)
    }

    /// Whether one unit may be spent now, spending it if so: the yes or no
    /// of [`check`](Self::check) without building a [`Decision`], for
    /// callers that send no headers. In shadow mode it always answers yes.
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use weir_rate::{Gcra, Quota, RateLimiter};
    ///
    /// let limiter = RateLimiter::new(Gcra::new(Quota::per_second(NonZeroU32::new(1).unwrap())));
    /// assert!(limiter.allows());
    /// assert!(!limiter.allows());
    /// ```
    #[inline]
    pub fn allows(&self) -> bool {
        let now = self.clock.now_nanos();
        let allowed = {
            let mut inner = self.inner.lock();
            let (limiter, state, latest) = &mut *inner;
            *latest = now.max(*latest);
            limiter.allows(state, *latest, 1)
        };
        allowed || self.is_shadow()
    }

    /// Give back what `decision` (a check of this limiter, or the
    /// [`Receipt`] of a [`charge`](Self::charge)) spent, as far as it
    /// still counts: see [`Algorithm::refund`]. Nothing for a decision that
    /// spent nothing. Refund each spending at most once.
    pub fn refund(&self, decision: &(impl Spending + ?Sized)) {
        let Some(receipt) = decision.receipt() else {
            return;
        };
        let now = self.clock.now_nanos();
        let mut inner = self.inner.lock();
        let (limiter, state, latest) = &mut *inner;
        *latest = now.max(*latest);
        limiter.refund(state, *latest, receipt);
    }

    /// Spend `cost` units now, unconditionally: work already done (response
    /// bytes, tokens) is counted even past the limit, as a debt that later
    /// checks wait out (see [`Algorithm::charge`]). Also in shadow mode. The
    /// receipt refunds it ([`refund`](Self::refund)).
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use std::time::Duration;
    /// use weir_rate::clock::ManualClock;
    /// use weir_rate::{Quota, RateLimiter, TokenBucket};
    ///
    /// let clock = ManualClock::new();
    /// // 1000 bytes a second.
    /// let bytes = RateLimiter::with_clock(TokenBucket::new(Quota::per_second(NonZeroU32::new(1000).unwrap())), clock.clone());
    /// bytes.charge(3000); // a response of 3000 bytes: 2000 in debt
    /// assert!(!bytes.check().is_allowed());
    /// clock.advance(Duration::from_secs(2));
    /// assert!(!bytes.check().is_allowed()); // the debt is paid, the bucket empty
    /// clock.advance(Duration::from_millis(1));
    /// assert!(bytes.check().is_allowed());
    /// ```
    pub fn charge(&self, cost: u32) -> Receipt {
        let now = self.clock.now_nanos();
        let mut inner = self.inner.lock();
        let (limiter, state, latest) = &mut *inner;
        *latest = now.max(*latest);
        limiter.charge(state, *latest, cost)
    }

    /// Replace the algorithm (e.g. with a new quota) keeping what has been
    /// spent, so a change never grants a fresh burst. For an
    /// [`AllOf`](crate::AllOf) (or a pair) the states follow the limits by
    /// position: keep their order, or a limit inherits another's spending.
    pub fn set_limit(&self, limiter: L) {
        self.inner.lock().0 = limiter;
    }

    /// In shadow mode every request is allowed, but decisions still say
    /// whether it conformed ([`Decision::is_conforming`]) and state evolves
    /// exactly as when enforcing, so the mode can be switched at any time.
    pub fn set_shadow(&self, shadow: bool) {
        self.shadow.store(shadow, Ordering::Relaxed);
    }

    /// Whether shadow mode is on.
    fn is_shadow(&self) -> bool {
        self.shadow.load(Ordering::Relaxed)
    }

    #[inline]
    fn run(&self, cost: u32, mode: Mode) -> Result<Decision, NeverAllowed> {
        let now = self.clock.now_nanos();
        self.run_at(cost, mode, |latest| Ok(now.max(latest)))
    }

    /// Check at the time `when` picks from the latest time judged at (or
    /// why it picks none).
    fn run_at<E: From<NeverAllowed>>(
        &self,
        cost: u32,
        mode: Mode,
        when: impl FnOnce(u64) -> Result<u64, E>,
    ) -> Result<Decision, E> {
        let decision = {
            let mut inner = self.inner.lock();
            let (limiter, state, latest) = &mut *inner;
            *latest = when(*latest)?;
            limiter.check(state, *latest, cost, mode)?
        };
        Ok(if self.is_shadow() {
            decision.shadowed()
        } else {
            decision
        })
    }
}

#[cfg(feature = "wait")]
#[cfg_attr(docsrs, doc(cfg(feature = "wait")))]
impl<L: Algorithm, C: Clock> RateLimiter<L, C> {
    /// Wait until `cost` units may be spent, then spend them (see the
    /// [`wait`](crate::wait) module). The decision is always an admission:
    /// there is nothing to look at, and no warning if it is dropped.
    ///
    /// ```
    /// #![deny(unused_must_use)]
    /// use std::num::NonZeroU32;
    /// use weir_rate::wait::Jitter;
    /// use weir_rate::{Gcra, NeverAllowed, Quota, RateLimiter};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
    /// let five_a_second = RateLimiter::new(Gcra::new(Quota::per_second(NonZeroU32::new(5).unwrap())));
    /// for _ in 0..3 {
    ///     five_a_second.until_ready(1, Jitter::NONE).await?;
    ///     // ... send the request
    /// }
    /// # Ok::<(), NeverAllowed>(())
    /// # }).unwrap();
    /// ```
    ///
    /// # Errors
    ///
    /// [`NeverAllowed`] at once for a cost the quota can never allow.
    pub async fn until_ready(
        &self,
        cost: u32,
        jitter: crate::wait::Jitter,
    ) -> Result<Decision, NeverAllowed> {
        crate::wait::until_allowed(|| std::future::ready(self.check_n(cost)), jitter).await
    }
}
