use super::{ceil_div, clamp_ns, clamp_u32};
use crate::algorithm::{Algorithm, Forgettable};
use crate::decision::{Decision, Receipt};
use crate::mode::Mode;
use crate::quota::Quota;

/// Fractional bits of the bucket level: tokens are counted in 2⁻³² units,
/// so refills between close requests are not lost to rounding (the Criteo
/// post's warning about integer refills).
pub(crate) const FRAC: u32 = 32;
const ONE: u128 = 1 << FRAC;

/// The bucket arithmetic shared by the token bucket and the leaky-bucket
/// meter: `level` is the amount spent (tokens taken out, or water in), in
/// 2⁻³² units, draining at `limit / window` and capped at `burst`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bucket {
    pub(crate) quota: Quota,
}

/// A bucket's state: level (2⁻³² units) and when it was last drained.
///
/// What a [`KeyedLimiter`](crate::KeyedLimiter) keeps per key; driven by
/// hand through [`Algorithm`](crate::Algorithm), times in ns:
///
/// ```
/// use std::num::NonZeroU32;
/// use weir_rate::{TokenBucket, Algorithm, Mode, Quota};
/// let limiter = TokenBucket::new(Quota::per_second(NonZeroU32::MIN));
/// let mut state = limiter.new_state(0);
/// assert!(limiter.check(&mut state, 0, 1, Mode::Consume)?.is_allowed());
/// assert!(!limiter.check(&mut state, 1, 1, Mode::Consume)?.is_allowed());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TokenBucketState {
    level: u128,
    at: u64,
}

impl TokenBucketState {
    /// An empty bucket level as of `now_ns`.
    pub(crate) fn starting_at(now_ns: u64) -> Self {
        Self {
            level: 0,
            at: now_ns,
        }
    }
}

impl Bucket {
    /// Drained amount over `elapsed` ns, rounded down (so the bucket never
    /// refills faster than the quota).
    #[inline]
    fn drained(&self, elapsed: u64) -> u128 {
        self.refill(elapsed, false)
    }

    /// `limit·elapsed/window` in 2⁻³² units, rounded up or down,
    /// saturating.
    #[inline]
    fn refill(&self, elapsed: u64, up: bool) -> u128 {
        let window = u128::from(self.quota.window_nanos());
        let Some(x) = (u128::from(self.quota.limit()) * u128::from(elapsed)).checked_mul(ONE)
        else {
            return u128::MAX;
        };
        if up { ceil_div(x, window) } else { x / window }
    }

    #[inline]
    fn drain(&self, s: &mut TokenBucketState, now: u64) -> u64 {
        let now = now.max(s.at);
        s.level = s.level.saturating_sub(self.drained(now - s.at));
        s.at = now;
        now
    }

    /// Nanoseconds to drain `amount` (2⁻³² units), rounded up.
    #[inline]
    fn time_for(&self, amount: u128) -> u64 {
        // amount < 2⁶⁵ and window < 2⁶⁴: the product can exceed u128, so
        // it saturates (to a wait longer than any clock can reach).
        let num = amount.saturating_mul(u128::from(self.quota.window_nanos()));
        clamp_ns(ceil_div(num, u128::from(self.quota.limit()) * ONE))
    }

    pub(crate) fn decide(
        &self,
        s: &mut TokenBucketState,
        now_ns: u64,
        cost: u32,
        mode: Mode,
    ) -> Decision {
        let burst = self.quota.burst();
        let mut drained = *s;
        let now = self.drain(&mut drained, now_ns);
        let cap = u128::from(burst) * ONE;
        // Saturating: a forced charge can leave the level past the burst.
        let need = drained.level.saturating_add(u128::from(cost) * ONE);
        let (limit, window) = (self.quota.limit(), self.quota.window_nanos());
        if need <= cap {
            if mode == Mode::Consume {
                *s = drained;
                s.level = need;
            }
            let remaining = clamp_u32((cap - need) / ONE);
            Decision::allow_ns(limit, window, remaining, self.time_for(need))
                .charged(mode, now, cost)
        } else {
            if mode == Mode::Consume {
                *s = drained;
            }
            // A quota shrunk at run time can leave more spent than the new
            // burst holds: nothing remains, and that must not underflow.
            let remaining = clamp_u32(cap.saturating_sub(drained.level) / ONE);
            Decision::deny_ns(
                limit,
                window,
                remaining,
                self.time_for(drained.level),
                self.time_for(need - cap),
            )
        }
    }

    /// Returns what of `receipt`'s tokens the bucket cannot have refilled
    /// since they were taken, even if it held nothing else: refills drain
    /// the level in order, so at least that much of this spending is
    /// still in it. The refill is rounded up, so a refund never returns
    /// more than the bucket's own arithmetic still holds of the spending.
    pub(crate) fn refund(&self, s: &mut TokenBucketState, now_ns: u64, receipt: Receipt) {
        let now = self.drain(s, now_ns);
        let refilled = self.refill(now.saturating_sub(receipt.at_nanos()), true);
        let back = (u128::from(receipt.cost()) * ONE).saturating_sub(refilled);
        s.level = s.level.saturating_sub(back);
    }

    /// Drain to `now_ns`, then add `cost` to the level, past the burst if
    /// need be (the level counts what was spent, so a debt is a level
    /// above the burst; it saturates at 2¹²⁸ − 1 units of 2⁻³², which no
    /// sum of `u32` costs reaches in practice).
    pub(crate) fn charge(&self, s: &mut TokenBucketState, now_ns: u64, cost: u32) -> Receipt {
        let now = self.drain(s, now_ns);
        s.level = s.level.saturating_add(u128::from(cost) * ONE);
        Receipt::new(now, cost)
    }

    pub(crate) fn is_idle(&self, s: &TokenBucketState, now_ns: u64) -> bool {
        s.at <= now_ns && (s.level == 0 || self.drained(now_ns - s.at) >= s.level)
    }

    pub(crate) fn idle_at(&self, s: &TokenBucketState, now_ns: u64) -> u64 {
        // An empty bucket drained at a time ahead of `now` is not a fresh
        // one now: forgotten, the key's time would be.
        if s.level == 0 {
            return s.at.max(now_ns);
        }
        // `time_for` rounds up: the least elapsed time `drained` counts the
        // whole level in.
        s.at.saturating_add(self.time_for(s.level)).max(now_ns)
    }

    /// A level that drains exactly by `idle_at`, plus one 2⁻³² unit: a
    /// bucket idle by then held at most `limit·(idle_at − now)/window` now,
    /// but its drains were rounded down from its own time, so at a later
    /// check it may hold one unit more than this bucket's own rounding
    /// leaves.
    pub(crate) fn spent_until(&self, idle_at: u64, now_ns: u64) -> TokenBucketState {
        if idle_at <= now_ns {
            return TokenBucketState::starting_at(now_ns);
        }
        TokenBucketState {
            level: self.refill(idle_at - now_ns, true).saturating_add(1),
            at: now_ns,
        }
    }
}

/// The token bucket: up to `burst` tokens, refilled continuously at
/// `limit / window`; a request takes `cost` tokens or is denied. At most
/// `burst + limit·t/window` units pass in any interval of length `t`.
///
/// The level is kept in 2⁻³² token units with the refill rounded down, so
/// it is exact to within 2⁻³² token per check and never looser than the
/// quota. As a limiter it is equivalent to [`Gcra`](crate::Gcra) (GCRA
/// stores one timestamp instead of a level and a time).
///
/// A refund returns what of its spending the bucket cannot have refilled
/// yet: `cost − limit·elapsed/window` tokens, nothing once that is zero.
/// A forced charge ([`Algorithm::charge`]) takes its tokens even from an
/// empty bucket: the bucket then holds a debt, refilled before any check
/// passes.
///
/// ```
/// use std::num::NonZeroU32;
/// use weir_rate::{Algorithm, Mode, Quota, TokenBucket};
///
/// // 60 per minute with bursts of 10.
/// let quota = Quota::per_minute(NonZeroU32::new(60).unwrap()).allow_burst(NonZeroU32::new(10).unwrap());
/// let tb = TokenBucket::new(quota);
/// let mut s = tb.new_state(0);
/// assert!(tb.check(&mut s, 0, 10, Mode::Consume).unwrap().is_allowed());
/// assert!(!tb.check(&mut s, 0, 1, Mode::Consume).unwrap().is_allowed());
/// assert!(tb.check(&mut s, 1_000_000_000, 1, Mode::Consume).unwrap().is_allowed());
/// ```
#[derive(Debug, Clone)]
pub struct TokenBucket {
    bucket: Bucket,
}

impl TokenBucket {
    /// A bucket of `quota.burst()` tokens refilled at `limit / window`.
    pub fn new(quota: Quota) -> Self {
        Self {
            bucket: Bucket { quota },
        }
    }

    /// The quota it enforces.
    pub fn quota(&self) -> Quota {
        self.bucket.quota
    }
}

impl Algorithm for TokenBucket {
    type State = TokenBucketState;

    fn max_cost(&self) -> u32 {
        self.bucket.quota.burst()
    }

    fn new_state(&self, now_ns: u64) -> Self::State {
        TokenBucketState {
            level: 0,
            at: now_ns,
        }
    }

    fn decide(&self, s: &mut Self::State, now_ns: u64, cost: u32, mode: Mode) -> Decision {
        self.bucket.decide(s, now_ns, cost, mode)
    }

    fn refund(&self, s: &mut Self::State, now_ns: u64, receipt: Receipt) {
        self.bucket.refund(s, now_ns, receipt);
    }

    fn charge(&self, s: &mut Self::State, now_ns: u64, cost: u32) -> Receipt {
        self.bucket.charge(s, now_ns, cost)
    }
}

impl Forgettable for TokenBucket {
    fn is_idle(&self, s: &Self::State, now_ns: u64) -> bool {
        self.bucket.is_idle(s, now_ns)
    }

    fn idle_at(&self, s: &Self::State, now_ns: u64) -> u64 {
        self.bucket.idle_at(s, now_ns)
    }

    fn spent_until(&self, idle_at: u64, now_ns: u64) -> Self::State {
        self.bucket.spent_until(idle_at, now_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::num::NonZeroU32;

    const SEC: u64 = 1_000_000_000;

    /// As for GCRA: a bucket of 2 refilled at 2 per second; A's 2 tokens
    /// taken at 0 s have been refilled by 1 s, so refunding them then must
    /// not add to what B left. A quarter second after B, 1.5 of B's tokens
    /// are still missing; a refund for B returns them and fills the bucket.
    #[test]
    fn a_refund_returns_only_tokens_not_yet_refilled() {
        let tb = TokenBucket::new(Quota::per_second(NonZeroU32::new(2).unwrap()));
        let mut s = tb.new_state(0);
        let a = tb.check(&mut s, 0, 2, Mode::Consume).unwrap();
        let b = tb.check(&mut s, SEC, 2, Mode::Consume).unwrap();
        assert!(a.is_allowed() && b.is_allowed());
        tb.refund(&mut s, SEC, a.receipt().unwrap());
        assert!(
            !tb.check(&mut s, SEC, 2, Mode::Consume)
                .unwrap()
                .is_allowed(),
            "4 units at one instant from a bucket of 2"
        );
        let half = SEC + SEC / 4;
        tb.refund(&mut s, half, b.receipt().unwrap());
        assert!(
            tb.check(&mut s, half, 2, Mode::Consume)
                .unwrap()
                .is_allowed()
        );
        assert!(
            !tb.check(&mut s, half, 1, Mode::Consume)
                .unwrap()
                .is_allowed()
        );
    }
}
