//! Every scenario against a private redis-server.

use super::failures::reported;
use super::*;
use weir_redis::{FailurePolicy, RedisLimiter, Target};
use weir_test_support::redis_server::RedisServer;

async fn limiter(server: &RedisServer, name: &str, limit: u32) -> RedisLimiter {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    RedisLimiter::builder(FixedWindow::new(Quota::per_hour(
        NonZeroU32::new(limit).unwrap(),
    )))
    .prefix(format!("settle-{name}-{}-{nanos}", std::process::id()))
    .on_failure(FailurePolicy::Closed)
    .connect(Target::server(server.url()))
    .await
    .expect("a limiter")
}

macro_rules! on_redis {
    ($name:ident, |$server:ident| $body:expr) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            let Some($server) = RedisServer::start_or_skip(stringify!($name)).expect("fixture")
            else {
                return;
            };
            $body.await;
        }
    };
}

on_redis!(redis_charges_the_bytes_streamed, |server| async {
    charges_the_bytes_streamed(limiter(&server, "bytes", 10_000).await, 10_000).await;
});

on_redis!(
    redis_a_generous_admission_is_partly_refunded,
    |server| async {
        a_generous_admission_is_partly_refunded(limiter(&server, "partial", 1000).await, 1000)
            .await;
    }
);

on_redis!(
    redis_a_client_gone_mid_stream_pays_for_what_was_sent,
    |server| async {
        let limiter = limiter(&server, "gone", 1_000_000).await;
        a_client_gone_mid_stream_pays_for_what_was_sent(limiter, 1_000_000).await;
    }
);

on_redis!(redis_only_server_errors_count, |server| async {
    only_server_errors_count(limiter(&server, "5xx", 3).await).await;
});

on_redis!(
    redis_settled_debt_denies_and_denials_settle_nothing,
    |server| async {
        settled_debt_denies_and_denials_settle_nothing(limiter(&server, "debt", 100).await).await;
    }
);

on_redis!(redis_tokens_from_header_trailer_or_usage, |server| async {
    let by_header = limiter(&server, "header", 1000).await;
    let by_usage = limiter(&server, "usage", 1000).await;
    tokens_from_header_trailer_or_usage(by_header, by_usage, 1000).await;
});

/// Redis gone after admission: the settlement fails, is reported, and
/// the response is unharmed.
#[test]
fn redis_down_at_settlement_is_reported() {
    let Some(mut server) =
        RedisServer::start_or_skip("redis_down_at_settlement_is_reported").expect("fixture")
    else {
        return;
    };
    let before = reported();
    {
        let rt = super::failures::one_thread();
        rt.block_on(async {
            let limiter = limiter(&server, "down", 1000).await;
            let (tx, rx) = mpsc::unbounded_channel::<Frame<Bytes>>();
            let feed = Arc::new(Mutex::new(Some(rx)));
            let app = Router::new()
                .route(
                    "/feed",
                    get(move || {
                        let feed = Arc::clone(&feed);
                        async move { Body::new(Fed(feed.lock().unwrap().take().unwrap())) }
                    }),
                )
                .layer(RateLimitLayer::new(limiter, by_user()).settle(Settle::body_bytes()));
            let addr = serve(app).await;
            let client = client();
            tx.send(Frame::data(Bytes::from_static(b"first"))).unwrap();
            let request = Request::get(format!("http://{addr}/feed"))
                .header("x-user", "judy")
                .body(Empty::new())
                .unwrap();
            let response = client.request(request).await.expect("admitted");
            assert_eq!(response.status(), StatusCode::OK);
            // Redis dies while the body streams; the body then ends.
            server.kill();
            tx.send(Frame::data(Bytes::from_static(b"second"))).unwrap();
            drop(tx);
            let body = tokio::time::timeout(PATIENCE, response.into_body().collect())
                .await
                .expect("the body ends in time")
                .expect("the body arrives")
                .to_bytes();
            assert_eq!(&body[..], b"firstsecond");
            let deadline = tokio::time::Instant::now() + PATIENCE;
            while reported() - before < 1 {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "the failure went unreported"
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        });
    }
}

// The same limiters behind `AnyLimiter`, as a service that picks its
// store from configuration holds them: charged by the bytes streamed and
// partly refunded, in process and on Redis alike.
on_redis!(
    any_limiter_settles_in_process_and_on_redis,
    |server| async {
        use weir_rate::AnyLimiter;
        let on_redis: AnyLimiter<String> =
            AnyLimiter::new(limiter(&server, "any-bytes", 10_000).await);
        charges_the_bytes_streamed(on_redis, 10_000).await;
        let in_process: AnyLimiter<String> = AnyLimiter::new(in_process(10_000));
        charges_the_bytes_streamed(in_process, 10_000).await;
        let on_redis: AnyLimiter<String> =
            AnyLimiter::new(limiter(&server, "any-partial", 1000).await);
        a_generous_admission_is_partly_refunded(on_redis, 1000).await;
    }
);
