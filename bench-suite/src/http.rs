//! The HTTP load run: a hello-world axum service on loopback, bare and
//! behind weir's layers, loaded by an in-process hyper client with
//! keep-alive connections; the layers' goal is to cost under 5% of the bare
//! service's throughput.
//!
//! On a 2-core VM whose neighbours come and go, requests per second swing
//! by more than 5% between back-to-back runs, so the run measures what sets
//! a saturated server's throughput instead: the server's CPU time per
//! request, read from the CPU clock of its only worker thread (pinned to
//! its own core), which work stolen by other processes does not reach.

use crate::harness::contest;
use crate::harness::machine;
use crate::harness::report::{Report, Table};
use crate::harness::slices::{self, Slice};
use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::routing::get;
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tower::ServiceExt;
use weir_adaptive::{Gradient2, KeyedAdaptiveLimiter};
use weir_rate::{Gcra, KeyedLimiter, Quota};
use weir_tower::{AdaptiveInflightLayer, InflightLayer, KeyFn, RateLimitLayer, Settle};

/// The services compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// Hello world, no layer.
    Bare,
    /// Behind a per-IP GCRA `RateLimitLayer` (never denying at this load).
    RateLimited,
    /// Behind the rate limit and a per-route `InflightLayer`, composed with
    /// one `ServiceBuilder` in one `Router::layer` call.
    RateAndInflight,
    /// The same two layers applied by two `Router::layer` calls (in-process
    /// table only): what composing them first saves.
    RateAndInflightSeparately,
    /// Behind a per-route `AdaptiveInflightLayer` learning its limit with
    /// Gradient2 (never refusing at this load).
    Adaptive,
    /// The per-IP rate limit charging by the response body's bytes
    /// (`settle(Settle::body_bytes())`, in-process table only): what
    /// settling after the response adds.
    RateLimitedSettled,
}

const NAMES: [&str; 6] = [
    "hello world (bare)",
    "+ RateLimitLayer (per-IP GCRA)",
    "+ RateLimitLayer + InflightLayer",
    "+ the same two layers by two Router::layer calls",
    "+ AdaptiveInflightLayer (per-route, Gradient2)",
    "+ RateLimitLayer settling by body bytes (per-IP GCRA)",
];

const ALL: [Variant; 6] = [
    Variant::Bare,
    Variant::RateLimited,
    Variant::RateAndInflight,
    Variant::RateAndInflightSeparately,
    Variant::Adaptive,
    Variant::RateLimitedSettled,
];

/// The services of the load run, in the order of every per-variant array
/// here.
const VARIANTS: [Variant; 4] = [
    Variant::Bare,
    Variant::RateLimited,
    Variant::RateAndInflight,
    Variant::Adaptive,
];

fn router(variant: Variant) -> Router {
    let hello = Router::new().route("/", get(|| async { "hello" }));
    let peer_ip = |req: &http::Request<Body>| {
        req.extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .map(|c| c.0.ip())
    };
    let path = |req: &http::Request<Body>| Some(req.uri().path().to_owned());
    // A quota no load here can reach: the layer decides and writes headers
    // on every request, but never denies.
    let quota = Quota::per_second(NonZeroU32::new(u32::MAX).expect("non-zero"));
    let rate = || {
        RateLimitLayer::shared(
            Arc::new(KeyedLimiter::new(Gcra::new(quota))),
            KeyFn::new(peer_ip),
        )
    };
    let inflight = || InflightLayer::new(KeyFn::new(path), 1_000_000);
    let router = match variant {
        Variant::Bare => hello,
        Variant::RateLimited => hello.layer(rate()),
        Variant::RateAndInflight => {
            hello.layer(tower::ServiceBuilder::new().layer(rate()).layer(inflight()))
        }
        // Outermost last, as with the ServiceBuilder: rate, then in-flight.
        Variant::RateAndInflightSeparately => hello.layer(inflight()).layer(rate()),
        Variant::Adaptive => hello.layer(AdaptiveInflightLayer::new(
            KeyFn::new(path),
            KeyedAdaptiveLimiter::new(Gradient2::default(), std::num::NonZeroUsize::MIN),
        )),
        Variant::RateLimitedSettled => hello.layer(rate().settle(Settle::body_bytes())),
    };
    // `with_state(())` finalises the routes once; without it axum rebuilds
    // every route (and re-applies its layers) on each request.
    router.with_state(())
}

/// Serve every variant from one server on loopback, switching which one
/// answers every `slice`, in `cycles` cycles of one slice per variant
/// ([`slices::interleave`]), while `connections` keep-alive clients load
/// it; each cycle's slices, indexed like [`VARIANTS`]. The dispatch in
/// front of the variants (an atomic load and a router clone) is the same
/// for all: it dilutes the measured overhead, never inflates it.
fn load_interleaved(
    connections: usize,
    slice: Duration,
    cycles: usize,
) -> Vec<[Slice; VARIANTS.len()]> {
    let routers = Arc::new(VARIANTS.map(router));
    let current = Arc::new(AtomicUsize::new(0));
    let dispatched = Arc::new([const { AtomicU64::new(0) }; VARIANTS.len()]);
    let dispatch = {
        let (routers, current, dispatched) = (routers, current.clone(), dispatched.clone());
        tower::service_fn(move |request: http::Request<Body>| {
            let i = current.load(Ordering::Relaxed);
            dispatched[i].fetch_add(1, Ordering::Relaxed);
            routers[i].clone().oneshot(request)
        })
    };
    let (server_rt, client_rt, addr) =
        machine::serve_loopback(Router::new().fallback_service(dispatch));
    // Runs on the server's only worker thread, so its thread clock is the
    // server's clock.
    let server_cpu_ns = || machine::thread_cpu_nanos().unwrap_or(0);
    let slicer = server_rt.spawn(async move {
        // Let the connections open and the caches warm.
        tokio::time::sleep(Duration::from_millis(300)).await;
        slices::interleave(cycles, slice, &current, &dispatched, || {
            std::future::ready(server_cpu_ns())
        })
        .await
    });
    client_rt.block_on(async move {
        let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(connections)
            .build_http();
        let uri: http::Uri = format!("http://{addr}/").parse().expect("uri");
        let stop = Arc::new(AtomicBool::new(false));
        let worker = |_| {
            let (client, uri, stop) = (client.clone(), uri.clone(), stop.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let Ok(response) = client.get(uri.clone()).await else {
                        break;
                    };
                    let _ = response.into_body().collect().await;
                }
            })
        };
        let workers: Vec<_> = (0..connections).map(worker).collect();
        let measured = slicer.await.expect("the slicer task");
        stop.store(true, Ordering::Relaxed);
        for worker in workers {
            let _ = worker.await;
        }
        measured
    })
}

/// Nanoseconds per request of `variant` called in-process (no sockets), on
/// a current-thread runtime.
pub fn in_process_ns(variant: Variant, requests: u32) -> f64 {
    time_in_process(router(variant), requests)
}

/// ns per request of the per-IP `RateLimitLayer` in-process whose counters
/// found no recorder (what a build with the `metrics` feature costs a
/// service that installs none), and with its decisions counted into a
/// Prometheus recorder. The layer registers its counters on its first
/// decision, so the recorded router answers one request under a
/// thread-local recorder first; no global recorder is installed.
fn metrics_cost_ns(requests: u32) -> (f64, f64) {
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let recorded = router(Variant::RateLimited);
    metrics::with_local_recorder(&recorder, || time_in_process(recorded.clone(), 1));
    let counted = time_in_process(recorded, requests);
    (
        time_in_process(router(Variant::RateLimited), requests),
        counted,
    )
}

fn time_in_process(router: Router, requests: u32) -> f64 {
    let peer = ConnectInfo(SocketAddr::from(([127, 0, 0, 1], 40_000)));
    time_service(router, requests, move || {
        let mut req = http::Request::new(Body::empty());
        req.extensions_mut().insert(peer);
        req
    })
}

/// Nanoseconds per request of `service` called in-process (no sockets) on
/// a current-thread runtime, after up to 1000 requests to warm up.
pub(crate) fn time_service<S>(
    service: S,
    requests: u32,
    request: impl Fn() -> http::Request<Body>,
) -> f64
where
    S: tower::Service<http::Request<Body>> + Clone,
{
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("tokio runtime");
    runtime.block_on(async move {
        for _ in 0..requests.min(1000) {
            let _ = service.clone().oneshot(request()).await;
        }
        let start = Instant::now();
        for _ in 0..requests {
            std::hint::black_box(service.clone().oneshot(request()).await.is_ok());
        }
        start.elapsed().as_nanos() as f64 / f64::from(requests)
    })
}

/// The report section.
pub fn run(report: &mut Report) {
    let scale = report.scale();
    let (slice, cycles, connections) = (Duration::from_millis(50), scale.pick(40, 150), 32);
    report.section("HTTP: the tower layers' cost (loopback load run)");
    report.text(&format!(
        "A hello-world axum service on 127.0.0.1, loaded by {connections} keep-alive hyper clients in the same process. \
         One server process serves every variant, switching which one answers every {slice:?}, in {cycles} cycles \
         (one slice per variant, the order rotating), so the machine's noise, slower than a cycle, hits them all alike. \
         The server runs on core 0 and the client on core 1, each in its own one-worker tokio runtime. \
         **Server CPU per request** is the server thread's CPU time over the requests it answered in a variant's slices — \
         what bounds a saturated server's throughput. The overhead is the ratio to the bare service's, over all slices \
         pooled and as the median (and middle half) of the per-cycle ratios. Requests per second are shown for reference: \
         here the client, not the server, is the bottleneck, so they hide the layers' cost."
    ));
    report.progress(&format!("load run: {cycles} cycles of 4 × {slice:?}"));
    let measured = load_interleaved(connections, slice, cycles);
    let bare_server_ns = slices::pooled(&measured, 0).0;
    let names = VARIANTS.map(|v| NAMES[v as usize]);
    report.table(&slices::overhead_table(
        &measured,
        (names, "server CPU per request"),
        None,
    ));

    // Interleaved repetitions, the fastest kept: noise only ever adds time.
    let requests = scale.pick(200_000, 500_000);
    let runs = contest::rotate(report, "in-process", NAMES.len(), 5, |v, _| {
        in_process_ns(ALL[v], requests)
    });
    let fastest: Vec<f64> = contest::spreads(&runs, |x| *x)
        .iter()
        .map(|s| s.min)
        .collect();
    let mut table = Table::new(
        "service | ns per request (in-process, fastest of 5) | layers' cost | share of the bare server's CPU per request",
    );
    for (name, ns) in NAMES.iter().zip(&fastest) {
        let cost = ns - fastest[0];
        let share = 100.0 * cost / bare_server_ns.max(1.0);
        table.row(format!("{name} | {ns:.0} | {cost:+.0} ns | {share:+.1}%"));
    }
    report.text("The same services called in-process (no sockets), which isolates the layers' own cost per request from the network stack; \
                 set against the bare server's CPU time per request above, it is a second, steadier estimate of the overhead:");
    report.table(&table);

    // The `metrics` feature: counted into a recorder, against the same
    // layer with no recorder, alternating, every repetition kept.
    let pairs = contest::rotate(report, "metrics cost", 1, 5, |_, _| {
        metrics_cost_ns(requests)
    });
    let ns = |f: fn(&(f64, f64)) -> f64, sign: &str| {
        let spread = contest::spreads(&pairs, f)[0];
        spread.show_each(|x| {
            if sign.is_empty() {
                format!("{x:.0}")
            } else {
                format!("{x:+.0}")
            }
        })
    };
    let mut table =
        Table::new("per-IP RateLimitLayer, in-process | ns per request (min / median / max of 5)");
    table.row(format!(
        "no recorder (feature on, nothing installed) | {}",
        ns(|p| p.0, "")
    ));
    table.row(format!(
        "decisions counted into a Prometheus recorder | {}",
        ns(|p| p.1, "")
    ));
    table.row(format!(
        "cost of counting (paired difference) | {}",
        ns(|p| p.1 - p.0, "+")
    ));
    report.text("weir-tower's `metrics` feature: each decision increments one pre-registered counter. Without the feature the \
                 counting code is compiled out; with it and no recorder installed, the counters are no-ops:");
    report.table(&table);
}
