use super::*;
use crate::{GlobalKey, KeyFn};
use std::convert::Infallible;
use std::num::NonZeroU32;
use std::time::Duration;
use tower::ServiceExt;
use weir_rate::clock::ManualClock;
use weir_rate::{FixedWindow, KeyedLimiter, LeakyBucket, NeverAllowed, Quota};

fn hello()
-> impl Service<Request<()>, Response = Response<String>, Error = Infallible, Future: Send>
+ Clone
+ Send
+ 'static {
    tower::service_fn(|_req: Request<()>| async {
        Ok::<_, Infallible>(Response::new("hello".to_string()))
    })
}

fn per_minute(n: u32) -> (KeyedLimiter<(), FixedWindow, ManualClock>, ManualClock) {
    let clock = ManualClock::new();
    let quota = Quota::per_minute(NonZeroU32::new(n).unwrap());
    (
        KeyedLimiter::with_clock(FixedWindow::new(quota), clock.clone()),
        clock,
    )
}

#[tokio::test]
async fn allows_the_quota_then_answers_429_with_headers() {
    let (limiter, clock) = per_minute(3);
    let service = RateLimitLayer::new(limiter, GlobalKey)
        .policy_name("api")
        .layer(hello());
    for remaining in [2, 1, 0] {
        let response = service.clone().oneshot(Request::new(())).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers()["ratelimit-policy"], "\"api\";q=3;w=60");
        assert_eq!(
            response.headers()["ratelimit"],
            format!("\"api\";r={remaining};t=60").as_str()
        );
        assert!(response.headers().get("retry-after").is_none());
    }
    let denied = service.clone().oneshot(Request::new(())).await.unwrap();
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(denied.headers()["retry-after"], "60");
    assert_eq!(denied.headers()["ratelimit"], "\"api\";r=0;t=60");
    clock.advance(Duration::from_secs(60));
    let again = service.oneshot(Request::new(())).await.unwrap();
    assert_eq!(again.status(), StatusCode::OK);
}

/// A shaper admits a burst but spaces it out: each admitted request is
/// held for its decision's delay before the service sees it, and a layer in
/// shadow mode holds nothing back.
#[tokio::test(start_paused = true)]
async fn a_shaper_spaces_out_the_requests_it_admits() {
    for shadow in [false, true] {
        let quota = Quota::per_second(NonZeroU32::new(10).unwrap());
        let shaper = LeakyBucket::try_shaper(quota, Duration::from_millis(250)).unwrap();
        let limiter = KeyedLimiter::with_clock(shaper, ManualClock::new());
        let service = RateLimitLayer::new(limiter, GlobalKey)
            .shadow(shadow)
            .layer(hello());
        let start = tokio::time::Instant::now();
        let requests: Vec<_> = (0..4)
            .map(|_| {
                let service = service.clone();
                tokio::spawn(async move {
                    let response = service.oneshot(Request::new(())).await.unwrap();
                    (start.elapsed(), response.status())
                })
            })
            .collect();
        let mut answered = Vec::new();
        for request in requests {
            answered.push(request.await.unwrap());
        }
        answered.sort();
        let statuses: Vec<StatusCode> = answered.iter().map(|a| a.1).collect();
        let times: Vec<Duration> = answered.iter().map(|a| a.0).collect();
        if shadow {
            assert_eq!(statuses, [StatusCode::OK; 4], "{answered:?}");
            assert!(times[3] < Duration::from_millis(25), "{answered:?}");
            continue;
        }
        // Three fit the queue, leaving at 0, 100 and 200 ms; the fourth
        // would wait 300 ms, past the 250 allowed: refused at once.
        assert_eq!(
            statuses,
            [
                StatusCode::OK,
                StatusCode::TOO_MANY_REQUESTS,
                StatusCode::OK,
                StatusCode::OK
            ],
            "{answered:?}"
        );
        for (at, due) in [(times[0], 0), (times[2], 100), (times[3], 200)] {
            let due = Duration::from_millis(due);
            assert!(
                at >= due && at <= due + Duration::from_millis(25),
                "{answered:?}"
            );
        }
    }
}

/// A denial is answered at once, even when a shaper in an all-of limit
/// would have delayed the request: only an admission waits.
#[tokio::test(start_paused = true)]
async fn a_denial_never_waits_a_shapers_delay() {
    let quota = Quota::per_second(NonZeroU32::new(10).unwrap());
    let shaper = LeakyBucket::try_shaper(quota, Duration::from_secs(1)).unwrap();
    let once = FixedWindow::new(Quota::per_minute(NonZeroU32::new(1).unwrap()));
    let limiter = KeyedLimiter::with_clock((shaper, once), ManualClock::new());
    let mut service = RateLimitLayer::new(limiter, GlobalKey).layer(hello());
    let first = service.ready().await.unwrap().call(Request::new(()));
    assert_eq!(first.await.unwrap().status(), StatusCode::OK);
    let denied = service.ready().await.unwrap().call(Request::new(()));
    assert!(
        matches!(denied.state, RateLimitFutureState::Answered { .. }),
        "a denial took the waiting path"
    );
    assert_eq!(
        denied.await.unwrap().status(),
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[tokio::test]
async fn costs_weigh_requests_and_impossible_costs_are_refused_without_retry_after() {
    let (limiter, _clock) = per_minute(10);
    let service = RateLimitLayer::new(limiter, GlobalKey)
        .cost_fn(|req: &Request<()>| if req.uri().path() == "/heavy" { 6 } else { 1 })
        .layer(hello());
    let heavy = || Request::builder().uri("/heavy").body(()).unwrap();
    assert_eq!(
        service.clone().oneshot(heavy()).await.unwrap().status(),
        StatusCode::OK
    );
    assert_eq!(
        service.clone().oneshot(heavy()).await.unwrap().status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    let light = service.clone().oneshot(Request::new(())).await.unwrap();
    assert_eq!(light.status(), StatusCode::OK);
    let (limiter, _clock) = per_minute(2);
    let service = RateLimitLayer::new(limiter, GlobalKey)
        .cost_fn(|_: &Request<()>| 3)
        .layer(hello());
    let never = service.oneshot(Request::new(())).await.unwrap();
    assert_eq!(never.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(never.headers().get("retry-after").is_none());
    assert!(never.headers().contains_key("x-ratelimit-error"));
}

#[tokio::test]
async fn a_quota_changed_at_run_time_shows_in_the_policy_header() {
    let (limiter, _clock) = per_minute(3);
    let limiter = Arc::new(limiter);
    let service = RateLimitLayer::shared(Arc::clone(&limiter), GlobalKey).layer(hello());
    let before = service.clone().oneshot(Request::new(())).await.unwrap();
    assert_eq!(before.headers()["ratelimit-policy"], "\"default\";q=3;w=60");
    limiter.set_limit(FixedWindow::new(Quota::per_minute(
        NonZeroU32::new(5).unwrap(),
    )));
    let after = service.oneshot(Request::new(())).await.unwrap();
    assert_eq!(after.headers()["ratelimit-policy"], "\"default\";q=5;w=60");
    assert_eq!(after.headers()["ratelimit"], "\"default\";r=3;t=60");
}

#[tokio::test]
async fn shadow_mode_never_denies_but_marks() {
    let (limiter, _clock) = per_minute(1);
    let service = RateLimitLayer::new(limiter, GlobalKey)
        .shadow(true)
        .layer(hello());
    let first = service.clone().oneshot(Request::new(())).await.unwrap();
    assert!(first.headers().get("x-ratelimit-shadow").is_none());
    let second = service.oneshot(Request::new(())).await.unwrap();
    assert_eq!(second.status(), StatusCode::OK);
    assert_eq!(second.headers()["x-ratelimit-shadow"], "denied");
}

/// Stacked layers (a per-minute and a per-day policy, say) each add their
/// policy to the response's lists instead of replacing the other's, so a
/// refusal names the policy that refused. `Retry-After` is set only by the
/// layer that refuses: a response let through keeps the origin's own (a
/// maintenance 503's), and a shadow denial adds none.
#[tokio::test]
async fn stacked_layers_add_their_policies_and_only_a_refusal_sets_retry_after() {
    let (outer, _) = per_minute(100);
    let (inner, _) = per_minute(1);
    let service = RateLimitLayer::new(outer, GlobalKey)
        .policy_name("outer")
        .layer(
            RateLimitLayer::new(inner, GlobalKey)
                .policy_name("inner")
                .layer(hello()),
        );
    let first = service.clone().oneshot(Request::new(())).await.unwrap();
    let listed = |r: &Response<_>, name: &str| {
        r.headers()
            .get_all(name)
            .iter()
            .map(|v| v.to_str().unwrap().to_owned())
            .collect::<Vec<_>>()
            .join(", ")
    };
    assert_eq!(
        listed(&first, "ratelimit"),
        "\"inner\";r=0;t=60, \"outer\";r=99;t=60"
    );
    assert_eq!(
        listed(&first, "ratelimit-policy"),
        "\"inner\";q=1;w=60, \"outer\";q=100;w=60"
    );
    let refused = service.oneshot(Request::new(())).await.unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(
        listed(&refused, "ratelimit").starts_with("\"inner\";r=0"),
        "{refused:?}"
    );
    assert_eq!(listed(&refused, "retry-after"), "60");

    let (limiter, _) = per_minute(1);
    let maintenance = tower::service_fn(|_req: Request<()>| async {
        let mut response = Response::new(String::new());
        *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
        response
            .headers_mut()
            .insert("retry-after", http::HeaderValue::from_static("3600"));
        Ok::<_, Infallible>(response)
    });
    let shadowed = RateLimitLayer::new(limiter, GlobalKey)
        .shadow(true)
        .layer(maintenance);
    for _ in 0..2 {
        let response = shadowed.clone().oneshot(Request::new(())).await.unwrap();
        assert_eq!(listed(&response, "retry-after"), "3600", "{response:?}");
    }
}

/// A checker that answers only after a real wait, like a network backend.
struct Slow(KeyedLimiter<(), FixedWindow, ManualClock>);

impl CheckKeyAsync<()> for Slow {
    type Future = Pin<Box<dyn Future<Output = Result<Decision, NeverAllowed>> + Send>>;

    fn check_n_async(&self, key: &(), cost: u32) -> Self::Future {
        let outcome = self.0.check_n(key, cost);
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(2)).await;
            outcome
        })
    }
}

#[tokio::test]
async fn checkers_that_must_wait_take_the_same_decisions() {
    let (limiter, _clock) = per_minute(2);
    let service = RateLimitLayer::new(Slow(limiter), GlobalKey)
        .policy_name("api")
        .layer(hello());
    let first = service.clone().oneshot(Request::new(())).await.unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(first.headers()["ratelimit"], "\"api\";r=1;t=60");
    assert_eq!(
        service
            .clone()
            .oneshot(Request::new(()))
            .await
            .unwrap()
            .status(),
        StatusCode::OK
    );
    let denied = service.oneshot(Request::new(())).await.unwrap();
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(denied.headers()["retry-after"], "60");
}

#[tokio::test]
async fn overload_limits_answer_503_and_keys_are_separate() {
    let clock = ManualClock::new();
    let quota = Quota::per_minute(NonZeroU32::new(1).unwrap());
    let limiter = KeyedLimiter::with_clock(FixedWindow::new(quota), clock);
    let by_header = KeyFn::new(|req: &Request<()>| {
        req.headers()
            .get("x-user")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    });
    let service = RateLimitLayer::new(limiter, by_header)
        .denied_status(StatusCode::SERVICE_UNAVAILABLE)
        .layer(hello());
    let status_for = |user: &str| {
        let request = Request::builder().header("x-user", user).body(()).unwrap();
        let service = service.clone();
        async move { service.oneshot(request).await.unwrap().status() }
    };
    assert_eq!(status_for("a").await, StatusCode::OK);
    assert_eq!(status_for("b").await, StatusCode::OK);
    assert_eq!(status_for("a").await, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        service.oneshot(Request::new(())).await.unwrap().status(),
        StatusCode::INTERNAL_SERVER_ERROR
    );
}

/// A limiter of tiers: each response names its key's tier in the fields
/// (and in the metrics' `limiter` label), and a key under no limit gets no
/// fields at all.
fn tiered_service()
-> impl Service<Request<()>, Response = Response<String>, Error = Infallible, Future: Send> + Clone
{
    use weir_rate::{Gcra, Tier, TieredLimiter};
    let per_minute = |n| Gcra::new(Quota::per_minute(NonZeroU32::new(n).unwrap()));
    let tiers = TieredLimiter::<String, _, _>::try_new(
        vec![
            Tier::limited("free", per_minute(2)),
            Tier::limited("paid", per_minute(5)),
            Tier::unlimited("internal"),
        ],
        "free",
        |key: &str| match key {
            "pk" => Some("paid"),
            "ops" => Some("internal"),
            _ => None,
        },
    )
    .unwrap();
    let by_header = KeyFn::new(|req: &Request<()>| {
        req.headers()
            .get("x-api-key")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    });
    RateLimitLayer::new(tiers, by_header)
        .policy_name("api")
        .layer(hello())
}

async fn call(
    service: &(impl Service<Request<()>, Response = Response<String>, Error = Infallible> + Clone),
    key: &str,
) -> Response<String> {
    let request = Request::builder()
        .header("x-api-key", key)
        .body(())
        .unwrap();
    service.clone().oneshot(request).await.unwrap()
}

#[tokio::test]
async fn each_keys_tier_names_its_fields() {
    let service = tiered_service();
    for remaining in [1, 0] {
        let free = call(&service, "anon").await;
        assert_eq!(free.status(), StatusCode::OK);
        assert_eq!(free.headers()["ratelimit-policy"], "\"free\";q=2;w=60");
        assert!(
            free.headers()["ratelimit"]
                .to_str()
                .unwrap()
                .starts_with(&format!("\"free\";r={remaining};"))
        );
    }
    let refused = call(&service, "anon").await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(refused.headers()["ratelimit-policy"], "\"free\";q=2;w=60");
    assert!(refused.headers().contains_key("retry-after"));
    let paid = call(&service, "pk").await;
    assert_eq!(paid.headers()["ratelimit-policy"], "\"paid\";q=5;w=60");
    for _ in 0..20 {
        let internal = call(&service, "ops").await;
        assert_eq!(internal.status(), StatusCode::OK);
        assert!(internal.headers().get("ratelimit-policy").is_none());
        assert!(internal.headers().get("ratelimit").is_none());
    }
}

#[cfg(all(feature = "metrics", not(loom)))]
#[test]
fn each_keys_tier_labels_its_decisions() {
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    metrics::with_local_recorder(&recorder, || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async {
            let service = tiered_service();
            for key in ["anon", "anon", "anon", "pk", "ops"] {
                let _ = call(&service, key).await;
            }
        });
    });
    let text = handle.render();
    let sample = |tier: &str, outcome: &str| {
        text.lines()
            .find(|l| {
                l.starts_with("weir_rate_decisions_total")
                    && l.contains(&format!("limiter=\"{tier}\""))
                    && l.contains(&format!("outcome=\"{outcome}\""))
            })
            .and_then(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
    };
    assert_eq!(sample("free", "ok"), Some(2), "{text}");
    assert_eq!(sample("free", "over_limit"), Some(1), "{text}");
    assert_eq!(sample("paid", "ok"), Some(1), "{text}");
    assert_eq!(sample("internal", "ok"), Some(1), "{text}");
    assert_eq!(
        sample("api", "ok"),
        None,
        "the layer's own name counts nothing"
    );
}
