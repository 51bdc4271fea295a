//! The process's cheap counter: the CPU's time-stamp counter where the
//! kernel keeps time with it, otherwise the OS monotonic clock in
//! nanoseconds; calibrated once against the OS clock.
//!
//! Two consumers want different things from one calibration, so a
//! [`Scale`] carries both:
//!
//! * a clock (weir-limits' `MonotonicClock`) converts counter ticks to
//!   nanoseconds with the best estimate of the counter's rate
//!   ([`Scale::nanos`]);
//! * a deadline window (weir-timeout's cache of "this bucket is still the
//!   answer until ...") converts nanoseconds to ticks with a *lower bound*
//!   on the rate ([`Scale::ticks_within`]), so a window can only close early,
//!   never late.
//!
//! # Calibration
//!
//! A sample reads the counter, the OS clock, and the counter again, so the
//! counter stood in `lo..=hi` when the clock read `ns`; of a few tries the
//! tightest is kept, and one wider than [`MAX_SAMPLE_TICKS`] (a thread
//! preempted between the reads) is refused. The first sample is the base;
//! one at least [`CALIBRATION_NS`] later fixes the scale, once, for the life
//! of the process. The lower bound counts only the ticks that certainly
//! passed between the two clock reads (`end.lo − base.hi`) and takes 1/64
//! off for the clock's own granularity and rate corrections (NTP slews by
//! at most 0.05 %); the estimate uses the middles of the two brackets.
//!
//! [`Tsc::ticks_within`] never waits: until a call comes
//! [`CALIBRATION_NS`] after the first, it answers 0 (no window). [`Tsc::scale`]
//! waits (sleeps) for the calibration instead, once per process.
//!
//! The kernel's choice of `tsc` as its clocksource is the licence that the
//! counter is invariant and synchronised across cores; anywhere else the
//! counter is the OS clock itself, exactly scaled.

use crate::time::duration_to_nanos;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The calibration baseline: the scale is fixed by a sample at least this
/// long after the first.
pub const CALIBRATION_NS: u64 = 20_000_000;

/// Widest bracket (counter ticks between the reads before and after the
/// clock) a sample may have: a few microseconds at any plausible counter
/// rate.
pub const MAX_SAMPLE_TICKS: u64 = 20_000;

/// Tries per sample; the tightest bracket is kept.
const SAMPLE_TRIES: usize = 8;

/// Rounds [`Tsc::scale`] waits for a calibration before it gives up (each
/// sleeps until the baseline is long enough, or a millisecond).
const BLOCKING_ROUNDS: u32 = 200;

/// A calibration sample: the OS clock read between two counter reads, so
/// the counter stood in `lo..=hi` when the clock read `ns`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    /// The counter before the clock read.
    pub lo: u64,
    /// The OS clock, nanoseconds since the counter's origin.
    pub ns: u64,
    /// The counter after the clock read.
    pub hi: u64,
}

impl Sample {
    /// Whether the bracket is narrow enough to calibrate with.
    pub fn is_tight(&self) -> bool {
        self.hi >= self.lo && self.hi - self.lo <= MAX_SAMPLE_TICKS
    }

    /// The middle of the bracket.
    fn mid(&self) -> u64 {
        self.lo + (self.hi - self.lo) / 2
    }
}

/// A calibrated counter rate: ticks to nanoseconds (best estimate) and
/// nanoseconds to ticks (a lower bound).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scale {
    /// Nanoseconds per tick, best estimate, 32.32 fixed point.
    ns_per_tick_q32: u64,
    /// Ticks per nanosecond, a lower bound, 32.32 fixed point.
    min_ticks_per_ns_q32: u64,
}

impl Scale {
    /// The scale of a counter that counts nanoseconds.
    pub const EXACT: Scale = Scale {
        ns_per_tick_q32: 1 << 32,
        min_ticks_per_ns_q32: 1 << 32,
    };

    /// The scale between two samples, or `None` if they cannot give one:
    /// either is loose, they are less than [`CALIBRATION_NS`] apart, or the
    /// counter did not certainly advance between them.
    ///
    /// ```
    /// use weir_primitives::tsc::{Sample, Scale, CALIBRATION_NS};
    ///
    /// // A counter at 2 ticks per nanosecond, read exactly.
    /// let at = |ns: u64| Sample { lo: 2 * ns, ns, hi: 2 * ns };
    /// let scale = Scale::between(at(1_000), at(1_000 + CALIBRATION_NS)).unwrap();
    /// assert_eq!(scale.nanos(2_000), 1_000);
    /// assert!(scale.ticks_within(1_000) <= 2_000);
    /// assert!(Scale::between(at(1_000), at(2_000)).is_none()); // too short
    /// ```
    pub fn between(base: Sample, end: Sample) -> Option<Scale> {
        if !base.is_tight() || !end.is_tight() {
            return None;
        }
        if end.ns < base.ns.saturating_add(CALIBRATION_NS) || end.lo <= base.hi {
            return None;
        }
        let ns = u128::from(end.ns - base.ns);
        // A lower bound on the ticks between the two clock reads: the
        // counter was at most `base.hi` at the first and at least `end.lo`
        // at the second, so a sample's skew never overestimates the rate.
        let certain = u128::from(end.lo - base.hi);
        let q = (certain << 32) / ns;
        let min_ticks_per_ns_q32 = u64::try_from(q - q / 64).ok()?;
        let ticks = u128::from(end.mid() - base.mid());
        let ns_per_tick_q32 = u64::try_from((ns << 32) / ticks).ok()?;
        Some(Scale {
            ns_per_tick_q32,
            min_ticks_per_ns_q32,
        })
    }

    /// Nanoseconds in `ticks` counter ticks (best estimate; saturating).
    #[inline]
    pub fn nanos(&self, ticks: u64) -> u64 {
        mul_q32(ticks, self.ns_per_tick_q32)
    }

    /// Counter ticks guaranteed to take no longer than `ns` nanoseconds.
    #[inline]
    pub fn ticks_within(&self, ns: u64) -> u64 {
        mul_q32(ns, self.min_ticks_per_ns_q32)
    }
}

/// `x · q / 2³²`, saturating.
#[inline]
fn mul_q32(x: u64, q: u64) -> u64 {
    u64::try_from((u128::from(x) * u128::from(q)) >> 32).unwrap_or(u64::MAX)
}

/// The counter and its calibration; one per process ([`Tsc::global`]).
#[derive(Debug)]
pub struct Tsc {
    /// Whether [`Tsc::read`] reads the TSC (else the OS clock).
    tsc: bool,
    origin: Instant,
    /// Calibration start, published once as a whole so that racing threads
    /// never mix the counter of one sample with the time of another.
    base: OnceLock<Sample>,
    scale: OnceLock<Scale>,
}

impl Tsc {
    /// The process's counter. The first call decides the source (the TSC if
    /// the kernel keeps time with it); calibration starts on first use.
    ///
    /// ```
    /// use weir_primitives::tsc::Tsc;
    ///
    /// let tsc = Tsc::global();
    /// let a = tsc.read();
    /// if let Some(scale) = tsc.scale() {
    ///     std::thread::sleep(std::time::Duration::from_millis(2));
    ///     assert!(scale.nanos(tsc.read().saturating_sub(a)) >= 1_000_000);
    /// }
    /// ```
    pub fn global() -> &'static Tsc {
        static GLOBAL: OnceLock<Tsc> = OnceLock::new();
        GLOBAL.get_or_init(|| Tsc::new(tsc_is_clocksource()))
    }

    fn new(tsc: bool) -> Self {
        let scale = OnceLock::new();
        if !tsc {
            let _ = scale.set(Scale::EXACT);
        }
        Self {
            tsc,
            origin: Instant::now(),
            base: OnceLock::new(),
            scale,
        }
    }

    /// Whether the counter is the CPU's time-stamp counter (else it is the
    /// OS clock in nanoseconds).
    pub fn is_tsc(&self) -> bool {
        self.tsc
    }

    /// The counter: TSC cycles, or nanoseconds of the OS clock since the
    /// counter's origin.
    #[inline]
    pub fn read(&self) -> u64 {
        #[cfg(target_arch = "x86_64")]
        if self.tsc {
            // SAFETY: `rdtsc` has no preconditions on x86_64; it only reads
            // the time-stamp counter.
            return unsafe { core::arch::x86_64::_rdtsc() };
        }
        self.os_nanos()
    }

    /// Nanoseconds of the OS monotonic clock since the counter's origin.
    #[inline]
    pub fn os_nanos(&self) -> u64 {
        duration_to_nanos(self.origin.elapsed())
    }

    /// Counter ticks guaranteed to take no longer than `ns` nanoseconds
    /// ([`Scale::ticks_within`]); 0 until calibrated. Never waits: a call
    /// [`CALIBRATION_NS`] after the first calibrates.
    #[inline]
    pub fn ticks_within(&self, ns: u64) -> u64 {
        match self.scale.get() {
            Some(scale) => scale.ticks_within(ns),
            None => self.calibrate_now().map_or(0, |s| s.ticks_within(ns)),
        }
    }

    /// The calibrated scale, waiting (sleeping) up to [`CALIBRATION_NS`]
    /// for it on the process's first call. `None` if no calibration could
    /// be made (the thread kept being preempted inside every sample, or the
    /// counter did not advance): read the OS clock instead.
    pub fn scale(&self) -> Option<Scale> {
        if let Some(scale) = self.scale.get() {
            return Some(*scale);
        }
        self.calibrate_blocking()
    }

    #[cold]
    fn calibrate_blocking(&self) -> Option<Scale> {
        for _ in 0..BLOCKING_ROUNDS {
            if let Some(scale) = self.calibrate_now() {
                return Some(scale);
            }
            let wait = self.base.get().map_or(1_000_000, |base| {
                base.ns
                    .saturating_add(CALIBRATION_NS)
                    .saturating_sub(self.os_nanos())
            });
            std::thread::sleep(Duration::from_nanos(wait.max(100_000)));
        }
        None
    }

    /// Take a sample and feed it: the scale, if it is now known.
    #[cold]
    #[inline(never)]
    fn calibrate_now(&self) -> Option<Scale> {
        self.feed(self.sample()?)
    }

    /// The tightest of a few samples, or `None` if every one was loose.
    fn sample(&self) -> Option<Sample> {
        (0..SAMPLE_TRIES)
            .map(|_| {
                let lo = self.read();
                let ns = self.os_nanos();
                let hi = self.read();
                Sample { lo, ns, hi }
            })
            .filter(Sample::is_tight)
            .min_by_key(|s| s.hi - s.lo)
    }

    /// Feed one sample: the first becomes the base, one at least
    /// [`CALIBRATION_NS`] later fixes the scale. Returns the scale once
    /// known.
    fn feed(&self, end: Sample) -> Option<Scale> {
        if let Some(scale) = self.scale.get() {
            return Some(*scale);
        }
        if !end.is_tight() {
            return None;
        }
        let base = *self.base.get_or_init(|| end);
        let scale = Scale::between(base, end)?;
        Some(*self.scale.get_or_init(|| scale))
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn uncalibrated() -> Tsc {
        Tsc::new(true)
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

    /// The scale of a counter at `per_ns` ticks per nanosecond, from two
    /// exact samples `span_ns` apart.
    fn calibrated(per_ns: f64, span_ns: u64) -> Scale {
        let tsc = uncalibrated();
        assert_eq!(tsc.feed(sample(per_ns, 1_000, 0, 0)), None);
        assert_eq!(tsc.ticks_within(1), 0, "uncalibrated");
        tsc.feed(sample(per_ns, 1_000 + span_ns, 0, 0))
            .expect("calibrated")
    }

    proptest! {
        #[test]
        fn a_window_never_outlasts_its_slack(
            per_ns in 0.2f64..6.0,
            slack in 0u64..100_000_000_000,
        ) {
            let span = calibrated(per_ns, CALIBRATION_NS).ticks_within(slack);
            // `span` ticks take `span / per_ns` ns: never more than the
            // slack (the window may only close early).
            prop_assert!(span as f64 / per_ns <= slack as f64 + 1.0, "{span} ticks for {slack} ns");
            // And not much earlier: within the 1/64 margin plus rounding.
            prop_assert!(span as f64 / per_ns >= slack as f64 * (1.0 - 1.0 / 60.0) - 2.0);
        }

        /// Samples whose counter reads sit anywhere around their clock read
        /// (a thread preempted between them) never make a window outlast
        /// its slack; with the counter of the base sample read 0.3 ms before
        /// the clock, as a calibration from single reads would allow, it
        /// would by ~1.5 %.
        #[test]
        fn a_skewed_sample_never_stretches_a_window(
            per_ns in 0.2f64..6.0,
            skews in proptest::array::uniform4(0u64..MAX_SAMPLE_TICKS / 2),
            extra_ns in 0u64..5_000_000,
            slack in 1_000_000u64..100_000_000_000,
        ) {
            let tsc = uncalibrated();
            tsc.feed(sample(per_ns, 5_000, skews[0], skews[1]));
            let end = 5_000 + CALIBRATION_NS + extra_ns;
            let scale = tsc.feed(sample(per_ns, end, skews[2], skews[3])).expect("calibrated");
            let span = scale.ticks_within(slack);
            prop_assert!(span > 0, "calibrated");
            prop_assert!(span as f64 / per_ns <= slack as f64 + 1.0, "{span} ticks for {slack} ns");
        }

        /// The estimate is exact to the brackets' width: over the baseline,
        /// an error of half a bracket at each end.
        #[test]
        fn the_estimate_converts_ticks_to_nanoseconds(
            per_ns in 0.2f64..6.0,
            skews in proptest::array::uniform4(0u64..100),
            ticks in 0u64..1 << 50,
        ) {
            let tsc = uncalibrated();
            tsc.feed(sample(per_ns, 5_000, skews[0], skews[1]));
            let scale = tsc
                .feed(sample(per_ns, 5_000 + CALIBRATION_NS, skews[2], skews[3]))
                .expect("calibrated");
            let truth = ticks as f64 / per_ns;
            let err = (scale.nanos(ticks) as f64 - truth).abs();
            // Half brackets of up to 50 ticks at each end, over a baseline of at
            // least 4e6 ticks: at most 2.5e-5 relative, plus rounding.
            prop_assert!(err <= truth * 4e-5 + 2.0, "{} ns for {truth}", scale.nanos(ticks));
        }
    }

    #[test]
    fn an_uncalibrated_counter_opens_no_window() {
        let tsc = uncalibrated();
        let at = |counter: u64, ns: u64| Sample {
            lo: counter,
            ns,
            hi: counter,
        };
        assert_eq!(tsc.feed(at(5_000, 100)), None);
        // Too short a baseline: still nothing.
        assert_eq!(tsc.feed(at(9_000, 1_000_100)), None);
        // Counter going backwards: nothing.
        assert_eq!(tsc.feed(at(10, CALIBRATION_NS + 200)), None);
        assert!(tsc.scale.get().is_none());
    }

    #[test]
    fn a_loosely_bracketed_sample_is_refused() {
        // The counter read 0.3 ms before the clock at 3 ticks/ns: refused,
        // as base and as end.
        let loose = sample(3.0, 1_000, 900_000, 0);
        let tsc = uncalibrated();
        assert_eq!(tsc.feed(loose), None);
        assert!(tsc.base.get().is_none());
        tsc.feed(sample(3.0, 1_000, 0, 0));
        let loose_end = sample(3.0, 1_000 + 2 * CALIBRATION_NS, 900_000, 0);
        assert_eq!(tsc.feed(loose_end), None);
        assert!(tsc.scale.get().is_none());
    }

    /// The real counter: lazily calibrated after the baseline, and its
    /// scale tracks the OS clock.
    #[test]
    fn the_real_counter_calibrates() {
        let tsc = Tsc::new(tsc_is_clocksource());
        assert!(tsc.sample().is_some_and(|s| s.is_tight()));
        let _ = tsc.ticks_within(1_000);
        std::thread::sleep(Duration::from_millis(25));
        let window = tsc.ticks_within(1_000_000);
        if tsc.is_tsc() {
            assert!(window > 0, "calibrated after 25 ms");
        } else {
            assert_eq!(window, 1_000_000);
        }
        let scale = tsc.scale().expect("calibrated");
        let (c0, n0) = (tsc.read(), tsc.os_nanos());
        std::thread::sleep(Duration::from_millis(20));
        let (c1, n1) = (tsc.read(), tsc.os_nanos());
        let (counted, slept) = (scale.nanos(c1 - c0), n1 - n0);
        assert!(
            counted.abs_diff(slept) < 1_000_000,
            "{counted} ns counted, {slept} ns on the OS clock"
        );
    }

    #[test]
    fn the_os_clock_counter_is_exact() {
        let tsc = Tsc::new(false);
        assert_eq!(tsc.scale(), Some(Scale::EXACT));
        assert_eq!(tsc.ticks_within(12_345), 12_345);
        assert_eq!(Scale::EXACT.nanos(u64::MAX), u64::MAX);
        let a = tsc.read();
        std::thread::sleep(Duration::from_millis(1));
        assert!(tsc.read() - a >= 1_000_000);
    }
}
