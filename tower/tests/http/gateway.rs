//! The example gateway over real loopback HTTP, driven by a real HTTP client
//! (hyper): the rate limit, the in-flight limit and shadow mode as a user of
//! the gateway sees them.
#![cfg(all(feature = "axum", feature = "metrics", not(loom)))]

#[path = "../../examples/gateway/app.rs"]
#[allow(dead_code)]
mod app;

use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::time::Duration;

type HttpClient = Client<HttpConnector, Empty<Bytes>>;

/// Serve the gateway on a free loopback port until the test's runtime ends.
async fn start(config: app::GatewayConfig) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let addr = listener.local_addr().expect("local addr");
    let service = app::router(&config).into_make_service_with_connect_info::<SocketAddr>();
    tokio::spawn(async move { axum::serve(listener, service).await });
    addr
}

/// Serve a gateway whose per-IP limit lives in the Redis server at `url`
/// under `prefix`, on a free loopback port until the test's runtime ends.
async fn start_on_redis(config: &app::GatewayConfig, url: String, prefix: &str) -> SocketAddr {
    use weir_rate::Gcra;
    use weir_redis::{RedisLimiter, Target};
    let limiter = RedisLimiter::builder(Gcra::new(app::quota(config)))
        .prefix(prefix)
        .connect(Target::server(url))
        .await
        .expect("connect to the private redis-server");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let addr = listener.local_addr().expect("local addr");
    let service =
        app::router_on_redis(config, limiter).into_make_service_with_connect_info::<SocketAddr>();
    tokio::spawn(async move { axum::serve(listener, service).await });
    addr
}

fn client() -> HttpClient {
    Client::builder(TokioExecutor::new()).build_http()
}

struct Answer {
    status: u16,
    headers: http::HeaderMap,
}

async fn get(client: &HttpClient, addr: SocketAddr, path: &str) -> Answer {
    let uri = format!("http://{addr}{path}").parse().expect("valid uri");
    let response = tokio::time::timeout(Duration::from_secs(20), client.get(uri))
        .await
        .expect("the gateway answers within 20 s")
        .expect("HTTP request succeeds");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let _ = response.into_body().collect().await;
    Answer { status, headers }
}

fn config(limit: u32) -> app::GatewayConfig {
    app::GatewayConfig {
        limit: NonZeroU32::new(limit).expect("non-zero"),
        window: Duration::from_secs(60),
        ..app::GatewayConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_the_allowed_number_pass_and_denials_carry_headers() {
    let addr = start(config(5)).await;
    let client = client();
    let mut answers = Vec::new();
    for _ in 0..8 {
        answers.push(get(&client, addr, "/").await);
    }
    let passed = answers.iter().filter(|a| a.status == 200).count();
    assert_eq!(
        passed,
        5,
        "statuses: {:?}",
        answers.iter().map(|a| a.status).collect::<Vec<_>>()
    );
    for (i, answer) in answers.iter().enumerate() {
        assert_eq!(answer.headers["ratelimit-policy"], "\"per-ip\";q=5;w=60");
        if i < 5 {
            assert_eq!(answer.status, 200);
            let remaining = 4 - i;
            assert!(
                answer.headers["ratelimit"]
                    .to_str()
                    .unwrap()
                    .starts_with(&format!("\"per-ip\";r={remaining};")),
                "request {i}: {:?}",
                answer.headers["ratelimit"]
            );
        } else {
            assert_eq!(answer.status, 429);
            // GCRA frees one request every 12 s (60 s / 5).
            let retry: u64 = answer.headers["retry-after"]
                .to_str()
                .unwrap()
                .parse()
                .unwrap();
            assert!((1..=12).contains(&retry), "retry-after {retry}");
            assert!(
                answer.headers["ratelimit"]
                    .to_str()
                    .unwrap()
                    .starts_with("\"per-ip\";r=0;")
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weighted_requests_spend_more_of_the_limit() {
    let addr = start(config(10)).await;
    let client = client();
    assert_eq!(get(&client, addr, "/heavy").await.status, 200);
    assert_eq!(get(&client, addr, "/heavy").await.status, 200);
    assert_eq!(get(&client, addr, "/heavy").await.status, 429);
    assert_eq!(get(&client, addr, "/").await.status, 429);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_origin_trips_the_inflight_limit_with_503() {
    let addr = start(app::GatewayConfig {
        max_inflight: 2,
        slow_origin: Duration::from_millis(1500),
        ..config(100)
    })
    .await;
    let client = client();
    let slow: Vec<_> = (0..2)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move { get(&client, addr, "/slow").await.status })
        })
        .collect();
    // Let both slow requests reach the origin, then one more is one too many.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let third = get(&client, addr, "/slow").await;
    assert_eq!(third.status, 503);
    assert_eq!(third.headers["retry-after"], "1");
    // Other routes are other origins: unaffected.
    assert_eq!(get(&client, addr, "/").await.status, 200);
    for handle in slow {
        assert_eq!(handle.await.unwrap(), 200);
    }
    // Once the origin has answered, the route is open again.
    let after = tokio::spawn({
        let client = client.clone();
        async move { get(&client, addr, "/slow").await.status }
    });
    assert_eq!(after.await.unwrap(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_mode_denies_nothing() {
    let addr = start(app::GatewayConfig {
        shadow: true,
        ..config(2)
    })
    .await;
    let client = client();
    let mut shadow_denied = 0;
    for _ in 0..6 {
        let answer = get(&client, addr, "/").await;
        assert_eq!(answer.status, 200);
        shadow_denied += usize::from(answer.headers.contains_key("x-ratelimit-shadow"));
    }
    assert_eq!(shadow_denied, 4);
}

/// Two gateways sharing one per-IP limit through a private redis-server:
/// requests alternate between them and exactly the limit passes in total.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gateways_on_redis_share_one_limit() {
    use weir_test_support::redis_server::RedisServer;
    let Some(server) = RedisServer::start_or_skip("the gateway on Redis").expect("redis fixture")
    else {
        return;
    };
    let config = config(6);
    let mut gateways = Vec::new();
    for _ in 0..2 {
        gateways.push(start_on_redis(&config, server.url(), "gateway-test").await);
    }
    let client = client();
    let mut statuses = Vec::new();
    for i in 0..10 {
        let answer = get(&client, gateways[i % 2], "/").await;
        assert_eq!(answer.headers["ratelimit-policy"], "\"per-ip\";q=6;w=60");
        statuses.push(answer.status);
    }
    assert_eq!(
        statuses.iter().filter(|&&s| s == 200).count(),
        6,
        "{statuses:?}"
    );
    assert!(statuses[6..].iter().all(|&s| s == 429), "{statuses:?}");
}

/// What `x-ratelimit-shadow` says on each of the four answers a client can
/// get: only a layer in shadow mode marks a request, and only one it let
/// through although the limit would have denied it.
async fn shadow_header_marks_only_shadow_denials(gateway: impl AsyncFn(bool, u32) -> SocketAddr) {
    let client = client();
    let marked = |answer: &Answer| answer.headers.contains_key("x-ratelimit-shadow");

    let enforcing = gateway(false, 1).await;
    let allowed = get(&client, enforcing, "/").await;
    assert_eq!(allowed.status, 200);
    assert!(!marked(&allowed), "an allowed request outside shadow mode");
    let denied = get(&client, enforcing, "/").await;
    assert_eq!(denied.status, 429);
    assert!(!marked(&denied), "a real 429 is not a shadow denial");

    let shadowing = gateway(true, 1).await;
    let within = get(&client, shadowing, "/").await;
    assert_eq!(within.status, 200);
    assert!(
        !marked(&within),
        "within the limit, shadow mode marks nothing"
    );
    let would_deny = get(&client, shadowing, "/").await;
    assert_eq!(would_deny.status, 200);
    assert_eq!(would_deny.headers["x-ratelimit-shadow"], "denied");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_header_marks_only_shadow_denials_in_process() {
    shadow_header_marks_only_shadow_denials(async |shadow, limit| {
        start(app::GatewayConfig {
            shadow,
            ..config(limit)
        })
        .await
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_header_marks_only_shadow_denials_on_redis() {
    use weir_test_support::redis_server::RedisServer;
    let Some(server) = RedisServer::start_or_skip("the gateway on Redis").expect("redis fixture")
    else {
        return;
    };
    let url = server.url();
    let gateways = std::sync::atomic::AtomicUsize::new(0);
    shadow_header_marks_only_shadow_denials(async |shadow, limit| {
        let config = app::GatewayConfig {
            shadow,
            ..config(limit)
        };
        // Each gateway its own keys: the two modes must not share a count.
        let n = gateways.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        start_on_redis(&config, url.clone(), &format!("shadow-test-{n}")).await
    })
    .await;
}
