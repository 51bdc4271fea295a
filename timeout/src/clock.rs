//! The manager's time line: nanoseconds since the manager was created, and
//! ticks of `resolution` nanoseconds on it.
//!
//! Tick `k` covers `[k·res, (k+1)·res)`. A deadline `t` belongs to tick
//! `⌈t / res⌉`, whose start is at or after `t`, and the sweeper fires tick `k`
//! only once it has read a time at or after `k·res`. Both rules round in the
//! waiter's favour, which is the whole never-early argument: the fired tick's
//! start is not before the deadline, and the sweeper has seen that start.

use std::time::{Duration, Instant};

/// A monotonic time line anchored at its creation.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock {
    origin: Instant,
}

impl Clock {
    pub(crate) fn new() -> Self {
        Self {
            origin: Instant::now(),
        }
    }

    /// Nanoseconds since the origin.
    #[inline]
    pub(crate) fn now_ns(&self) -> u64 {
        duration_ns(Instant::now().saturating_duration_since(self.origin))
    }
}

/// A duration in nanoseconds, saturating at `u64::MAX` (about 584 years).
#[inline]
pub(crate) fn duration_ns(d: Duration) -> u64 {
    d.as_secs()
        .saturating_mul(1_000_000_000)
        .saturating_add(u64::from(d.subsec_nanos()))
}

/// The tick a deadline at `deadline_ns` belongs to: rounded up, so the tick
/// never starts before the deadline.
#[inline]
pub(crate) fn tick_of_deadline(deadline_ns: u64, resolution_ns: u64) -> u64 {
    deadline_ns.div_ceil(resolution_ns)
}

/// The last tick that has started at `now_ns`: every tick up to and
/// including it is due.
#[inline]
pub(crate) fn due_tick(now_ns: u64, resolution_ns: u64) -> u64 {
    now_ns / resolution_ns
}

/// When tick `tick` starts, in nanoseconds since the origin (saturating).
#[inline]
pub(crate) fn tick_start_ns(tick: u64, resolution_ns: u64) -> u64 {
    tick.saturating_mul(resolution_ns)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadlines_round_up_to_the_next_tick() {
        let res = 10_000_000;
        assert_eq!(tick_of_deadline(53_000_000, res), 6);
        assert_eq!(tick_of_deadline(101_000_000, res), 11);
        assert_eq!(tick_of_deadline(1_000_000_000, res), 100);
        assert_eq!(tick_of_deadline(1, res), 1);
        assert_eq!(tick_of_deadline(0, res), 0);
    }

    #[test]
    fn a_tick_is_due_only_once_it_has_started() {
        let res = 10_000_000;
        for deadline in [1, 9_999_999, 10_000_000, 10_000_001, 123_456_789] {
            let tick = tick_of_deadline(deadline, res);
            // The first time at which the tick is due is not before the deadline.
            let first_due = tick_start_ns(tick, res);
            assert!(first_due >= deadline);
            assert!(due_tick(first_due, res) >= tick);
            assert!(due_tick(first_due - 1, res) < tick);
            // And lateness from rounding is below one tick.
            assert!(first_due - deadline < res);
        }
    }

    #[test]
    fn huge_durations_saturate() {
        assert_eq!(duration_ns(Duration::MAX), u64::MAX);
        let tick = tick_of_deadline(u64::MAX, 10_000_000);
        assert_eq!(tick_start_ns(tick, 10_000_000), u64::MAX);
        assert_eq!(duration_ns(Duration::from_millis(3)), 3_000_000);
    }
}
