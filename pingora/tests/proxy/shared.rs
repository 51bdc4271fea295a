//! One quota kept by two pingora proxies through one `redis-server`.

use super::{Proxy, connect, get, origin, serve};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use weir_pingora::{HeaderKey, RateLimit, Settle, UpstreamInflight};
use weir_rate::{Gcra, Quota, nonzero};
use weir_redis::{RedisLimiter, Target};
use weir_test_support::redis_server::RedisServer;

/// A proxy before `origin` limiting each `x-api-key` to 10 a minute on
/// the Redis at `url` (settled by `rule`, if any), connected on a runtime
/// of its own (kept for the life of the test process, as pingora's are).
fn on_redis(origin: SocketAddr, url: &str, rule: Option<Settle>) -> SocketAddr {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let limiter = runtime
        .block_on(
            RedisLimiter::builder(Gcra::new(Quota::per_minute(nonzero!(10))))
                .prefix("pingora-shared")
                .connect(Target::server(url)),
        )
        .unwrap();
    std::mem::forget(runtime);
    let mut rate = RateLimit::new(HeaderKey::new("x-api-key"), limiter, "per-key");
    if let Some(rule) = rule {
        rate = rate.settle(rule);
    }
    serve(Proxy {
        origin,
        rate,
        upstream: Arc::new(UpstreamInflight::new(100)),
        adaptive: None,
    })
}

#[test]
fn two_proxies_on_one_redis_keep_one_quota() {
    let Some(redis) =
        RedisServer::start_or_skip("two pingora proxies on one Redis").expect("fixture")
    else {
        return;
    };
    let origin = origin();
    let proxies = [
        on_redis(origin, &redis.url(), None),
        on_redis(origin, &redis.url(), None),
    ];

    // One client alternating between the proxies on kept-alive connections.
    let mut conns = proxies.map(connect);
    let statuses: Vec<u16> = (0..14)
        .map(|i| get(&mut conns[i % 2], "/", "x-api-key: alternating\r\n").status)
        .collect();
    assert_eq!(statuses[..10], [200; 10]);
    assert_eq!(statuses[10..], [429; 4], "{statuses:?}");

    // Forty concurrent clients of one key, half through each proxy: ten pass.
    let clients: Vec<_> = (0..40)
        .map(|i| {
            let proxy = proxies[i % 2];
            std::thread::spawn(move || {
                let response = get(&mut connect(proxy), "/", "x-api-key: crowd\r\n");
                (i % 2, response.status)
            })
        })
        .collect();
    let mut passed = [0, 0];
    for client in clients {
        let (proxy, status) = client.join().unwrap();
        match status {
            200 => passed[proxy] += 1,
            429 => {}
            other => panic!("status {other}"),
        }
    }
    assert_eq!(
        passed[0] + passed[1],
        10,
        "passed through each proxy: {passed:?}"
    );
}

#[test]
fn a_settlement_on_redis_lands_after_the_response() {
    let Some(redis) = RedisServer::start_or_skip("settling on Redis").expect("fixture") else {
        return;
    };
    let proxy = on_redis(origin(), &redis.url(), Some(Settle::server_errors()));
    let mut conn = connect(proxy);
    // Successes are refunded (each a round trip after its response).
    for _ in 0..8 {
        assert_eq!(get(&mut conn, "/", "x-api-key: k\r\n").status, 200);
    }
    std::thread::sleep(Duration::from_millis(200));
    let statuses: Vec<u16> = (0..12)
        .map(|_| get(&mut conn, "/busy", "x-api-key: k\r\n").status)
        .collect();
    assert_eq!(statuses[..10], [503; 10], "the 8 successes were given back");
    assert_eq!(statuses[10..], [429; 2]);
}
