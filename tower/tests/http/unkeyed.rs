//! A request the key extractor finds no key for is refused with a
//! documented status and a header naming the cause, and logged once per
//! layer, not answered with a bare, silent 500.
#![cfg(not(loom))]

use http::{Request, Response, StatusCode};
use std::convert::Infallible;
use std::num::NonZeroU32;
use tower::{Layer, ServiceExt};
use weir_rate::{Gcra, KeyedLimiter, Quota};
use weir_tower::{InflightLayer, PeerIp, RateLimitLayer};

use crate::warnings;

/// Run `f` on a current-thread runtime and count the warnings it logs.
fn counting_warnings(f: impl std::future::Future<Output = ()>) -> usize {
    let before = warnings::on_this_thread("");
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime")
        .block_on(f);
    warnings::on_this_thread("") - before
}

fn hello()
-> impl tower::Service<Request<()>, Response = Response<String>, Error = Infallible, Future: Send>
+ Clone
+ Send
+ 'static {
    tower::service_fn(|_req: Request<()>| async {
        Ok::<_, Infallible>(Response::new("hello".to_string()))
    })
}

fn per_ip() -> KeyedLimiter<std::net::IpAddr, Gcra> {
    KeyedLimiter::new(Gcra::new(Quota::per_second(NonZeroU32::new(50).unwrap())))
}

#[test]
fn the_rate_limit_layer_names_the_cause_and_logs_it_once() {
    let warnings = counting_warnings(async {
        let service = RateLimitLayer::new(per_ip(), PeerIp::new()).layer(hello());
        for _ in 0..3 {
            // No peer address anywhere in the request: PeerIp has no key.
            let response = service.clone().oneshot(Request::new(())).await.unwrap();
            assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
            let cause = response.headers()["x-ratelimit-error"].to_str().unwrap();
            assert!(cause.starts_with("no-key"), "{cause}");
        }
        let service = RateLimitLayer::new(per_ip(), PeerIp::new())
            .missing_key_status(StatusCode::BAD_REQUEST)
            .layer(hello());
        let response = service.oneshot(Request::new(())).await.unwrap();
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    });
    assert_eq!(warnings, 2, "one line per layer, however many requests");
}

#[test]
fn the_inflight_layer_names_the_cause_and_logs_it_once() {
    let warnings = counting_warnings(async {
        let layer = InflightLayer::new(PeerIp::new(), 10);
        let service = layer.layer(hello());
        for _ in 0..3 {
            let response = service.clone().oneshot(Request::new(())).await.unwrap();
            assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
            let cause = response.headers()["x-inflight-error"].to_str().unwrap();
            assert!(cause.starts_with("no-key"), "{cause}");
        }
        let service = InflightLayer::new(PeerIp::new(), 10)
            .missing_key_status(StatusCode::BAD_REQUEST)
            .layer(hello());
        let response = service.oneshot(Request::new(())).await.unwrap();
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    });
    assert_eq!(warnings, 2, "one line per layer, however many requests");
}

/// Built without weir-tower's `axum` feature (`default-features = false`),
/// `PeerIp` cannot read axum's `ConnectInfo`: the documented axum set-up
/// answers 500, and the warning names the fix. (With the default features
/// the same set-up answers 200: `docs.rs`.)
#[cfg(not(feature = "axum"))]
#[test]
fn without_the_axum_feature_the_warning_names_the_fix() {
    let fix = "weir-tower's `axum` feature";
    let ours = "weir_tower::response: ";
    let before_ours = warnings::on_this_thread(ours);
    let before = warnings::on_this_thread(fix);
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime")
        .block_on(async {
            let service = RateLimitLayer::new(per_ip(), PeerIp::new()).layer(hello());
            let mut request = Request::new(());
            let peer: std::net::SocketAddr = "192.0.2.1:4000".parse().unwrap();
            request
                .extensions_mut()
                .insert(axum::extract::ConnectInfo(peer));
            let response = service.oneshot(request).await.unwrap();
            assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        });
    assert_eq!(warnings::on_this_thread(fix) - before, 1);
    assert_eq!(
        warnings::on_this_thread(ours) - before_ours,
        1,
        "under weir-tower's own target"
    );
}
