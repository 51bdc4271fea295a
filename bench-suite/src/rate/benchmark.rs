//! The keyed-limiter benchmark against governor: ns per check by key
//! distribution and thread count, memory and allowed shares beside, the
//! issue's goals, and the cheaper clocks.

use super::contenders::{
    EXACT, EXACT_RECENT, GOVERNOR, GOVERNOR_UPKEEP, SIZED_FOR, SKETCH, WRONG_DENIALS, bench_quota,
    contenders,
};
use crate::alloc::{self, AllocStats};
use crate::contest::{self, Goal, Spread};
use crate::plot::{BarPlot, BarSeries};
use crate::report::{Report, Table, thousands};
use crate::workload;
use std::time::Instant;
use weir_limits::clock::{Clock, ManualClock, MonotonicClock, StdClock, Timestamp};
use weir_rate::{Gcra, KeyedLimiter, SketchLimiter};

/// The key distributions of the benchmark.
const DISTRIBUTIONS: [&str; 2] = ["uniform", "Zipf 1.1"];

/// The benchmark part of the report.
pub(super) fn benchmark(report: &mut Report) {
    let scale = report.scale();
    let total: usize = scale.pick(4_000_000, 20_000_000);
    let repetitions: usize = scale.pick(3, 5);
    report.section("weir-rate: keyed limiters against governor");
    let q = bench_quota();
    let shape = weir_rate::SketchLimiter::shape_for_load(
        q,
        std::num::NonZeroU64::new(SIZED_FOR).expect("non-zero"),
        WRONG_DENIALS,
    )
    .expect("a valid sizing");
    let (hashes, slots) = (shape.hashes(), shape.slots());
    report.text(&format!(
        "{} checks over {} `u32` keys drawn uniformly or from Zipf (s = 1.1), pre-generated; per-key quota {} per second, burst {} (GCRA), \
         both crates on their default clocks. The sketch is sized by `SketchLimiter::try_sized_for` for {} M checks a second at {}% wrong denials: \
         {hashes} × {slots} cells ({} KiB). Each figure is the median (min–max) of {repetitions} repetitions; within one the contenders \
         run back to back (order rotating), each on a fresh limiter, threads barrier-started; ratios pair a repetition with governor's. \
         Memory is the peak heap growth of the first 1-thread run; 'allowed' is what each let through in it. \
         weir's rows marked `allows` answer yes or no, as governor's `check_key` does; the `check` rows build the full `Decision` \
         (remaining, reset and retry times for headers). The goals are judged on the `allows` rows.",
        thousands(total as u64),
        thousands(u64::from(workload::KEYS)),
        q.limit(),
        q.burst(),
        SIZED_FOR / 1_000_000,
        WRONG_DENIALS * 100.0,
        hashes * slots * 8 / 1024,
    ));
    let contenders = contenders();
    let n = contenders.len();
    let position = |name: &str| {
        contenders
            .iter()
            .position(|c| c.name == name)
            .expect("a contender of this benchmark")
    };
    let (anchor, exact, sketch) = (position(GOVERNOR), position(EXACT), position(SKETCH));
    let (upkeep, exact_recent) = (position(GOVERNOR_UPKEEP), position(EXACT_RECENT));
    let mut table = Table::new(
        "keys | limiter | 1 thread ns/check | 2 threads ns/check | × governor (1 thread) | × governor (2 threads) | peak bytes | allowed (1 thread)",
    );
    let mut goals = Table::new("goal | keys | this run: median (min–max) | verdict");
    let mut recent = Table::new(
        "keys | threads | weir exact on RecentClock × governor on QuantaUpkeepClock | weir exact on RecentClock × governor on its default clock",
    );
    // ns per check for the chart: [contender][distribution × threads].
    let mut chart: Vec<Vec<Option<Spread>>> = vec![Vec::new(); n];
    let mut groups = Vec::new();
    for (d, distribution) in DISTRIBUTIONS.iter().enumerate() {
        let mut first = vec![(AllocStats::default(), 0u64); n];
        let streams = |threads: usize| -> Vec<Vec<u32>> {
            let seed = |i: usize| 7000 + 100 * d as u64 + i as u64;
            let keys = |i| {
                if d == 0 {
                    workload::uniform(total / threads, seed(i))
                } else {
                    workload::zipf(total / threads, 1.1, seed(i))
                }
            };
            (0..threads).map(keys).collect()
        };
        let one_thread = streams(1);
        // ns per check per thread, [threads − 1][contender][repetition].
        let ns: Vec<Vec<Vec<f64>>> = [one_thread.clone(), streams(2)]
            .iter()
            .enumerate()
            .map(|(t, streams)| {
                let what = format!("{distribution}, {} thread(s)", t + 1);
                contest::rotate(report, &what, n, repetitions, |c, r| {
                    let time = || (contenders[c].time)(streams);
                    let (elapsed, _) = if t == 0 && r == 0 {
                        let (result, stats) = alloc::measure(time);
                        first[c] = (stats, result.1);
                        result
                    } else {
                        time()
                    };
                    elapsed.as_nanos() as f64 * (t + 1) as f64 / total as f64
                })
            })
            .collect();
        // Each repetition of `c` paired with the same repetition of `over`.
        let ratio =
            |over: usize, c: usize, t: usize| Spread::of(&contest::paired(&ns[t][over], &ns[t][c]));
        for (t, ns_t) in ns.iter().enumerate() {
            groups.push(format!(
                "{distribution}, {} thread{}",
                t + 1,
                if t == 0 { "" } else { "s" }
            ));
            for (c, bars) in chart.iter_mut().enumerate() {
                bars.push(Some(Spread::of(&ns_t[c])));
            }
            let (upkeep, default) = (
                ratio(upkeep, exact_recent, t).show(2),
                ratio(anchor, exact_recent, t).show(2),
            );
            recent.row(format!("{distribution} | {} | {upkeep} | {default}", t + 1));
        }
        for (c, contender) in contenders.iter().enumerate() {
            let (memory, allowed) = first[c];
            let [one, two] = [0, 1].map(|t| Spread::of(&ns[t][c]).show(1));
            let [x1, x2] = [0, 1].map(|t| ratio(anchor, c, t).show(2));
            let (peak, allowed) = (thousands(memory.peak_bytes as u64), thousands(allowed));
            let share = first[c].1 as f64 * 100.0 / total as f64;
            table.row(format!("{distribution} | {} | {one} | {two} | {x1} | {x2} | {peak} | {allowed} ({share:.2}%)", contender.name));
        }
        for (goal, c) in [
            (Goal::at_least("KeyedLimiter ≥ 3× governor", 3.0), exact),
            (Goal::at_least("SketchLimiter ≥ 5× governor", 5.0), sketch),
        ] {
            for t in 0..2 {
                let s = ratio(anchor, c, t);
                goals.row(format!(
                    "{}, {} thread(s) | {distribution} | {} | {}",
                    goal.name,
                    t + 1,
                    s.show(2),
                    goal.verdict_spread(&s)
                ));
            }
        }
        // Allowed shares from the timed runs are not comparable: a slower
        // limiter spends more real time, so its over-quota keys earn more.
        // Compare on the 1-thread stream with the same timestamps for both.
        let (by_exact, by_sketch) = allowed_on_a_timed_stream(&one_thread[0]);
        let [by_exact, by_sketch] = [by_exact, by_sketch].map(|a| a as f64 * 100.0 / total as f64);
        let gap = Goal::at_most(
            "SketchLimiter allows within 0.1 pp of the exact limiter (same timed stream)",
            0.1,
        );
        let verdict = gap.verdict((by_exact - by_sketch).abs());
        let figure = format!(
            "exact {by_exact:.3}%, sketch {by_sketch:.3}%: {:+.3} pp",
            by_exact - by_sketch
        );
        goals.row(format!(
            "{} | {distribution} | {figure} | {verdict}",
            gap.name
        ));
    }
    report.table(&table);
    let series = contenders
        .iter()
        .zip(chart)
        .map(|(c, bars)| BarSeries::new(c.name, bars));
    report.plot(
        "rate-keyed-ns-per-check",
        &BarPlot {
            title: "weir-rate: ns per check by key distribution and thread count, keyed limiters against governor (median, min–max)".into(),
            x_label: "keys, threads checking at once".into(),
            y_label: "ns/check per thread".into(),
            groups,
            series: series.collect(),
            ..BarPlot::default()
        },
    );
    report.text("Goals (issue 14), judged on this run:");
    report.table(&goals);
    report.text(
        "Both crates also offer a clock that reads a time a background thread refreshes (here every millisecond) \
         instead of the time-stamp counter: weir's `RecentClock` (opt-in, at most about a millisecond stale) and governor's \
         `QuantaUpkeepClock`. The goals above are judged on the default clocks; on the cheaper clocks, paired per repetition:",
    );
    report.table(&recent);
    let reads = scale.pick(2_000_000u32, 10_000_000);
    let per_read = |clock: &dyn Clock| {
        let start = Instant::now();
        let sink = (0..reads).fold(0u64, |sink, _| sink.wrapping_add(clock.now_nanos()));
        std::hint::black_box(sink);
        start.elapsed().as_nanos() as f64 / f64::from(reads)
    };
    let monotonic = per_read(&MonotonicClock::new());
    let std_clock = per_read(&StdClock::new());
    let recent_clock = per_read(&weir_rate::clock::RecentClock::new());
    report.text(&format!(
        "One clock read on this machine: weir's default `MonotonicClock` (time-stamp counter, as governor's quanta clock) {monotonic:.1} ns, \
         `StdClock` (`Instant::now()`) {std_clock:.1} ns, `RecentClock` {recent_clock:.1} ns."
    ));
    report.text(
        "The exact KeyedLimiter forgets keys whose state has expired (after burst/rate); governor keeps every key until \
         `retain_recent()` is called. With two threads the machine's two cores are shared with nothing else only when the \
         machine is otherwise idle.",
    );
}

/// The checks of `keys` the exact limiter and the sized sketch allow when
/// the checks arrive at half the sketch's sizing load ([`SIZED_FOR`] / 2,
/// one thread's share), each at its own timestamp, the same for both.
fn allowed_on_a_timed_stream(keys: &[u32]) -> (u64, u64) {
    let q = bench_quota();
    let exact = KeyedLimiter::with_clock(Gcra::new(q), ManualClock::new());
    let shape = weir_rate::SketchLimiter::shape_for_load(
        q,
        std::num::NonZeroU64::new(SIZED_FOR).expect("non-zero"),
        WRONG_DENIALS,
    )
    .expect("a valid sizing");
    let sketch = SketchLimiter::with_clock(q, shape, ManualClock::new());
    let step = 2_000_000_000 / SIZED_FOR;
    let (mut by_exact, mut by_sketch) = (0, 0);
    for (i, key) in keys.iter().enumerate() {
        let now = Timestamp::from_nanos(i as u64 * step);
        by_exact += u64::from(exact.check_n_at(key, 1, now).is_ok_and(|d| d.is_allowed()));
        by_sketch += u64::from(sketch.check_n_at(key, 1, now).is_ok_and(|d| d.is_allowed()));
    }
    (by_exact, by_sketch)
}
