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
//! `Instant::now()` costs about 26 ns here, as much as everything else on
//! the arm-and-cancel path together. But a waiter does not need the time, only
//! its tick, and with a fixed duration the tick changes once per tick length.
//! So each thread caches, per duration, "until when is tick `k` still the
//! answer": a window that ends at `k·res − d`. Whether we are still inside
//! it is answered by a cheaper counter, the TSC (about 10 ns), read *before*
//! the clock when the window is opened and converted to cycles with a
//! *lower* bound on its frequency, so the window can only close early, never
//! late. The kernel's choice of `tsc` as clocksource is our licence that the
//! TSC is invariant and synchronised across cores; anywhere else the counter
//! is the clock itself (no saving, still correct).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Calibrate the TSC over at least this long before trusting it.
const CALIBRATION_NS: u64 = 20_000_000;

/// A monotonic time line anchored at its creation, with a cheap counter.
#[derive(Debug)]
pub(crate) struct Clock {
    origin: Instant,
    /// Whether [`Clock::counter`] reads the TSC (else it reads the clock).
    tsc: bool,
    /// Calibration start: counter value and time.
    base_counter: AtomicU64,
    base_ns: AtomicU64,
    /// Lower bound on counter ticks per nanosecond, in 32.32 fixed point;
    /// 0 until calibrated.
    per_ns_q32: AtomicU64,
}

impl Clock {
    pub(crate) fn new() -> Self {
        let tsc = tsc_is_clocksource();
        Self {
            origin: Instant::now(),
            tsc,
            base_counter: AtomicU64::new(0),
            base_ns: AtomicU64::new(u64::MAX),
            per_ns_q32: AtomicU64::new(if tsc { 0 } else { 1 << 32 }),
        }
    }

    /// Nanoseconds since the origin.
    #[inline]
    pub(crate) fn now_ns(&self) -> u64 {
        duration_ns(Instant::now().saturating_duration_since(self.origin))
    }

    /// The cheap counter: TSC cycles, or nanoseconds where the TSC is not
    /// the kernel's clocksource.
    #[inline]
    pub(crate) fn counter(&self) -> u64 {
        #[cfg(target_arch = "x86_64")]
        if self.tsc {
            // SAFETY: `rdtsc` has no preconditions on x86_64; it only reads
            // the time-stamp counter.
            return unsafe { core::arch::x86_64::_rdtsc() };
        }
        self.now_ns()
    }

    /// How many counter ticks are guaranteed to take no longer than
    /// `slack_ns` nanoseconds (0 while uncalibrated). `counter` and `now`
    /// are a fresh pair (counter read first) used to calibrate.
    pub(crate) fn window(&self, counter: u64, now: u64, slack_ns: u64) -> u64 {
        let mut q = self.per_ns_q32.load(Ordering::Relaxed);
        if q == 0 {
            q = self.calibrate(counter, now);
        }
        let ticks = (u128::from(slack_ns) * u128::from(q)) >> 32;
        u64::try_from(ticks).unwrap_or(u64::MAX)
    }

    #[cold]
    fn calibrate(&self, counter: u64, now: u64) -> u64 {
        let base_ns = self.base_ns.load(Ordering::Acquire);
        if base_ns == u64::MAX {
            // First sample. A racing thread may overwrite it; any one sample
            // is as good as another.
            self.base_counter.store(counter, Ordering::Relaxed);
            self.base_ns.store(now, Ordering::Release);
            return 0;
        }
        let base_counter = self.base_counter.load(Ordering::Relaxed);
        if now < base_ns.saturating_add(CALIBRATION_NS) || counter <= base_counter {
            return 0;
        }
        // The base pair was read counter-first, this one too, so both
        // intervals are measured the same way; the error is a few clock reads
        // over 20 ms, far inside the 1/64 we take off.
        let ticks = u128::from(counter - base_counter);
        let ns = u128::from(now - base_ns);
        let q = (ticks << 32) / ns;
        let q = u64::try_from(q - q / 64).unwrap_or(0);
        self.per_ns_q32.store(q, Ordering::Relaxed);
        q
    }
}

/// Whether the kernel keeps time with the TSC (so it is invariant and
/// synchronised across cores).
fn tsc_is_clocksource() -> bool {
    if !cfg!(all(target_arch = "x86_64", target_os = "linux")) {
        return false;
    }
    std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
        .is_ok_and(|s| s.trim() == "tsc")
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
    use proptest::prelude::*;

    /// A clock whose counter runs at `per_ns` ticks per nanosecond,
    /// calibrated from two exact samples `span_ns` apart.
    fn calibrated(per_ns: f64, span_ns: u64) -> Clock {
        let clock = Clock {
            origin: Instant::now(),
            tsc: true,
            base_counter: AtomicU64::new(0),
            base_ns: AtomicU64::new(u64::MAX),
            per_ns_q32: AtomicU64::new(0),
        };
        let at = |ns: u64| (ns as f64 * per_ns) as u64 + 1_000;
        assert_eq!(clock.window(at(1_000), 1_000, 1), 0, "uncalibrated");
        let end = 1_000 + span_ns;
        clock.window(at(end), end, 0);
        clock
    }

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

        #[test]
        fn a_cache_window_never_outlasts_its_slack(
            per_ns in 0.2f64..6.0,
            slack in 0u64..100_000_000_000,
        ) {
            let clock = calibrated(per_ns, CALIBRATION_NS);
            let span = clock.window(0, 0, slack);
            // `span` counter ticks take `span / per_ns` ns: never more than
            // the slack (the window may only close early).
            prop_assert!(span as f64 / per_ns <= slack as f64 + 1.0, "{span} ticks for {slack} ns");
            // And not much earlier: within the 1/64 margin plus rounding.
            prop_assert!(span as f64 / per_ns >= slack as f64 * (1.0 - 1.0 / 60.0) - 2.0);
        }
    }

    #[test]
    fn an_uncalibrated_clock_opens_no_window() {
        let clock = Clock {
            origin: Instant::now(),
            tsc: true,
            base_counter: AtomicU64::new(0),
            base_ns: AtomicU64::new(u64::MAX),
            per_ns_q32: AtomicU64::new(0),
        };
        assert_eq!(clock.window(5_000, 100, 1_000_000), 0);
        // Too short a baseline: still nothing.
        assert_eq!(clock.window(9_000, 1_000_100, 1_000_000), 0);
        // Counter going backwards: nothing.
        assert_eq!(clock.window(10, CALIBRATION_NS + 200, 1_000_000), 0);
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

    #[test]
    fn huge_durations_saturate() {
        assert_eq!(duration_ns(Duration::MAX), u64::MAX);
        let tick = tick_of_deadline(u64::MAX, 10_000_000);
        assert_eq!(tick_start_ns(tick, 10_000_000), u64::MAX);
        assert_eq!(duration_ns(Duration::from_millis(3)), 3_000_000);
    }
}
