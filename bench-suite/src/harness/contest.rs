//! The measuring discipline every area shares. weir and its competitors
//! run in the same binary, on the same pre-generated input, interleaved
//! over repetitions with the order rotating (whatever slows a shared
//! machine down lasts longer than a repetition, so it hits them alike),
//! threads released together by a barrier; each figure is the spread of
//! its repetitions (min / median / max), ratios pair a repetition with the
//! anchor's in the same repetition, and goals are judged on the spread.

pub use super::spread::{Spread, quantile};
use crate::harness::alloc::{self, AllocStats};
use crate::harness::report::Report;
use std::sync::Barrier;
use std::time::{Duration, Instant};

/// Runs `measure(contender, repetition)` for each of `contenders` in each
/// of `repetitions` rounds, the order rotating from round to round, the
/// round shown on the progress bar as `what`; results as
/// `[contender][repetition]`.
pub fn rotate<T>(
    report: &Report,
    what: &str,
    contenders: usize,
    repetitions: usize,
    mut measure: impl FnMut(usize, usize) -> T,
) -> Vec<Vec<T>> {
    let mut results: Vec<Vec<T>> = (0..contenders).map(|_| Vec::new()).collect();
    for r in 0..repetitions {
        report.progress(&format!("{what}, repetition {}/{repetitions}", r + 1));
        for offset in 0..contenders {
            let c = (r + offset) % contenders;
            results[c].push(measure(c, r));
        }
    }
    results
}

/// The spread of each contender's results, read by `figure`.
pub fn spreads<T>(results: &[Vec<T>], figure: impl Fn(&T) -> f64) -> Vec<Spread> {
    let of = |r: &Vec<T>| Spread::of(&r.iter().map(&figure).collect::<Vec<_>>());
    results.iter().map(of).collect()
}

/// `a / b`, repetition by repetition (each pair ran in the same round).
pub fn paired(a: &[f64], b: &[f64]) -> Vec<f64> {
    a.iter().zip(b).map(|(a, b)| a / b).collect()
}

/// Runs one thread per stream, all released together by a barrier, each
/// calling `op` on every key of its stream and counting the calls that
/// return true. Returns the slowest thread's time and the total count.
pub fn run_streams<F: Fn(u32) -> bool + Sync>(streams: &[Vec<u32>], op: F) -> (Duration, u64) {
    let barrier = Barrier::new(streams.len());
    let results: Vec<(Duration, u64)> = std::thread::scope(|s| {
        let threads: Vec<_> = streams
            .iter()
            .map(|keys| {
                let (barrier, op) = (&barrier, &op);
                s.spawn(move || {
                    barrier.wait();
                    let start = Instant::now();
                    let hits = keys.iter().filter(|&&key| op(key)).count() as u64;
                    (start.elapsed(), hits)
                })
            })
            .collect();
        let joined = threads.into_iter().map(|t| t.join().expect("bench thread"));
        joined.collect()
    });
    let slowest = results.iter().map(|r| r.0).max().unwrap_or_default();
    (slowest, results.iter().map(|r| r.1).sum())
}

/// A contender's first run: its heap and its count.
pub type First = (AllocStats, u64);

/// ns per event per thread, `[set][contender][repetition]`, of each
/// contender on each set of streams (one thread a stream), rotated as
/// [`rotate`] does; `time(c, streams)` returns the slowest thread's time
/// and a count. The first repetition on the first set runs under the
/// counting allocator: its heap and count are returned per contender.
pub fn per_thread_ns(
    report: &Report,
    what: impl Fn(usize) -> String,
    contenders: usize,
    repetitions: usize,
    sets: &[Vec<Vec<u32>>],
    time: impl Fn(usize, &[Vec<u32>]) -> (Duration, u64),
) -> (Vec<Vec<Vec<f64>>>, Vec<First>) {
    let mut first = vec![(AllocStats::default(), 0); contenders];
    let ns = sets.iter().enumerate().map(|(s, streams)| {
        let events = streams.iter().map(Vec::len).sum::<usize>() as f64;
        rotate(report, &what(s), contenders, repetitions, |c, r| {
            let elapsed = if s == 0 && r == 0 {
                let ((elapsed, count), stats) = alloc::measure(|| time(c, streams));
                first[c] = (stats, count);
                elapsed
            } else {
                time(c, streams).0
            };
            elapsed.as_nanos() as f64 * streams.len() as f64 / events
        })
    });
    (ns.collect(), first)
}

/// A goal this run is judged against: a named figure (a ratio, a share, a
/// time) that must be at least, or at most, a bound.
#[derive(Debug, Clone, Copy)]
pub struct Goal {
    /// What must hold, as the report names it (`"KeyedLimiter ≥ 3× governor"`).
    pub name: &'static str,
    /// The bound.
    pub bound: f64,
    /// Whether the figure must stay at or below the bound (else at or above).
    pub at_most: bool,
}

impl Goal {
    /// A figure that must reach `bound`.
    pub const fn at_least(name: &'static str, bound: f64) -> Self {
        Self {
            name,
            bound,
            at_most: false,
        }
    }

    /// A figure that must not exceed `bound`.
    pub const fn at_most(name: &'static str, bound: f64) -> Self {
        Self {
            name,
            bound,
            at_most: true,
        }
    }

    /// Whether `x` meets the goal.
    pub fn met(&self, x: f64) -> bool {
        if self.at_most {
            x <= self.bound
        } else {
            x >= self.bound
        }
    }

    /// The verdict on one figure.
    pub fn verdict(&self, x: f64) -> &'static str {
        if self.met(x) { "met" } else { "**not met**" }
    }

    /// The verdict on a figure per repetition: met when the median meets
    /// it, and whether every repetition did.
    pub fn verdict_spread(&self, s: &Spread) -> &'static str {
        match (self.met(s.median), self.met(s.min) && self.met(s.max)) {
            (true, true) => "met in every repetition",
            (true, false) => "met at the median, not in every repetition",
            _ => "**not met**",
        }
    }

    /// A goal table's cells for a figure per repetition: its spread (2
    /// decimals) and the verdict.
    pub fn judge(&self, values: &[f64]) -> [String; 2] {
        let s = Spread::of(values);
        [s.show(2), self.verdict_spread(&s).to_owned()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_is_min_median_max() {
        let s = Spread::of(&[3.0, 1.0, 2.0]);
        assert_eq!((s.min, s.median, s.max), (1.0, 2.0, 3.0));
        assert_eq!(Spread::of(&[4.0, 1.0, 2.0, 3.0]).median, 2.5);
        assert_eq!(s.show(1), "2.0 (1.0–3.0)");
        let sorted = [10, 20, 30, 40, 50];
        assert_eq!(
            [0.0, 0.5, 0.99, 1.0].map(|q| quantile(&sorted, q)),
            [10, 30, 50, 50].map(Some)
        );
        assert_eq!(quantile::<u32>(&[], 0.5), None);
    }

    #[test]
    fn goals_judge_the_median_and_every_repetition() {
        let goal = Goal::at_least("x ≥ 2", 2.0);
        assert_eq!(
            goal.verdict_spread(&Spread::of(&[2.0, 3.0])),
            "met in every repetition"
        );
        let mixed = Spread::of(&[1.0, 2.0, 3.0]);
        assert_eq!(
            goal.verdict_spread(&mixed),
            "met at the median, not in every repetition"
        );
        assert_eq!(
            Goal::at_most("x ≤ 1", 1.0).verdict_spread(&mixed),
            "**not met**"
        );
        assert_eq!(
            (goal.verdict(2.0), goal.verdict(1.9)),
            ("met", "**not met**")
        );
    }

    #[test]
    fn rotation_runs_each_contender_once_a_round_in_turning_order() {
        let report = Report::new(
            "unused",
            crate::harness::report::Scale::Quick,
            Duration::ZERO,
        );
        let mut order = Vec::new();
        let results = rotate(&report, "test", 3, 2, |c, r| {
            order.push(c);
            (c, r)
        });
        assert_eq!(order, [0, 1, 2, 1, 2, 0]);
        assert_eq!(results[2], [(2, 0), (2, 1)]);
    }
}
