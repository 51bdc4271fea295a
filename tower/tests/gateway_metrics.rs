//! The example gateway's `/metrics`, scraped over real loopback HTTP after
//! a burst of 429s: the counts match what the client saw. Its own test
//! binary, since a process has one metrics recorder.
#![cfg(all(feature = "axum", feature = "metrics", not(loom)))]

#[path = "../examples/gateway/app.rs"]
#[allow(dead_code)]
mod app;

use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::time::Duration;
use weir_redis::{FailurePolicy, RedisLimiter, Target};
use weir_test_support::redis_server::RedisServer;

type HttpClient = Client<hyper_util::client::legacy::connect::HttpConnector, Empty<Bytes>>;

async fn get(client: &HttpClient, addr: SocketAddr, path: &str) -> (u16, String) {
    let uri = format!("http://{addr}{path}").parse().expect("valid uri");
    let response = tokio::time::timeout(Duration::from_secs(20), client.get(uri))
        .await
        .expect("the gateway answers within 20 s")
        .expect("HTTP request succeeds");
    let status = response.status().as_u16();
    let body = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// The value of the sample of `metric` whose labels include every one of
/// `labels` (`name="value"`), or 0 when there is none.
fn sample(text: &str, metric: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(metric) && !l.starts_with('#'))
        .filter(|l| labels.iter().all(|label| l.contains(label)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_a_burst_of_429s_on_redis() {
    let Some(server) = RedisServer::start_or_skip("gateway metrics").expect("fixture") else {
        return;
    };
    let handle = metrics_exporter_prometheus::PrometheusBuilder::new()
        .install_recorder()
        .expect("the only recorder of this process");
    let config = app::GatewayConfig {
        limit: NonZeroU32::new(5).expect("non-zero"),
        window: Duration::from_secs(60),
        metrics: Some(handle),
        ..app::GatewayConfig::default()
    };
    let limiter = RedisLimiter::builder(weir_rate::Gcra::new(app::quota(&config)))
        .prefix("metrics-test")
        // The layer's policy name: one `limiter` label for layer and store.
        .name("per-ip")
        .on_failure(FailurePolicy::Closed)
        .connect(Target::server(server.url()))
        .await
        .expect("a limiter");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let addr = listener.local_addr().expect("local addr");
    let service =
        app::router_on_redis(&config, limiter).into_make_service_with_connect_info::<SocketAddr>();
    tokio::spawn(async move { axum::serve(listener, service).await });

    let client = Client::builder(TokioExecutor::new()).build_http();
    let mut statuses = Vec::new();
    for _ in 0..12 {
        statuses.push(get(&client, addr, "/").await.0);
    }
    let ok = statuses.iter().filter(|&&s| s == 200).count();
    let denied = statuses.iter().filter(|&&s| s == 429).count();
    assert_eq!((ok, denied), (5, 7), "{statuses:?}");

    let (status, text) = get(&client, addr, "/metrics").await;
    assert_eq!(status, 200);
    let decisions = "weir_rate_decisions_total";
    let per_ip = "limiter=\"per-ip\"";
    assert_eq!(
        sample(&text, decisions, &[per_ip, "outcome=\"ok\""]),
        5.0,
        "{text}"
    );
    assert_eq!(
        sample(&text, decisions, &[per_ip, "outcome=\"over_limit\""]),
        7.0,
        "{text}"
    );
    assert_eq!(
        sample(&text, decisions, &[per_ip, "outcome=\"error\""]),
        0.0,
        "{text}"
    );
    let store = "weir_store_decisions_total";
    let on_redis = "store=\"redis\"";
    assert_eq!(
        sample(
            &text,
            store,
            &[per_ip, on_redis, "source=\"store\"", "allowed=\"true\""]
        ),
        5.0,
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            store,
            &[per_ip, on_redis, "source=\"store\"", "allowed=\"false\""]
        ),
        7.0,
        "{text}"
    );
    // One script call per decision, each timed.
    assert_eq!(
        sample(&text, "weir_store_call_seconds_count", &[per_ip, on_redis]),
        12.0,
        "{text}"
    );
}
