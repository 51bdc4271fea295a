//! The checks: each reads the clock once, finds the key's shard by one
//! hash, and answers from this thread's memory of refusals while that
//! shard is busy (see `refusals`), or decides under the shard's lock.

use super::KeyedLimiter;
use super::refusals;
use super::shard::{LockedShard, at_reading};
use crate::algorithm::Forgettable;
use crate::check::{CheckKey, CheckKeyAsync, SettleKey, Settlement};
use crate::clock::{Clock, Timestamp};
use crate::decision::{CheckAtError, Decision, NeverAllowed, Receipt};
use crate::mode::Mode;
use std::borrow::Borrow;
use std::convert::Infallible;
use std::future::{Ready, ready};
use std::hash::Hash;
use std::sync::atomic::Ordering;

impl<K: Hash + Eq + Clone + Send, L: Forgettable + Clone, C: Clock> KeyedLimiter<K, L, C> {
    /// Check one unit for `key`.
    #[inline]
    #[must_use = "a decision not looked at lets a denied request through"]
    pub fn check<Q>(&self, key: &Q) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.check_unit(key)
            .unwrap_or_else(|_| Decision::deny_ns(0, 0, 0, 0, u64::MAX))
    }

    /// Check `cost` units for `key`, spending them if allowed.
    ///
    /// # Errors
    ///
    /// [`NeverAllowed`] when `cost` exceeds what the limiter can ever allow
    /// at once (its max cost); a denial is an `Ok` decision.
    #[must_use = "a decision not looked at lets a denied request through"]
    pub fn check_n<Q>(&self, key: &Q, cost: u32) -> Result<Decision, NeverAllowed>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        if cost == 1 {
            return self.check_unit(key);
        }
        self.run(key, cost, Mode::Consume)
    }

    /// This thread's remembered refusal of `key`, consulted only while its
    /// shard is busy, if it still holds at `now`.
    #[inline]
    fn remembered_refusal<Q>(
        &self,
        shard: &LockedShard<K, L>,
        hash: u64,
        key: &Q,
        now: u64,
    ) -> Option<refusals::Refused>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        if shard.busy_until.load(Ordering::Relaxed) <= now {
            return None;
        }
        self.refusals.refusal(hash, key, now)
    }

    /// One unit for `key`, answered from this thread's memory of refusals
    /// while the key's shard is busy.
    #[inline]
    fn check_unit<Q>(&self, key: &Q) -> Result<Decision, NeverAllowed>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let (hash, shard) = self.shard(key);
        let now = self.clock.now_nanos();
        if let Some(refused) = self.remembered_refusal(shard, hash, key, now) {
            return Ok(self.shadowed(refused.decision(now)));
        }
        let Ok(decision) = self.decide_at(
            (hash, shard),
            key,
            true,
            true,
            at_reading(now),
            |l, s, now| l.check(s, now, 1, Mode::Consume),
        );
        Ok(self.shadowed(decision?))
    }

    /// What [`check_n`](Self::check_n) would answer, without spending.
    ///
    /// # Errors
    ///
    /// [`NeverAllowed`] when `cost` exceeds what the limiter can ever allow
    /// at once (its max cost); a denial is an `Ok` decision.
    pub fn peek_n<Q>(&self, key: &Q, cost: u32) -> Result<Decision, NeverAllowed>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.run(key, cost, Mode::Peek)
    }

    /// The time on this limiter's clock, for [`check_n_at`](Self::check_n_at).
    pub fn now(&self) -> Timestamp<C> {
        self.clock.now()
    }

    /// [`check_n`](Self::check_n) at a time read from this limiter's clock
    /// (e.g. once for a batch of requests, or replayed from a trace). The
    /// time is judged at for `key` alone (see [Time](Self#time)); the clock
    /// is read only when it is later than any reading the key's shard has
    /// judged at.
    ///
    /// # Errors
    ///
    /// [`CheckAtError::NeverAllowed`] for a cost above the limiter's
    /// max cost; [`CheckAtError::AheadOfClock`] for a time more than
    /// [`MAX_AHEAD`](crate::clock::MAX_AHEAD) past the clock. Neither
    /// changes anything.
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use weir_rate::{Gcra, KeyedLimiter, Quota};
    ///
    /// let per_user = KeyedLimiter::new(Gcra::new(Quota::per_second(NonZeroU32::MIN)));
    /// let now = per_user.now();
    /// let batch = ["alice", "bob", "alice"].map(|user| per_user.check_n_at(&user, 1, now).unwrap());
    /// assert_eq!(batch.map(|d| d.is_allowed()), [true, true, false]);
    /// ```
    ///
    /// A reading of another type of clock is a type error:
    ///
    /// ```compile_fail,E0308
    /// use std::num::NonZeroU32;
    /// use weir_rate::clock::{Clock, ManualClock, StdClock};
    /// use weir_rate::{Gcra, KeyedLimiter, Quota};
    ///
    /// let per_user = KeyedLimiter::with_clock(Gcra::new(Quota::per_second(NonZeroU32::MIN)), ManualClock::new());
    /// let _ = per_user.check_n_at(&"alice", 1, StdClock::new().now());
    /// ```
    pub fn check_n_at<Q>(
        &self,
        key: &Q,
        cost: u32,
        now: Timestamp<C>,
    ) -> Result<Decision, CheckAtError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let at = now.as_nanos();
        let decision = self.decide_at(
            self.shard(key),
            key,
            true,
            false,
            |latest: &mut u64| {
                if at > *latest {
                    let reading = self.clock.now_nanos();
                    CheckAtError::check_ahead(at, reading)?;
                    *latest = reading.min(at).max(*latest);
                }
                Ok::<_, CheckAtError>(at.max(*latest))
            },
            |limiter, state, now| limiter.check(state, now, cost, Mode::Consume),
        )??;
        Ok(self.shadowed(decision))
    }

    #[inline]
    fn run<Q>(&self, key: &Q, cost: u32, mode: Mode) -> Result<Decision, NeverAllowed>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.run_by(key, cost, mode, None)
    }

    /// A check in `mode` by `by` (a key's tier of the same layout, reading
    /// the same state), or by the limiter's own limit. No refusal
    /// is remembered: a remembered refusal is the limiter's own limit's.
    #[inline]
    pub(crate) fn run_by<Q>(
        &self,
        key: &Q,
        cost: u32,
        mode: Mode,
        by: Option<&L>,
    ) -> Result<Decision, NeverAllowed>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let located = self.shard(key);
        let now = self.clock.now_nanos();
        let Ok(decision) = self.decide_at(
            located,
            key,
            mode == Mode::Consume,
            false,
            at_reading(now),
            |own, s, now| by.unwrap_or(own).check(s, now, cost, mode),
        );
        Ok(self.shadowed(decision?))
    }

    #[inline]
    fn shadowed(&self, decision: Decision) -> Decision {
        if self.shadow.load(Ordering::Relaxed) {
            decision.shadowed()
        } else {
            decision
        }
    }

    /// Whether one unit for `key` may be spent now, spending it if so:
    /// [`check`](Self::check) for callers that need only the yes or no
    /// (no headers), without building a [`Decision`]. In shadow mode it
    /// always answers yes, as `check(key).is_allowed()` does.
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use weir_rate::{Gcra, KeyedLimiter, Quota};
    ///
    /// let per_client = KeyedLimiter::new(Gcra::new(Quota::per_second(NonZeroU32::new(1).unwrap())));
    /// assert!(per_client.allows("alice"));
    /// assert!(!per_client.allows("alice"));
    /// assert!(per_client.allows("bob"));
    /// ```
    #[inline]
    pub fn allows<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        // The clock is read after hashing, not before: the time-stamp
        // counter's read is slow but independent of the hash, so the two
        // overlap.
        let (hash, shard) = self.shard(key);
        let now = self.clock.now_nanos();
        if self.remembered_refusal(shard, hash, key, now).is_some() {
            return self.shadow.load(Ordering::Relaxed);
        }
        let Ok(allowed) = self.decide_at(
            (hash, shard),
            key,
            true,
            true,
            at_reading(now),
            |limiter, state, now| limiter.allows(state, now, 1),
        );
        allowed || self.shadow.load(Ordering::Relaxed)
    }
}

impl<K, Q, L, C> CheckKey<Q> for KeyedLimiter<K, L, C>
where
    K: Hash + Eq + Clone + Send + Borrow<Q>,
    Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    L: Forgettable + Clone,
    C: Clock,
    Self: Send + Sync,
{
    fn check_n(&self, key: &Q, cost: u32) -> Result<Decision, NeverAllowed> {
        self.check_n(key, cost)
    }

    fn charge(&self, key: &Q, cost: u32) -> Option<Receipt> {
        Some(self.charge(key, cost))
    }

    fn refund(&self, key: &Q, receipt: Receipt) {
        self.refund(key, &receipt);
    }
}

/// In-process limiters answer the async form with a completed future.
impl<K, Q, L, C> CheckKeyAsync<Q> for KeyedLimiter<K, L, C>
where
    K: Send,
    Q: ?Sized,
    L: Forgettable,
    Self: CheckKey<Q> + 'static,
{
    type Future = Ready<Result<Decision, NeverAllowed>>;

    fn check_n_async(&self, key: &Q, cost: u32) -> Self::Future {
        ready(self.check_n(key, cost))
    }
}

impl<K, Q, L, C> SettleKey<Q> for KeyedLimiter<K, L, C>
where
    K: Hash + Eq + Clone + Send + Borrow<Q>,
    Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    L: Forgettable + Clone,
    C: Clock,
    Self: CheckKeyAsync<Q>,
{
    type Error = Infallible;
    type Settling = Ready<Result<(), Infallible>>;

    fn settle(&self, key: &Q, admitted: &Decision, from: u32, to: u32) -> Self::Settling {
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

#[cfg(feature = "wait")]
#[cfg_attr(docsrs, doc(cfg(feature = "wait")))]
impl<K, L, C> KeyedLimiter<K, L, C>
where
    K: Hash + Eq + Clone + Send,
    L: Forgettable + Clone,
    C: Clock,
{
    /// Wait until `key` may spend `cost` units, then spend them (see the
    /// [`wait`](crate::wait) module).
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use weir_rate::wait::Jitter;
    /// use weir_rate::{Gcra, KeyedLimiter, Quota};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), weir_rate::NeverAllowed> {
    /// let per_user = KeyedLimiter::<String, _>::new(Gcra::new(Quota::per_second(NonZeroU32::new(50).unwrap())));
    /// let decision = per_user.until_key_ready("alice", 1, Jitter::NONE).await?;
    /// assert!(decision.is_allowed());
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`NeverAllowed`] at once for a cost the quota can never allow.
    pub async fn until_key_ready<Q>(
        &self,
        key: &Q,
        cost: u32,
        jitter: crate::wait::Jitter,
    ) -> Result<Decision, NeverAllowed>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        crate::wait::until_allowed(|| std::future::ready(self.check_n(key, cost)), jitter).await
    }
}
