use crate::algorithm::{Algorithm, Forgettable};
use crate::decision::{Decision, Receipt};
use crate::mode::Mode;
use crate::quota::Quota;

/// `limit` units per calendar window (windows aligned to multiples of the
/// window length on the limiter's clock: on the default clock, which
/// counts from the Unix epoch, a daily window runs from UTC midnight and
/// an hourly one from the hour, as on Redis and Memcached; a clock of your
/// own puts them on its grid). One counter per key and the
/// cheapest check, but it forgets everything at each boundary: a client can
/// spend `limit` just before and `limit` just after it, up to `2·limit` in a
/// window-long interval.
///
/// A refund returns its spending only while the window it was charged to
/// is the current one; no window ever serves more than `limit` units
/// through checks. A forced charge ([`Algorithm::charge`]) counts in the
/// current window however far past the limit.
///
/// ```
/// use std::num::NonZeroU32;
/// use weir_rate::{FixedWindow, Algorithm, Mode, Quota};
///
/// let fw = FixedWindow::new(Quota::per_second(NonZeroU32::new(3).unwrap()));
/// let mut s = fw.new_state(0);
/// let at = |t: u64, s: &mut _| fw.check(s, t, 1, Mode::Consume).unwrap().is_allowed();
/// assert_eq!((0..5).filter(|_| at(999_000_000, &mut s)).count(), 3);
/// // A new window starts at 1 s: three more, 1 ms later.
/// assert_eq!((0..5).filter(|_| at(1_000_000_000, &mut s)).count(), 3);
/// ```
#[derive(Debug, Clone)]
pub struct FixedWindow {
    quota: Quota,
}

/// [`FixedWindow`]'s state: the current window's start and count.
///
/// What a [`KeyedLimiter`](crate::KeyedLimiter) keeps per key; driven by
/// hand through [`Algorithm`](crate::Algorithm), times in ns:
///
/// ```
/// use std::num::NonZeroU32;
/// use weir_rate::{FixedWindow, Algorithm, Mode, Quota};
/// let limiter = FixedWindow::new(Quota::per_second(NonZeroU32::MIN));
/// let mut state = limiter.new_state(0);
/// assert!(limiter.check(&mut state, 0, 1, Mode::Consume)?.is_allowed());
/// assert!(!limiter.check(&mut state, 1, 1, Mode::Consume)?.is_allowed());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FixedWindowState {
    start: u64,
    count: u64,
}

impl FixedWindow {
    /// `quota.limit()` units per `quota.window()` (the burst is unused).
    pub fn new(quota: Quota) -> Self {
        Self { quota }
    }

    /// The quota it enforces.
    pub fn quota(&self) -> Quota {
        self.quota
    }

    /// The units counted in the window holding `now_ns` (what the limit is
    /// compared with), without changing the state.
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use weir_rate::{FixedWindow, Algorithm, Mode, Quota};
    ///
    /// let window = FixedWindow::new(Quota::per_second(NonZeroU32::new(10).unwrap()));
    /// let mut state = window.new_state(0);
    /// window.check(&mut state, 0, 3, Mode::Consume).unwrap();
    /// assert_eq!(window.estimate(&state, 999_999_999), 3.0);
    /// assert_eq!(window.estimate(&state, 1_000_000_000), 0.0);
    /// ```
    pub fn estimate(&self, s: &FixedWindowState, now_ns: u64) -> f64 {
        if now_ns.saturating_sub(s.start) >= self.quota.window_nanos() {
            0.0
        } else {
            s.count as f64
        }
    }

    /// Roll to the window holding `now`; returns `now`, clamped to not
    /// before the current window.
    fn roll(&self, s: &mut FixedWindowState, now: u64) -> u64 {
        let w = self.quota.window_nanos();
        let now = now.max(s.start);
        if now - s.start >= w {
            s.start = now - now % w;
            s.count = 0;
        }
        now
    }
}

impl Algorithm for FixedWindow {
    type State = FixedWindowState;

    fn max_cost(&self) -> u32 {
        self.quota.limit()
    }

    fn new_state(&self, now_ns: u64) -> Self::State {
        FixedWindowState {
            start: now_ns - now_ns % self.quota.window_nanos(),
            count: 0,
        }
    }

    fn decide(&self, s: &mut Self::State, now_ns: u64, cost: u32, mode: Mode) -> Decision {
        let limit = self.quota.limit();
        let now = self.roll(s, now_ns);
        let end_in = s.start.saturating_add(self.quota.window_nanos()) - now;
        let (limit64, cost64) = (u64::from(limit), u64::from(cost));
        let window = self.quota.window_nanos();
        // Saturating: a forced charge can count far past the limit.
        if s.count.saturating_add(cost64) <= limit64 {
            let after = s.count + cost64;
            if mode == Mode::Consume {
                s.count = after;
            }
            let reset = if after > 0 { end_in } else { 0 };
            Decision::allow_ns(limit, window, (limit64 - after) as u32, reset)
                .charged(mode, now, cost)
        } else {
            let remaining = limit64.saturating_sub(s.count) as u32;
            Decision::deny_ns(limit, window, remaining, end_in, end_in)
        }
    }

    fn refund(&self, s: &mut Self::State, now_ns: u64, receipt: Receipt) {
        self.roll(s, now_ns);
        let since_start = receipt.at_nanos().checked_sub(s.start);
        if since_start.is_some_and(|d| d < self.quota.window_nanos()) {
            s.count = s.count.saturating_sub(u64::from(receipt.cost()));
        }
    }

    /// Counted in the current window, past the limit if need be; the window
    /// refuses every check until it ends.
    fn charge(&self, s: &mut Self::State, now_ns: u64, cost: u32) -> Receipt {
        let now = self.roll(s, now_ns);
        s.count = s.count.saturating_add(u64::from(cost));
        Receipt::new(now, cost)
    }
}

impl Forgettable for FixedWindow {
    fn is_idle(&self, s: &Self::State, now_ns: u64) -> bool {
        s.start <= now_ns && (s.count == 0 || now_ns - s.start >= self.quota.window_nanos())
    }

    fn idle_at(&self, s: &Self::State, now_ns: u64) -> u64 {
        // An empty window ahead of `now` (judged at a caller's later time)
        // is not a fresh state now: forgotten, the key's time would be.
        if s.count == 0 {
            return s.start.max(now_ns);
        }
        s.start
            .saturating_add(self.quota.window_nanos())
            .max(now_ns)
    }

    /// The window ending then, full: more than any limit (a `u32`) holds,
    /// so nothing passes until it ends whatever the quota by then.
    fn spent_until(&self, idle_at: u64, now_ns: u64) -> Self::State {
        if idle_at <= now_ns {
            return self.new_state(now_ns);
        }
        FixedWindowState {
            start: idle_at.saturating_sub(self.quota.window_nanos()),
            count: u64::from(u32::MAX),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const MS: u64 = 1_000_000;

    /// A refund across a window boundary: 10 per second, 10 spent at 0.999 s and 10 at
    /// 1.0 s. Refunding the first 10 at 1.1 s returns nothing (their
    /// window is over), so nothing more fits before 2 s; refunding the
    /// second 10 frees their place.
    #[test]
    fn a_refund_returns_only_to_the_window_it_was_charged_to() {
        let fw = FixedWindow::new(Quota::try_new(10, Duration::from_secs(1)).unwrap());
        let mut s = fw.new_state(0);
        let first = fw.check(&mut s, 999 * MS, 10, Mode::Consume).unwrap();
        let second = fw.check(&mut s, 1000 * MS, 10, Mode::Consume).unwrap();
        assert!(first.is_allowed() && second.is_allowed());
        fw.refund(&mut s, 1100 * MS, first.receipt().unwrap());
        assert!(
            !fw.check(&mut s, 1200 * MS, 10, Mode::Consume)
                .unwrap()
                .is_allowed(),
            "20 units passed in the window [1 s, 2 s) of limit 10"
        );
        fw.refund(&mut s, 1300 * MS, second.receipt().unwrap());
        assert!(
            fw.check(&mut s, 1400 * MS, 10, Mode::Consume)
                .unwrap()
                .is_allowed()
        );
    }
}
