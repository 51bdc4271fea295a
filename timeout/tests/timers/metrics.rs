//! The `metrics` feature: `TimerManager::publish_metrics` counted into a
//! real recorder (metrics-exporter-prometheus, installed for this thread
//! only) after a known workload, exact figures read back from the
//! rendered Prometheus text.
#![cfg(all(feature = "metrics", not(loom)))]

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusRecorder};
use std::future::{Future, pending};
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use weir_timeout::TimerManager;

/// The value of `metric` for `manager="name"` in the rendered text, or
/// `None` when the recorder has no such series.
fn value(recorder: &PrometheusRecorder, metric: &str, name: &str) -> Option<f64> {
    let series = format!("{metric}{{manager=\"{name}\"}} ");
    recorder
        .handle()
        .render()
        .lines()
        .find_map(|l| l.strip_prefix(&series)?.trim().parse().ok())
}

/// Poll `fut` once, with a waker that does nothing.
fn poll_once<F: Future>(fut: std::pin::Pin<&mut F>) -> Poll<F::Output> {
    fut.poll(&mut Context::from_waker(Waker::noop()))
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime")
}

#[test]
fn published_figures_match_a_known_workload() {
    let m = TimerManager::try_new(Duration::from_millis(1)).unwrap();
    let recorder = PrometheusBuilder::new().build_recorder();
    metrics::with_local_recorder(&recorder, || {
        // Three sleeps that fire.
        runtime().block_on(async {
            for _ in 0..3 {
                m.sleep(Duration::from_millis(2)).await;
            }
        });
        // Five timeouts armed (their future pends) and dropped.
        for _ in 0..5 {
            let t = pin!(m.timeout(Duration::from_secs(60), pending::<()>()));
            assert!(poll_once(t).is_pending());
        }
        // Four sleeps armed and still waiting.
        let mut waiting: Vec<_> = (0..4)
            .map(|_| Box::pin(m.sleep(Duration::from_secs(60))))
            .collect();
        for s in &mut waiting {
            assert!(poll_once(s.as_mut()).is_pending());
        }
        // A ready future arms nothing; an elapsed deadline arms nothing.
        let ready = pin!(m.timeout(Duration::from_secs(60), async { 1 }));
        assert_eq!(poll_once(ready), Poll::Ready(Ok(1)));
        let zero = pin!(m.timeout(Duration::ZERO, pending::<()>()));
        assert!(poll_once(zero).is_ready());

        // Nothing reaches the recorder until the manager publishes.
        assert_eq!(
            value(&recorder, "weir_timeout_timers_armed_total", "t"),
            None
        );
        let snapshot = m.publish_metrics("t");
        assert_eq!(snapshot, m.metrics());
        let v = |metric| value(&recorder, metric, "t");
        assert_eq!(v("weir_timeout_timers_armed_total"), Some(12.0));
        assert_eq!(v("weir_timeout_timers_fired_total"), Some(3.0));
        assert_eq!(v("weir_timeout_timers_cancelled_total"), Some(5.0));
        assert_eq!(v("weir_timeout_timers_pending"), Some(4.0));
        assert_eq!(v("weir_timeout_sweeper_starts_total"), Some(1.0));
        assert_eq!(
            v("weir_timeout_ticks_live"),
            Some(snapshot.live_ticks as f64)
        );
        assert!(snapshot.live_ticks >= 1, "{snapshot:?}");
        assert_eq!(
            v("weir_timeout_sweeper_wakeups_total"),
            Some(snapshot.sweeper_wakeups as f64)
        );

        // The waiting sleeps are dropped: pending falls, cancelled rises,
        // armed stays.
        drop(waiting);
        m.publish_metrics("t");
        assert_eq!(v("weir_timeout_timers_armed_total"), Some(12.0));
        assert_eq!(v("weir_timeout_timers_cancelled_total"), Some(9.0));
        assert_eq!(v("weir_timeout_timers_pending"), Some(0.0));
        assert_eq!(v("weir_timeout_timers_fired_total"), Some(3.0));
    });
}

#[test]
fn managers_publish_under_their_own_names_and_every_thread_counts() {
    let a = TimerManager::try_new(Duration::from_millis(1)).unwrap();
    let b = TimerManager::try_new(Duration::from_millis(1)).unwrap();
    // Four threads, each firing 25 sleeps on `a`; one sleep on `b`.
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                runtime().block_on(async {
                    for _ in 0..25 {
                        a.sleep(Duration::from_micros(1500)).await;
                    }
                })
            });
        }
    });
    runtime().block_on(b.sleep(Duration::from_millis(1)));
    let recorder = PrometheusBuilder::new().build_recorder();
    metrics::with_local_recorder(&recorder, || {
        a.publish_metrics("a");
        b.publish_metrics("b");
    });
    let v = |metric, name| value(&recorder, metric, name);
    assert_eq!(v("weir_timeout_timers_armed_total", "a"), Some(100.0));
    assert_eq!(v("weir_timeout_timers_fired_total", "a"), Some(100.0));
    assert_eq!(v("weir_timeout_timers_pending", "a"), Some(0.0));
    assert_eq!(v("weir_timeout_timers_armed_total", "b"), Some(1.0));
    assert_eq!(v("weir_timeout_timers_fired_total", "b"), Some(1.0));
    assert_eq!(v("weir_timeout_sweeper_starts_total", "b"), Some(1.0));
}
