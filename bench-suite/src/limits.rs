//! The pingora-limits blog table, reproduced and extended: per-event time of
//! weir's estimators against the real `pingora-limits` crate, weir's pingora
//! drop-in (`weir_limits::pingora`, called with keys by value exactly like
//! pingora-limits), a naive `Mutex<HashMap>` and `DashMap` (ahash), at 1, 2
//! and 8 threads on the blog's workload (1 M `u32` keys drawn uniformly,
//! events pre-generated); memory as dhat would report it; and the accuracy
//! the blog left out.

use crate::alloc::{self, AllocStats};
use crate::plot::{BarPlot, BarSeries};
use crate::report::{Report, Scale, Spread, Table, thousands};
use crate::workload;
use dashmap::DashMap;
use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use weir_limits::{Estimator, Layout, Shape, ShardedEstimator, Update};

/// The blog's dimensions: 3 hashes × 1024 slots.
pub const HASHES: usize = 3;
/// See [`HASHES`].
pub const SLOTS: usize = 1024;

/// Something that counts `u32` events, as in the blog's benchmark.
pub trait Counter: Sync {
    /// Count one more event of `key`.
    fn incr(&self, key: u32);
}

// Every sketch's `incr` is forced into the timed loop: left to itself the
// compiler inlined pingora-limits' there but called weir's out of line in
// this binary (a call and six register saves per event), which measured the
// inliner, not the counters.
impl Counter for Estimator {
    #[inline(always)]
    fn incr(&self, key: u32) {
        std::hint::black_box(Estimator::incr(self, &key, 1));
    }
}

impl Counter for ShardedEstimator {
    #[inline(always)]
    fn incr(&self, key: u32) {
        std::hint::black_box(ShardedEstimator::incr(self, &key, 1));
    }
}

// Both pingora-shaped estimators are called exactly as pingora code calls
// them (key by value), so their rows differ only in what is underneath.
impl Counter for pingora_limits::estimator::Estimator {
    #[inline(always)]
    fn incr(&self, key: u32) {
        std::hint::black_box(pingora_limits::estimator::Estimator::incr(self, key, 1));
    }
}

impl Counter for weir_limits::pingora::estimator::Estimator {
    #[inline(always)]
    fn incr(&self, key: u32) {
        std::hint::black_box(weir_limits::pingora::estimator::Estimator::incr(
            self, key, 1,
        ));
    }
}

/// The blog's "naive" counter.
#[derive(Default)]
pub struct Naive(Mutex<HashMap<u32, usize>>);

impl Counter for Naive {
    fn incr(&self, key: u32) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        *map.entry(key).or_insert(0) += 1;
    }
}

/// The blog's "optimized" counter: `DashMap` of atomics with ahash.
#[derive(Default)]
pub struct Dash(DashMap<u32, AtomicUsize, ahash::RandomState>);

impl Counter for Dash {
    fn incr(&self, key: u32) {
        if let Some(v) = self.0.get(&key) {
            v.fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.0
            .entry(key)
            .or_insert_with(|| AtomicUsize::new(0))
            .fetch_add(1, Ordering::Relaxed);
    }
}

/// One contender: a name, how to time it, and how to build it.
pub struct Contender {
    /// Name in the tables.
    pub name: &'static str,
    /// Builds a fresh counter and runs one thread per stream over it
    /// (barrier-started), calling the counter's own `incr` directly (no
    /// dynamic dispatch in the loop); returns the slowest thread's time.
    pub time: fn(&[Vec<u32>]) -> Duration,
    /// Builds a fresh, empty counter.
    pub build: fn() -> Box<dyn Counter>,
}

/// A [`Contender`] from a name and a constructor expression.
macro_rules! contender {
    ($name:expr, $build:expr) => {
        Contender {
            name: $name,
            time: |streams| time_counter(($build)(), streams),
            build: || Box::new(($build)()),
        }
    };
}

/// Time `counter` on `streams`. The counter passes through `black_box` so
/// its dimensions are run-time values, as in a server that sizes its
/// sketch from configuration, not constants folded into the loop.
fn time_counter<C: Counter>(counter: C, streams: &[Vec<u32>]) -> Duration {
    let counter = std::hint::black_box(counter);
    run_threads(&counter, streams)
}

/// weir's estimator variants and the three competitors, at the blog's dimensions.
pub fn contenders() -> Vec<Contender> {
    vec![
        contender!("weir Estimator (rows, plain: default)", || weir(
            Layout::Rows,
            Update::Plain
        )),
        contender!("weir Estimator (rows, conservative)", || weir(
            Layout::Rows,
            Update::Conservative
        )),
        contender!("weir Estimator (blocked, plain)", || weir(
            Layout::Blocked,
            Update::Plain
        )),
        contender!("weir ShardedEstimator", || ShardedEstimator::new(shape(
            Layout::Rows
        ))),
        contender!(PINGORA, || pingora_limits::estimator::Estimator::new(
            HASHES, SLOTS
        )),
        contender!("weir_limits::pingora Estimator (drop-in)", || {
            weir_limits::pingora::estimator::Estimator::new(HASHES, SLOTS)
        }),
        contender!("naive Mutex<HashMap>", Naive::default),
        contender!("DashMap (ahash)", Dash::default),
    ]
}

/// The anchor every ratio is taken against.
const PINGORA: &str = "pingora-limits Estimator";

fn weir(layout: Layout, update: Update) -> Estimator {
    Estimator::with_update(shape(layout), update)
}

/// The blog's dimensions in `layout`.
fn shape(layout: Layout) -> Shape {
    Shape::try_new(HASHES, SLOTS, layout).expect("the blog's dimensions are valid")
}

/// Run `counter` with one thread per stream (each with its own slice of
/// pre-generated keys); returns the wall time of the slowest thread.
pub fn run_threads<C: Counter + ?Sized>(counter: &C, streams: &[Vec<u32>]) -> Duration {
    workload::run_streams(streams, |key| {
        counter.incr(key);
        false
    })
    .0
}

/// The thread counts of the blog's table.
const THREADS: [usize; 3] = [1, 2, 8];

/// Every contender's timings: `[contender][thread count][repetition]`.
struct Timings(Vec<[Vec<Duration>; 3]>);

impl Timings {
    /// ns per event per thread (the blog's figure) in each repetition.
    fn per_event_ns(&self, c: usize, t: usize, total: usize) -> Vec<f64> {
        let per_thread = (total / THREADS[t]) as f64;
        self.0[c][t]
            .iter()
            .map(|d| d.as_nanos() as f64 / per_thread)
            .collect()
    }

    /// `a`'s time over `b`'s, repetition by repetition (each pair ran back
    /// to back, so both saw the same machine).
    fn time_ratio(&self, a: usize, b: usize, t: usize) -> Vec<f64> {
        self.0[a][t]
            .iter()
            .zip(&self.0[b][t])
            .map(|(x, y)| x.as_secs_f64() / y.as_secs_f64())
            .collect()
    }

    /// Total throughput with 2 threads over that with 1, per repetition.
    fn scaling(&self, c: usize) -> Vec<f64> {
        // 2 threads do the same total work as 1: throughput ∝ 1 / time.
        self.0[c][0]
            .iter()
            .zip(&self.0[c][1])
            .map(|(one, two)| one.as_secs_f64() / two.as_secs_f64())
            .collect()
    }
}

/// The report section.
pub fn run(report: &mut Report) {
    let scale = report.scale();
    let total: usize = scale.pick(4_000_000, 16_000_000);
    let repetitions: usize = scale.pick(3, 5);
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
    let streams: Vec<Vec<Vec<u32>>> = THREADS
        .iter()
        .map(|&t| {
            (0..t)
                .map(|i| workload::uniform(total / t, 1000 + i as u64))
                .collect()
        })
        .collect();

    let contenders = contenders();
    let n = contenders.len();
    let mut timings = Timings((0..n).map(|_| Default::default()).collect());
    let mut memory = vec![AllocStats::default(); n];
    for (t, threads) in THREADS.iter().enumerate() {
        for repetition in 0..repetitions {
            report.progress(&format!(
                "{threads} thread(s), repetition {}/{repetitions}",
                repetition + 1
            ));
            for offset in 0..n {
                let c = (repetition + offset) % n;
                let elapsed = if t == 0 && repetition == 0 {
                    let (elapsed, stats) = alloc::measure(|| (contenders[c].time)(&streams[t]));
                    memory[c] = stats;
                    elapsed
                } else {
                    (contenders[c].time)(&streams[t])
                };
                timings.0[c][t].push(elapsed);
            }
        }
    }

    let pingora = contenders
        .iter()
        .position(|c| c.name == PINGORA)
        .expect("pingora-limits is a contender");
    let mut table = Table::new([
        "counter",
        "1 thread ns/event",
        "2 threads ns/event",
        "8 threads ns/event",
        "time / pingora's (1 thread)",
        "throughput × pingora (2 threads)",
        "2-thread / 1-thread throughput",
        "peak bytes",
        "allocations",
        "total bytes",
    ]);
    for (c, contender) in contenders.iter().enumerate() {
        let throughput_2t: Vec<f64> = timings
            .time_ratio(c, pingora, 1)
            .iter()
            .map(|r| 1.0 / r)
            .collect();
        table.row([
            contender.name.to_string(),
            Spread::of(&timings.per_event_ns(c, 0, total)).show(1),
            Spread::of(&timings.per_event_ns(c, 1, total)).show(1),
            Spread::of(&timings.per_event_ns(c, 2, total)).show(1),
            Spread::of(&timings.time_ratio(c, pingora, 0)).show(2),
            Spread::of(&throughput_2t).show(2),
            Spread::of(&timings.scaling(c)).show(2),
            thousands(memory[c].peak_bytes as u64),
            thousands(memory[c].allocations as u64),
            thousands(memory[c].total_bytes as u64),
        ]);
    }
    report.table(&table);
    report.plot(
        "limits-ns-per-event",
        &BarPlot {
            title:
                "weir-limits: ns per event by counter and thread count (median, min–max; log scale)"
                    .into(),
            x_label: "threads counting at once".into(),
            y_label: "ns/event per thread".into(),
            groups: THREADS
                .iter()
                .map(|&t| format!("{t} thread{}", if t == 1 { "" } else { "s" }))
                .collect(),
            series: contenders
                .iter()
                .enumerate()
                .map(|(c, contender)| {
                    BarSeries::new(
                        contender.name,
                        (0..THREADS.len())
                            .map(|t| Some(Spread::of(&timings.per_event_ns(c, t, total)))),
                    )
                })
                .collect(),
            // On a linear axis the locked maps' bars would flatten the
            // sketches' into slivers.
            log_y: true,
            ..BarPlot::default()
        },
    );
    let contention = Spread::of(&timings.scaling(pingora));
    report.text(&format!(
        "pingora-limits' own 2-thread/1-thread throughput this run: **{}** ({}). \
         The two-thread goals are judged on runs where it is below 0.5.",
        contention.show(2),
        if contention.median < 0.5 {
            "the cores bounce cache lines expensively: the contended case"
        } else {
            "cross-core traffic was cheap on this placement: not the contended case"
        }
    ));
    goals(
        report,
        &contenders,
        &timings,
        pingora,
        contention.median < 0.5,
    );

    accuracy(report, scale);
}

/// The goals for the two always-on estimators, judged in this run.
fn goals(
    report: &mut Report,
    contenders: &[Contender],
    timings: &Timings,
    pingora: usize,
    contended: bool,
) {
    let find = |prefix: &str| {
        contenders
            .iter()
            .position(|c| c.name.starts_with(prefix))
            .expect("a weir contender")
    };
    let estimator = find("weir Estimator (rows, plain");
    let sharded = find("weir ShardedEstimator");
    let mut table = Table::new(["goal", "this run: median (min–max)", "verdict"]);
    // `at_most`: lower is better. A goal is met when the median meets it,
    // and the verdict says whether every repetition did.
    let mut judge = |goal: &str, values: Vec<f64>, bound: f64, at_most: bool, applies: bool| {
        let s = Spread::of(&values);
        let ok = |x: f64| if at_most { x <= bound } else { x >= bound };
        let verdict = if !applies {
            "not judged (uncontended run)"
        } else if ok(s.min) && ok(s.max) {
            "met in every repetition"
        } else if ok(s.median) {
            "met at the median, not in every repetition"
        } else {
            "not met"
        };
        table.row([goal.to_string(), s.show(2), verdict.to_string()]);
    };
    judge(
        "Estimator time / pingora's, 1 thread ≤ 1.0",
        timings.time_ratio(estimator, pingora, 0),
        1.0,
        true,
        true,
    );
    judge(
        "ShardedEstimator time / pingora's, 1 thread ≤ 0.6",
        timings.time_ratio(sharded, pingora, 0),
        0.6,
        true,
        true,
    );
    let throughput = |c: usize| -> Vec<f64> {
        timings
            .time_ratio(c, pingora, 1)
            .iter()
            .map(|r| 1.0 / r)
            .collect()
    };
    judge(
        "Estimator throughput × pingora's, 2 threads ≥ 3",
        throughput(estimator),
        3.0,
        false,
        contended,
    );
    judge(
        "ShardedEstimator throughput × pingora's, 2 threads ≥ 8",
        throughput(sharded),
        8.0,
        false,
        contended,
    );
    judge(
        "ShardedEstimator 2-thread / 1-thread throughput ≥ 1.8",
        timings.scaling(sharded),
        1.8,
        false,
        true,
    );
    report.table(&table);
}

/// Mean and max overestimate over every key that occurred.
struct Accuracy {
    mean: f64,
    max: i64,
    exact: f64,
}

fn accuracy_of(estimate: impl Fn(u32) -> i64, truth: &HashMap<u32, i64>) -> Accuracy {
    let mut sum = 0.0;
    let mut max = 0;
    let mut exact = 0usize;
    for (&key, &count) in truth {
        let over = estimate(key) - count;
        assert!(over >= 0, "a count-min estimate fell below the truth");
        sum += over as f64;
        max = max.max(over);
        exact += usize::from(over == 0);
    }
    Accuracy {
        mean: sum / truth.len() as f64,
        max,
        exact: exact as f64 / truth.len() as f64,
    }
}

fn accuracy(report: &mut Report, scale: Scale) {
    let events: usize = scale.pick(4_000_000, 20_000_000);
    report.section("weir-limits: accuracy at equal memory");
    report.text(&format!(
        "Overestimate (estimate − true count) over every key that occurred, for {} events over {} keys: \
         uniform and Zipf (s = 1.1). Every sketch of a row has the same number of counters.",
        thousands(events as u64),
        thousands(u64::from(workload::KEYS))
    ));
    let streams = [
        ("uniform", workload::uniform(events, 7)),
        ("Zipf 1.1", workload::zipf(events, 1.1, 7)),
    ];
    let mut table = Table::new([
        "stream",
        "dimensions",
        "sketch",
        "mean overestimate",
        "max overestimate",
        "keys exact",
    ]);
    for (stream, keys) in &streams {
        let mut truth: HashMap<u32, i64> = HashMap::new();
        for &k in keys {
            *truth.entry(k).or_default() += 1;
        }
        for (hashes, slots) in [(HASHES, SLOTS), (4, 1 << 16)] {
            report.progress(&format!("accuracy {stream} {hashes}x{slots}"));
            let variants: [(&str, Layout, Update); 4] = [
                ("weir rows, plain", Layout::Rows, Update::Plain),
                (
                    "weir rows, conservative",
                    Layout::Rows,
                    Update::Conservative,
                ),
                ("weir blocked, plain", Layout::Blocked, Update::Plain),
                (
                    "weir blocked, conservative",
                    Layout::Blocked,
                    Update::Conservative,
                ),
            ];
            for (name, layout, update) in variants {
                let shape = Shape::try_new(hashes, slots, layout).expect("valid dimensions");
                let e = Estimator::with_update(shape.with_seed(99), update);
                for &k in keys {
                    e.incr(&k, 1);
                }
                let a = accuracy_of(|k| e.get(&k) as i64, &truth);
                table.row(row(stream, hashes, slots, name, &a));
            }
            let p = pingora_limits::estimator::Estimator::new(hashes, slots);
            for &k in keys {
                p.incr(k, 1);
            }
            let a = accuracy_of(|k| p.get(k) as i64, &truth);
            table.row(row(stream, hashes, slots, "pingora-limits", &a));
        }
    }
    report.table(&table);
}

fn row(stream: &str, hashes: usize, slots: usize, name: &str, a: &Accuracy) -> Vec<String> {
    vec![
        stream.to_string(),
        format!("{hashes} × {slots}"),
        name.to_string(),
        format!("{:.1}", a.mean),
        thousands(a.max as u64),
        format!("{:.1}%", a.exact * 100.0),
    ]
}
