//! The pingora-limits blog table, reproduced and extended: per-event time of
//! weir's estimators against the real `pingora-limits` crate, weir's pingora
//! drop-in (called with keys by value exactly like pingora-limits), a naive
//! `Mutex<HashMap>` and `DashMap` (ahash), at 1, 2 and 8 threads on the
//! blog's workload (1 M uniformly drawn `u32` keys, pre-generated); memory
//! as dhat would report it; and the accuracy the blog left out.

use crate::harness::contest::{self, Goal, Spread};
use crate::harness::plot::{BarPlot, BarSeries};
use crate::harness::report::{Report, Table, thousands};
use crate::harness::workload;
use dashmap::DashMap;
use std::collections::HashMap;
use std::hint::black_box;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use weir_limits::{Estimator, Layout, Shape, ShardedEstimator, Update};

/// The blog's dimensions: 3 hashes × 1024 slots.
const HASHES: usize = 3;
const SLOTS: usize = 1024;

/// Something that counts `u32` events, as in the blog's benchmark.
pub trait Counter: Sync {
    /// Count one more event of `key`.
    fn incr(&self, key: u32);
}

// Every sketch's `incr` is forced into the timed loop: left to itself the
// compiler inlined pingora-limits' there but called weir's out of line in
// this binary (a call and six register saves per event), which measured the
// inliner, not the counters. Both pingora-shaped estimators take the key by
// value, as pingora code calls them.
macro_rules! sketch {
    ($($t:ty: |$s:ident, $k:ident| $incr:expr;)*) => {$(
        impl Counter for $t {
            #[inline(always)]
            fn incr(&self, $k: u32) {
                let $s = self;
                black_box($incr);
            }
        }
    )*};
}

sketch! {
    Estimator: |s, k| s.incr(&k, 1);
    ShardedEstimator: |s, k| s.incr(&k, 1);
    pingora_limits::estimator::Estimator: |s, k| s.incr(k, 1);
    weir_limits::pingora::estimator::Estimator: |s, k| s.incr(k, 1);
}

/// The blog's "naive" counter.
#[derive(Default)]
struct Naive(Mutex<HashMap<u32, usize>>);

impl Counter for Naive {
    fn incr(&self, key: u32) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        *map.entry(key).or_insert(0) += 1;
    }
}

/// The blog's "optimized" counter: `DashMap` of atomics with ahash.
#[derive(Default)]
struct Dash(DashMap<u32, AtomicUsize, ahash::RandomState>);

impl Counter for Dash {
    fn incr(&self, key: u32) {
        match self.0.get(&key) {
            Some(v) => v.fetch_add(1, Ordering::Relaxed),
            None => self
                .0
                .entry(key)
                .or_default()
                .fetch_add(1, Ordering::Relaxed),
        };
    }
}

/// One contender: a name, how to time it, and how to build it.
pub struct Contender {
    /// Name in the tables.
    pub name: &'static str,
    /// Runs one barrier-started thread per stream over a fresh counter,
    /// calling its own `incr` (no dynamic dispatch in the loop); the
    /// slowest thread's time.
    time: fn(&[Vec<u32>]) -> Duration,
    /// Builds a fresh, empty counter.
    pub build: fn() -> Box<dyn Counter>,
}

/// [`Contender`]s from names and constructor expressions. The counter
/// passes through `black_box` so its dimensions are run-time values, as in
/// a server that sizes its sketch from configuration.
macro_rules! contenders {
    ($($name:expr => $build:expr,)*) => {
        vec![$(Contender {
            name: $name,
            time: |streams| {
                let counter = black_box(($build)());
                contest::run_streams(streams, |key| { Counter::incr(&counter, key); false }).0
            },
            build: || Box::new(($build)()),
        },)*]
    };
}

/// The anchor every ratio is taken against.
const PINGORA: &str = "pingora-limits Estimator";

/// weir's estimator variants and the three competitors, at the blog's dimensions.
pub fn contenders() -> Vec<Contender> {
    contenders![
        "weir Estimator (rows, plain: default)" => || weir(Layout::Rows, Update::Plain),
        "weir Estimator (rows, conservative)" => || weir(Layout::Rows, Update::Conservative),
        "weir Estimator (blocked, plain)" => || weir(Layout::Blocked, Update::Plain),
        "weir ShardedEstimator" => || ShardedEstimator::new(shape(Layout::Rows)),
        PINGORA => || pingora_limits::estimator::Estimator::new(HASHES, SLOTS),
        "weir_limits::pingora Estimator (drop-in)" => || weir_limits::pingora::estimator::Estimator::new(HASHES, SLOTS),
        "naive Mutex<HashMap>" => Naive::default,
        "DashMap (ahash)" => Dash::default,
    ]
}

fn weir(layout: Layout, update: Update) -> Estimator {
    Estimator::with_update(shape(layout), update)
}

/// The blog's dimensions in `layout`.
fn shape(layout: Layout) -> Shape {
    Shape::try_new(HASHES, SLOTS, layout).expect("the blog's dimensions are valid")
}

/// The thread counts of the blog's table.
const THREADS: [usize; 3] = [1, 2, 8];

/// The report section.
pub fn run(report: &mut Report) {
    let scale = report.scale();
    let (total, repetitions): (usize, usize) =
        (scale.pick(4_000_000, 16_000_000), scale.pick(3, 5));
    report.section("weir-limits: the pingora-limits blog table");
    report.text(&format!(
        "{} events over {} uniformly drawn `u32` keys, pre-generated; dimensions {HASHES} hashes × {SLOTS} slots for every sketch. \
         Each figure is the median (min–max) of {repetitions} repetitions; within a repetition the contenders run back to back \
         (the order rotating between repetitions), each on a fresh counter, its threads released together by a barrier, \
         calling the counter's own `incr` (pingora's takes the key by value). ns/event is per thread (wall time of a thread / its events), \
         as in the blog; ratios to pingora-limits pair each repetition with pingora's in the same repetition.",
        thousands(total as u64),
        thousands(u64::from(workload::KEYS))
    ));
    let contenders = contenders();
    let sets: Vec<Vec<Vec<u32>>> = THREADS
        .map(|n| {
            (0..n)
                .map(|i| workload::uniform(total / n, 1000 + i as u64))
                .collect()
        })
        .into();
    let what = |t: usize| format!("{} thread(s)", THREADS[t]);
    let (ns, memory) = contest::per_thread_ns(
        report,
        what,
        contenders.len(),
        repetitions,
        &sets,
        |c, s| ((contenders[c].time)(s), 0),
    );
    let p = contenders
        .iter()
        .position(|c| c.name == PINGORA)
        .expect("pingora-limits is a contender");
    // Time over pingora's on one thread; throughput over pingora's on two;
    // two threads' throughput over one's (each does the same total work).
    let time_1t = |c: usize| contest::paired(&ns[0][c], &ns[0][p]);
    let throughput_2t = |c: usize| contest::paired(&ns[1][p], &ns[1][c]);
    let scaling = |c: usize| {
        contest::paired(&ns[0][c], &ns[1][c])
            .iter()
            .map(|r| 2.0 * r)
            .collect::<Vec<_>>()
    };
    let mut table = Table::new(
        "counter | 1 thread ns/event | 2 threads ns/event | 8 threads ns/event | time / pingora's (1 thread) \
         | throughput × pingora (2 threads) | 2-thread / 1-thread throughput | peak bytes | allocations | total bytes",
    );
    for (c, contender) in contenders.iter().enumerate() {
        let m = memory[c].0;
        let bytes = [m.peak_bytes, m.allocations, m.total_bytes].map(|n| thousands(n as u64));
        let spreads = ns.iter().map(|ns| Spread::of(&ns[c]).show(1));
        let ratios = [time_1t(c), throughput_2t(c), scaling(c)].map(|v| Spread::of(&v).show(2));
        table.cells(
            [contender.name.to_owned()]
                .into_iter()
                .chain(spreads)
                .chain(ratios)
                .chain(bytes),
        );
    }
    report.table(&table);
    let series = contenders.iter().enumerate().map(|(c, contender)| {
        BarSeries::new(contender.name, ns.iter().map(|ns| Some(Spread::of(&ns[c]))))
    });
    let groups = THREADS.map(|t| format!("{t} thread{}", if t == 1 { "" } else { "s" }));
    let title =
        "weir-limits: ns per event by counter and thread count (median, min–max; log scale)";
    let plot = BarPlot::new(
        title,
        "threads counting at once",
        "ns/event per thread",
        groups.into(),
        series.collect(),
    );
    // On a linear axis the locked maps' bars would flatten the sketches'.
    report.plot(
        "limits-ns-per-event",
        &BarPlot {
            log_y: true,
            values: false,
            ..plot
        },
    );
    let contention = Spread::of(&scaling(p));
    let contended = contention.median < 0.5;
    report.text(&format!(
        "pingora-limits' own 2-thread/1-thread throughput this run: **{}** ({}). \
         The two-thread goals are judged on runs where it is below 0.5.",
        contention.show(2),
        if contended {
            "the cores bounce cache lines expensively: the contended case"
        } else {
            "cross-core traffic was cheap on this placement: not the contended case"
        }
    ));
    let find = |prefix: &str| {
        contenders
            .iter()
            .position(|c| c.name.starts_with(prefix))
            .expect("a weir contender")
    };
    let (estimator, sharded) = (
        find("weir Estimator (rows, plain"),
        find("weir ShardedEstimator"),
    );
    let mut goals = Table::new("goal | this run: median (min–max) | verdict");
    for (goal, values, applies) in [
        (
            Goal::at_most("Estimator time / pingora's, 1 thread ≤ 1.0", 1.0),
            time_1t(estimator),
            true,
        ),
        (
            Goal::at_most("ShardedEstimator time / pingora's, 1 thread ≤ 0.6", 0.6),
            time_1t(sharded),
            true,
        ),
        (
            Goal::at_least("Estimator throughput × pingora's, 2 threads ≥ 3", 3.0),
            throughput_2t(estimator),
            contended,
        ),
        (
            Goal::at_least(
                "ShardedEstimator throughput × pingora's, 2 threads ≥ 8",
                8.0,
            ),
            throughput_2t(sharded),
            contended,
        ),
        (
            Goal::at_least("ShardedEstimator 2-thread / 1-thread throughput ≥ 1.8", 1.8),
            scaling(sharded),
            true,
        ),
    ] {
        let [figure, mut verdict] = goal.judge(&values);
        if !applies {
            verdict = "not judged (uncontended run)".into();
        }
        goals.cells([goal.name.into(), figure, verdict]);
    }
    report.table(&goals);
    accuracy(report);
}

/// Overestimates (estimate − true count) over every key that occurred:
/// (mean, max, share of keys exact).
fn overestimates(estimate: impl Fn(u32) -> i64, truth: &HashMap<u32, i64>) -> (f64, i64, f64) {
    let over: Vec<i64> = truth
        .iter()
        .map(|(&key, &count)| estimate(key) - count)
        .collect();
    assert!(
        over.iter().all(|&o| o >= 0),
        "a count-min estimate fell below the truth"
    );
    let n = over.len() as f64;
    let exact = over.iter().filter(|&&o| o == 0).count() as f64;
    let max = over.iter().copied().max().unwrap_or(0);
    (over.iter().sum::<i64>() as f64 / n, max, exact / n)
}

fn accuracy(report: &mut Report) {
    let events: usize = report.scale().pick(4_000_000, 20_000_000);
    report.section("weir-limits: accuracy at equal memory");
    report.text(&format!(
        "Overestimate (estimate − true count) over every key that occurred, for {} events over {} keys: \
         uniform and Zipf (s = 1.1). Every sketch of a row has the same number of counters.",
        thousands(events as u64),
        thousands(u64::from(workload::KEYS))
    ));
    let mut table = Table::new(
        "stream | dimensions | sketch | mean overestimate | max overestimate | keys exact",
    );
    for (stream, keys) in [
        ("uniform", workload::uniform(events, 7)),
        ("Zipf 1.1", workload::zipf(events, 1.1, 7)),
    ] {
        let mut truth: HashMap<u32, i64> = HashMap::new();
        keys.iter().for_each(|&k| *truth.entry(k).or_default() += 1);
        for (hashes, slots) in [(HASHES, SLOTS), (4, 1 << 16)] {
            report.progress(&format!("accuracy {stream} {hashes}x{slots}"));
            let mut row = |name: &str, (mean, max, exact): (f64, i64, f64)| {
                let (max, exact) = (thousands(max as u64), exact * 100.0);
                table.row(format!(
                    "{stream} | {hashes} × {slots} | {name} | {mean:.1} | {max} | {exact:.1}%"
                ));
            };
            for (layout, update) in [Layout::Rows, Layout::Blocked]
                .into_iter()
                .flat_map(|l| [(l, Update::Plain), (l, Update::Conservative)])
            {
                let shape = Shape::try_new(hashes, slots, layout).expect("valid dimensions");
                let e = Estimator::with_update(shape.with_seed(99), update);
                keys.iter().for_each(|k| _ = e.incr(k, 1));
                let name = format!("weir {layout:?}, {update:?}").to_lowercase();
                row(&name, overestimates(|k| e.get(&k) as i64, &truth));
            }
            let p = pingora_limits::estimator::Estimator::new(hashes, slots);
            keys.iter().for_each(|&k| _ = p.incr(k, 1));
            row("pingora-limits", overestimates(|k| p.get(k) as i64, &truth));
        }
    }
    report.table(&table);
}
