//! weir-timeout against `tokio::time::timeout`, the real `pingora-timeout`
//! and the bare future, on a 2-worker multi-thread tokio runtime.
//!
//! Three shapes, each timed in one task (or, for the contended shape, in many
//! tasks on both workers) and repeated in interleaved rounds so that every
//! contender sees the same machine state; the report keeps each contender's
//! best round:
//!
//! 1. **ready**: the future is ready at once (no timer should be armed);
//! 2. **pend-once**: the future wakes itself and pends once, then completes,
//!    so a lazy timer is armed and cancelled: the proxy's common case;
//! 3. **contended**: the pend-once shape in many tasks on both workers.
//!
//! Beside speed: the cost of creating, arming and dropping a bare timer,
//! the heap per live waiter, and lateness percentiles for sleeps of 3–99 ms.

mod lateness;
mod metrics;
mod shapes;

pub use shapes::{contended, pend_once, ready, runtime};

use crate::contest::{self, Goal};
use crate::plot::{BarPlot, BarSeries};
use crate::report::{Report, Table};
use shapes::{create_drop, memory_per_waiter, pend_once_spawned};
use std::time::Duration;

/// The deadline used by the speed shapes: long enough never to fire.
const DEADLINE: Duration = Duration::from_secs(5);

/// Who is being measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Contender {
    /// The future with no timeout at all.
    Bare,
    /// `weir_timeout::timeout`.
    Weir,
    /// `tokio::time::timeout`.
    Tokio,
    /// `pingora_timeout::timeout` (its `fast_timeout`).
    Pingora,
}

impl Contender {
    /// Every contender, bare first.
    pub const ALL: [Contender; 4] = [
        Contender::Bare,
        Contender::Weir,
        Contender::Tokio,
        Contender::Pingora,
    ];

    /// Display name.
    pub fn name(self) -> &'static str {
        [
            "bare future",
            "weir-timeout",
            "tokio::time::timeout",
            "pingora-timeout",
        ][self as usize]
    }
}

fn ns_per(d: Duration, n: u64) -> f64 {
    d.as_nanos() as f64 / n as f64
}

/// Best (lowest) ns/op per contender over many short interleaved rounds of
/// `shape`. The machine is shared, and interference only ever adds time, so
/// the best round is the closest to each contender's own cost; every
/// contender gets the same number of rounds, interleaved.
fn rounds(
    report: &Report,
    what: &str,
    rounds: usize,
    n: u64,
    shape: impl Fn(Contender, u64) -> Duration,
) -> [f64; 4] {
    // Warm up every contender (starts pingora's clock thread, weir's sweeper).
    Contender::ALL
        .iter()
        .for_each(|&c| _ = shape(c, n / 10 + 1));
    let samples = contest::rotate(report, what, 4, rounds, |c, _| {
        ns_per(shape(Contender::ALL[c], n), n)
    });
    [0, 1, 2, 3].map(|c| samples[c].iter().copied().fold(f64::INFINITY, f64::min))
}

/// The report section.
pub fn run(report: &mut Report) {
    let scale = report.scale();
    report.section("weir-timeout: timeouts against tokio and pingora-timeout");
    report.text(
        "Each shape runs on a 2-worker multi-thread tokio runtime, all contenders in the same \
         process, in many short interleaved rounds; figures are each contender's best round \
         (the machine is shared; interference only adds time). Overhead is the \
         contender's ns/op minus the bare future's. The deadline is 5 s and never fires. \
         Shapes 1 and 2 run in `block_on` on the runtime; 2b runs the same loop in one \
         spawned task (its self-wake goes through a worker's run queue and the task can move \
         between workers); 3 runs 64 such tasks at once.",
    );
    let rt = runtime();
    let (n, r, tasks) = (
        scale.pick(50_000u64, 500_000),
        scale.pick(15usize, 31),
        64u64,
    );
    let per_task = scale.pick(1_000u64, 10_000);
    let shapes = [
        (
            "1. ready",
            rounds(report, "ready future", r, n, |c, n| ready(&rt, c, n)),
        ),
        (
            "2. pend once",
            rounds(report, "pend-once future", r, n, |c, n| {
                pend_once(&rt, c, n)
            }),
        ),
        (
            "2b. pend once, spawned task",
            rounds(report, "pend-once future, spawned task", r, n, |c, n| {
                pend_once_spawned(&rt, c, n)
            }),
        ),
        // Per operation across all tasks.
        (
            "3. contended (64 tasks, ns per op)",
            rounds(report, "contended, 64 tasks", r, per_task, |c, n| {
                contended(&rt, c, tasks, n)
            })
            .map(|v| v / tasks as f64),
        ),
    ];
    let mut t = Table::new(
        "shape | bare ns/op | weir ns/op | tokio ns/op | pingora ns/op | weir overhead | tokio overhead | pingora overhead | weir / tokio overhead",
    );
    for (name, [bare, weir, tokio, pingora]) in shapes {
        let [weir_over, tokio_over, pingora_over] = [weir, tokio, pingora].map(|x| x - bare);
        let ratio = if tokio_over > 0.0 {
            format!("{:.2}", weir_over / tokio_over)
        } else {
            "n/a".into()
        };
        t.row(format!(
            "{name} | {bare:.1} | {weir:.1} | {tokio:.1} | {pingora:.1} | {weir_over:.1} | {tokio_over:.1} | {pingora_over:.1} | {ratio}"
        ));
    }
    report.table(&t);
    let series = Contender::ALL[1..]
        .iter()
        .enumerate()
        .map(|(i, c)| BarSeries::new(c.name(), shapes.iter().map(|(_, v)| Some(v[i + 1] - v[0]))));
    report.plot(
        "timeout-overhead",
        &BarPlot {
            title: "weir-timeout: overhead over the bare future by shape (best round)".into(),
            x_label: "shape".into(),
            y_label: "ns/op over the bare future".into(),
            groups: shapes.iter().map(|(name, _)| name.to_string()).collect(),
            series: series.collect(),
            values: true,
            ..BarPlot::default()
        },
    );
    let [ready, pend, _, cont] = shapes.map(|s| s.1);
    let mut t = Table::new("contended throughput | M ops/s | × tokio");
    for (c, ns) in Contender::ALL.iter().zip(cont) {
        t.row(format!(
            "{} | {:.2} | {:.2}",
            c.name(),
            1_000.0 / ns,
            cont[2] / ns
        ));
    }
    report.table(&t);

    // The three goals, judged from this run.
    let mut t = Table::new("goal | target | this run | verdict");
    for (goal, target, figure, shown) in [
        (
            Goal::at_most("ready future: weir overhead over bare", 2.0),
            "≤ 2 ns",
            ready[1] - ready[0],
            " ns",
        ),
        (
            Goal::at_most("pend once: weir overhead / tokio overhead", 0.25),
            "≤ 0.25",
            (pend[1] - pend[0]) / (pend[2] - pend[0]),
            "",
        ),
        (
            Goal::at_least("contended: weir throughput / tokio", 2.0),
            "≥ 2×",
            cont[2] / cont[1],
            "×",
        ),
    ] {
        let precision = if shown == " ns" { 1 } else { 2 };
        t.row(format!(
            "{} | {target} | {figure:.precision$}{shown} | {}",
            goal.name,
            goal.verdict(figure)
        ));
    }
    report.table(&t);

    let cd = rounds(report, "create, arm, drop a bare timer", r, n, |c, n| {
        create_drop(&rt, c, n)
    });
    let mem_n = scale.pick(100_000usize, 1_000_000);
    let mut t = Table::new(
        "contender | create+arm+drop ns | future size (bytes) | heap per live waiter (bytes)",
    );
    for (i, c) in Contender::ALL.into_iter().enumerate().skip(1) {
        let (heap, size) = memory_per_waiter(&rt, c, mem_n);
        t.row(format!(
            "{} | {:.1} | {size} | {heap:.1}",
            c.name(),
            cd[i] - cd[0]
        ));
    }
    report.table(&t);

    metrics::metrics_cost(report, &rt, n);
    lateness::section(report, &rt);
}
