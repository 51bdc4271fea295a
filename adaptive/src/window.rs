//! What the algorithms share: windows of samples, and the no-load latency
//! with the probes that measure it (see the [module docs](super)).

use super::{Common, ConfigError, Outcome, Problem, Sample};
use weir_primitives::time::duration_to_nanos;

/// The samples of requests that started in the current window.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Window {
    /// When the window opened (ns of the caller's clock).
    start: u64,
    count: u32,
    latency_sum: u128,
    in_flight_sum: u64,
    max_in_flight: u32,
    drops: u32,
}

/// A closed window, as the algorithms judge it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Summary {
    /// Mean latency of the window's successes, in ns (at least 1); the
    /// window's drops when it had no success.
    pub(crate) latency: f64,
    /// Mean requests in flight at their start.
    pub(crate) in_flight: f64,
    /// Most requests in flight at a start.
    pub(crate) max_in_flight: u32,
    /// Requests dropped.
    pub(crate) drops: u32,
}

impl Window {
    pub(crate) fn new(start: u64) -> Self {
        Self {
            start,
            count: 0,
            latency_sum: 0,
            in_flight_sum: 0,
            max_in_flight: 0,
            drops: 0,
        }
    }

    /// Adds a sample that finished at `now` (`dropped` if it counts as a
    /// drop); returns the window's summary if this closes it, and opens
    /// the next one at `now`. Samples of requests that started before the
    /// window opened are not counted: they were admitted under an earlier
    /// limit.
    pub(crate) fn add(
        &mut self,
        now: u64,
        sample: &Sample,
        dropped: bool,
        common: &Common,
    ) -> Option<Summary> {
        let latency = duration_to_nanos(sample.latency);
        if now.saturating_sub(latency) >= self.start {
            self.count += 1;
            self.in_flight_sum += u64::from(sample.in_flight);
            self.max_in_flight = self.max_in_flight.max(sample.in_flight);
            if dropped {
                self.drops += 1;
            } else {
                self.latency_sum += u128::from(latency);
            }
        }
        if self.count < common.window_samples || now.saturating_sub(self.start) < common.window_ns {
            return None;
        }
        let successes = self.count - self.drops;
        let summary = Summary {
            latency: if successes == 0 {
                f64::INFINITY
            } else {
                (self.latency_sum as f64 / f64::from(successes)).max(1.0)
            },
            in_flight: self.in_flight_sum as f64 / f64::from(self.count),
            max_in_flight: self.max_in_flight,
            drops: self.drops,
        };
        *self = Self::new(now);
        Some(summary)
    }
}

/// The limit may grow by `step`, but not beyond twice the most requests
/// seen in flight: a limit far above the traffic says nothing about the
/// origin (Netflix's algorithms stop growing below half the limit for the
/// same reason). Non-decreasing in `estimate`.
pub(crate) fn grow(estimate: f64, step: f64, max_in_flight: u32) -> f64 {
    estimate.max((estimate + step).min(2.0 * f64::from(max_in_flight)))
}

/// The origin's no-load latency, measured by probes (see the module docs).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Baseline {
    /// Mean no-load latency in ns, once known.
    latency: Option<f64>,
    probe: Probe,
    /// Between probes (ns); `None`: never probe.
    interval: Option<u64>,
    /// splitmix64 state for the jitter.
    rng: u64,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Probe {
    /// Waiting until a sample arrives at or after `next`.
    Idle { next: u64 },
    /// Pinned since `started`: the samples of requests admitted since.
    Running { started: u64, count: u32, sum: u128 },
}

/// Feeds one sample of a probing algorithm (Vegas, Gradient2) that
/// finished at `now`: ignored samples count for nothing, the probe takes
/// what it needs (a finished probe opens a new window), and the rest go
/// to `window`. Returns the summary of a window this closes, to judge.
pub(crate) fn feed(
    baseline: &mut Baseline,
    window: &mut Window,
    common: &Common,
    now: u64,
    sample: &Sample,
) -> Option<Summary> {
    if sample.outcome == Outcome::Ignored {
        return None;
    }
    match baseline.probe(now, sample, common) {
        Probing::Taken => None,
        Probing::Ended => {
            *window = Window::new(now);
            None
        }
        Probing::No => window.add(now, sample, sample.outcome == Outcome::Dropped, common),
    }
}

/// What a sample did to the probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Probing {
    /// No probe is running: judge the sample as usual.
    No,
    /// The probe took the sample (or started with it).
    Taken,
    /// The probe has just measured the no-load latency: open a new window.
    Ended,
}

impl Baseline {
    /// Probes every `interval` (jittered by ±25 %, seeded by `seed`),
    /// starting with the first sample; none if `interval` is `None`.
    pub(crate) fn new(interval: Option<u64>, seed: u64) -> Self {
        Self {
            latency: None,
            probe: match interval {
                Some(_) => Probe::Idle { next: 0 },
                None => Probe::Idle { next: u64::MAX },
            },
            interval,
            rng: seed,
        }
    }

    /// The limit to enforce instead of `limit` while a probe runs.
    pub(crate) fn pinned(&self, limit: u32, common: &Common) -> Option<u32> {
        match self.probe {
            Probe::Running { .. } => Some((limit / 2).max(common.min)),
            Probe::Idle { .. } => None,
        }
    }

    /// Offers a sample that finished at `now` to the probe.
    pub(crate) fn probe(&mut self, now: u64, sample: &Sample, common: &Common) -> Probing {
        match &mut self.probe {
            Probe::Idle { next } => {
                if self.interval.is_none() || now < *next {
                    return Probing::No;
                }
                self.probe = Probe::Running {
                    started: now,
                    count: 0,
                    sum: 0,
                };
                Probing::Taken
            }
            Probe::Running {
                started,
                count,
                sum,
            } => {
                let latency = duration_to_nanos(sample.latency);
                if sample.outcome == Outcome::Success && now.saturating_sub(latency) >= *started {
                    *count += 1;
                    *sum += u128::from(latency);
                }
                if *count < common.window_samples {
                    return Probing::Taken;
                }
                self.latency = Some((*sum as f64 / f64::from(*count)).max(1.0));
                let interval = self.interval.unwrap_or(u64::MAX);
                self.probe = Probe::Idle {
                    next: now.saturating_add(self.jitter(interval)),
                };
                Probing::Ended
            }
        }
    }

    /// Takes in a window's mean latency: the no-load latency is never
    /// above what a whole window averaged. Returns the no-load latency.
    pub(crate) fn observe(&mut self, window_latency: f64) -> f64 {
        let latency = match self.latency {
            Some(known) => known.min(window_latency),
            None => window_latency,
        };
        self.latency = Some(latency);
        latency
    }

    /// `interval` scaled by a factor in [0.75, 1.25).
    fn jitter(&mut self, interval: u64) -> u64 {
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        let unit = (z >> 11) as f64 / (1u64 << 53) as f64;
        (interval as f64 * (0.75 + 0.5 * unit)) as u64
    }
}

/// A window length setting: zero is fine (windows then close on their
/// sample count alone), over 2⁶⁴ ns is not.
pub(crate) fn window_nanos(window: std::time::Duration) -> Result<u64, ConfigError> {
    u64::try_from(window.as_nanos()).map_err(|_| ConfigError::new("window", Problem::Duration))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn common(samples: u32, window_ns: u64) -> Common {
        Common {
            window_samples: samples,
            window_ns,
            ..Common::default()
        }
    }

    fn ok(ms: u64, in_flight: u32) -> Sample {
        Sample::new(Duration::from_millis(ms), Outcome::Success, in_flight)
    }

    #[test]
    fn a_window_counts_only_requests_that_started_in_it() {
        let c = common(2, 0);
        let mut w = Window::new(100_000_000);
        // Finished at 105 ms after 10 ms: started before the window.
        assert_eq!(w.add(105_000_000, &ok(10, 3), false, &c), None);
        assert_eq!(w.add(106_000_000, &ok(5, 4), false, &c), None);
        let s = w.add(107_000_000, &ok(3, 6), false, &c).unwrap();
        assert_eq!(s.latency, 4_000_000.0);
        assert_eq!(s.in_flight, 5.0);
        assert_eq!(s.max_in_flight, 6);
        assert_eq!(s.drops, 0);
    }

    #[test]
    fn a_window_waits_for_its_duration_and_its_samples() {
        let c = common(1, 10_000_000);
        let mut w = Window::new(0);
        assert_eq!(w.add(5_000_000, &ok(1, 1), false, &c), None);
        assert!(w.add(10_000_000, &ok(1, 1), false, &c).is_some());
    }

    #[test]
    fn a_window_of_drops_only_has_infinite_latency() {
        let c = common(1, 0);
        let mut w = Window::new(0);
        let s = w.add(5, &ok(0, 1), true, &c).unwrap();
        assert_eq!(s.latency, f64::INFINITY);
        assert_eq!(s.drops, 1);
    }

    #[test]
    fn time_going_backwards_closes_nothing() {
        let c = common(1, 10);
        let mut w = Window::new(1_000);
        assert_eq!(w.add(5, &ok(0, 1), false, &c), None);
    }

    #[test]
    fn growth_stops_at_twice_the_traffic() {
        assert_eq!(grow(10.0, 4.0, 100), 14.0);
        assert_eq!(grow(10.0, 4.0, 6), 12.0);
        assert_eq!(grow(10.0, 4.0, 2), 10.0, "never shrinks");
    }

    #[test]
    fn a_probe_measures_requests_admitted_under_the_pin() {
        let c = common(2, 0);
        let mut b = Baseline::new(Some(1_000_000_000), 7);
        assert_eq!(b.pinned(40, &c), None);
        assert_eq!(b.probe(50_000_000, &ok(30, 40), &c), Probing::Taken);
        assert_eq!(b.pinned(40, &c), Some(20));
        // Admitted before the probe: not a no-load measurement.
        assert_eq!(b.probe(60_000_000, &ok(30, 40), &c), Probing::Taken);
        assert_eq!(b.probe(70_000_000, &ok(10, 20), &c), Probing::Taken);
        assert_eq!(b.probe(72_000_000, &ok(12, 20), &c), Probing::Ended);
        assert_eq!(b.pinned(40, &c), None);
        assert_eq!(b.observe(30_000_000.0), 11_000_000.0);
        assert_eq!(
            b.observe(9_000_000.0),
            9_000_000.0,
            "a faster window lowers it"
        );
        // The next probe is due 0.75 s to 1.25 s later.
        let Probe::Idle { next } = b.probe else {
            panic!("idle after a probe")
        };
        assert!((822_000_000..1_322_000_000).contains(&next), "{next}");
        assert_eq!(b.probe(next - 1, &ok(10, 1), &c), Probing::No);
        assert_eq!(b.probe(next, &ok(10, 1), &c), Probing::Taken);
    }

    #[test]
    fn without_an_interval_nothing_is_probed() {
        let c = common(1, 0);
        let mut b = Baseline::new(None, 1);
        assert_eq!(b.probe(u64::MAX, &ok(1, 1), &c), Probing::No);
        assert_eq!(b.pinned(10, &c), None);
    }
}
