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
//! path together. But a waiter does not need the time, only
//! its tick, and with a fixed duration the tick changes once per tick length.
//! So each thread caches, per duration, "until when is tick `k` still the
//! answer": a window that ends at `k·res − d`. Whether we are still inside
//! it is answered by a cheaper counter, the TSC (about half the cost), read *before*
//! the clock when the window is opened and converted to cycles with a
//! *lower* bound on its frequency, so the window can only close early, never
//! late. The kernel's choice of `tsc` as clocksource is our licence that the
//! TSC is invariant and synchronised across cores; anywhere else the counter
//! is the clock itself (no saving, still correct).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Calibrate the TSC over at least this long before trusting it.
const CALIBRATION_NS: u64 = 20_000_000;

/// Widest bracket (counter ticks between the reads before and after the
/// clock) a calibration sample may have: a few µs at any plausible TSC
/// frequency. A thread preempted between the reads gives a wider one and the
/// sample is taken again.
const MAX_SAMPLE_TICKS: u64 = 20_000;

/// A calibration sample: the clock read between two counter reads, so the
/// counter at the instant `ns` was read lies in `lo..=hi`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Sample {
    lo: u64,
    ns: u64,
    hi: u64,
}

/// A monotonic time line anchored at its creation, with a cheap counter.
#[derive(Debug)]
pub(crate) struct Clock {
    origin: Instant,
    /// Whether [`Clock::counter`] reads the TSC (else it reads the clock).
    tsc: bool,
    /// Calibration start, published once as a whole so that racing threads
    /// never mix the counter of one sample with the time of another.
    base: OnceLock<Sample>,
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
            base: OnceLock::new(),
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
    /// `slack_ns` nanoseconds (0 while uncalibrated).
    pub(crate) fn window(&self, slack_ns: u64) -> u64 {
        let mut q = self.per_ns_q32.load(Ordering::Relaxed);
        if q == 0 {
            q = match self.sample() {
                Some(s) => self.calibrate(s),
                None => 0,
            };
        }
        let ticks = (u128::from(slack_ns) * u128::from(q)) >> 32;
        u64::try_from(ticks).unwrap_or(u64::MAX)
    }

    /// A tightly bracketed sample, or `None` if the thread kept being
    /// preempted between the reads.
    #[cold]
    fn sample(&self) -> Option<Sample> {
        (0..8).find_map(|_| {
            let lo = self.counter();
            let ns = self.now_ns();
            let hi = self.counter();
            let s = Sample { lo, ns, hi };
            s.is_tight().then_some(s)
        })
    }

    /// Feed one sample: the first becomes the base, a later one at least
    /// [`CALIBRATION_NS`] after it sets the rate. Returns the rate (0 while
    /// uncalibrated).
    #[cold]
    fn calibrate(&self, end: Sample) -> u64 {
        if !end.is_tight() {
            return 0;
        }
        let base = *self.base.get_or_init(|| end);
        if end.ns < base.ns.saturating_add(CALIBRATION_NS) || end.lo <= base.hi {
            return 0;
        }
        // A lower bound on the ticks between the two clock reads: the counter
        // was at most `base.hi` at the first and at least `end.lo` at the
        // second. So the rate is never overestimated by a sample's skew;
        // the 1/64 taken off covers the clock's own granularity and rate
        // corrections (NTP slews by at most 0.05 %).
        let ticks = u128::from(end.lo - base.hi);
        let ns = u128::from(end.ns - base.ns);
        let q = (ticks << 32) / ns;
        let q = u64::try_from(q - q / 64).unwrap_or(0);
        self.per_ns_q32.store(q, Ordering::Relaxed);
        q
    }
}

impl Sample {
    fn is_tight(&self) -> bool {
        self.hi >= self.lo && self.hi - self.lo <= MAX_SAMPLE_TICKS
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

    fn uncalibrated() -> Clock {
        Clock {
            origin: Instant::now(),
            tsc: true,
            base: OnceLock::new(),
            per_ns_q32: AtomicU64::new(0),
        }
    }

    /// A sample of a counter running at `per_ns` ticks per nanosecond, read
    /// `before` ticks before and `after` ticks after the clock read at `ns`.
    fn sample(per_ns: f64, ns: u64, before: u64, after: u64) -> Sample {
        let c = (ns as f64 * per_ns) as u64 + 1_000_000;
        Sample {
            lo: c - before,
            ns,
            hi: c + after,
        }
    }

    /// A clock whose counter runs at `per_ns` ticks per nanosecond,
    /// calibrated from two exact samples `span_ns` apart.
    fn calibrated(per_ns: f64, span_ns: u64) -> Clock {
        let clock = uncalibrated();
        assert_eq!(clock.calibrate(sample(per_ns, 1_000, 0, 0)), 0);
        assert_eq!(clock.window(1), 0, "uncalibrated");
        clock.calibrate(sample(per_ns, 1_000 + span_ns, 0, 0));
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
            let span = clock.window(slack);
            // `span` counter ticks take `span / per_ns` ns: never more than
            // the slack (the window may only close early).
            prop_assert!(span as f64 / per_ns <= slack as f64 + 1.0, "{span} ticks for {slack} ns");
            // And not much earlier: within the 1/64 margin plus rounding.
            prop_assert!(span as f64 / per_ns >= slack as f64 * (1.0 - 1.0 / 60.0) - 2.0);
        }

        /// Samples whose counter reads sit anywhere around their clock read
        /// (a thread preempted between them) never make a window outlast
        /// its slack; with the counter of the base sample read 0.3 ms before
        /// the clock, as the old calibration allowed, it would by ~1.5 %.
        #[test]
        fn a_skewed_sample_never_stretches_a_window(
            per_ns in 0.2f64..6.0,
            skews in proptest::array::uniform4(0u64..MAX_SAMPLE_TICKS / 2),
            extra_ns in 0u64..5_000_000,
            slack in 1_000_000u64..100_000_000_000,
        ) {
            let clock = uncalibrated();
            clock.calibrate(sample(per_ns, 5_000, skews[0], skews[1]));
            let end = 5_000 + CALIBRATION_NS + extra_ns;
            clock.calibrate(sample(per_ns, end, skews[2], skews[3]));
            let span = clock.window(slack);
            prop_assert!(span > 0, "calibrated");
            prop_assert!(span as f64 / per_ns <= slack as f64 + 1.0, "{span} ticks for {slack} ns");
        }
    }

    #[test]
    fn an_uncalibrated_clock_opens_no_window() {
        let clock = uncalibrated();
        let at = |counter: u64, ns: u64| Sample {
            lo: counter,
            ns,
            hi: counter,
        };
        assert_eq!(clock.calibrate(at(5_000, 100)), 0);
        // Too short a baseline: still nothing.
        assert_eq!(clock.calibrate(at(9_000, 1_000_100)), 0);
        // Counter going backwards: nothing.
        assert_eq!(clock.calibrate(at(10, CALIBRATION_NS + 200)), 0);
        assert_eq!(clock.per_ns_q32.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_loosely_bracketed_sample_is_refused() {
        // The counter read 0.3 ms before the clock at 3 ticks/ns: refused,
        // as base and as end.
        let loose = sample(3.0, 1_000, 900_000, 0);
        let clock = uncalibrated();
        assert_eq!(clock.calibrate(loose), 0);
        assert!(clock.base.get().is_none());
        clock.calibrate(sample(3.0, 1_000, 0, 0));
        let loose_end = sample(3.0, 1_000 + 2 * CALIBRATION_NS, 900_000, 0);
        assert_eq!(clock.calibrate(loose_end), 0);
        assert_eq!(clock.per_ns_q32.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn the_real_counter_calibrates() {
        let clock = Clock::new();
        assert!(clock.sample().is_some_and(|s| s.is_tight()));
        let _ = clock.window(1_000);
        std::thread::sleep(Duration::from_millis(25));
        let window = clock.window(1_000_000);
        if clock.tsc {
            assert!(window > 0, "calibrated after 25 ms");
        } else {
            assert_eq!(window, 1_000_000);
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
        assert_eq!(duration_ns(Duration::MAX), u64::MAX);
        let tick = tick_of_deadline(u64::MAX, 10_000_000);
        assert_eq!(tick_start_ns(tick, 10_000_000), u64::MAX);
        assert_eq!(duration_ns(Duration::from_millis(3)), 3_000_000);
    }
}
