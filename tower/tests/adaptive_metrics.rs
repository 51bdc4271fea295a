//! The adaptive layer's metrics, read back from a Prometheus recorder:
//! admitted and rejected counts, and a shared limit's gauges (limit, in
//! flight, no-load latency), all under the layer's name. Its own test
//! binary, since a process has one metrics recorder.
#![cfg(all(feature = "metrics", not(loom)))]

use http::{Request, Response, StatusCode};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;
use tower::{Layer, ServiceExt};
use weir_adaptive::{AdaptiveLimiter, Gradient2};
use weir_rate::clock::ManualClock;
use weir_tower::AdaptiveInflightLayer;

/// The value of the sample of `metric` whose labels include every one of
/// `labels`, or `None`.
fn sample(text: &str, metric: &str, labels: &[&str]) -> Option<f64> {
    text.lines()
        .filter(|l| l.starts_with(metric) && !l.starts_with('#'))
        .filter(|l| l[metric.len()..].starts_with(['{', ' ']))
        .filter(|l| labels.iter().all(|label| l.contains(label)))
        .find_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
}

#[tokio::test]
async fn a_shared_layer_exports_its_limit_load_and_decisions() {
    let handle = metrics_exporter_prometheus::PrometheusBuilder::new()
        .install_recorder()
        .expect("the only recorder of this process");
    let clock = ManualClock::new();
    let limiter = AdaptiveLimiter::with_clock(Gradient2::default(), clock.clone());
    let gate = Arc::new(Semaphore::new(0));
    let origin = {
        let (clock, gate) = (clock.clone(), Arc::clone(&gate));
        tower::service_fn(move |_: Request<()>| {
            let (clock, gate) = (clock.clone(), Arc::clone(&gate));
            async move {
                gate.acquire().await.expect("open").forget();
                clock.advance(Duration::from_millis(5));
                Ok::<_, Infallible>(Response::new(String::new()))
            }
        })
    };
    let service = AdaptiveInflightLayer::shared(limiter.clone())
        .name("api")
        .layer(origin);
    // 40 requests of 5 ms, one at a time: the probe measures 5 ms.
    gate.add_permits(40);
    for _ in 0..40 {
        let response = service.clone().oneshot(Request::new(())).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
    }
    // Hold as many as the limit allows; the next is refused.
    let limit = limiter.limit();
    let mut held = Vec::new();
    for _ in 0..limit {
        held.push(tokio::spawn(service.clone().oneshot(Request::new(()))));
    }
    while limiter.in_flight() < limit {
        tokio::task::yield_now().await;
    }
    let refused = service.clone().oneshot(Request::new(())).await.unwrap();
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);

    let text = handle.render();
    let api = "limiter=\"api\"";
    let requests = "weir_adaptive_requests_total";
    assert_eq!(
        sample(&text, requests, &[api, "outcome=\"admitted\""]),
        Some(f64::from(40 + limit)),
        "{text}"
    );
    assert_eq!(
        sample(&text, requests, &[api, "outcome=\"rejected\""]),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "weir_adaptive_limit", &[api]),
        Some(f64::from(limit)),
        "{text}"
    );
    assert_eq!(
        sample(&text, "weir_adaptive_in_flight", &[api]),
        Some(f64::from(limit)),
        "{text}"
    );
    assert_eq!(
        sample(&text, "weir_adaptive_no_load_seconds", &[api]),
        Some(0.005),
        "{text}"
    );
    gate.add_permits(limit as usize);
    for h in held {
        assert_eq!(h.await.unwrap().unwrap().status(), StatusCode::OK);
    }
}
