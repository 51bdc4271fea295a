//! The cost of weir-timeout's `metrics` feature: the publishing call
//! itself, and what a publisher does to timers armed meanwhile.

use super::shapes::pend_once;
use super::{Contender, DEADLINE, ns_per};
use crate::contest;
use crate::report::{Report, Table, thousands};
use std::future::Future;
use std::hint::black_box;
use std::task::{Context, Waker};
use std::time::{Duration, Instant};
use tokio::runtime::Runtime;

/// The cost of weir-timeout's `metrics` feature, which adds nothing to a
/// timer's path: ns per call of `TimerManager::metrics` (the snapshot) and
/// of `publish_metrics` (the snapshot, published into a Prometheus
/// recorder for this thread), alternating in 5 blocks of `calls / 5`, with
/// `waiters` sleeps armed over 1000 ticks of a private manager.
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

/// Shape 2 for weir-timeout without and with a thread publishing the
/// global manager's figures (`publish_metrics`, into a Prometheus
/// recorder) every `every` meanwhile: ns per op, each the best of 3
/// rounds of `n`.
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

/// The `metrics` feature's part of the section: what publishing costs,
/// and whether a publisher slows the pend-once shape, paired, every
/// repetition kept.
pub(super) fn metrics_cost(report: &mut Report, rt: &Runtime, n: u64) {
    let runs = contest::rotate(report, "metrics cost", 1, 5, |_, _| {
        let pend = pend_once_publishing(rt, n, Duration::from_millis(1));
        (
            pend,
            [0, 10_000].map(|waiters| publish_cost_ns(waiters, 2_000)),
        )
    });
    type Run = ((f64, f64), [(f64, f64); 2]);
    let spread = |f: &dyn Fn(&Run) -> f64, decimals: usize| {
        contest::spreads(&runs, f)[0].show_each(|x| format!("{x:.decimals$}"))
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
    for (i, armed) in [
        "no timer armed".to_owned(),
        format!("{} armed over 1000 ticks", thousands(10_000)),
    ]
    .iter()
    .enumerate()
    {
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
         which takes each thread's table lock and each armed tick's lock briefly) when called, \
         e.g. once per scrape. Its cost is therefore the call itself, and whatever the locks it \
         takes do to timers armed meanwhile: below, the pend-once shape alone and with another \
         thread publishing every 1 ms (a thousand times a typical scrape rate), paired and \
         alternated, and the call's own cost with no timer and with 10,000 sleeps armed:",
    );
    report.table(&t);
}
