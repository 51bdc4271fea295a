//! Every documented setup of the layers, served by a real axum server over
//! loopback with `into_make_service_with_connect_info::<SocketAddr>()`, as
//! the docs say to serve it: each must answer 200 with its headers, never
//! a 500 because the key extractor could not find the client. Each test
//! copies one rustdoc example's setup; keep them in step.
#![cfg(all(feature = "axum", not(loom)))]

use axum::Router;
use axum::routing::get;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroU32;
use std::time::Duration;
use weir_rate::http::{ClientKey, ForwardedIp, InflightLayer, PeerIp, RateLimitLayer};
use weir_rate::{Gcra, KeyedLimiter, Quota};

/// Serve `app` as the docs say, on a free loopback port, until the test's
/// runtime ends.
async fn serve(app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let addr = listener.local_addr().expect("local addr");
    let service = app.into_make_service_with_connect_info::<SocketAddr>();
    tokio::spawn(async move { axum::serve(listener, service).await });
    addr
}

/// A response as read off the wire.
struct Answer {
    status: u16,
    head: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().find_map(|line| {
            let (n, v) = line.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }
}

/// One HTTP/1.1 GET with `extra` header lines (raw bytes, so they can hold
/// what a client library would refuse to send), over its own connection.
async fn fetch_with(addr: SocketAddr, extra: &[u8]) -> Answer {
    let mut request = b"GET / HTTP/1.1\r\nhost: weir.test\r\nconnection: close\r\n".to_vec();
    request.extend_from_slice(extra);
    request.extend_from_slice(b"\r\n");
    // A blocking socket with deadlines on its own thread: no client library
    // between the test and the bytes on the wire.
    let reply = tokio::task::spawn_blocking(move || {
        let mut stream = std::net::TcpStream::connect(addr).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("deadline");
        stream
            .set_write_timeout(Some(Duration::from_secs(10)))
            .expect("deadline");
        stream.write_all(&request).expect("send");
        let mut reply = Vec::new();
        stream
            .read_to_end(&mut reply)
            .expect("the server answers within 10 s");
        reply
    })
    .await
    .expect("the client thread finishes");
    let text = String::from_utf8_lossy(&reply).into_owned();
    let head = text.split("\r\n\r\n").next().unwrap_or_default().to_owned();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("an HTTP status line in {text:?}"));
    Answer { status, head }
}

async fn fetch(addr: SocketAddr) -> Answer {
    fetch_with(addr, b"").await
}

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
