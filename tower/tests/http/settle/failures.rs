//! A settlement that cannot be made is reported, never lost and never a panic.

use super::*;

/// A settler whose settlements fail after a wait, like a backend that is
/// down: the response is unharmed, nothing panics, and each failure is
/// reported through `tracing`.
struct Unsettleable(KeyedLimiter<String, FixedWindow, ManualClock>);

impl CheckKeyAsync<String> for Unsettleable {
    type Future = std::future::Ready<Result<Decision, NeverAllowed>>;

    fn check_n_async(&self, key: &String, cost: u32) -> Self::Future {
        std::future::ready(self.0.check_n(key, cost))
    }
}

impl SettleKey<String> for Unsettleable {
    type Error = std::io::Error;
    type Settling = Pin<Box<dyn Future<Output = Result<(), std::io::Error>> + Send>>;

    fn settle(&self, _: &String, _: &Decision, _from: u32, _to: u32) -> Self::Settling {
        Box::pin(async {
            tokio::time::sleep(Duration::from_millis(1)).await;
            Err(std::io::Error::other("backend down"))
        })
    }
}

/// Warnings of failed settlements emitted on this thread so far, under
/// weir-tower's own target (so `RUST_LOG=weir_tower=warn` shows them).
pub(super) fn reported() -> usize {
    warnings::on_this_thread("weir_tower::settle: weir-tower: a settlement failed")
}

/// A current-thread runtime: what a server on it does (and warns about)
/// happens on the test's own thread.
pub(super) fn one_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// Serve through `checker`, settling by the bytes sent, and stream `n`
/// responses of 20 bytes to `user`, each arriving whole.
async fn stream_settled_by_bytes<Ch: SettleKey<String>>(checker: Ch, user: &str, n: usize) {
    let app = routes().layer(RateLimitLayer::new(checker, by_user()).settle(Settle::body_bytes()));
    let addr = serve(app).await;
    let client = client();
    for _ in 0..n {
        let got = get_as(&client, addr, user, "/stream/2/10").await;
        assert_eq!((got.status, got.body.len()), (StatusCode::OK, 20));
    }
}

#[test]
fn a_failed_settlement_is_reported_not_lost_and_never_panics() {
    let before = reported();
    let since = || reported() - before;
    {
        let rt = one_thread();
        rt.block_on(async {
            stream_settled_by_bytes(Unsettleable(in_process(100)), "ivy", 3).await;
            let deadline = tokio::time::Instant::now() + PATIENCE;
            while since() < 3 {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "failures unreported"
                );
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        });
    }
    assert_eq!(since(), 3, "one report per failed settlement");
}

/// The value of the sample of `metric` whose labels include every one of
/// `labels`, or 0 when there is none.
#[cfg(feature = "metrics")]
fn sample(text: &str, metric: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(metric) && !l.starts_with('#'))
        .filter(|l| labels.iter().all(|label| l.contains(label)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[cfg(feature = "metrics")]
#[test]
fn settlements_are_counted_by_outcome() {
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    // A recorder of this thread's own, so other tests in the binary do not
    // count here; one thread, so it sees the server's tasks too.
    metrics::with_local_recorder(&recorder, || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let bytes = routes().layer(
                RateLimitLayer::new(in_process(10_000), by_user())
                    .policy_name("bytes")
                    .settle(Settle::body_bytes()),
            );
            let down = routes().layer(
                RateLimitLayer::new(Unsettleable(in_process(100)), by_user())
                    .policy_name("down")
                    .settle(Settle::body_bytes()),
            );
            let (bytes, down) = (serve(bytes).await, serve(down).await);
            let client = client();
            for path in ["/stream/4/500", "/stream/1/1", "/empty", "/empty"] {
                assert_eq!(
                    get_as(&client, bytes, "kim", path).await.status,
                    StatusCode::OK
                );
            }
            assert_eq!(
                get_as(&client, down, "kim", "/stream/2/10").await.status,
                StatusCode::OK
            );
            let deadline = tokio::time::Instant::now() + PATIENCE;
            let metric = "weir_rate_settlements_total";
            while sample(&handle.render(), metric, &["limiter=\"down\""]) < 1.0 {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "the failure went uncounted"
                );
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        });
    });
    let text = handle.render();
    let count = |limiter: &str, outcome: &str| {
        sample(
            &text,
            "weir_rate_settlements_total",
            &[
                &format!("limiter=\"{limiter}\""),
                &format!("outcome=\"{outcome}\""),
            ],
        )
    };
    assert_eq!(count("bytes", "charge"), 1.0, "{text}");
    assert_eq!(count("bytes", "refund"), 2.0, "{text}");
    assert_eq!(count("bytes", "error"), 0.0, "{text}");
    assert_eq!(count("down", "error"), 1.0, "{text}");
}

/// A settler whose settlements never finish, like a backend that stopped
/// answering without closing the connection.
struct Unanswered(KeyedLimiter<String, FixedWindow, ManualClock>);

impl CheckKeyAsync<String> for Unanswered {
    type Future = std::future::Ready<Result<Decision, NeverAllowed>>;

    fn check_n_async(&self, key: &String, cost: u32) -> Self::Future {
        std::future::ready(self.0.check_n(key, cost))
    }
}

impl SettleKey<String> for Unanswered {
    type Error = std::io::Error;
    type Settling = std::future::Pending<Result<(), std::io::Error>>;

    fn settle(&self, _: &String, _: &Decision, _from: u32, _to: u32) -> Self::Settling {
        std::future::pending()
    }
}

/// A settlement still waiting when its runtime shuts down is dropped with
/// the runtime's tasks: it is reported as failed, not lost in silence.
#[test]
fn a_settlement_cut_off_by_runtime_shutdown_is_reported() {
    let before = reported();
    let rt = one_thread();
    rt.block_on(async {
        stream_settled_by_bytes(Unanswered(in_process(100)), "jo", 2).await;
        // Let the server see both bodies end and start their settlements.
        tokio::time::sleep(Duration::from_millis(20)).await;
    });
    assert_eq!(reported() - before, 0, "nothing failed yet");
    drop(rt);
    assert_eq!(
        reported() - before,
        2,
        "one report per settlement the shutdown cut off"
    );
}
