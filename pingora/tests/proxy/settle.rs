//! Settling by the response: what an admitted request cost, read from
//! what the proxy sent, charged or refunded against its check.

use super::{Proxy, connect, get, origin, serve};
use std::sync::Arc;
use weir_pingora::{ClientIp, RateLimit, Settle};
use weir_rate::{Gcra, KeyedLimiter, Quota};

/// A proxy before a fresh origin charging each client by `rule` against
/// `per_minute` units a minute, with `upstream_limit` requests in flight.
fn settling(per_minute: u32, rule: Settle, upstream_limit: usize) -> Proxy<ClientIp> {
    let quota = Quota::per_minute(per_minute.try_into().unwrap());
    Proxy {
        origin: origin(),
        rate: RateLimit::new(
            ClientIp::new(),
            KeyedLimiter::new(Gcra::new(quota)),
            "units",
        )
        .settle(rule),
        upstream: Arc::new(weir_pingora::UpstreamInflight::new(upstream_limit)),
        adaptive: None,
    }
}

#[test]
fn a_limit_of_bytes_is_charged_the_body_sent() {
    let proxy = serve(settling(100, Settle::body_bytes(), 100));
    let mut conn = connect(proxy);
    // Each check spends one unit; the settlement charges the other 59.
    assert_eq!(get(&mut conn, "/bytes/60", "").status, 200);
    assert_eq!(
        get(&mut conn, "/bytes/60", "").status,
        200,
        "40 units were left"
    );
    let refused = get(&mut conn, "/bytes/1", "");
    assert_eq!(refused.status, 429, "120 bytes were sent of 100");
    assert!(refused.header("retry-after").is_some());
}

#[test]
fn only_server_errors_count_and_a_weir_refusal_is_not_one() {
    let proxy = serve(settling(3, Settle::server_errors(), 100));
    let mut conn = connect(proxy);
    let statuses: Vec<u16> = (0..6).map(|_| get(&mut conn, "/", "").status).collect();
    assert_eq!(statuses, [200; 6], "successes are refunded");
    let statuses: Vec<u16> = (0..5).map(|_| get(&mut conn, "/busy", "").status).collect();
    assert_eq!(
        statuses,
        [503, 503, 503, 429, 429],
        "the origin's 503s count"
    );

    // An upstream permit's 503 is weir's, not the origin's: it costs nothing.
    // (pingora closes a connection after an error it answered itself.)
    let full = serve(settling(3, Settle::server_errors(), 0));
    let statuses: Vec<u16> = (0..6)
        .map(|_| get(&mut connect(full), "/", "").status)
        .collect();
    assert_eq!(statuses, [503; 6]);
}

#[test]
fn a_cost_the_upstream_reports_is_what_the_request_costs() {
    let proxy = serve(settling(10, Settle::count_in("x-cost", 50), 100));
    let mut conn = connect(proxy);
    for path in ["/cost/4", "/cost/4", "/cost/1", "/"] {
        assert_eq!(get(&mut conn, path, "").status, 200, "{path}");
    }
    // 4 + 4 + 1, and a response without a count keeps its check's 1.
    assert_eq!(get(&mut conn, "/cost/1", "").status, 429);
}
