//! The adaptive concurrency limits: invariants of each algorithm
//! (proptests), their behaviour on a simulated origin (a deterministic
//! discrete-event simulation, so no test depends on the machine's speed),
//! and the limiters.

use proptest::prelude::*;
use std::collections::{BTreeMap, VecDeque};
use std::num::NonZeroU32;
use std::time::Duration;
use weir_adaptive::clock::Timestamp;
use weir_adaptive::{Aimd, Algorithm, AnyAlgorithm, Gradient2, Outcome, Sample, Vegas};

mod held;
mod mixes;

const MS: u64 = 1_000_000;

fn nz(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).unwrap()
}

fn at(nanos: u64) -> Timestamp<()> {
    Timestamp::from_nanos(nanos)
}

/// Settings drawn for a property.
#[derive(Debug, Clone)]
struct Config {
    kind: u8,
    min: u32,
    initial: u32,
    max: u32,
    window_ms: u64,
    samples: u32,
    probe: Option<u64>,
    tolerance: f64,
    timeout_ms: u64,
}

impl Config {
    fn build(&self) -> AnyAlgorithm {
        let window = Duration::from_millis(self.window_ms);
        let probe = self.probe.map(Duration::from_millis);
        match self.kind {
            0 => AnyAlgorithm::Aimd(
                Aimd::builder()
                    .min_limit(nz(self.min))
                    .initial_limit(nz(self.initial))
                    .max_limit(nz(self.max))
                    .window(window)
                    .window_samples(nz(self.samples))
                    .timeout(Duration::from_millis(self.timeout_ms))
                    .build()
                    .unwrap(),
            ),
            1 => AnyAlgorithm::Vegas(
                Vegas::builder()
                    .min_limit(nz(self.min))
                    .initial_limit(nz(self.initial))
                    .max_limit(nz(self.max))
                    .window(window)
                    .window_samples(nz(self.samples))
                    .probe_interval(probe)
                    .build()
                    .unwrap(),
            ),
            _ => AnyAlgorithm::Gradient2(
                Gradient2::builder()
                    .min_limit(nz(self.min))
                    .initial_limit(nz(self.initial))
                    .max_limit(nz(self.max))
                    .window(window)
                    .window_samples(nz(self.samples))
                    .probe_interval(probe)
                    .tolerance(self.tolerance)
                    .build()
                    .unwrap(),
            ),
        }
    }
}

fn config(probes: bool) -> impl Strategy<Value = Config> {
    (
        0u8..3,
        1u32..50,
        0u32..100,
        0u32..2000,
        0u64..50,
        1u32..40,
        proptest::option::of(100u64..5_000),
        1.0f64..3.0,
        1u64..500,
    )
        .prop_map(
            move |(kind, min, up, span, window_ms, samples, probe, tolerance, timeout_ms)| {
                let max = min + span;
                Config {
                    kind,
                    min,
                    initial: (min + up).min(max),
                    max,
                    window_ms,
                    samples,
                    probe: if probes { probe } else { None },
                    tolerance,
                    timeout_ms,
                }
            },
        )
}

fn outcome() -> impl Strategy<Value = Outcome> {
    prop_oneof![
        6 => Just(Outcome::Success),
        1 => Just(Outcome::Dropped),
        1 => Just(Outcome::Ignored),
    ]
}

/// A finished request: time since the previous one (or, rarely, a step
/// back in time), latency, outcome, requests in flight at its start.
fn event() -> impl Strategy<Value = (i64, u64, Outcome, u32)> {
    (
        prop_oneof![20 => 0i64..20 * MS as i64, 1 => -(50 * MS as i64)..0],
        prop_oneof![
            10 => 0u64..200 * MS,
            1 => Just(0u64),
            1 => Just(u64::MAX),
        ],
        outcome(),
        prop_oneof![10 => 0u32..3000, 1 => Just(u32::MAX)],
    )
}

/// Feeds `events` from time `start`, calling `check` after each.
fn replay(
    algorithm: &mut impl Algorithm,
    start: u64,
    events: &[(i64, u64, Outcome, u32)],
    mut check: impl FnMut(&dyn Fn() -> u32),
) -> u64 {
    let mut now = start;
    for &(dt, latency, outcome, in_flight) in events {
        now = now.saturating_add_signed(dt);
        algorithm.update(
            at(now),
            Sample::new(Duration::from_nanos(latency), outcome, in_flight),
        );
        let limit = algorithm.limit();
        check(&|| limit);
    }
    now
}

/// A steady stream: one request every `spacing` ns, each `latency` ns,
/// `in_flight` at its start; returns the limit after each.
fn steady(
    algorithm: &mut impl Algorithm,
    from: u64,
    count: usize,
    spacing: u64,
    latency: u64,
    in_flight: u32,
) -> Vec<u32> {
    (1..=count as u64)
        .map(|i| {
            let sample = Sample::new(Duration::from_nanos(latency), Outcome::Success, in_flight);
            algorithm.update(at(from + i * spacing), sample);
            algorithm.limit()
        })
        .collect()
}

/// A step scenario: warm-up at latency `a`, then `b`.
#[derive(Debug, Clone)]
struct Step {
    config: Config,
    spacing: u64,
    a: u64,
    factor: f64,
    in_flight: u32,
    before: usize,
    after: usize,
}

fn step(factor: std::ops::Range<f64>) -> impl Strategy<Value = Step> {
    // Steps just past the start of the range are the subtle ones.
    let near = factor.start..(factor.start + (factor.end - factor.start) / 20.0);
    (
        config(false),
        (MS / 10)..(3 * MS),
        MS..(60 * MS),
        prop_oneof![near, factor],
        prop_oneof![1u32..12, 1u32..400],
        200usize..1500,
        200usize..1500,
    )
        .prop_map(
            |(config, spacing, a, factor, in_flight, before, after)| Step {
                config,
                spacing,
                a,
                factor,
                in_flight,
                before,
                after,
            },
        )
}

impl Step {
    fn b(&self) -> u64 {
        (self.a as f64 * self.factor) as u64
    }

    /// Enough samples for a few windows to pass after the step (a window
    /// lasts its samples, its duration, and three of the latencies
    /// finishing in it).
    fn settle(&self) -> usize {
        let c = &self.config;
        let per_window =
            c.samples as u64 + (c.window_ms * MS + 3 * self.a.max(self.b())) / self.spacing;
        3 * per_window as usize + 3
    }

    /// The limits after the step, without it (latency stays `a`) and with it.
    fn run(&self) -> (Vec<u32>, Vec<u32>) {
        let mut warm = self.config.build();
        steady(
            &mut warm,
            0,
            self.before,
            self.spacing,
            self.a,
            self.in_flight,
        );
        let from = self.before as u64 * self.spacing;
        let mut flat = warm.clone();
        let mut stepped = warm;
        let flat = steady(
            &mut flat,
            from,
            self.after,
            self.spacing,
            self.a,
            self.in_flight,
        );
        let stepped = steady(
            &mut stepped,
            from,
            self.after,
            self.spacing,
            self.b(),
            self.in_flight,
        );
        (flat, stepped)
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn the_limit_stays_within_its_bounds(
        config in config(true),
        events in proptest::collection::vec(event(), 0..600),
    ) {
        let mut algorithm = config.build();
        prop_assert!((config.min..=config.max).contains(&algorithm.limit()));
        replay(&mut algorithm, 0, &events, |limit| {
            assert!(
                (config.min..=config.max).contains(&limit()),
                "{} outside [{}, {}]", limit(), config.min, config.max
            );
        });
    }

    #[test]
    fn without_samples_nothing_changes(
        config in config(true),
        events in proptest::collection::vec(event(), 0..300),
        ignored in proptest::collection::vec(event(), 1..300),
    ) {
        let mut algorithm = config.build();
        let now = replay(&mut algorithm, 0, &events, |_| {});
        let before = algorithm.clone();
        // Samples that say nothing about the origin, at any time later.
        let ignored: Vec<_> = ignored
            .into_iter()
            .map(|(dt, latency, _, in_flight)| (dt.abs(), latency, Outcome::Ignored, in_flight))
            .collect();
        replay(&mut algorithm, now, &ignored, |_| {});
        prop_assert_eq!(algorithm, before);
    }

    /// A step up in latency never leaves the limit higher than it would
    /// have been without the step, at any moment after it. (Without the
    /// step the limit only grows or holds; with it, each window's verdict
    /// is no higher and windows close no sooner. For AIMD that needs a
    /// latency within the timeout before the step: beyond it, both runs
    /// back off once per window, and longer latencies make longer windows.)
    #[test]
    fn a_step_up_never_raises_the_limit(step in step(1.01..20.0)) {
        prop_assume!(step.config.kind != 0 || step.a <= step.config.timeout_ms * MS);
        let (flat, stepped) = step.run();
        for (i, (f, s)) in flat.iter().zip(&stepped).enumerate() {
            prop_assert!(s <= f, "sample {}: {} with the step, {} without", i, s, f);
        }
    }

    /// Beyond the algorithm's tolerance, a step up in latency lowers the
    /// limit or holds it: once the windows straddling the step have
    /// passed, it never rises.
    #[test]
    fn beyond_its_tolerance_a_step_up_never_raises_the_limit_again(
        step in step(1.01..20.0),
        extra in 1.001f64..3.0,
    ) {
        let mut step = step;
        let c = step.config.clone();
        let (a, timeout) = (step.a as f64, (c.timeout_ms * MS) as f64);
        let band = 3.0 * f64::from(c.max).log10().floor().max(1.0);
        let beyond = |step: &Step| {
            let b = step.b() as f64;
            match c.kind {
                // Every sample after the step is a drop.
                0 => a <= timeout && b > timeout,
                // At least alpha × digits queued, at any limit up to the max.
                1 => f64::from(step.in_flight) * (1.0 - a / b) >= band,
                _ => b > c.tolerance * a * 1.001,
            }
        };
        // A step short of the tolerance, or half the time any step, is
        // aimed just beyond it instead.
        if extra < 1.5 || !beyond(&step) {
            step.factor = match c.kind {
                0 => timeout / a * extra,
                1 => {
                    step.in_flight = step.in_flight.max((2.0 * band * extra).ceil() as u32);
                    1.0 / (1.0 - band * extra / f64::from(step.in_flight))
                }
                _ => c.tolerance * extra,
            };
        }
        let beyond = beyond(&step);
        prop_assume!(beyond);
        let (_, stepped) = step.run();
        let settled = &stepped[step.settle().min(stepped.len())..];
        for pair in settled.windows(2) {
            prop_assert!(pair[1] <= pair[0], "rose from {} to {}", pair[0], pair[1]);
        }
    }

    /// After a step down in latency, once the windows straddling it have
    /// passed, the limit never falls.
    #[test]
    fn after_a_step_down_the_limit_never_falls(step in step(0.05..0.99)) {
        // AIMD sees latency only through its timeout: a step down that
        // stays beyond it is still a stream of drops.
        prop_assume!(step.config.kind != 0 || step.b() <= step.config.timeout_ms * MS);
        let (_, stepped) = step.run();
        let settled = &stepped[step.settle().min(stepped.len())..];
        for pair in settled.windows(2) {
            prop_assert!(pair[1] >= pair[0], "fell from {} to {}", pair[0], pair[1]);
        }
    }
}

// ---------------------------------------------------------------------
// A simulated origin: `capacity` requests served at once, each for
// `service` ± 10 %, the rest queued first come first served; requests
// arrive as a Poisson process of `rate` (open loop), are admitted while
// fewer than the limit are in flight, and are refused otherwise. The
// randomness is seeded: every run is the same.

/// What happened in one run of the simulation.
#[derive(Debug, Default)]
struct Run {
    /// (finish time, latency) of every admitted request.
    finished: Vec<(u64, u64)>,
    /// Requests refused.
    refused: u64,
    /// Requests that arrived.
    arrived: u64,
}

impl Run {
    /// Requests finished within `slo` per second, between `from` and `to`.
    fn goodput(&self, from: u64, to: u64, slo: u64) -> f64 {
        let good = self
            .finished
            .iter()
            .filter(|&&(t, l)| t >= from && t < to && l <= slo)
            .count();
        good as f64 * 1e9 / (to - from) as f64
    }

    /// The `q`-quantile of the latency of requests finished in [from, to).
    fn quantile(&self, from: u64, to: u64, q: f64) -> u64 {
        let mut l: Vec<u64> = self
            .finished
            .iter()
            .filter(|&&(t, _)| t >= from && t < to)
            .map(|&(_, l)| l)
            .collect();
        l.sort_unstable();
        l.get(((l.len() as f64 - 1.0) * q) as usize)
            .copied()
            .unwrap_or(0)
    }
}

/// A small seeded generator (splitmix64) for the simulation.
struct Rng(u64);

impl Rng {
    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Simulates `phases` of (duration, capacity) at `rate` requests per
/// second, each served in `service` ns ± 10 %.
fn simulate(
    algorithm: &mut impl Algorithm,
    phases: &[(u64, usize)],
    rate: u64,
    service: u64,
) -> Run {
    let mut run = Run::default();
    let end: u64 = phases.iter().map(|p| p.0).sum();
    let capacity_at = |t: u64| {
        let mut edge = 0;
        for &(d, c) in phases {
            edge += d;
            if t < edge {
                return c;
            }
        }
        phases.last().map_or(1, |p| p.1)
    };
    // Requests being served, by finish time: (start, in flight at start).
    let mut serving: BTreeMap<(u64, u64), (u64, u32)> = BTreeMap::new();
    let mut queue: VecDeque<(u64, u32)> = VecDeque::new();
    let mut in_flight = 0u32;
    let mut seq = 0u64;
    let mut rng = Rng(rate ^ service);
    let mean_spacing = 1e9 / rate as f64;
    let mut next_arrival = 0u64;
    loop {
        let next_finish = serving.keys().next().map(|k| k.0);
        let now = match next_finish {
            Some(f) if f <= next_arrival => f,
            _ => next_arrival,
        };
        if now >= end {
            break;
        }
        if next_finish == Some(now) {
            let key = *serving.keys().next().unwrap();
            let (start, at_start) = serving.remove(&key).unwrap();
            in_flight -= 1;
            run.finished.push((now, now - start));
            algorithm.update(
                at(now),
                Sample::new(
                    Duration::from_nanos(now - start),
                    Outcome::Success,
                    at_start,
                ),
            );
        } else {
            run.arrived += 1;
            next_arrival += (-(1.0 - rng.unit()).ln() * mean_spacing) as u64;
            if in_flight < algorithm.limit() {
                in_flight += 1;
                queue.push_back((now, in_flight));
            } else {
                run.refused += 1;
            }
        }
        while serving.len() < capacity_at(now) {
            let Some(request) = queue.pop_front() else {
                break;
            };
            seq += 1;
            let time = (service as f64 * (0.9 + 0.2 * rng.unit())) as u64;
            serving.insert((now + time, seq), request);
        }
    }
    run
}

/// The judging scenario at simulation scale: capacity 32 × 20 ms (1600/s),
/// offered 3× that, halved for 4 s in the middle.
fn judge(name: &str, algorithm: &mut impl Algorithm) {
    const S: u64 = 20 * MS;
    const SEC: u64 = 1_000_000_000;
    let run = simulate(
        algorithm,
        &[(4 * SEC, 32), (4 * SEC, 16), (4 * SEC, 32)],
        4_800,
        S,
    );
    let slo = 2 * S;
    for (phase, capacity) in [(0u64, 1600.0), (1, 800.0), (2, 1600.0)] {
        // Judged from 2 s after each change: converged within 2 s.
        let (from, to) = (phase * 4 * SEC + 2 * SEC, (phase + 1) * 4 * SEC);
        let goodput = run.goodput(from, to, slo);
        let p99 = run.quantile(from, to, 0.99);
        eprintln!(
            "{name} phase {phase}: goodput {goodput:.0}/s p99 {:.1} ms; refused {}/{}",
            p99 as f64 / MS as f64,
            run.refused,
            run.arrived
        );
        assert!(
            goodput >= 0.95 * capacity,
            "{name}, phase {phase}: goodput {goodput:.0}/s of {capacity}/s"
        );
        assert!(
            p99 <= slo,
            "{name}, phase {phase}: p99 {:.1} ms over the SLO {:.1} ms",
            p99 as f64 / MS as f64,
            slo as f64 / MS as f64
        );
    }
}

#[test]
fn vegas_holds_a_simulated_origin_at_capacity_through_a_halving() {
    judge("Vegas", &mut Vegas::default());
}

#[test]
fn gradient2_holds_a_simulated_origin_at_capacity_through_a_halving() {
    judge("Gradient2", &mut Gradient2::default());
}

#[test]
fn aimd_with_a_timeout_holds_a_simulated_origin_through_a_halving() {
    let mut aimd = Aimd::builder()
        .timeout(Duration::from_millis(35))
        .build()
        .unwrap();
    judge("AIMD", &mut aimd);
}

#[test]
fn without_a_limit_the_simulated_origin_misses_its_slo() {
    // The simulation is strict enough to fail: a limit of 1000 queues
    // everything.
    let mut loose = weir_adaptive::Constant::new(nz(1000));
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        judge("fixed 1000", &mut loose);
    }));
    assert!(result.is_err());
}
