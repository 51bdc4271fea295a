use crate::algorithm::{Algorithm, Forgettable};
use crate::decision::{Decision, Receipt};
use crate::mode::Mode;
use crate::quota::Quota;
use std::collections::VecDeque;

/// The exact sliding window: a log of the allowed requests of the last
/// window. Never allows more than `limit` units in any window-long
/// interval, at the price of memory proportional to the limit (one 16-byte
/// entry per allowed request still in the window) and a check that is
/// linear in the number of expired entries.
///
/// A refund removes the refunded spending's own entry while it is in the
/// log (less than a window old), and nothing after: the window around any
/// instant then holds at most `limit` units that were served. A forced
/// charge ([`Algorithm::charge`]) is logged like a check, past the limit if
/// need be: charges at distinct instants add an entry each, so a key
/// charged often holds an entry per charge of the last window, beyond the
/// limit's worth. Charge a sliding log sparingly, or use GCRA.
///
/// ```
/// use std::num::NonZeroU32;
/// use weir_rate::{Algorithm, Mode, Quota, SlidingLog};
///
/// let log = SlidingLog::new(Quota::per_second(NonZeroU32::new(2).unwrap()));
/// let mut s = log.new_state(0);
/// assert!(log.check(&mut s, 900_000_000, 2, Mode::Consume).unwrap().is_allowed());
/// // Unlike a fixed window, the boundary at 1 s changes nothing.
/// assert!(!log.check(&mut s, 1_100_000_000, 1, Mode::Consume).unwrap().is_allowed());
/// assert!(log.check(&mut s, 1_900_000_000, 1, Mode::Consume).unwrap().is_allowed());
/// ```
#[derive(Debug, Clone)]
pub struct SlidingLog {
    quota: Quota,
}

/// [`SlidingLog`]'s state: the allowed requests still in the window.
///
/// What a [`KeyedLimiter`](crate::KeyedLimiter) keeps per key; driven by
/// hand through [`Algorithm`](crate::Algorithm), times in ns:
///
/// ```
/// use std::num::NonZeroU32;
/// use weir_rate::{SlidingLog, Algorithm, Mode, Quota};
/// let limiter = SlidingLog::new(Quota::per_second(NonZeroU32::MIN));
/// let mut state = limiter.new_state(0);
/// assert!(limiter.check(&mut state, 0, 1, Mode::Consume)?.is_allowed());
/// assert!(!limiter.check(&mut state, 1, 1, Mode::Consume)?.is_allowed());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct SlidingLogState {
    entries: VecDeque<(u64, u32)>,
    total: u64,
    /// The latest time the log was judged at: an empty log judged ahead
    /// of a caller's clock keeps it, so it is never judged earlier.
    at: u64,
}

impl SlidingLogState {
    /// Entries held (one per allowed request still in the window).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the log is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl SlidingLog {
    /// `quota.limit()` units in any `quota.window()` (the burst is unused).
    pub fn new(quota: Quota) -> Self {
        Self { quota }
    }

    fn expire(&self, s: &mut SlidingLogState, now: u64) -> u64 {
        let w = self.quota.window_nanos();
        let now = now.max(s.at);
        s.at = now;
        while let Some(&(t, c)) = s.entries.front() {
            // Elapsed time, not a deadline: `t + w` would saturate at the
            // end of the clock's range and expire every entry at once.
            if now - t < w {
                break;
            }
            // Saturating: only a total past 2⁶⁴ (forced charges beyond any
            // memory) could have lost count, and must not underflow here.
            s.total = s.total.saturating_sub(u64::from(c));
            s.entries.pop_front();
        }
        now
    }

    fn reset_in(&self, s: &SlidingLogState, now: u64) -> u64 {
        s.entries.back().map_or(0, |&(t, _)| {
            self.quota
                .window_nanos()
                .saturating_sub(now.saturating_sub(t))
        })
    }
}

impl Algorithm for SlidingLog {
    type State = SlidingLogState;

    fn max_cost(&self) -> u32 {
        self.quota.limit()
    }

    fn new_state(&self, _now_ns: u64) -> Self::State {
        SlidingLogState::default()
    }

    fn decide(&self, s: &mut Self::State, now_ns: u64, cost: u32, mode: Mode) -> Decision {
        let limit = self.quota.limit();
        let now = self.expire(s, now_ns);
        let (limit64, cost64) = (u64::from(limit), u64::from(cost));
        let window = self.quota.window_nanos();
        if s.total.saturating_add(cost64) <= limit64 {
            let remaining = (limit64 - s.total - cost64) as u32;
            let reset = if cost > 0 {
                self.quota.window_nanos()
            } else {
                self.reset_in(s, now)
            };
            if mode == Mode::Consume && cost > 0 {
                s.entries.push_back((now, cost));
                s.total += cost64;
            }
            Decision::allow_ns(limit, window, remaining, reset).charged(mode, now, cost)
        } else {
            // The earliest time enough old entries have expired.
            let w = self.quota.window_nanos();
            let mut left = s.total;
            let mut retry = 0;
            for &(t, c) in &s.entries {
                left = left.saturating_sub(u64::from(c));
                if left + cost64 <= limit64 {
                    retry = w - (now - t);
                    break;
                }
            }
            let remaining = limit64.saturating_sub(s.total) as u32;
            Decision::deny_ns(limit, window, remaining, self.reset_in(s, now), retry)
        }
    }

    fn refund(&self, s: &mut Self::State, now_ns: u64, receipt: Receipt) {
        self.expire(s, now_ns);
        // Entries are in time order, and only those charged at the
        // receipt's instant can be its spending (any of them will do: they
        // leave the window together).
        let at = receipt.at_nanos();
        let mut i = s.entries.partition_point(|&(t, _)| t <= at);
        let mut left = receipt.cost();
        while left > 0 && i > 0 && s.entries[i - 1].0 == at {
            i -= 1;
            let take = left.min(s.entries[i].1);
            s.entries[i].1 -= take;
            s.total = s.total.saturating_sub(u64::from(take));
            left -= take;
            if s.entries[i].1 == 0 {
                s.entries.remove(i);
            }
        }
    }

    /// One log entry of `cost`, as an allowed check's, past the limit if
    /// need be (merged into the newest entry when that was charged at the
    /// same instant and the sum fits, so charges at one instant take one
    /// entry). The log then holds more than the limit until enough of it
    /// has left the window; its memory grows with the units charged per
    /// window, not only with the limit.
    fn charge(&self, s: &mut Self::State, now_ns: u64, cost: u32) -> Receipt {
        let now = self.expire(s, now_ns);
        if cost > 0 {
            match s.entries.back_mut() {
                Some((t, c)) if *t == now && c.checked_add(cost).is_some() => *c += cost,
                _ => s.entries.push_back((now, cost)),
            }
            s.total = s.total.saturating_add(u64::from(cost));
        }
        Receipt::new(now, cost)
    }
}

impl Forgettable for SlidingLog {
    fn is_idle(&self, s: &Self::State, now_ns: u64) -> bool {
        s.at <= now_ns && self.reset_in(s, now_ns) == 0
    }

    fn idle_at(&self, s: &Self::State, now_ns: u64) -> u64 {
        s.entries.back().map_or(s.at.max(now_ns), |&(t, _)| {
            t.saturating_add(self.quota.window_nanos()).max(now_ns)
        })
    }

    /// One entry of more than any limit (a `u32`) holds, leaving the
    /// window then.
    fn spent_until(&self, idle_at: u64, now_ns: u64) -> Self::State {
        if idle_at <= now_ns {
            return self.new_state(now_ns);
        }
        let at = idle_at.saturating_sub(self.quota.window_nanos());
        SlidingLogState {
            entries: VecDeque::from([(at, u32::MAX)]),
            total: u64::from(u32::MAX),
            at: at.max(now_ns),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const SEC: u64 = 1_000_000_000;

    fn two_per_ten_seconds() -> (SlidingLog, SlidingLogState) {
        let log = SlidingLog::new(Quota::try_new(2, Duration::from_secs(10)).unwrap());
        let s = log.new_state(0);
        (log, s)
    }

    /// A refund of an old entry: limit 2 per 10 s, A at 0 and B at 9 s; a refund
    /// for A at 9.5 s must free A's place, not B's, so that at 10 s only
    /// one more fits beside B.
    #[test]
    fn a_refund_frees_the_refunded_spending_not_the_newest() {
        let (log, mut s) = two_per_ten_seconds();
        let at = |t: u64, s: &mut SlidingLogState| log.check(s, t, 1, Mode::Consume).unwrap();
        let a = at(0, &mut s);
        assert!(a.is_allowed());
        assert!(at(9 * SEC, &mut s).is_allowed());
        log.refund(&mut s, 9 * SEC + SEC / 2, a.receipt().unwrap());
        assert!(at(10 * SEC, &mut s).is_allowed());
        assert!(
            !at(10 * SEC, &mut s).is_allowed(),
            "B, C and D all passed within one second"
        );
    }

    /// A refund within the window frees the place at once; one after the
    /// spending left the log returns nothing.
    #[test]
    fn a_refund_returns_a_spending_only_while_it_is_logged() {
        let (log, mut s) = two_per_ten_seconds();
        let a = log.check(&mut s, 0, 1, Mode::Consume).unwrap();
        let b = log.check(&mut s, SEC, 1, Mode::Consume).unwrap();
        log.refund(&mut s, 5 * SEC, b.receipt().unwrap());
        assert_eq!(s.len(), 1);
        assert!(
            log.check(&mut s, 5 * SEC, 1, Mode::Consume)
                .unwrap()
                .is_allowed()
        );
        log.refund(&mut s, 10 * SEC, a.receipt().unwrap());
        assert_eq!(s.len(), 1, "only the spending at 5 s is left");
        assert!(
            log.check(&mut s, 10 * SEC, 1, Mode::Consume)
                .unwrap()
                .is_allowed()
        );
        assert!(
            !log.check(&mut s, 10 * SEC, 1, Mode::Consume)
                .unwrap()
                .is_allowed()
        );
    }
}
