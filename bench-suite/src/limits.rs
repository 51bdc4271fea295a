//! The pingora-limits blog table, reproduced and extended: per-event time of
//! weir's estimators against the real `pingora-limits` crate, weir's pingora
//! drop-in (`weir_limits::pingora`, called with keys by value exactly like
//! pingora-limits), a naive `Mutex<HashMap>` and `DashMap` (ahash), at 1, 2
//! and 8 threads on the blog's workload (1 M `u32` keys drawn uniformly,
//! events pre-generated); memory as dhat would report it; and the accuracy
//! the blog left out.

use crate::alloc::{self, AllocStats};
use crate::report::{Report, Scale, Table, thousands};
use crate::workload;
use dashmap::DashMap;
use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use weir_limits::sketch::Layout;
use weir_limits::{Estimator, ShardedEstimator, Update};

/// The blog's dimensions: 3 hashes × 1024 slots.
pub const HASHES: usize = 3;
/// See [`HASHES`].
pub const SLOTS: usize = 1024;

/// Something that counts `u32` events, as in the blog's benchmark.
pub trait Counter: Sync {
    /// Count one more event of `key`.
    fn incr(&self, key: u32);
}

impl Counter for Estimator {
    #[inline]
    fn incr(&self, key: u32) {
        std::hint::black_box(Estimator::incr(self, &key, 1));
    }
}

impl Counter for ShardedEstimator {
    #[inline]
    fn incr(&self, key: u32) {
        std::hint::black_box(ShardedEstimator::incr(self, &key, 1));
    }
}

// Both pingora-shaped estimators are called exactly as pingora code calls
// them (key by value), so their rows differ only in what is underneath.
impl Counter for pingora_limits::estimator::Estimator {
    #[inline]
    fn incr(&self, key: u32) {
        std::hint::black_box(pingora_limits::estimator::Estimator::incr(self, key, 1));
    }
}

impl Counter for weir_limits::pingora::estimator::Estimator {
    #[inline]
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

/// One contender: a name and how to build it.
pub struct Contender {
    /// Name in the tables.
    pub name: &'static str,
    /// Builds a fresh, empty counter.
    pub build: fn() -> Box<dyn Counter>,
}

/// weir's estimator variants and the three competitors, at the blog's dimensions.
pub fn contenders() -> Vec<Contender> {
    vec![
        Contender {
            name: "weir Estimator (rows, plain: default)",
            build: || Box::new(weir(Layout::Rows, Update::Plain)),
        },
        Contender {
            name: "weir Estimator (rows, conservative)",
            build: || Box::new(weir(Layout::Rows, Update::Conservative)),
        },
        Contender {
            name: "weir Estimator (blocked, plain)",
            build: || Box::new(weir(Layout::Blocked, Update::Plain)),
        },
        Contender {
            name: "weir ShardedEstimator",
            build: || Box::new(ShardedEstimator::new(HASHES, SLOTS)),
        },
        Contender {
            name: "pingora-limits Estimator",
            build: || Box::new(pingora_limits::estimator::Estimator::new(HASHES, SLOTS)),
        },
        Contender {
            name: "weir_limits::pingora Estimator (drop-in)",
            build: || {
                Box::new(weir_limits::pingora::estimator::Estimator::new(
                    HASHES, SLOTS,
                ))
            },
        },
        Contender {
            name: "naive Mutex<HashMap>",
            build: || Box::new(Naive::default()),
        },
        Contender {
            name: "DashMap (ahash)",
            build: || Box::new(Dash::default()),
        },
    ]
}

fn weir(layout: Layout, update: Update) -> Estimator {
    Estimator::builder()
        .hashes(HASHES)
        .slots(SLOTS)
        .layout(layout)
        .update(update)
        .build()
        .expect("the blog's dimensions are valid")
}

/// Run `events` split over `threads` threads (each with its own slice of
/// pre-generated keys); returns the wall time of the slowest thread.
pub fn run_threads(counter: &dyn Counter, streams: &[Vec<u32>]) -> Duration {
    workload::run_streams(streams, |key| {
        counter.incr(key);
        false
    })
    .0
}

struct Speed {
    per_event_ns: [f64; 3],
    throughput: [f64; 3],
    memory: AllocStats,
}

/// The report section.
pub fn run(report: &mut Report) {
    let scale = report.scale();
    let total: usize = scale.pick(8_000_000, 100_000_000);
    report.section("weir-limits: the pingora-limits blog table");
    report.text(&format!(
        "{} events over {} uniformly drawn `u32` keys, pre-generated; dimensions {HASHES} hashes × {SLOTS} slots for every sketch. \
         ns/event is per thread (wall time of a thread / its events), as in the blog; the throughput columns are total events per second.",
        thousands(total as u64),
        thousands(u64::from(workload::KEYS))
    ));
    let thread_counts = [1usize, 2, 8];
    let streams: Vec<Vec<Vec<u32>>> = thread_counts
        .iter()
        .map(|&t| {
            (0..t)
                .map(|i| workload::uniform(total / t, 1000 + i as u64))
                .collect()
        })
        .collect();

    let mut results = Vec::new();
    for contender in contenders() {
        report.progress(contender.name);
        let mut speed = Speed {
            per_event_ns: [0.0; 3],
            throughput: [0.0; 3],
            memory: AllocStats::default(),
        };
        for (i, threads) in thread_counts.iter().enumerate() {
            let (elapsed, stats) = alloc::measure(|| {
                let counter = (contender.build)();
                run_threads(counter.as_ref(), &streams[i])
            });
            if *threads == 1 {
                speed.memory = stats;
            }
            let per_thread = (total / threads) as f64;
            speed.per_event_ns[i] = elapsed.as_nanos() as f64 / per_thread;
            speed.throughput[i] = total as f64 / elapsed.as_secs_f64();
        }
        results.push((contender.name, speed));
    }

    let pingora = results
        .iter()
        .find(|(n, _)| n.starts_with("pingora"))
        .map(|(_, s)| s.throughput)
        .unwrap_or([1.0; 3]);
    let mut table = Table::new([
        "counter",
        "1 thread ns/event",
        "2 threads ns/event",
        "8 threads ns/event",
        "2-thread total / 1-thread",
        "× pingora (1 thread)",
        "× pingora (2 threads)",
        "peak bytes",
        "allocations",
        "total bytes",
    ]);
    for (name, s) in &results {
        table.row([
            name.to_string(),
            format!("{:.1}", s.per_event_ns[0]),
            format!("{:.1}", s.per_event_ns[1]),
            format!("{:.1}", s.per_event_ns[2]),
            format!("{:.2}", s.throughput[1] / s.throughput[0]),
            format!("{:.2}", s.throughput[0] / pingora[0]),
            format!("{:.2}", s.throughput[1] / pingora[1]),
            thousands(s.memory.peak_bytes as u64),
            thousands(s.memory.allocations as u64),
            thousands(s.memory.total_bytes as u64),
        ]);
    }
    report.table(&table);
    let ratio = pingora[1] / pingora[0];
    report.text(&format!(
        "pingora-limits' own 2-thread/1-thread throughput ratio this run: **{ratio:.2}** ({}). \
         The two-thread goals are judged on runs where it is below 0.5.",
        if ratio < 0.5 {
            "the cores bounce cache lines expensively: the contended case"
        } else {
            "cross-core traffic was cheap on this placement: not the contended case"
        }
    ));

    accuracy(report, scale);
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
                let e = Estimator::builder()
                    .hashes(hashes)
                    .slots(slots)
                    .layout(layout)
                    .update(update)
                    .seed(99)
                    .build()
                    .expect("valid dimensions");
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
