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

use crate::alloc;
use crate::plot::{BarPlot, BarSeries, LinePlot, Series};
use crate::report::{Report, Spread, Table, thousands};
use std::future::Future;
use std::hint::black_box;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

/// The deadline used by the speed shapes: long enough never to fire.
pub const DEADLINE: Duration = Duration::from_secs(5);

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
        match self {
            Contender::Bare => "bare future",
            Contender::Weir => "weir-timeout",
            Contender::Tokio => "tokio::time::timeout",
            Contender::Pingora => "pingora-timeout",
        }
    }
}

/// A future that wakes itself and pends on its first poll, then is ready:
/// one trip through the scheduler, like a read that had to wait once.
#[derive(Debug, Default)]
pub struct PendOnce(bool);

impl Future for PendOnce {
    type Output = u64;
    #[inline]
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<u64> {
        if self.0 {
            Poll::Ready(1)
        } else {
            self.0 = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }
}

/// Await `fut` under `contender`'s timeout (or none); returns the value or 0.
#[inline(always)]
async fn under<F: Future<Output = u64>>(contender: Contender, fut: F) -> u64 {
    match contender {
        Contender::Bare => fut.await,
        Contender::Weir => weir_timeout::timeout(DEADLINE, fut).await.unwrap_or(0),
        Contender::Tokio => tokio::time::timeout(DEADLINE, fut).await.unwrap_or(0),
        Contender::Pingora => pingora_timeout::timeout(DEADLINE, fut).await.unwrap_or(0),
    }
}

/// The 2-worker multi-thread runtime every shape runs on.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .expect("build the tokio runtime")
}

/// Shape 1: `n` timeouts around a ready future, awaited in `block_on` on
/// the runtime (the caller's thread drives the future; the runtime's workers
/// and time driver are there). Returns the elapsed time.
pub fn ready(rt: &tokio::runtime::Runtime, contender: Contender, n: u64) -> Duration {
    rt.block_on(async move {
        let start = Instant::now();
        let mut sum = 0u64;
        for i in 0..n {
            sum += under(contender, std::future::ready(black_box(i))).await;
        }
        black_box(sum);
        start.elapsed()
    })
}

/// Shape 2: `n` timeouts around a future that pends once, in `block_on`
/// like [`ready`]: each pend is one cheap self-wake, so the timer's own
/// arm-and-cancel cost is what shows.
pub fn pend_once(rt: &tokio::runtime::Runtime, contender: Contender, n: u64) -> Duration {
    rt.block_on(async move {
        let start = Instant::now();
        let mut sum = 0u64;
        for _ in 0..n {
            sum += under(contender, black_box(PendOnce::default())).await;
        }
        black_box(sum);
        start.elapsed()
    })
}

/// Shape 2 in a spawned task on a worker: the self-wake goes through the
/// worker's run queue, and the task may move between the two workers.
pub fn pend_once_spawned(rt: &tokio::runtime::Runtime, contender: Contender, n: u64) -> Duration {
    rt.block_on(async move {
        tokio::spawn(async move { pend_once_inner(contender, n).await })
            .await
            .expect("bench task")
    })
}

async fn pend_once_inner(contender: Contender, n: u64) -> Duration {
    let start = Instant::now();
    let mut sum = 0u64;
    for _ in 0..n {
        sum += under(contender, black_box(PendOnce::default())).await;
    }
    black_box(sum);
    start.elapsed()
}

/// Shape 3: `tasks` tasks spread over both workers, each doing `n` pend-once
/// timeouts. Returns the wall time for all `tasks × n`: from the first task
/// starting its loop to the last one finishing.
pub fn contended(
    rt: &tokio::runtime::Runtime,
    contender: Contender,
    tasks: u64,
    n: u64,
) -> Duration {
    rt.block_on(async move {
        let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(tasks as usize));
        let mut handles = Vec::new();
        for _ in 0..tasks {
            let barrier = barrier.clone();
            handles.push(tokio::spawn(async move {
                barrier.wait().await;
                let start = Instant::now();
                let mut sum = 0u64;
                for _ in 0..n {
                    sum += under(contender, black_box(PendOnce::default())).await;
                }
                black_box(sum);
                (start, Instant::now())
            }));
        }
        let mut first = None::<Instant>;
        let mut last = None::<Instant>;
        for h in handles {
            let (start, end) = h.await.expect("bench task");
            first = Some(first.map_or(start, |f| f.min(start)));
            last = Some(last.map_or(end, |l| l.max(end)));
        }
        match (first, last) {
            (Some(first), Some(last)) => last - first,
            _ => Duration::ZERO,
        }
    })
}

/// Create a sleep, poll it once (arming its timer), drop it: `n` times in
/// one task. Bare: just the loop.
pub fn create_drop(rt: &tokio::runtime::Runtime, contender: Contender, n: u64) -> Duration {
    rt.block_on(async move {
        tokio::spawn(async move {
            let mut cx = Context::from_waker(Waker::noop());
            let start = Instant::now();
            for _ in 0..n {
                match contender {
                    Contender::Bare => {
                        black_box(&mut cx);
                    }
                    Contender::Weir => {
                        let mut s = weir_timeout::sleep(DEADLINE);
                        let _ = black_box(Pin::new(&mut s).poll(&mut cx));
                    }
                    Contender::Tokio => {
                        let mut s = std::pin::pin!(tokio::time::sleep(DEADLINE));
                        let _ = black_box(s.as_mut().poll(&mut cx));
                    }
                    Contender::Pingora => {
                        let mut s = std::pin::pin!(pingora_timeout::sleep(DEADLINE));
                        let _ = black_box(s.as_mut().poll(&mut cx));
                    }
                }
            }
            start.elapsed()
        })
        .await
        .expect("bench task")
    })
}

/// Heap bytes per live (armed, pending) waiter, beyond the future itself,
/// and the future's size. Arms `n` sleeps held in a pre-allocated vector.
pub fn memory_per_waiter(
    rt: &tokio::runtime::Runtime,
    contender: Contender,
    n: usize,
) -> (f64, usize) {
    fn hold<F: Future>(n: usize, make: impl Fn() -> F) -> f64 {
        let mut held: Vec<Pin<Box<F>>> = Vec::with_capacity(n);
        let mut cx = Context::from_waker(Waker::noop());
        let ((), stats) = alloc::measure(|| {
            for _ in 0..n {
                let mut f = Box::pin(make());
                let _ = f.as_mut().poll(&mut cx);
                held.push(f);
            }
        });
        let boxes = n * std::mem::size_of::<F>();
        drop(held);
        stats.peak_bytes.saturating_sub(boxes) as f64 / n as f64
    }
    rt.block_on(async move {
        tokio::spawn(async move {
            match contender {
                Contender::Bare => (0.0, 0),
                Contender::Weir => (
                    hold(n, || weir_timeout::sleep(DEADLINE)),
                    std::mem::size_of::<weir_timeout::Sleep>(),
                ),
                Contender::Tokio => (
                    hold(n, || tokio::time::sleep(DEADLINE)),
                    std::mem::size_of::<tokio::time::Sleep>(),
                ),
                Contender::Pingora => {
                    fn size_of_fut<F>(_: &F) -> usize {
                        std::mem::size_of::<F>()
                    }
                    let size = size_of_fut(&pingora_timeout::sleep(DEADLINE));
                    (hold(n, || pingora_timeout::sleep(DEADLINE)), size)
                }
            }
        })
        .await
        .expect("bench task")
    })
}

/// Lateness (actual minus requested) of sleeps of 3–99 ms: `tasks` tasks
/// each sleeping `rounds` times for pseudo-random durations. Returns the
/// sorted latenesses in microseconds; negative would mean early.
pub fn lateness(
    rt: &tokio::runtime::Runtime,
    contender: Contender,
    tasks: u64,
    rounds: u64,
) -> Vec<i64> {
    rt.block_on(async move {
        let mut handles = Vec::new();
        for t in 0..tasks {
            handles.push(tokio::spawn(async move {
                let mut x = t.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
                let mut out = Vec::new();
                for _ in 0..rounds {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let d = Duration::from_micros(3_000 + x % 96_000);
                    let start = Instant::now();
                    match contender {
                        Contender::Bare | Contender::Tokio => tokio::time::sleep(d).await,
                        Contender::Weir => weir_timeout::sleep(d).await,
                        Contender::Pingora => pingora_timeout::sleep(d).await,
                    }
                    let took = start.elapsed();
                    out.push(took.as_micros() as i64 - d.as_micros() as i64);
                }
                out
            }));
        }
        let mut all = Vec::new();
        for h in handles {
            all.extend(h.await.expect("lateness task"));
        }
        all.sort_unstable();
        all
    })
}

/// The cost of weir-timeout's `metrics` feature, which adds nothing to a
/// timer's path: ns per call of `TimerManager::metrics` (the snapshot) and
/// of `publish_metrics` (the snapshot, published into a Prometheus
/// recorder for this thread), alternating in 5 blocks of `calls / 5`, with
/// `waiters` sleeps armed over 1000 ticks of a private manager.
pub fn publish_cost_ns(waiters: usize, calls: u32) -> (f64, f64) {
    let m = weir_timeout::TimerManager::try_new(Duration::from_millis(10)).expect("valid tick");
    let mut cx = Context::from_waker(Waker::noop());
    let sleeps: Vec<_> = (0..waiters)
        .map(|i| {
            let d = DEADLINE + Duration::from_millis(10 * (i % 1000) as u64);
            let mut s = Box::pin(m.sleep(d));
            let _ = s.as_mut().poll(&mut cx);
            s
        })
        .collect();
    assert_eq!(m.metrics().waiters, waiters as u64, "every sleep armed");
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let block = (calls / 5).max(1);
    let (mut snapshot, mut published) = (Duration::ZERO, Duration::ZERO);
    metrics::with_local_recorder(&recorder, || {
        m.publish_metrics("bench");
        for _ in 0..5 {
            let start = Instant::now();
            for _ in 0..block {
                black_box(m.metrics());
            }
            snapshot += start.elapsed();
            let start = Instant::now();
            for _ in 0..block {
                black_box(m.publish_metrics("bench"));
            }
            published += start.elapsed();
        }
    });
    drop(sleeps);
    let per = |d: Duration| d.as_nanos() as f64 / f64::from(block * 5);
    (per(snapshot), per(published))
}

/// Shape 2 for weir-timeout without and with a thread publishing the
/// global manager's figures (`publish_metrics`, into a Prometheus
/// recorder) every `every` meanwhile: ns per op, each the best of 3
/// rounds of `n`.
pub fn pend_once_publishing(rt: &tokio::runtime::Runtime, n: u64, every: Duration) -> (f64, f64) {
    use std::sync::atomic::{AtomicBool, Ordering};
    let quiet = best(
        (0..3)
            .map(|_| ns_per(pend_once(rt, Contender::Weir, n), n))
            .collect(),
    );
    let stop = AtomicBool::new(false);
    let published = std::thread::scope(|scope| {
        scope.spawn(|| {
            let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
            metrics::with_local_recorder(&recorder, || {
                while !stop.load(Ordering::Relaxed) {
                    weir_timeout::TimerManager::global().publish_metrics("global");
                    std::thread::sleep(every);
                }
            });
        });
        let ns = best(
            (0..3)
                .map(|_| ns_per(pend_once(rt, Contender::Weir, n), n))
                .collect(),
        );
        stop.store(true, Ordering::Relaxed);
        ns
    });
    (quiet, published)
}

fn best(v: Vec<f64>) -> f64 {
    v.into_iter().fold(f64::INFINITY, f64::min)
}

fn ns_per(d: Duration, n: u64) -> f64 {
    d.as_nanos() as f64 / n as f64
}

fn percentile(sorted: &[i64], p: f64) -> i64 {
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

fn ms(us: i64) -> String {
    format!("{:.2}", us as f64 / 1000.0)
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
    mut shape: impl FnMut(Contender, u64) -> Duration,
) -> [f64; 4] {
    report.progress(what);
    // Warm up every contender (starts pingora's clock thread, weir's sweeper).
    for c in Contender::ALL {
        shape(c, n / 10 + 1);
    }
    let mut samples: [Vec<f64>; 4] = Default::default();
    for _ in 0..rounds {
        for (i, c) in Contender::ALL.into_iter().enumerate() {
            samples[i].push(ns_per(shape(c, n), n));
        }
    }
    samples.map(best)
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
    let n = scale.pick(50_000u64, 500_000);
    let r = scale.pick(15usize, 31);

    let ready = rounds(report, "ready future", r, n, |c, n| ready(&rt, c, n));
    let pend = rounds(report, "pend-once future", r, n, |c, n| {
        pend_once(&rt, c, n)
    });
    let pend_spawned = rounds(report, "pend-once future, spawned task", r, n, |c, n| {
        pend_once_spawned(&rt, c, n)
    });
    let tasks = 64u64;
    let per_task = scale.pick(1_000u64, 10_000);
    let cont = rounds(report, "contended, 64 tasks", r, per_task, |c, n| {
        contended(&rt, c, tasks, n)
    });
    // Per operation across all tasks.
    let cont = cont.map(|v| v / tasks as f64);

    let mut t = Table::new([
        "shape",
        "bare ns/op",
        "weir ns/op",
        "tokio ns/op",
        "pingora ns/op",
        "weir overhead",
        "tokio overhead",
        "pingora overhead",
        "weir / tokio overhead",
    ]);
    let row = |t: &mut Table, name: &str, v: [f64; 4]| {
        let over = |x: f64| x - v[0];
        t.row([
            name.to_string(),
            format!("{:.1}", v[0]),
            format!("{:.1}", v[1]),
            format!("{:.1}", v[2]),
            format!("{:.1}", v[3]),
            format!("{:.1}", over(v[1])),
            format!("{:.1}", over(v[2])),
            format!("{:.1}", over(v[3])),
            if over(v[2]) > 0.0 {
                format!("{:.2}", over(v[1]) / over(v[2]))
            } else {
                "n/a".into()
            },
        ]);
    };
    let shapes = [
        ("1. ready", ready),
        ("2. pend once", pend),
        ("2b. pend once, spawned task", pend_spawned),
        ("3. contended (64 tasks, ns per op)", cont),
    ];
    for (name, v) in shapes {
        row(&mut t, name, v);
    }
    report.table(&t);
    report.plot(
        "timeout-overhead",
        &BarPlot {
            title: "weir-timeout: overhead over the bare future by shape (best round)".into(),
            x_label: "shape".into(),
            y_label: "ns/op over the bare future".into(),
            groups: shapes.iter().map(|(name, _)| name.to_string()).collect(),
            series: Contender::ALL
                .into_iter()
                .enumerate()
                .skip(1)
                .map(|(i, c)| {
                    BarSeries::new(c.name(), shapes.iter().map(|(_, v)| Some(v[i] - v[0])))
                })
                .collect(),
            values: true,
            ..BarPlot::default()
        },
    );

    let mut t = Table::new(["contended throughput", "M ops/s", "× tokio"]);
    for (i, c) in Contender::ALL.into_iter().enumerate() {
        t.row([
            c.name().to_string(),
            format!("{:.2}", 1_000.0 / cont[i]),
            format!("{:.2}", cont[2] / cont[i]),
        ]);
    }
    report.table(&t);

    // The three goals, judged from this run.
    let met = |ok: bool| if ok { "met" } else { "NOT met" }.to_string();
    let ready_over = ready[1] - ready[0];
    let pend_ratio = (pend[1] - pend[0]) / (pend[2] - pend[0]);
    let cont_speedup = cont[2] / cont[1];
    let mut t = Table::new(["goal", "target", "this run", "verdict"]);
    t.row([
        "ready future: weir overhead over bare".to_string(),
        "≤ 2 ns".to_string(),
        format!("{ready_over:.1} ns"),
        met(ready_over <= 2.0),
    ]);
    t.row([
        "pend once: weir overhead / tokio overhead".to_string(),
        "≤ 0.25".to_string(),
        format!("{pend_ratio:.2}"),
        met(pend_ratio <= 0.25),
    ]);
    t.row([
        "contended: weir throughput / tokio".to_string(),
        "≥ 2×".to_string(),
        format!("{cont_speedup:.2}×"),
        met(cont_speedup >= 2.0),
    ]);
    report.table(&t);

    report.progress("create/drop and memory");
    let cd_n = scale.pick(50_000u64, 500_000);
    let cd = rounds(report, "create, arm, drop a bare timer", r, cd_n, |c, n| {
        create_drop(&rt, c, n)
    });
    let mem_n = scale.pick(100_000usize, 1_000_000);
    let mut t = Table::new([
        "contender",
        "create+arm+drop ns",
        "future size (bytes)",
        "heap per live waiter (bytes)",
    ]);
    for (i, c) in Contender::ALL.into_iter().enumerate().skip(1) {
        let (heap, size) = memory_per_waiter(&rt, c, mem_n);
        t.row([
            c.name().to_string(),
            format!("{:.1}", cd[i] - cd[0]),
            size.to_string(),
            format!("{heap:.1}"),
        ]);
    }
    report.table(&t);

    metrics_cost(report, &rt, n);

    let tasks = scale.pick(300u64, 1_000);
    let rounds_per_task = scale.pick(4u64, 20);
    let mut t = Table::new([
        "sleep 3–99 ms",
        "samples",
        "lateness p50 ms",
        "p99 ms",
        "max ms",
        "min ms",
    ]);
    let mut distributions = Vec::new();
    for c in [Contender::Weir, Contender::Pingora, Contender::Tokio] {
        report.progress(&format!("lateness of {}", c.name()));
        let l = lateness(&rt, c, tasks, rounds_per_task);
        distributions.push(Series::line(c.name(), cumulative_ms(&l)));
        t.row([
            c.name().to_string(),
            l.len().to_string(),
            ms(percentile(&l, 0.5)),
            ms(percentile(&l, 0.99)),
            ms(*l.last().expect("samples")),
            ms(l[0]),
        ]);
    }
    report.table(&t);
    report.text(
        "Lateness is actual minus requested sleep; a negative minimum would mean a timer \
         fired early. weir and pingora round deadlines up to a 10 ms tick; tokio's wheel has \
         1 ms resolution.",
    );
    report.plot(
        "timeout-lateness",
        &LinePlot {
            title: "weir-timeout: lateness of 3–99 ms sleeps (cumulative distribution)".into(),
            x_label: "lateness (ms): actual minus requested sleep".into(),
            y_label: "% of sleeps at most this late".into(),
            series: distributions,
            y_max: Some(100.0),
            reference: None,
        },
    );
}

/// The `metrics` feature's part of the section: what publishing costs,
/// and whether a publisher slows the pend-once shape, paired, every
/// repetition kept.
fn metrics_cost(report: &mut Report, rt: &tokio::runtime::Runtime, n: u64) {
    let spread =
        |xs: &[f64], decimals: usize| Spread::of(xs).show_each(|x| format!("{x:.decimals$}"));
    let every = Duration::from_millis(1);
    let mut pend: Vec<(f64, f64)> = Vec::new();
    let mut publish: Vec<(usize, Vec<(f64, f64)>)> = vec![(0, Vec::new()), (10_000, Vec::new())];
    for repetition in 0..5 {
        report.progress(&format!("metrics cost, repetition {} of 5", repetition + 1));
        pend.push(pend_once_publishing(rt, n, every));
        for (waiters, pairs) in &mut publish {
            pairs.push(publish_cost_ns(*waiters, 2_000));
        }
    }
    let mut t = Table::new(["weir-timeout `metrics`", "min / median / max of 5"]);
    let column = |pairs: &[(f64, f64)], f: fn(&(f64, f64)) -> f64| -> Vec<f64> {
        pairs.iter().map(f).collect()
    };
    t.row([
        "pend once, ns/op, nothing publishing".to_string(),
        spread(&column(&pend, |p| p.0), 1),
    ]);
    t.row([
        "pend once, ns/op, global manager published every 1 ms".to_string(),
        spread(&column(&pend, |p| p.1), 1),
    ]);
    t.row([
        "pend once: publishing's cost (paired difference), ns/op".to_string(),
        spread(&column(&pend, |p| p.1 - p.0), 1),
    ]);
    for (waiters, pairs) in &publish {
        let armed = if *waiters == 0 {
            "no timer armed".to_string()
        } else {
            format!("{} armed over 1000 ticks", thousands(*waiters as u64))
        };
        t.row([
            format!("`metrics()` snapshot, µs per call, {armed}"),
            spread(&column(pairs, |p| p.0 / 1e3), 2),
        ]);
        t.row([
            format!("`publish_metrics()` into a Prometheus recorder, µs per call, {armed}"),
            spread(&column(pairs, |p| p.1 / 1e3), 2),
        ]);
    }
    report.text(
        "weir-timeout's `metrics` feature adds nothing to arming, cancelling or firing a timer: \
         `TimerManager::publish_metrics` publishes the manager's own snapshot (`metrics()`, \
         which takes each thread's table lock and each armed tick's lock briefly) when called, \
         e.g. once per scrape. Its cost is therefore the call itself, and whatever the locks it \
         takes do to timers armed meanwhile: below, the pend-once shape alone and with another \
         thread publishing every 1 ms (a thousand times a typical scrape rate), paired and \
         alternated, and the call's own cost with no timer and with 10,000 sleeps armed:",
    );
    report.table(&t);
}

/// The cumulative distribution of `sorted` (µs) as points (ms, % at or
/// below), one per permille: enough for the curve at a fraction of the file.
fn cumulative_ms(sorted: &[i64]) -> Vec<(f64, f64)> {
    if sorted.is_empty() {
        return Vec::new();
    }
    (0..=1000)
        .map(|k| {
            let i = ((sorted.len() - 1) * k).div_ceil(1000);
            (
                sorted[i] as f64 / 1000.0,
                (i + 1) as f64 * 100.0 / sorted.len() as f64,
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::cumulative_ms;

    #[test]
    fn cumulative_distribution_runs_from_the_first_sample_to_all_of_them() {
        let sorted: Vec<i64> = (1..=10).map(|i| i * 1000).collect();
        let points = cumulative_ms(&sorted);
        assert_eq!(points.first(), Some(&(1.0, 10.0)));
        assert_eq!(points.last(), Some(&(10.0, 100.0)));
        assert!(
            points
                .windows(2)
                .all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1)
        );
        assert!(cumulative_ms(&[]).is_empty());
    }
}
