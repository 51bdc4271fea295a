use super::clamp_u32;
use crate::algorithm::{Algorithm, Forgettable};
use crate::config::ConfigError;
use crate::decision::{Decision, Receipt};
use crate::mode::Mode;
use crate::quota::Quota;
use std::time::Duration;

/// The sliding-window counter: the window approximated from `N` fixed
/// sub-window counters of length `S = window / (N − 1)`. The `N − 1` most
/// recent sub-windows (the current one included) count in full and the
/// oldest is weighted by the part of it still inside the sliding window.
/// With `N = 2` this is Cloudflare's two-window approximation (current
/// minute plus the previous minute scaled by the overlap).
///
/// Exact under steady traffic; otherwise it underestimates when the oldest
/// sub-window's requests came late in it and overestimates when they came
/// early. Because the oldest sub-window may hold up to `limit` units that
/// the weighting partly forgets, the worst case is still `2·limit` in a window-long interval, like a fixed window, but it takes
/// adversarial timing; the accuracy simulation in the bench report measures
/// the typical error (Cloudflare measured 0.003 % wrong decisions with
/// `N = 2`). Memory and check cost grow linearly with `N`.
///
/// If the window is not a multiple of `N − 1` nanoseconds, the effective
/// window is `(N − 1)·S`, up to `N − 2` ns shorter.
///
/// A refund takes its spending out of the sub-window it was charged to
/// while that sub-window still counts (one of the `N` newest), and returns
/// nothing after. So right after every allowed check the estimate, taken
/// over the units served and not refunded, is at most `limit`. A forced
/// charge ([`Algorithm::charge`]) counts in the current sub-window however
/// far past the limit, and those units count in that estimate too.
///
/// ```
/// use std::num::NonZeroU32;
/// use weir_rate::{Algorithm, Mode, Quota, SlidingWindow};
///
/// let quota = Quota::per_minute(NonZeroU32::new(100).unwrap());
/// let sw = SlidingWindow::try_new(quota, 2).unwrap(); // Cloudflare's approximation
/// let mut s = sw.new_state(0);
/// let sec = 1_000_000_000u64;
/// assert!(sw.check(&mut s, 30 * sec, 90, Mode::Consume).unwrap().is_allowed());
/// // At 1:15 the previous minute still weighs 45/60 · 90 = 67.5 units.
/// let d = sw.check(&mut s, 75 * sec, 40, Mode::Peek).unwrap();
/// assert!(!d.is_allowed());
/// assert!(sw.check(&mut s, 75 * sec, 32, Mode::Consume).unwrap().is_allowed());
/// ```
#[derive(Debug, Clone)]
pub struct SlidingWindow {
    quota: Quota,
    counters: u32,
    sub: u64,
}

/// [`SlidingWindow`]'s state: a ring of sub-window counters.
///
/// What a [`KeyedLimiter`](crate::KeyedLimiter) keeps per key; driven by
/// hand through [`Algorithm`](crate::Algorithm), times in ns:
///
/// ```
/// use std::num::NonZeroU32;
/// use weir_rate::{SlidingWindow, Algorithm, Mode, Quota};
/// let limiter = SlidingWindow::try_new(Quota::per_second(NonZeroU32::MIN), 2)?;
/// let mut state = limiter.new_state(0);
/// assert!(limiter.check(&mut state, 0, 1, Mode::Consume)?.is_allowed());
/// assert!(!limiter.check(&mut state, 1, 1, Mode::Consume)?.is_allowed());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlidingWindowState {
    /// Start of the current sub-window.
    start: u64,
    /// Index of the current sub-window's counter.
    head: usize,
    counts: Box<[u64]>,
}

impl SlidingWindow {
    /// The most counters a sliding window takes: each key's state holds
    /// all of them, so the count bounds every key's memory (8 KiB), and
    /// the Redis script keeps the same ring.
    pub const MAX_COUNTERS: u32 = 1024;

    /// A sliding-window counter over `counters` sub-window counters.
    ///
    /// # Errors
    ///
    /// [`ConfigError::BadSubWindows`] for fewer than 2 or more than
    /// [`MAX_COUNTERS`](Self::MAX_COUNTERS) counters, or sub-windows
    /// shorter than a nanosecond.
    pub fn try_new(quota: Quota, counters: u32) -> Result<Self, ConfigError> {
        if !(2..=Self::MAX_COUNTERS).contains(&counters) {
            return Err(ConfigError::BadSubWindows { counters });
        }
        let sub = quota.window_nanos() / u64::from(counters - 1);
        if sub == 0 {
            return Err(ConfigError::BadSubWindows { counters });
        }
        Ok(Self {
            quota,
            counters,
            sub,
        })
    }

    /// The quota it enforces.
    pub fn quota(&self) -> Quota {
        self.quota
    }

    /// The number of counters `N`.
    pub fn counters(&self) -> u32 {
        self.counters
    }

    /// The length `S = window / (N − 1)` of a sub-window (whole
    /// nanoseconds).
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use std::time::Duration;
    /// use weir_rate::{Quota, SlidingWindow};
    ///
    /// let sliding = SlidingWindow::try_new(Quota::per_second(NonZeroU32::new(10).unwrap()), 5)?;
    /// assert_eq!((sliding.counters(), sliding.sub_window()), (5, Duration::from_millis(250)));
    /// # Ok::<(), weir_rate::ConfigError>(())
    /// ```
    pub fn sub_window(&self) -> Duration {
        Duration::from_nanos(self.sub)
    }

    /// The estimated units in the sliding window ending at `now_ns` (what
    /// the limit is compared with), without changing the state: for
    /// measuring how far the estimate strays from an exact count.
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use weir_rate::{Algorithm, Mode, Quota, SlidingWindow};
    ///
    /// let sliding = SlidingWindow::try_new(Quota::per_second(NonZeroU32::new(10).unwrap()), 2)?;
    /// let mut state = sliding.new_state(0);
    /// sliding.check(&mut state, 0, 4, Mode::Consume).unwrap();
    /// // Half way through the next second, half of the 4 still count.
    /// assert_eq!(sliding.estimate(&state, 1_500_000_000), 2.0);
    /// # Ok::<(), weir_rate::ConfigError>(())
    /// ```
    pub fn estimate(&self, s: &SlidingWindowState, now_ns: u64) -> f64 {
        // A state from a limiter with another N is read as `check` would
        // leave it after adopting it; its ring cannot be indexed with ours.
        let adopted;
        let s = if s.counts.len() == self.n() {
            s
        } else {
            let mut copy = s.clone();
            self.adopt(&mut copy);
            adopted = copy;
            &adopted
        };
        let ahead = now_ns.saturating_sub(s.start);
        let shift = usize::try_from(ahead / self.sub).unwrap_or(usize::MAX);
        let pos = ahead % self.sub;
        let (full, oldest) = self.parts(s, shift);
        self.scaled(full, oldest, pos) as f64 / self.sub as f64
    }

    fn n(&self) -> usize {
        self.counters as usize
    }

    /// Count of the sub-window `age` steps back (0 = current).
    #[inline]
    fn age(&self, s: &SlidingWindowState, age: usize) -> u64 {
        let n = s.counts.len();
        s.counts[(s.head + n - age) % n]
    }

    /// Move to the sub-window holding `now`; returns `now` clamped to not
    /// before the current sub-window.
    fn roll(&self, s: &mut SlidingWindowState, now: u64) -> u64 {
        let n = self.n();
        self.adopt(s);
        let now = now.max(s.start);
        let steps = (now - s.start) / self.sub;
        if steps > 0 {
            for _ in 0..steps.min(n as u64) {
                s.head = (s.head + 1) % n;
                s.counts[s.head] = 0;
            }
            s.start += steps * self.sub;
        }
        now
    }

    /// Give a state built with another N this limiter's ring: everything
    /// counted moves to the current sub-window (stricter, never a burst).
    fn adopt(&self, s: &mut SlidingWindowState) {
        let n = self.n();
        if s.counts.len() != n {
            let total = s.counts.iter().fold(0u64, |a, &c| a.saturating_add(c));
            let mut counts = vec![0; n].into_boxed_slice();
            counts[0] = total;
            s.counts = counts;
            s.head = 0;
        }
    }

    /// `(full, oldest)`: the sum of the `N − 1` newest counters and the
    /// oldest counter, `shift` sub-windows in the future (no new traffic).
    fn parts(&self, s: &SlidingWindowState, shift: usize) -> (u64, u64) {
        let n = self.n();
        let mut full = 0u64;
        for age in 0..(n - 1) {
            if age >= shift {
                full = full.saturating_add(self.age(s, age - shift));
            }
        }
        let oldest = if n > shift {
            self.age(s, n - 1 - shift)
        } else {
            0
        };
        (full, oldest)
    }

    /// The estimate scaled by `S`: `full·S + oldest·(S − pos)`.
    fn scaled(&self, full: u64, oldest: u64, pos: u64) -> u128 {
        let sub = u128::from(self.sub);
        u128::from(full) * sub + u128::from(oldest) * (sub - u128::from(pos))
    }
}

impl Algorithm for SlidingWindow {
    type State = SlidingWindowState;

    fn max_cost(&self) -> u32 {
        self.quota.limit()
    }

    fn new_state(&self, now_ns: u64) -> Self::State {
        SlidingWindowState {
            start: now_ns - now_ns % self.sub,
            head: 0,
            counts: vec![0; self.n()].into_boxed_slice(),
        }
    }

    fn decide(&self, s: &mut Self::State, now_ns: u64, cost: u32, mode: Mode) -> Decision {
        let limit = self.quota.limit();
        let now = self.roll(s, now_ns);
        let pos = now - s.start;
        let sub = u128::from(self.sub);
        let budget = u128::from(limit) * sub;
        let (full, oldest) = self.parts(s, 0);
        let used = self.scaled(full, oldest, pos);
        let need = used + u128::from(cost) * sub;
        let window = self.quota.window_nanos();
        if need <= budget {
            if mode == Mode::Consume {
                s.counts[s.head] = s.counts[s.head].saturating_add(u64::from(cost));
            }
            let remaining = clamp_u32((budget - need) / sub);
            let reset = self.reset_in(s, pos, cost > 0 && mode == Mode::Consume);
            Decision::allow_ns(limit, window, remaining, reset).charged(mode, now, cost)
        } else {
            let remaining = clamp_u32(budget.saturating_sub(used) / sub);
            let retry = self.retry_in(s, pos, cost);
            Decision::deny_ns(
                limit,
                window,
                remaining,
                self.reset_in(s, pos, false),
                retry,
            )
        }
    }

    fn refund(&self, s: &mut Self::State, now_ns: u64, receipt: Receipt) {
        self.roll(s, now_ns);
        let at = receipt.at_nanos();
        // Sub-windows back from the current one to the one holding `at`.
        let age = if at >= s.start {
            if at - s.start >= self.sub {
                return; // after the current sub-window: not a spending of this state
            }
            0
        } else {
            (s.start - at).div_ceil(self.sub)
        };
        let n = s.counts.len();
        if age >= n as u64 {
            return;
        }
        let i = (s.head + n - age as usize) % n;
        s.counts[i] = s.counts[i].saturating_sub(u64::from(receipt.cost()));
    }

    /// Counted in the current sub-window, past the limit if need be: checks
    /// are refused until enough of it has slid out.
    fn charge(&self, s: &mut Self::State, now_ns: u64, cost: u32) -> Receipt {
        let now = self.roll(s, now_ns);
        s.counts[s.head] = s.counts[s.head].saturating_add(u64::from(cost));
        Receipt::new(now, cost)
    }
}

impl Forgettable for SlidingWindow {
    fn is_idle(&self, s: &Self::State, now_ns: u64) -> bool {
        let Some(ahead) = now_ns.checked_sub(s.start) else {
            return false;
        };
        ahead / self.sub >= self.n() as u64 || s.counts.iter().all(|&c| c == 0)
    }

    fn idle_at(&self, s: &Self::State, now_ns: u64) -> u64 {
        // Empty sub-windows ahead of `now` are not a fresh state now.
        if s.counts.iter().all(|&c| c == 0) {
            return s.start.max(now_ns);
        }
        let span = (self.n() as u64).saturating_mul(self.sub);
        s.start.saturating_add(span).max(now_ns)
    }

    /// Every sub-window of the window ending then full, each with more than
    /// any limit (a `u32`) holds: nothing passes until the newest of them
    /// stops counting. A state idle by then holds at most the limit in each
    /// (an allowed check keeps the estimate within it), so the estimate
    /// never falls below its own.
    fn spent_until(&self, idle_at: u64, now_ns: u64) -> Self::State {
        if idle_at <= now_ns {
            return self.new_state(now_ns);
        }
        let span = (self.n() as u64).saturating_mul(self.sub);
        SlidingWindowState {
            start: idle_at.saturating_sub(span),
            head: 0,
            counts: vec![u64::from(u32::MAX); self.n()].into_boxed_slice(),
        }
    }
}

impl SlidingWindow {
    /// Time from `pos` (into the current sub-window) until nothing counted
    /// weighs on the estimate any more.
    fn reset_in(&self, s: &SlidingWindowState, pos: u64, just_spent: bool) -> u64 {
        let n = self.n();
        let newest = (0..n).find(|&age| self.age(s, age) > 0);
        match newest {
            None if !just_spent => 0,
            None => (n as u64).saturating_mul(self.sub) - pos,
            // The sub-window `age` back stops counting at the end of the
            // sub-window in which it is the oldest: (N − age) starts ahead.
            Some(age) => ((n - age) as u64).saturating_mul(self.sub) - pos,
        }
    }

    /// Time from `pos` until `cost` more would fit if nothing else is spent.
    fn retry_in(&self, s: &SlidingWindowState, pos: u64, cost: u32) -> u64 {
        let sub = u128::from(self.sub);
        let limit = u128::from(self.quota.limit());
        let cost = u128::from(cost);
        for shift in 0..=self.n() {
            let (full, oldest) = self.parts(s, shift);
            let full = u128::from(full);
            if full + cost > limit {
                continue;
            }
            let from = if shift == 0 { u128::from(pos) } else { 0 };
            // Need oldest·(S − p) ≤ (limit − full − cost)·S.
            let at = if oldest == 0 {
                from
            } else {
                let allowed = (limit - full - cost) * sub / u128::from(oldest);
                from.max(sub.saturating_sub(allowed))
            };
            if at < sub || oldest == 0 {
                let when = shift as u128 * sub + at;
                return super::clamp_ns(when - u128::from(pos));
            }
        }
        // Unreachable for cost ≤ limit: after N sub-windows nothing counts.
        (self.n() as u64).saturating_mul(self.sub)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const SEC: u64 = 1_000_000_000;

    /// Two counters of 10 s, limit 2: A at 0 s, B at 15 s. At 21 s A's
    /// sub-window no longer counts, so a refund for A returns nothing; B
    /// still weighs 9/10 and leaves room for one more unit, not two. A
    /// refund for B, whose sub-window still counts, frees its weight.
    #[test]
    fn a_refund_returns_only_to_a_sub_window_that_still_counts() {
        let sw =
            SlidingWindow::try_new(Quota::try_new(2, Duration::from_secs(10)).unwrap(), 2).unwrap();
        let mut s = sw.new_state(0);
        let at = |t: u64, s: &mut SlidingWindowState| sw.check(s, t, 1, Mode::Consume).unwrap();
        let a = at(0, &mut s);
        let b = at(15 * SEC, &mut s);
        assert!(a.is_allowed() && b.is_allowed());
        sw.refund(&mut s, 21 * SEC, a.receipt().unwrap());
        assert!(at(21 * SEC, &mut s).is_allowed());
        assert!(
            !at(21 * SEC, &mut s).is_allowed(),
            "estimate 2.9 > 2 at 21 s: the refund for A was taken from B"
        );
        sw.refund(&mut s, 21 * SEC, b.receipt().unwrap());
        assert!(at(21 * SEC, &mut s).is_allowed());
    }

    fn sliding(counters: u32) -> SlidingWindow {
        let quota = Quota::try_new(100, Duration::from_secs(60)).unwrap();
        SlidingWindow::try_new(quota, counters).unwrap()
    }

    /// A state built under one N and read by a limiter with another (a
    /// limit changed at run time): `estimate` must read it as `check` would
    /// after adopting it, not index past the ring.
    #[test]
    fn estimate_reads_a_state_from_another_n_like_check_does() {
        let histories: [&[u64]; 2] = [&[0, 20, 40], &[0, 20, 40, 70]];
        for ((from, to), history) in [(2, 4), (2, 7), (4, 2), (3, 5)]
            .into_iter()
            .flat_map(|ns| histories.map(|h| (ns, h)))
        {
            let old = sliding(from);
            let new = sliding(to);
            let mut s = old.new_state(0);
            for &t in history {
                let _ = old.check(&mut s, t * SEC, 5, Mode::Consume).unwrap();
            }
            for now in [10, 45, 70, 75, 100, 130, 500].map(|t| t * SEC) {
                let read = new.estimate(&s, now);
                let mut adopted = s.clone();
                let _ = new.check(&mut adopted, now, 0, Mode::Peek).unwrap();
                assert_eq!(
                    read,
                    new.estimate(&adopted, now),
                    "N {from} -> {to} at {now} ns"
                );
            }
        }
    }
}
