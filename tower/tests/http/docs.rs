//! Every documented setup of the layers, served by a real axum server over
//! loopback with `into_make_service_with_connect_info::<SocketAddr>()`, as
//! the docs say to serve it: each must answer 200 with its headers, never
//! a 500 because the key extractor could not find the client. Each test
//! copies one rustdoc example's setup; keep them in step.
#![cfg(all(feature = "axum", not(loom)))]

use crate::http_loopback;

use axum::Router;
use axum::routing::get;
use http_loopback::{fetch, fetch_with, serve};
use std::net::IpAddr;
use std::num::NonZeroU32;
use weir_rate::{Gcra, KeyedLimiter, Quota};
use weir_tower::{ClientKey, ForwardedIp, InflightLayer, PeerIp, RateLimitLayer};

fn hello() -> Router {
    Router::new().route("/", get(|| async { "hello" }))
}

/// `RateLimitLayer`'s example.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn the_rate_limit_layer_example_answers_over_loopback() {
    let per_ip =
        KeyedLimiter::<IpAddr, _>::new(Gcra::new(Quota::per_second(NonZeroU32::new(50).unwrap())));
    let app = hello().layer(RateLimitLayer::new(per_ip, PeerIp::new()).policy_name("per-ip"));
    let addr = serve(app).await;
    let answer = fetch(addr).await;
    assert_eq!(answer.status, 200, "{}", answer.head);
    assert_eq!(answer.header("ratelimit"), Some("\"per-ip\";r=49;t=1"));
}

/// `InflightLayer`'s example.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn the_inflight_layer_example_answers_over_loopback() {
    let app = hello().layer(InflightLayer::new(PeerIp::new(), 100));
    let addr = serve(app).await;
    let answer = fetch(addr).await;
    assert_eq!(answer.status, 200, "{}", answer.head);
}

/// The module's advice: both layers in one `Router::layer` call.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn both_layers_composed_as_the_module_docs_say_answer_over_loopback() {
    let per_ip =
        KeyedLimiter::<IpAddr, _>::new(Gcra::new(Quota::per_second(NonZeroU32::new(50).unwrap())));
    let app = hello().layer(
        tower::ServiceBuilder::new()
            .layer(RateLimitLayer::new(per_ip, PeerIp::new()))
            .layer(InflightLayer::new(PeerIp::new(), 100)),
    );
    let addr = serve(app).await;
    let answer = fetch(addr).await;
    assert_eq!(answer.status, 200, "{}", answer.head);
    assert!(answer.header("ratelimit").is_some(), "{}", answer.head);
}

/// `ForwardedIp`'s example, behind a "proxy" on loopback: each client
/// named by the proxy has its own limit, whatever bytes it wrote itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn the_forwarded_ip_example_answers_over_loopback() {
    let per_client = KeyedLimiter::<ClientKey, _>::new(Gcra::new(Quota::per_minute(
        NonZeroU32::new(1).unwrap(),
    )));
    let proxies = ForwardedIp::trusting(["127.0.0.0/8".parse().unwrap()]);
    let app = hello().layer(RateLimitLayer::new(per_client, proxies));
    let addr = serve(app).await;
    let first = fetch_with(addr, b"x-forwarded-for: 198.51.100.4\r\n").await;
    assert_eq!(first.status, 200, "{}", first.head);
    let other = fetch_with(addr, b"x-forwarded-for: 198.51.100.5:5555\r\n").await;
    assert_eq!(other.status, 200, "{}", other.head);
    // The same client, having written a non-visible byte of its own.
    let again = fetch_with(addr, b"x-forwarded-for: \xff, 198.51.100.4\r\n").await;
    assert_eq!(again.status, 429, "{}", again.head);
    // The proxy's own key is untouched by all of it.
    let proxy = fetch(addr).await;
    assert_eq!(proxy.status, 200, "{}", proxy.head);
}
