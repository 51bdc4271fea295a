//! An all-or-nothing set of limits shows every quota a request is under:
//! each limit is its own item of `RateLimit-Policy` and `RateLimit`, read
//! back with a structured-field parser, in process and on Redis alike.
#![cfg(not(loom))]

use http::{HeaderMap, Request, Response, StatusCode};
use std::convert::Infallible;
use std::num::NonZeroU32;
use tower::{Layer, Service, ServiceExt};
use weir_rate::{AllOf, CheckKeyAsync, FixedWindow, Gcra, KeyedLimiter, Quota};
use weir_redis::{FailurePolicy, RedisLimiter, Target};
use weir_test_support::redis_server::RedisServer;
use weir_tower::{GlobalKey, KeyExtractor, KeyFn, RateLimitLayer};

fn nz(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).expect("non-zero")
}

/// 10 a second with bursts of 20, and 1000 a day.
fn per_second() -> Gcra {
    Gcra::new(Quota::per_second(nz(10)).allow_burst(nz(20)))
}

fn per_day() -> FixedWindow {
    FixedWindow::new(Quota::per_day(nz(1000)))
}

/// Each item of a structured-field list: its string and its integer
/// parameters, in order.
fn items(headers: &HeaderMap, name: &str) -> Vec<(String, Vec<(String, i64)>)> {
    let value = headers
        .get(name)
        .unwrap_or_else(|| panic!("no {name}"))
        .to_str()
        .expect("ASCII");
    let list = sfv::Parser::new(value)
        .parse_list()
        .unwrap_or_else(|e| panic!("{name}: {value:?} is not a structured-field list: {e}"));
    list.into_iter()
        .map(|entry| {
            let sfv::ListEntry::Item(item) = entry else {
                panic!("{name}: an inner list in {value:?}")
            };
            let string = item
                .bare_item
                .as_string()
                .expect("a string")
                .as_str()
                .to_owned();
            let params = item
                .params
                .iter()
                .map(|(k, v)| {
                    (
                        k.as_str().to_owned(),
                        v.as_integer().expect("integer").into(),
                    )
                })
                .collect();
            (string, params)
        })
        .collect()
}

/// Five requests through a layer named `api` in front of `limiter`; the
/// headers of the fifth.
async fn fifth<L, X>(limiter: L, key: X) -> HeaderMap
where
    X: KeyExtractor<()> + Clone + Send + Sync + 'static,
    L: CheckKeyAsync<X::Key>,
{
    let hello = tower::service_fn(|_: Request<()>| async {
        Ok::<_, Infallible>(Response::new(String::new()))
    });
    let mut service = RateLimitLayer::new(limiter, key)
        .policy_name("api")
        .layer(hello);
    let mut last = None;
    for _ in 0..5 {
        let response = service
            .ready()
            .await
            .expect("ready")
            .call(Request::new(()))
            .await
            .expect("infallible");
        assert_eq!(response.status(), StatusCode::OK);
        last = Some(response.headers().clone());
    }
    last.expect("five responses")
}

fn check_every_quota_is_listed(headers: &HeaderMap) {
    let policy = items(headers, "ratelimit-policy");
    let to_i = |v: &[(String, i64)], k: &str| v.iter().find(|(n, _)| n == k).map(|(_, x)| *x);
    assert_eq!(policy.len(), 2, "{policy:?}");
    assert_eq!(policy[0].0, "api-1s");
    assert_eq!(
        (to_i(&policy[0].1, "q"), to_i(&policy[0].1, "w")),
        (Some(10), Some(1))
    );
    assert_eq!(policy[1].0, "api-1d");
    assert_eq!(
        (to_i(&policy[1].1, "q"), to_i(&policy[1].1, "w")),
        (Some(1000), Some(86_400))
    );
    let state = items(headers, "ratelimit");
    assert_eq!(state.len(), 2, "{state:?}");
    assert_eq!(state[0].0, "api-1s");
    assert_eq!(
        to_i(&state[0].1, "r"),
        Some(15),
        "a burst of 20, five spent"
    );
    assert_eq!(to_i(&state[0].1, "t"), Some(1));
    assert_eq!(state[1].0, "api-1d");
    assert_eq!(
        to_i(&state[1].1, "r"),
        Some(995),
        "a thousand a day, five spent"
    );
    let reset = to_i(&state[1].1, "t").expect("t");
    assert!((1..=86_400).contains(&reset), "{reset}");
}

#[tokio::test]
async fn an_in_process_set_lists_each_quota() {
    let limiter: KeyedLimiter<(), _> = KeyedLimiter::new((per_second(), per_day()));
    check_every_quota_is_listed(&fifth(limiter, GlobalKey).await);
    // Nested: an AllOf of one kind inside a pair still lists each limit.
    let limiter: KeyedLimiter<(), _> =
        KeyedLimiter::new((AllOf::new(vec![per_second()]), per_day()));
    check_every_quota_is_listed(&fifth(limiter, GlobalKey).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_set_lists_each_quota() {
    let Some(server) = RedisServer::start_or_skip("all-of headers").expect("fixture") else {
        return;
    };
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let limiter = RedisLimiter::builder(per_second())
        .and(per_day())
        .prefix(format!("headers-{nanos}"))
        .on_failure(FailurePolicy::Closed)
        .connect(Target::server(server.url()))
        .await
        .expect("a limiter");
    let everyone = KeyFn::new(|_: &Request<()>| Some("everyone".to_owned()));
    check_every_quota_is_listed(&fifth(limiter, everyone).await);
}
