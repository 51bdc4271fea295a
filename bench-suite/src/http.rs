//! The HTTP load run: requests per second of a hello-world axum service on
//! loopback, bare and behind weir's layers, measured in the same run by an
//! in-process hyper client with keep-alive connections. The layers' goal is
//! to cost under 5% of the bare service's throughput.
//!
//! The server and the client each get one core (pinned, one-worker
//! runtimes), and each variant runs in several alternating rounds with the
//! best round kept: what varies between rounds is noise from the machine,
//! not the layers. On this 2-core VM that noise is still several percent,
//! the size of the effect measured, so the in-process figures (no sockets)
//! are reported beside it.

use crate::report::{Report, Table, thousands};
use axum::Router;
use axum::extract::ConnectInfo;
use axum::routing::get;
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use weir_rate::http::{InflightLayer, KeyFn, RateLimitLayer};
use weir_rate::{Gcra, KeyedLimiter, Quota};

/// The three services compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// Hello world, no layer.
    Bare,
    /// Behind a per-IP GCRA `RateLimitLayer` (never denying at this load).
    RateLimited,
    /// Behind the rate limit and a per-route `InflightLayer`.
    RateAndInflight,
}

impl Variant {
    fn name(self) -> &'static str {
        match self {
            Variant::Bare => "hello world (bare)",
            Variant::RateLimited => "+ RateLimitLayer (per-IP GCRA)",
            Variant::RateAndInflight => "+ RateLimitLayer + InflightLayer",
        }
    }
}

fn peer_ip<B>(req: &http::Request<B>) -> Option<IpAddr> {
    req.extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip())
}

/// The service of a variant.
pub fn router(variant: Variant) -> Router {
    let hello = Router::new().route("/", get(|| async { "hello" }));
    // A quota no load here can reach: the layer decides and writes headers
    // on every request, but never denies.
    let quota = Quota::per_second(NonZeroU32::new(u32::MAX).expect("non-zero"));
    let rate = || {
        RateLimitLayer::shared(
            Arc::new(KeyedLimiter::new(Gcra::new(quota))),
            KeyFn::new(peer_ip),
        )
    };
    // `with_state(())` finalises the routes once; without it axum rebuilds
    // every route (and re-applies its layers) on each request.
    let router = match variant {
        Variant::Bare => hello,
        Variant::RateLimited => hello.layer(rate()),
        Variant::RateAndInflight => hello
            .layer(InflightLayer::new(
                KeyFn::new(|req: &http::Request<axum::body::Body>| {
                    Some(req.uri().path().to_owned())
                }),
                1_000_000,
            ))
            .layer(rate()),
    };
    router.with_state(())
}

/// Pin the calling thread to one CPU (best effort: a no-op where the
/// kernel refuses), so server and client stop trading places on the cores.
fn pin_to_cpu(cpu: usize) {
    // SAFETY: `set` is a plain bit set on a zeroed, correctly sized
    // `cpu_set_t`, and `sched_setaffinity(0, ..)` only changes the calling
    // thread's affinity; a failure leaves it unchanged and is ignored.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        let _ = libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// A one-worker runtime whose threads all run on `cpu`.
fn pinned_runtime(cpu: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .on_thread_start(move || pin_to_cpu(cpu))
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// Serve `variant` on loopback and load it with `connections` concurrent
/// keep-alive clients for `duration`; returns requests per second. The
/// server runs on the first core and the client on the second (when there
/// are two), each in its own one-worker runtime, so that what differs
/// between variants is the service, not where the scheduler put things.
pub fn load(variant: Variant, connections: usize, duration: Duration) -> f64 {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let server_rt = pinned_runtime(0);
    let client_rt = pinned_runtime(1 % cores);
    let listener = server_rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("bind loopback");
    let addr = listener.local_addr().expect("local addr");
    let app = router(variant).into_make_service_with_connect_info::<SocketAddr>();
    let server = server_rt.spawn(async move { axum::serve(listener, app).await });
    let rate = client_rt.block_on(async move {
        let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(connections)
            .build_http();
        let uri: http::Uri = format!("http://{addr}/").parse().expect("uri");
        let done = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let workers: Vec<_> = (0..connections)
            .map(|_| {
                let (client, uri, done, stop) =
                    (client.clone(), uri.clone(), done.clone(), stop.clone());
                tokio::spawn(async move {
                    while !stop.load(Ordering::Relaxed) {
                        let Ok(response) = client.get(uri.clone()).await else {
                            break;
                        };
                        let ok = response.status().is_success();
                        let _ = response.into_body().collect().await;
                        if ok {
                            done.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                })
            })
            .collect();
        // Warm up the connections, then count.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let start_count = done.load(Ordering::Relaxed);
        let start = Instant::now();
        tokio::time::sleep(duration).await;
        let count = done.load(Ordering::Relaxed) - start_count;
        let elapsed = start.elapsed();
        stop.store(true, Ordering::Relaxed);
        for worker in workers {
            let _ = worker.await;
        }
        count as f64 / elapsed.as_secs_f64()
    });
    server.abort();
    rate
}

/// Nanoseconds per request of `variant` called in-process (no sockets): the
/// router answering a request that carries a peer address, on a
/// current-thread runtime.
pub fn in_process_ns(variant: Variant, requests: u32) -> f64 {
    use tower::ServiceExt;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("tokio runtime");
    let router = router(variant);
    let peer = ConnectInfo(SocketAddr::from(([127, 0, 0, 1], 40_000)));
    runtime.block_on(async move {
        let request = || {
            let mut req = http::Request::new(axum::body::Body::empty());
            req.extensions_mut().insert(peer);
            req
        };
        for _ in 0..1000 {
            let _ = router.clone().oneshot(request()).await;
        }
        let start = Instant::now();
        for _ in 0..requests {
            let response = router.clone().oneshot(request()).await.expect("infallible");
            std::hint::black_box(response);
        }
        start.elapsed().as_nanos() as f64 / f64::from(requests)
    })
}

/// The report section.
pub fn run(report: &mut Report) {
    let scale = report.scale();
    let duration = scale.pick(Duration::from_millis(1500), Duration::from_secs(5));
    let rounds = scale.pick(2, 3);
    let connections = 32;
    report.section("HTTP: the tower layers' cost (loopback load run)");
    report.text(&format!(
        "A hello-world axum service on 127.0.0.1, loaded by {connections} keep-alive hyper clients in the same process \
         for {duration:?} per round, {rounds} alternating rounds, best round kept. The server runs on core 0 and the client on core 1, \
         each in its own one-worker tokio runtime."
    ));
    let variants = [
        Variant::Bare,
        Variant::RateLimited,
        Variant::RateAndInflight,
    ];
    let mut best = [0f64; 3];
    for round in 0..rounds {
        for (i, variant) in variants.iter().enumerate() {
            report.progress(&format!("round {} {}", round + 1, variant.name()));
            best[i] = best[i].max(load(*variant, connections, duration));
        }
    }
    let mut table = Table::new(["service", "requests/s", "vs bare", "overhead"]);
    for (i, variant) in variants.iter().enumerate() {
        table.row([
            variant.name().to_string(),
            thousands(best[i] as u64),
            format!("{:.3}", best[i] / best[0]),
            format!("{:+.1}%", (1.0 - best[i] / best[0]) * 100.0),
        ]);
    }
    report.table(&table);

    let requests = scale.pick(200_000, 1_000_000);
    let bare = in_process_ns(Variant::Bare, requests);
    let mut table = Table::new(["service", "ns per request (in-process)", "layers' cost"]);
    for variant in variants {
        report.progress(&format!("in-process {}", variant.name()));
        let ns = if variant == Variant::Bare {
            bare
        } else {
            in_process_ns(variant, requests)
        };
        table.row([
            variant.name().to_string(),
            format!("{ns:.0}"),
            format!("{:+.0} ns", ns - bare),
        ]);
    }
    report.text("The same services called in-process (no sockets), which isolates the layers' own cost per request from the network stack:");
    report.table(&table);
}
