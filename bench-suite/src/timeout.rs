//! weir-timeout against `tokio::time::timeout`, the real `pingora-timeout`
//! and the bare future, on a 2-worker multi-thread tokio runtime: a ready
//! future (no timer should be armed), a future that pends once (a lazy
//! timer armed and cancelled: the proxy's common case) in `block_on`, in a
//! spawned task and in many tasks at once; a bare timer created, armed and
//! dropped; the heap per live waiter; the `metrics` feature's cost; and how
//! late sleeps of 3–99 ms fire.

use crate::harness::contest::{self, Goal};
use crate::harness::plot::{BarPlot, BarSeries, LinePlot, Series};
use crate::harness::report::{Report, Table, thousands};
use crate::harness::{alloc, workload};
use std::future::Future;
use std::hint::black_box;
use std::pin::{Pin, pin};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};
use tokio::runtime::Runtime;

/// The deadline of the speed shapes: long enough never to fire.
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
    pub const ALL: [Contender; 4] = [Self::Bare, Self::Weir, Self::Tokio, Self::Pingora];

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

/// `$body` with `sleep` and `timeout` naming the contender's own, or
/// `$bare` for the bare future.
macro_rules! with_timer {
    ($contender:expr, $bare:expr, $body:expr) => {
        match $contender {
            Contender::Bare => $bare,
            Contender::Weir => {
                #[allow(unused_imports)]
                use weir_timeout::{sleep, timeout};
                $body
            }
            Contender::Tokio => {
                #[allow(unused_imports)]
                use tokio::time::{sleep, timeout};
                $body
            }
            Contender::Pingora => {
                #[allow(unused_imports)]
                use pingora_timeout::{sleep, timeout};
                $body
            }
        }
    };
}

/// A future that wakes itself and pends on its first poll, then is ready:
/// one trip through the scheduler, like a read that had to wait once.
#[derive(Debug, Default)]
struct PendOnce(bool);

impl Future for PendOnce {
    type Output = u64;
    #[inline]
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<u64> {
        if std::mem::replace(&mut self.0, true) {
            return Poll::Ready(1);
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

/// `n` awaits of `make(i)` under `contender`'s timeout, one after another;
/// when they started and how long they took.
async fn timed<F: Future<Output = u64>>(
    contender: Contender,
    n: u64,
    make: impl Fn(u64) -> F,
) -> (Instant, Duration) {
    let start = Instant::now();
    let mut sum = 0u64;
    for i in 0..n {
        let fut = make(i);
        sum += with_timer!(
            contender,
            fut.await,
            timeout(DEADLINE, fut).await.unwrap_or(0)
        );
    }
    black_box(sum);
    (start, start.elapsed())
}

/// The 2-worker multi-thread runtime every shape runs on.
pub fn runtime() -> Runtime {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder
        .worker_threads(2)
        .enable_time()
        .build()
        .expect("build the tokio runtime")
}

/// Shape 1: `n` timeouts around a ready future, awaited in `block_on` on
/// the runtime (the caller's thread drives the future; the runtime's
/// workers and time driver are there).
pub fn ready(rt: &Runtime, contender: Contender, n: u64) -> Duration {
    rt.block_on(timed(contender, n, |i| std::future::ready(black_box(i))))
        .1
}

/// Shape 2: `n` timeouts around a future that pends once, in `block_on`:
/// each pend is one cheap self-wake, so the timer's own arm-and-cancel cost
/// is what shows.
pub fn pend_once(rt: &Runtime, contender: Contender, n: u64) -> Duration {
    rt.block_on(timed(contender, n, |_| black_box(PendOnce::default())))
        .1
}

/// Shape 2 in a spawned task: the self-wake goes through a worker's run
/// queue, and the task may move between the two workers.
fn pend_once_spawned(rt: &Runtime, contender: Contender, n: u64) -> Duration {
    let task = rt.spawn(timed(contender, n, |_| black_box(PendOnce::default())));
    rt.block_on(task).expect("bench task").1
}

/// Shape 3: `tasks` barrier-started tasks spread over both workers, each
/// doing `n` pend-once timeouts; the wall time from the first task starting
/// its loop to the last one finishing.
pub fn contended(rt: &Runtime, contender: Contender, tasks: u64, n: u64) -> Duration {
    rt.block_on(async move {
        let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(tasks as usize));
        let spawn = |_| {
            let barrier = barrier.clone();
            tokio::spawn(async move {
                barrier.wait().await;
                timed(contender, n, |_| black_box(PendOnce::default())).await
            })
        };
        let handles: Vec<_> = (0..tasks).map(spawn).collect();
        let (mut first, mut last) = (None::<Instant>, None::<Instant>);
        for h in handles {
            let (start, took) = h.await.expect("bench task");
            first = Some(first.map_or(start, |f| f.min(start)));
            last = Some(last.map_or(start + took, |l| l.max(start + took)));
        }
        first
            .zip(last)
            .map_or(Duration::ZERO, |(first, last)| last - first)
    })
}

/// Create a sleep, poll it once (arming its timer), drop it: `n` times in
/// one task. Bare: just the loop.
fn create_drop(rt: &Runtime, contender: Contender, n: u64) -> Duration {
    let task = rt.spawn(async move {
        let mut cx = Context::from_waker(Waker::noop());
        let start = Instant::now();
        for _ in 0..n {
            with_timer!(contender, _ = black_box(&mut cx), {
                _ = black_box(pin!(sleep(DEADLINE)).poll(&mut cx))
            });
        }
        start.elapsed()
    });
    rt.block_on(task).expect("bench task")
}

/// Heap bytes per live (armed, pending) waiter beyond the future itself,
/// and the future's size: `n` sleeps armed and held.
fn memory_per_waiter(rt: &Runtime, contender: Contender, n: usize) -> (f64, usize) {
    fn hold<F: Future>(n: usize, make: impl Fn() -> F) -> (f64, usize) {
        let mut held: Vec<Pin<Box<F>>> = Vec::with_capacity(n);
        let mut cx = Context::from_waker(Waker::noop());
        let ((), stats) = alloc::measure(|| {
            for _ in 0..n {
                let mut f = Box::pin(make());
                let _ = f.as_mut().poll(&mut cx);
                held.push(f);
            }
        });
        let size = std::mem::size_of::<F>();
        (
            stats.peak_bytes.saturating_sub(n * size) as f64 / n as f64,
            size,
        )
    }
    let task =
        rt.spawn(async move { with_timer!(contender, (0.0, 0), hold(n, || sleep(DEADLINE))) });
    rt.block_on(task).expect("bench task")
}

fn ns_per(d: Duration, n: u64) -> f64 {
    d.as_nanos() as f64 / n as f64
}

/// Best (lowest) ns/op per contender over interleaved rounds of `shape`,
/// after a warm-up (pingora's clock thread, weir's sweeper): the machine is
/// shared and interference only ever adds time, so the best round is the
/// closest to each contender's own cost.
fn best(
    report: &Report,
    what: &str,
    rounds: usize,
    n: u64,
    shape: impl Fn(Contender, u64) -> Duration,
) -> [f64; 4] {
    Contender::ALL
        .iter()
        .for_each(|&c| _ = shape(c, n / 10 + 1));
    let samples = contest::rotate(report, what, 4, rounds, |c, _| {
        ns_per(shape(Contender::ALL[c], n), n)
    });
    let best = contest::spreads(&samples, |x| *x);
    [0, 1, 2, 3].map(|c| best[c].min)
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
    let (n, r, tasks, per_task) = (
        scale.pick(50_000u64, 500_000),
        scale.pick(15usize, 31),
        64u64,
        scale.pick(1_000u64, 10_000),
    );
    let shapes = [
        (
            "1. ready",
            best(report, "ready future", r, n, |c, n| ready(&rt, c, n)),
        ),
        (
            "2. pend once",
            best(report, "pend-once future", r, n, |c, n| {
                pend_once(&rt, c, n)
            }),
        ),
        (
            "2b. pend once, spawned task",
            best(report, "pend-once future, spawned task", r, n, |c, n| {
                pend_once_spawned(&rt, c, n)
            }),
        ),
        // Per operation across all tasks.
        (
            "3. contended (64 tasks, ns per op)",
            best(report, "contended, 64 tasks", r, per_task, |c, n| {
                contended(&rt, c, tasks, n)
            })
            .map(|v| v / tasks as f64),
        ),
    ];
    let mut t = Table::new(
        "shape | bare ns/op | weir ns/op | tokio ns/op | pingora ns/op | weir overhead | tokio overhead | pingora overhead | weir / tokio overhead",
    );
    for (name, [bare, weir, tokio, pingora]) in shapes {
        let [w, t_, p] = [weir, tokio, pingora].map(|x| x - bare);
        let ratio = if t_ > 0.0 {
            format!("{:.2}", w / t_)
        } else {
            "n/a".into()
        };
        t.row(format!("{name} | {bare:.1} | {weir:.1} | {tokio:.1} | {pingora:.1} | {w:.1} | {t_:.1} | {p:.1} | {ratio}"));
    }
    report.table(&t);
    let series = (1..4).map(|i| {
        BarSeries::new(
            Contender::ALL[i].name(),
            shapes.iter().map(|(_, v)| Some(v[i] - v[0])),
        )
    });
    let groups = shapes.iter().map(|(name, _)| name.to_string()).collect();
    let title = "weir-timeout: overhead over the bare future by shape (best round)";
    report.plot(
        "timeout-overhead",
        &BarPlot::new(
            title,
            "shape",
            "ns/op over the bare future",
            groups,
            series.collect(),
        ),
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
    for (goal, target, figure, unit) in [
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
        let d = if unit == " ns" { 1 } else { 2 };
        t.row(format!(
            "{} | {target} | {figure:.d$}{unit} | {}",
            goal.name,
            goal.verdict(figure)
        ));
    }
    report.table(&t);

    let cd = best(report, "create, arm, drop a bare timer", r, n, |c, n| {
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
    metrics_cost(report, &rt, n);
    lateness(report, &rt);
}

/// ns per call of `TimerManager::metrics` (the snapshot) and of
/// `publish_metrics` (the snapshot published into a Prometheus recorder for
/// this thread), alternating in 5 blocks of `calls / 5`, with `waiters`
/// sleeps armed over 1000 ticks of a private manager.
fn publish_cost_ns(waiters: usize, calls: u32) -> (f64, f64) {
    let m = weir_timeout::TimerManager::try_new(Duration::from_millis(10)).expect("valid tick");
    let mut cx = Context::from_waker(Waker::noop());
    let arm = |i: usize| {
        let mut s = Box::pin(m.sleep(DEADLINE + Duration::from_millis(10 * (i % 1000) as u64)));
        let _ = s.as_mut().poll(&mut cx);
        s
    };
    let sleeps: Vec<_> = (0..waiters).map(arm).collect();
    assert_eq!(m.metrics().waiters, waiters as u64, "every sleep armed");
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let block = (calls / 5).max(1);
    let time = |f: &dyn Fn()| {
        let start = Instant::now();
        (0..block).for_each(|_| f());
        start.elapsed()
    };
    let (mut snapshot, mut published) = (Duration::ZERO, Duration::ZERO);
    metrics::with_local_recorder(&recorder, || {
        m.publish_metrics("bench");
        for _ in 0..5 {
            snapshot += time(&|| _ = black_box(m.metrics()));
            published += time(&|| _ = black_box(m.publish_metrics("bench")));
        }
    });
    drop(sleeps);
    let per = |d: Duration| d.as_nanos() as f64 / f64::from(block * 5);
    (per(snapshot), per(published))
}

/// The pend-once shape for weir-timeout, best of 3 rounds of `n`, without
/// and with a thread publishing the global manager's figures (into a
/// Prometheus recorder) every `every` meanwhile.
fn pend_once_publishing(rt: &Runtime, n: u64, every: Duration) -> (f64, f64) {
    use std::sync::atomic::{AtomicBool, Ordering};
    let best = || {
        (0..3)
            .map(|_| ns_per(pend_once(rt, Contender::Weir, n), n))
            .fold(f64::INFINITY, f64::min)
    };
    let quiet = best();
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
        let ns = best();
        stop.store(true, Ordering::Relaxed);
        ns
    });
    (quiet, published)
}

/// What publishing costs, and whether a publisher slows the pend-once
/// shape, paired, every repetition kept.
fn metrics_cost(report: &mut Report, rt: &Runtime, n: u64) {
    let runs = contest::rotate(report, "metrics cost", 1, 5, |_, _| {
        let pend = pend_once_publishing(rt, n, Duration::from_millis(1));
        (
            pend,
            [0, 10_000].map(|waiters| publish_cost_ns(waiters, 2_000)),
        )
    });
    type Run = ((f64, f64), [(f64, f64); 2]);
    let spread = |f: &dyn Fn(&Run) -> f64, d: usize| {
        contest::spreads(&runs, f)[0].show_each(|x| format!("{x:.d$}"))
    };
    let mut t = Table::new("weir-timeout `metrics` | min / median / max of 5");
    t.row(format!(
        "pend once, ns/op, nothing publishing | {}",
        spread(&|r| r.0.0, 1)
    ));
    t.row(format!(
        "pend once, ns/op, global manager published every 1 ms | {}",
        spread(&|r| r.0.1, 1)
    ));
    t.row(format!(
        "pend once: publishing's cost (paired difference), ns/op | {}",
        spread(&|r| r.0.1 - r.0.0, 1)
    ));
    let armed = [
        "no timer armed".to_owned(),
        format!("{} armed over 1000 ticks", thousands(10_000)),
    ];
    for (i, armed) in armed.iter().enumerate() {
        t.row(format!(
            "`metrics()` snapshot, µs per call, {armed} | {}",
            spread(&|r| r.1[i].0 / 1e3, 2)
        ));
        let published = spread(&|r| r.1[i].1 / 1e3, 2);
        t.row(format!(
            "`publish_metrics()` into a Prometheus recorder, µs per call, {armed} | {published}"
        ));
    }
    report.text(
        "weir-timeout's `metrics` feature adds nothing to arming, cancelling or firing a timer: \
         `TimerManager::publish_metrics` publishes the manager's own snapshot (`metrics()`, \
         which takes each thread's table lock briefly and reads each armed tick's counts \
         without its lock) when called, \
         e.g. once per scrape. Its cost is therefore the call itself, and whatever the locks it \
         takes do to timers armed meanwhile: below, the pend-once shape alone and with another \
         thread publishing every 1 ms (a thousand times a typical scrape rate), paired and \
         alternated, and the call's own cost with no timer and with 10,000 sleeps armed:",
    );
    report.table(&t);
}

/// Sorted lateness (µs, actual minus requested; negative would mean early)
/// of sleeps of 3–99 ms: `tasks` tasks each sleeping `rounds` times for
/// pseudo-random durations.
fn lateness_us(rt: &Runtime, contender: Contender, tasks: u64, rounds: u64) -> Vec<i64> {
    let task = |t: u64| {
        rt.spawn(async move {
            let mut x = t.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            let mut out = Vec::new();
            for _ in 0..rounds {
                let d = Duration::from_micros(3_000 + workload::xorshift(&mut x) % 96_000);
                let start = Instant::now();
                with_timer!(contender, tokio::time::sleep(d).await, sleep(d).await);
                out.push(start.elapsed().as_micros() as i64 - d.as_micros() as i64);
            }
            out
        })
    };
    let handles: Vec<_> = (0..tasks).map(task).collect();
    let mut all: Vec<i64> = rt.block_on(async {
        let mut all = Vec::new();
        for h in handles {
            all.extend(h.await.expect("lateness task"));
        }
        all
    });
    all.sort_unstable();
    all
}

/// The lateness table and chart.
fn lateness(report: &mut Report, rt: &Runtime) {
    let (tasks, rounds) = (
        report.scale().pick(300u64, 1_000),
        report.scale().pick(4u64, 20),
    );
    let mut t = Table::new("sleep 3–99 ms | samples | lateness p50 ms | p99 ms | max ms | min ms");
    let mut distributions = Vec::new();
    for c in [Contender::Weir, Contender::Pingora, Contender::Tokio] {
        report.progress(&format!("lateness of {}", c.name()));
        let l = lateness_us(rt, c, tasks, rounds);
        let [p50, p99, max, min] =
            [0.5, 0.99, 1.0, 0.0].map(|p| contest::quantile(&l, p).unwrap_or(0) as f64 / 1000.0);
        t.row(format!(
            "{} | {} | {p50:.2} | {p99:.2} | {max:.2} | {min:.2}",
            c.name(),
            l.len()
        ));
        distributions.push(Series::line(c.name(), cumulative_ms(&l)));
    }
    report.table(&t);
    report.text(
        "Lateness is actual minus requested sleep; a negative minimum would mean a timer \
         fired early. weir and pingora round deadlines up to a 10 ms tick; tokio's wheel has \
         1 ms resolution.",
    );
    let title = "weir-timeout: lateness of 3–99 ms sleeps (cumulative distribution)";
    let plot = LinePlot::new(
        title,
        "lateness (ms): actual minus requested sleep",
        "% of sleeps at most this late",
        distributions,
    );
    report.plot(
        "timeout-lateness",
        &LinePlot {
            y_max: Some(100.0),
            ..plot
        },
    );
}

/// The cumulative distribution of `sorted` (µs) as points (ms, % at or
/// below), one per permille: enough for the curve at a fraction of the file.
fn cumulative_ms(sorted: &[i64]) -> Vec<(f64, f64)> {
    let n = sorted.len();
    let point = |k: usize| {
        let i = ((n - 1) * k).div_ceil(1000);
        (sorted[i] as f64 / 1000.0, (i + 1) as f64 * 100.0 / n as f64)
    };
    if n == 0 {
        Vec::new()
    } else {
        (0..=1000).map(point).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::cumulative_ms;

    #[test]
    fn cumulative_distribution_runs_from_the_first_sample_to_all_of_them() {
        let sorted: Vec<i64> = (1..=10).map(|i| i * 1000).collect();
        let points = cumulative_ms(&sorted);
        assert_eq!(
            (points.first(), points.last()),
            (Some(&(1.0, 10.0)), Some(&(10.0, 100.0)))
        );
        assert!(
            points
                .windows(2)
                .all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1)
        );
        assert!(cumulative_ms(&[]).is_empty());
    }
}
