use crate::decision::{Decision, NeverAllowed};
use crate::limiter::{Limiter, Mode};
use crate::quota::Quota;
use std::collections::VecDeque;

/// The exact sliding window: a log of the allowed requests of the last
/// window. Never allows more than `limit` units in any window-long
/// interval, at the price of memory proportional to the limit (one 16-byte
/// entry per allowed request still in the window) and a check that is
/// linear in the number of expired entries.
///
/// ```
/// use std::num::NonZeroU32;
/// use weir_rate::{Limiter, Mode, Quota, SlidingLog};
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
#[derive(Debug, Clone, Default)]
pub struct SlidingLogState {
    entries: VecDeque<(u64, u32)>,
    total: u64,
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

    /// The quota.
    pub fn quota(&self) -> Quota {
        self.quota
    }

    fn expire(&self, s: &mut SlidingLogState, now: u64) -> u64 {
        let w = self.quota.window_nanos();
        let now = s.entries.back().map_or(now, |&(t, _)| now.max(t));
        while let Some(&(t, c)) = s.entries.front() {
            if t.saturating_add(w) > now {
                break;
            }
            s.total -= u64::from(c);
            s.entries.pop_front();
        }
        now
    }

    fn reset_in(&self, s: &SlidingLogState, now: u64) -> u64 {
        s.entries.back().map_or(0, |&(t, _)| {
            t.saturating_add(self.quota.window_nanos())
                .saturating_sub(now)
        })
    }
}

impl Limiter for SlidingLog {
    type State = SlidingLogState;

    fn capacity(&self) -> u32 {
        self.quota.limit()
    }

    fn new_state(&self, _now_ns: u64) -> Self::State {
        SlidingLogState::default()
    }

    fn check(
        &self,
        s: &mut Self::State,
        now_ns: u64,
        cost: u32,
        mode: Mode,
    ) -> Result<Decision, NeverAllowed> {
        let limit = self.quota.limit();
        NeverAllowed::check(cost, limit)?;
        let now = self.expire(s, now_ns);
        let (limit64, cost64) = (u64::from(limit), u64::from(cost));
        let window = self.quota.window();
        if s.total + cost64 <= limit64 {
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
            Ok(Decision::allow(limit, window, remaining, reset))
        } else {
            // The earliest time enough old entries have expired.
            let w = self.quota.window_nanos();
            let mut left = s.total;
            let mut retry = 0;
            for &(t, c) in &s.entries {
                left -= u64::from(c);
                if left + cost64 <= limit64 {
                    retry = t.saturating_add(w) - now;
                    break;
                }
            }
            let remaining = limit64.saturating_sub(s.total) as u32;
            Ok(Decision::deny(
                limit,
                window,
                remaining,
                self.reset_in(s, now),
                retry,
            ))
        }
    }

    fn refund(&self, s: &mut Self::State, now_ns: u64, cost: u32) {
        self.expire(s, now_ns);
        let mut cost = cost;
        while cost > 0 {
            let Some(last) = s.entries.back_mut() else {
                break;
            };
            let take = cost.min(last.1);
            last.1 -= take;
            s.total -= u64::from(take);
            cost -= take;
            if last.1 == 0 {
                s.entries.pop_back();
            }
        }
    }

    fn is_idle(&self, s: &Self::State, now_ns: u64) -> bool {
        self.reset_in(s, now_ns) == 0
    }
}
