//! The manager's time line: nanoseconds since the manager was created, and
//! ticks of `resolution` nanoseconds on it.
//!
//! Tick `k` covers `[k·res, (k+1)·res)`. A deadline `t` belongs to tick
//! `⌈t / res⌉`, whose start is at or after `t`, and the sweeper fires tick `k`
//! only once it has read a time at or after `k·res`. Both rules round in the
//! waiter's favour, which is the whole never-early argument: the fired tick's
//! start is not before the deadline, and the sweeper has seen that start.
//!
//! # Not reading the clock on the hot path
//!
//! `Instant::now()` costs as much as everything else on the arm-and-cancel
//! path together. But a waiter does not need the time, only its tick, and
//! with a fixed duration the tick changes once per tick length. So each
//! thread caches, per duration, "until when is tick `k` still the answer": a
//! window that ends at `k·res − d`. Whether we are still inside it is
//! answered by a cheaper counter, weir-primitives' time-stamp counter, read
//! *before* the clock when the window is opened and converted to ticks with
//! a *lower* bound on its rate ([`Tsc::ticks_within`]), so the window can
//! only close early, never late.

use std::time::Instant;
use weir_primitives::time::duration_to_nanos;
use weir_primitives::tsc::Tsc;

/// A monotonic time line anchored at its creation, with a cheap counter.
#[derive(Debug)]
pub(crate) struct Clock {
    origin: Instant,
    counter: &'static Tsc,
}

impl Clock {
    pub(crate) fn new() -> Self {
        Self {
            origin: Instant::now(),
            counter: Tsc::global(),
        }
    }

    /// Nanoseconds since the origin.
    #[inline]
    pub(crate) fn now_ns(&self) -> u64 {
        duration_to_nanos(Instant::now().saturating_duration_since(self.origin))
    }

    /// The cheap counter (see [`Tsc::read`]).
    #[inline]
    pub(crate) fn counter(&self) -> u64 {
        self.counter.read()
    }

    /// How many counter ticks are guaranteed to take no longer than
    /// `slack_ns` nanoseconds (0 while uncalibrated).
    pub(crate) fn window(&self, slack_ns: u64) -> u64 {
        self.counter.ticks_within(slack_ns)
    }
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

/// Reads of the real clock [`is_frozen`] waits for it to advance, at most:
/// a few microseconds where a read takes tens of nanoseconds, enough for
/// any clock source that ticks faster than about 1 MHz.
const FROZEN_CHECK_READS: u32 = 256;

/// Whether `tokio_now` is frozen (tokio's paused test clock) rather than
/// following `real_now`.
///
/// A running tokio clock is the real monotonic clock plus a constant offset
/// (zero unless it was paused and resumed), so once the real clock has
/// moved on, so has it; a paused one returns the same instant until the
/// runtime advances it, which it does only between polls. So: read tokio's
/// clock, wait until the real clock reads later than it did just after that,
/// read tokio's clock again. Equal means frozen; later means running.
///
/// Exact unless the real clock does not advance within
/// [`FROZEN_CHECK_READS`] reads (a coarse clock source such as `jiffies`):
/// then the answer is "running", the choice that never panics (tokio's
/// timer panics on a runtime without a time driver); or another thread
/// advances this runtime's paused clock between the two reads.
pub(crate) fn is_frozen<T: PartialOrd>(
    mut tokio_now: impl FnMut() -> T,
    mut real_now: impl FnMut() -> T,
) -> bool {
    let before = tokio_now();
    let real = real_now();
    for _ in 0..FROZEN_CHECK_READS {
        if real_now() > real {
            return tokio_now() == before;
        }
        std::hint::spin_loop();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::time::Duration;

    proptest! {
        #[test]
        fn a_deadline_never_maps_to_an_earlier_tick(
            deadline in 0u64..u64::MAX / 2,
            res in 1_000u64..3_600_000_000_000,
        ) {
            let tick = tick_of_deadline(deadline, res);
            let start = tick_start_ns(tick, res);
            prop_assert!(start >= deadline);
            prop_assert!(start - deadline < res);
            prop_assert!(due_tick(start, res) >= tick);
            if start > 0 {
                prop_assert!(due_tick(start - 1, res) < tick);
            }
        }
    }

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

    /// A simulated monotonic clock that advances by one every `every` reads
    /// (large `every`: a coarse clock source), shared by a "real" clock and
    /// a tokio clock that either follows it at an offset or is frozen.
    struct Sim {
        reads: std::cell::Cell<u64>,
        every: u64,
    }

    impl Sim {
        fn new(every: u64) -> Self {
            Self {
                reads: std::cell::Cell::new(1_000_000 * every),
                every,
            }
        }
        fn real(&self) -> u64 {
            self.reads.set(self.reads.get() + 1);
            self.reads.get() / self.every
        }
    }

    #[test]
    fn a_running_clock_is_not_frozen() {
        for every in [1, 3, 50] {
            let sim = Sim::new(every);
            assert!(!is_frozen(|| sim.real(), || sim.real()), "every {every}");
            // Resumed after a pause: offset from real time, still running.
            let sim = Sim::new(every);
            assert!(!is_frozen(|| sim.real() + 5_000, || sim.real()));
            let sim = Sim::new(every);
            assert!(!is_frozen(|| sim.real() - 5_000, || sim.real()));
        }
    }

    #[test]
    fn a_frozen_clock_is_frozen() {
        for every in [1, 3, 50] {
            let sim = Sim::new(every);
            // Paused in the past, advanced into the future, or paused at
            // the very reading the real clock shows now.
            for at in [sim.real() - 7, sim.real() + 1_000, sim.real()] {
                assert!(is_frozen(|| at, || sim.real()), "every {every}, at {at}");
            }
        }
    }

    /// On a coarse clock source a running tokio clock reads the same value
    /// for a while. Calling it paused sent timers to tokio's timer, which
    /// panics on a runtime without a time driver; undecided means running.
    #[test]
    fn a_running_coarse_clock_is_not_taken_for_frozen() {
        let sim = Sim::new(1_000_000);
        assert!(!is_frozen(|| sim.real(), || sim.real()));
    }

    #[test]
    fn huge_durations_saturate() {
        assert_eq!(duration_to_nanos(Duration::MAX), u64::MAX);
        let tick = tick_of_deadline(u64::MAX, 10_000_000);
        assert_eq!(tick_start_ns(tick, 10_000_000), u64::MAX);
        assert_eq!(duration_to_nanos(Duration::from_millis(3)), 3_000_000);
    }
}
