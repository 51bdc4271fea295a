//! What the algorithms share: windows of samples, the latency statistic
//! they are judged by, and the no-load latency with the probes that
//! measure it (see the [module docs](super)).

use super::{Common, ConfigError, Outcome, Sample};
use weir_primitives::time::duration_to_nanos;

/// The latency quantile windows and probes are judged by: the third
/// quartile. It stays among the latencies of the requests that make up
/// most of the traffic while up to three quarters of the samples are
/// faster than them or up to a quarter slower (see the module docs).
pub(crate) const QUANTILE: f64 = 0.75;

/// A window lasts at least this many times the latency of the requests
/// finishing in it (their 90th percentile, whenever they started), so
/// that the slower requests admitted in it can finish in it too: judged
/// too early, a window would hold only the fast ones.
pub(crate) const SPAN: f64 = 3.0;

/// How many latencies a reservoir keeps to read a quantile from.
const KEPT: usize = 64;

/// A uniform sample of up to [`KEPT`] latencies (reservoir sampling):
/// every latency offered is equally likely to be kept, whatever the order
/// they came in, in fixed memory. A quantile read from it is within about
/// ±6 % of rank of the offered latencies' own.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Reservoir {
    kept: [f32; KEPT],
    /// Latencies offered since the last clear.
    seen: u32,
    /// splitmix64 state: which offered latency replaces which kept one.
    rng: u64,
}

impl Reservoir {
    pub(crate) fn new(seed: u64) -> Self {
        Self {
            kept: [0.0; KEPT],
            seen: 0,
            rng: seed,
        }
    }

    pub(crate) fn clear(&mut self) {
        self.seen = 0;
    }

    /// Offers a latency (ns): kept with probability `KEPT / seen`.
    pub(crate) fn offer(&mut self, latency_ns: u64) {
        let value = latency_ns as f32;
        let slot = if (self.seen as usize) < KEPT {
            Some(self.seen as usize)
        } else {
            // Uniform in [0, seen] by a multiply and a shift (Lemire's
            // reduction), not a division: this runs for every request.
            let r = splitmix(&mut self.rng) >> 32;
            let j = (r * (u64::from(self.seen) + 1)) >> 32;
            usize::try_from(j).ok().filter(|&j| j < KEPT)
        };
        if let Some(slot) = slot {
            self.kept[slot] = value;
        }
        self.seen = self.seen.saturating_add(1);
    }

    /// The `q`-quantile of the kept latencies in ns: the smallest with at
    /// least `q` of them at or below it. `None` if none was offered.
    pub(crate) fn quantile(&self, q: f64) -> Option<f64> {
        let n = (self.seen as usize).min(KEPT);
        if n == 0 {
            return None;
        }
        let mut kept = self.kept;
        let kept = &mut kept[..n];
        kept.sort_unstable_by(f32::total_cmp);
        let rank = ((q * n as f64).ceil() as usize).clamp(1, n);
        Some(f64::from(kept[rank - 1]))
    }
}

/// One step of splitmix64.
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The samples of requests that started in the current window, and the
/// latencies of every request that finished in it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Window {
    /// When the window opened (ns of the caller's clock).
    start: u64,
    count: u32,
    /// Successes of requests that started in the window.
    latencies: Reservoir,
    /// Every request that finished in the window, whenever it started:
    /// how long the window must last.
    finishing: Reservoir,
    in_flight_sum: u64,
    max_in_flight: u32,
    drops: u32,
    /// The window cannot close before it has lasted this long (ns): the
    /// [`SPAN`] last computed, so that a sample that cannot close it costs
    /// no sort.
    lasts: u64,
}

/// A closed window, as the algorithms judge it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Summary {
    /// The [`QUANTILE`] of the latency of the window's successes, in ns
    /// (at least 1); infinite when it had no success.
    pub(crate) latency: f64,
    /// Mean requests in flight at their start.
    pub(crate) in_flight: f64,
    /// Most requests in flight at a start.
    pub(crate) max_in_flight: u32,
    /// Requests dropped.
    pub(crate) drops: u32,
    /// How long the window lasted (ns).
    pub(crate) lasted: u64,
}

impl Window {
    pub(crate) fn new(start: u64, seed: u64) -> Self {
        Self {
            start,
            count: 0,
            latencies: Reservoir::new(seed),
            finishing: Reservoir::new(seed ^ 0x6669_6e69_7368),
            in_flight_sum: 0,
            max_in_flight: 0,
            drops: 0,
            lasts: 0,
        }
    }

    /// Empties the window and opens it at `start`.
    pub(crate) fn reopen(&mut self, start: u64) {
        self.start = start;
        self.count = 0;
        self.latencies.clear();
        self.finishing.clear();
        self.in_flight_sum = 0;
        self.max_in_flight = 0;
        self.drops = 0;
        self.lasts = 0;
    }

    /// Adds a sample that finished at `now` (`dropped` if it counts as a
    /// drop); returns the window's summary if this closes it, and opens
    /// the next one at `now`. Samples of requests that started before the
    /// window opened are not counted: they were admitted under an earlier
    /// limit. A window closes once it holds `window_samples` samples and
    /// has lasted `window_ns` and [`SPAN`] times the latency of the
    /// requests finishing in it.
    pub(crate) fn add(
        &mut self,
        now: u64,
        sample: &Sample,
        dropped: bool,
        common: &Common,
    ) -> Option<Summary> {
        let latency = duration_to_nanos(sample.latency);
        self.finishing.offer(latency);
        if now.saturating_sub(latency) >= self.start {
            self.count += 1;
            self.in_flight_sum += u64::from(sample.in_flight);
            self.max_in_flight = self.max_in_flight.max(sample.in_flight);
            if dropped {
                self.drops += 1;
            } else {
                self.latencies.offer(latency);
            }
        }
        let lasted = now.saturating_sub(self.start);
        if self.count < common.window_samples || lasted < common.window_ns || lasted < self.lasts {
            return None;
        }
        // Requests finishing now may be slower than when the span was last
        // read: read it again, and wait for it if it grew.
        let span = self.finishing.quantile(0.9).unwrap_or(0.0) * SPAN;
        self.lasts = span as u64;
        if lasted < self.lasts {
            return None;
        }
        let summary = Summary {
            latency: self
                .latencies
                .quantile(QUANTILE)
                .map_or(f64::INFINITY, |q| q.max(1.0)),
            in_flight: self.in_flight_sum as f64 / f64::from(self.count),
            max_in_flight: self.max_in_flight,
            drops: self.drops,
            lasted,
        };
        self.reopen(now);
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
///
/// A probe is a window like any other, judged differently: while it runs
/// the limit is pinned to half, and when it closes its latency becomes the
/// no-load latency.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Baseline {
    /// The no-load latency in ns, once known.
    latency: Option<f64>,
    /// Whether the current window is a probe.
    probing: bool,
    /// The next probe starts with a sample at or after this (ns).
    next: u64,
    /// The running probe ends by this (ns), measured or not.
    deadline: u64,
    /// The longest a probe may run at the least (ns); it may run four
    /// times as long as the last window took to close, if that is longer.
    timeout: u64,
    /// How long the last window judged took to close (ns).
    last_lasted: u64,
    /// Between probes (ns); `None`: never probe.
    interval: Option<u64>,
    /// splitmix64 state for the jitter.
    rng: u64,
}

/// Feeds one sample of an algorithm that finished at `now` (`dropped` if
/// it counts as a drop): ignored samples count for nothing, a probe that
/// is due starts (in a new window), and a window that closes is either a
/// probe's, which measures the no-load latency, or returned, to judge.
pub(crate) fn feed(
    baseline: &mut Baseline,
    window: &mut Window,
    common: &Common,
    now: u64,
    sample: &Sample,
    dropped: bool,
) -> Option<Summary> {
    if sample.outcome == Outcome::Ignored {
        return None;
    }
    if baseline.due(now) {
        baseline.probing = true;
        let bound = baseline.timeout.max(baseline.last_lasted.saturating_mul(4));
        baseline.deadline = now.saturating_add(bound);
        window.reopen(now);
        return None;
    }
    if baseline.tick(window, now) {
        return None;
    }
    let summary = window.add(now, sample, dropped, common)?;
    if baseline.probing {
        baseline.measured(&summary, now);
        return None;
    }
    baseline.last_lasted = summary.lasted;
    Some(summary)
}

impl Baseline {
    /// Probes every `interval` (jittered by ±25 %, seeded by `seed`),
    /// starting with the first sample, each ending within `timeout` (or
    /// four times the last window's length, if longer); none if
    /// `interval` is `None`.
    pub(crate) fn new(interval: Option<u64>, timeout: u64, seed: u64) -> Self {
        Self {
            latency: None,
            probing: false,
            next: if interval.is_some() { 0 } else { u64::MAX },
            deadline: u64::MAX,
            timeout,
            last_lasted: 0,
            interval,
            rng: seed,
        }
    }

    /// When the running probe must end, though no request finishes (ns).
    pub(crate) fn next_tick(&self) -> Option<u64> {
        self.probing.then_some(self.deadline)
    }

    /// Ends a probe whose deadline has come by `now`, unmeasured: the
    /// places it pinned are held by requests that do not finish (streams,
    /// long polls), so it could gather no samples. The no-load latency
    /// stays as it was and the next probe is one interval away. Whether
    /// it ended one.
    pub(crate) fn tick(&mut self, window: &mut Window, now: u64) -> bool {
        if !self.probing || now < self.deadline {
            return false;
        }
        self.probing = false;
        self.deadline = u64::MAX;
        let interval = self.interval.unwrap_or(u64::MAX);
        self.next = now.saturating_add(self.jitter(interval));
        window.reopen(now);
        true
    }

    /// The limit to enforce instead of `limit` while a probe runs.
    pub(crate) fn pinned(&self, limit: u32, common: &Common) -> Option<u32> {
        self.probing.then(|| (limit / 2).max(common.min))
    }

    /// Whether a probe starts with a sample finishing at `now`.
    fn due(&self, now: u64) -> bool {
        !self.probing && self.interval.is_some() && now >= self.next
    }

    /// A probe's window closed: its latency is the no-load latency (kept
    /// as it was if every request of the probe was dropped).
    fn measured(&mut self, probe: &Summary, now: u64) {
        if probe.latency.is_finite() {
            self.latency = Some(probe.latency);
        }
        self.probing = false;
        self.deadline = u64::MAX;
        let interval = self.interval.unwrap_or(u64::MAX);
        self.next = now.saturating_add(self.jitter(interval));
    }

    /// The no-load latency to judge a window of latency `window_latency`
    /// by. With probes it is the last probe's measurement, whatever the
    /// windows say: a window of cheap requests must not teach the limit
    /// that every other request is slow. Without probes it is the lowest
    /// window seen.
    pub(crate) fn no_load(&mut self, window_latency: f64) -> f64 {
        let latency = match (self.latency, self.interval) {
            (Some(probed), Some(_)) => probed,
            (Some(known), None) => known.min(window_latency),
            (None, _) => window_latency,
        };
        self.latency = Some(latency);
        latency
    }

    /// The no-load latency, once known.
    pub(crate) fn known(&self) -> Option<std::time::Duration> {
        self.latency
            .map(|ns| std::time::Duration::from_nanos(ns as u64))
    }

    /// `interval` scaled by a factor in [0.75, 1.25).
    fn jitter(&mut self, interval: u64) -> u64 {
        let z = splitmix(&mut self.rng);
        let unit = (z >> 11) as f64 / (1u64 << 53) as f64;
        (interval as f64 * (0.75 + 0.5 * unit)) as u64
    }
}

/// A window length setting: zero is fine (windows then close on their
/// sample count alone), over 2⁶⁴ ns is not.
pub(crate) fn window_nanos(window: std::time::Duration) -> Result<u64, ConfigError> {
    u64::try_from(window.as_nanos()).map_err(|_| ConfigError::DurationTooLong { setting: "window" })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_samples::ok;

    fn common(samples: u32, window_ns: u64) -> Common {
        Common {
            window_samples: samples,
            window_ns,
            ..Common::default()
        }
    }

    #[test]
    fn a_window_counts_only_requests_that_started_in_it() {
        let c = common(2, 0);
        let mut w = Window::new(100_000_000, 1);
        // Finished at 105 ms after 10 ms: started before the window.
        assert_eq!(w.add(105_000_000, &ok(10, 3), false, &c), None);
        assert_eq!(w.add(106_000_000, &ok(5, 4), false, &c), None);
        // Two samples, but the window has not lasted three times the 10 ms
        // of the requests finishing in it.
        assert_eq!(w.add(107_000_000, &ok(3, 6), false, &c), None);
        let mut w = Window::new(100_000_000, 1);
        assert_eq!(w.add(105_000_000, &ok(10, 3), false, &c), None);
        assert_eq!(w.add(126_000_000, &ok(5, 4), false, &c), None);
        let s = w.add(130_000_000, &ok(3, 6), false, &c).unwrap();
        assert_eq!(s.latency, 5_000_000.0, "the third quartile of 3 and 5 ms");
        assert_eq!(s.in_flight, 5.0);
        assert_eq!(s.max_in_flight, 6);
        assert_eq!(s.drops, 0);
    }

    #[test]
    fn a_quarter_of_slow_or_most_of_cheap_samples_do_not_move_the_quantile() {
        let c = common(400, 0);
        let judged = |cheap: u64, slow: u64| {
            let mut w = Window::new(0, 7);
            let mut summary = None;
            for i in 0..400u64 {
                let ms = if i % 100 < cheap {
                    1
                } else if i % 100 < cheap + slow {
                    500
                } else {
                    10 + i % 3
                };
                summary = w.add(10_000_000_000 + i, &ok(ms, 1), false, &c);
            }
            summary.unwrap().latency / 1e6
        };
        for (cheap, slow) in [(0, 0), (70, 0), (0, 20), (50, 15)] {
            let q = judged(cheap, slow);
            assert!(
                (10.0..=12.0).contains(&q),
                "{cheap} % cheap, {slow} % slow: {q} ms"
            );
        }
        assert_eq!(judged(80, 0), 1.0, "beyond three quarters, the cheap ones");
        assert_eq!(judged(0, 30), 500.0, "beyond a quarter, the slow ones");
    }

    #[test]
    fn a_reservoir_keeps_a_uniform_sample_of_a_long_window() {
        // 10 000 latencies rising from 1 to 10 000: the third quartile
        // read from 64 of them is near 7 500 whatever the order they came
        // in (within ±5 % of rank, one standard deviation), and unbiased
        // over many seeds.
        let mut sum = 0.0;
        for seed in 0..100 {
            let mut r = Reservoir::new(seed);
            for i in 1..=10_000u64 {
                r.offer(i);
            }
            let q = r.quantile(QUANTILE).unwrap();
            assert!((5_500.0..=9_500.0).contains(&q), "seed {seed}: {q}");
            sum += q;
            r.clear();
            assert_eq!(r.quantile(QUANTILE), None);
        }
        let mean = sum / 100.0;
        assert!((7_200.0..=7_800.0).contains(&mean), "{mean}");
    }

    #[test]
    fn a_window_waits_for_its_duration_and_its_samples() {
        let c = common(1, 10_000_000);
        let mut w = Window::new(0, 1);
        assert_eq!(w.add(5_000_000, &ok(1, 1), false, &c), None);
        assert!(w.add(10_000_000, &ok(1, 1), false, &c).is_some());
    }

    #[test]
    fn a_window_of_drops_only_has_infinite_latency() {
        let c = common(1, 0);
        let mut w = Window::new(0, 1);
        let s = w.add(5, &ok(0, 1), true, &c).unwrap();
        assert_eq!(s.latency, f64::INFINITY);
        assert_eq!(s.drops, 1);
    }

    #[test]
    fn time_going_backwards_closes_nothing() {
        let c = common(1, 10);
        let mut w = Window::new(1_000, 1);
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
        let mut b = Baseline::new(Some(1_000_000_000), u64::MAX, 7);
        let mut w = Window::new(0, 7);
        let feed_at = |b: &mut Baseline, w: &mut Window, ms: u64, s: Sample| {
            feed(b, w, &c, ms * 1_000_000, &s, false)
        };
        assert_eq!(b.pinned(40, &c), None);
        // The first sample starts a probe: the limit is pinned to half.
        assert_eq!(feed_at(&mut b, &mut w, 50, ok(30, 40)), None);
        assert_eq!(b.pinned(40, &c), Some(20));
        // Admitted before the probe: not a no-load measurement.
        assert_eq!(feed_at(&mut b, &mut w, 60, ok(30, 40)), None);
        assert_eq!(feed_at(&mut b, &mut w, 70, ok(10, 20)), None);
        assert_eq!(b.pinned(40, &c), Some(20), "not three latencies long yet");
        // 12 ms, and the probe has lasted three times the 30 ms finishing.
        assert_eq!(feed_at(&mut b, &mut w, 140, ok(12, 20)), None);
        assert_eq!(b.pinned(40, &c), None);
        assert_eq!(b.no_load(30_000_000.0), 12_000_000.0);
        assert_eq!(
            b.no_load(1_000.0),
            12_000_000.0,
            "a window of cheap requests does not lower it"
        );
        assert_eq!(b.known(), Some(std::time::Duration::from_millis(12)));
        // The next probe is due 0.75 s to 1.25 s later.
        let next = b.next;
        assert!((890_000_000..1_390_000_000).contains(&next), "{next}");
        assert!(!b.due(next - 1));
        assert!(b.due(next));
    }

    #[test]
    fn without_probes_the_lowest_window_is_the_no_load_latency() {
        let mut b = Baseline::new(None, u64::MAX, 1);
        assert_eq!(b.no_load(30.0), 30.0);
        assert_eq!(b.no_load(50.0), 30.0);
        assert_eq!(b.no_load(20.0), 20.0);
    }

    #[test]
    fn without_an_interval_nothing_is_probed() {
        let c = common(1, 0);
        let mut b = Baseline::new(None, u64::MAX, 1);
        let mut w = Window::new(0, 1);
        assert!(!b.due(u64::MAX));
        assert!(feed(&mut b, &mut w, &c, 5, &ok(0, 1), false).is_some());
        assert_eq!(b.pinned(10, &c), None);
    }
}
