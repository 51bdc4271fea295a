//! The HTTP load run: a hello-world axum service on loopback, bare and
//! behind weir's layers, loaded in the same run by an in-process hyper
//! client with keep-alive connections. The layers' goal is to cost under 5%
//! of the bare service's throughput.
//!
//! Throughput is what the goal names, but on a 2-core VM whose neighbours
//! come and go, requests per second swing by more than 5% between
//! back-to-back runs of the same binary. So the run measures the quantity
//! that sets a saturated server's throughput instead: the server's CPU
//! time per request. The server is a one-worker tokio runtime pinned to
//! its own core (the client gets the other one), so everything it does —
//! accepting, parsing, routing, the layers, writing — runs on one thread,
//! whose CPU clock (`CLOCK_THREAD_CPUTIME_ID`) is read at the start and end
//! of each counting window. Work stolen by other processes does not land
//! on that clock, which is what makes the figure steadier than wall-clock
//! rates. The variants run in many short alternating rounds; each round
//! gives a paired ratio against that round's bare run, and the report
//! quotes the median ratio with its range. Requests per second are
//! reported beside it, as are the in-process figures (no sockets).

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
        Variant::RateAndInflight => hello.layer(tower::ServiceBuilder::new().layer(rate()).layer(
            InflightLayer::new(
                KeyFn::new(|req: &http::Request<axum::body::Body>| {
                    Some(req.uri().path().to_owned())
                }),
                1_000_000,
            ),
        )),
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

/// The calling thread's CPU time so far, in nanoseconds (0 where the clock
/// is unavailable).
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the call only writes it.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0;
    }
    u64::try_from(ts.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(ts.tv_nsec).unwrap_or(0)
}

/// What one load run measured.
#[derive(Debug, Clone, Copy, Default)]
pub struct Load {
    /// Requests answered per second of wall-clock time.
    pub per_second: f64,
    /// The server thread's CPU time per answered request, in nanoseconds.
    pub server_ns: f64,
}

/// Serve `variant` on loopback and load it with `connections` concurrent
/// keep-alive clients for `duration`. The server runs on the first core
/// and the client on the second (when there are two), each in its own
/// one-worker runtime, so that what differs between variants is the
/// service, not where the scheduler put things.
pub fn load(variant: Variant, connections: usize, duration: Duration) -> Load {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let server_rt = pinned_runtime(0);
    let client_rt = pinned_runtime(1 % cores);
    let listener = server_rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("bind loopback");
    let addr = listener.local_addr().expect("local addr");
    let app = router(variant).into_make_service_with_connect_info::<SocketAddr>();
    let server = server_rt.spawn(async move { axum::serve(listener, app).await });
    // Runs on the server's only worker thread: its CPU clock.
    let server_handle = server_rt.handle().clone();
    let server_cpu = move || server_handle.spawn(async { thread_cpu_ns() });
    let measured = client_rt.block_on(async move {
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
        let cpu_start = server_cpu().await.unwrap_or(0);
        let start_count = done.load(Ordering::Relaxed);
        let start = Instant::now();
        tokio::time::sleep(duration).await;
        let count = done.load(Ordering::Relaxed) - start_count;
        let elapsed = start.elapsed();
        let cpu = server_cpu().await.unwrap_or(0).saturating_sub(cpu_start);
        stop.store(true, Ordering::Relaxed);
        for worker in workers {
            let _ = worker.await;
        }
        Load {
            per_second: count as f64 / elapsed.as_secs_f64(),
            server_ns: cpu as f64 / count.max(1) as f64,
        }
    });
    server.abort();
    measured
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

/// The median and the interquartile range (the middle half) of `xs`,
/// which must not be empty.
fn median_and_quartiles(xs: &mut [f64]) -> (f64, f64, f64) {
    xs.sort_by(f64::total_cmp);
    let at = |q: f64| {
        let x = q * (xs.len() - 1) as f64;
        let (lo, hi) = (x.floor() as usize, x.ceil() as usize);
        xs[lo] + (xs[hi] - xs[lo]) * (x - lo as f64)
    };
    (at(0.5), at(0.25), at(0.75))
}

/// The report section.
pub fn run(report: &mut Report) {
    let scale = report.scale();
    let duration = scale.pick(Duration::from_millis(700), Duration::from_millis(1500));
    let rounds = scale.pick(6, 15);
    let connections = 32;
    report.section("HTTP: the tower layers' cost (loopback load run)");
    report.text(&format!(
        "A hello-world axum service on 127.0.0.1, loaded by {connections} keep-alive hyper clients in the same process \
         for {duration:?} per round, {rounds} rounds, the three services alternating within each round (in an order that rotates). The server runs on core 0 \
         and the client on core 1, each in its own one-worker tokio runtime. **Server CPU per request** is the server \
         thread's CPU time over the requests it answered — what bounds a saturated server's throughput, and steady where \
         wall-clock rates on this VM are not; each round's figure is divided by the same round's bare figure, the \
         median of those paired ratios is the overhead and their middle half shows the spread. Requests per second (median over rounds) are shown for reference: \
         here the client, not the server, is the bottleneck, so they hide the layers' cost."
    ));
    let variants = [
        Variant::Bare,
        Variant::RateLimited,
        Variant::RateAndInflight,
    ];
    let mut runs: Vec<[Load; 3]> = Vec::with_capacity(rounds);
    for round in 0..rounds {
        report.progress(&format!("load run, round {} of {rounds}", round + 1));
        // The order rotates from round to round, so no variant always runs
        // first (on a cold heap) or last.
        let mut this = [Load::default(); 3];
        for step in 0..variants.len() {
            let i = (round + step) % variants.len();
            this[i] = load(variants[i], connections, duration);
        }
        runs.push(this);
    }
    let mut table = Table::new([
        "service",
        "server CPU per request",
        "overhead (median of paired rounds)",
        "middle half of rounds",
        "requests/s",
    ]);
    for (i, variant) in variants.iter().enumerate() {
        let (ns, _, _) =
            median_and_quartiles(&mut runs.iter().map(|r| r[i].server_ns).collect::<Vec<_>>());
        let (rps, _, _) =
            median_and_quartiles(&mut runs.iter().map(|r| r[i].per_second).collect::<Vec<_>>());
        let (ratio, lo, hi) = median_and_quartiles(
            &mut runs
                .iter()
                .map(|r| r[i].server_ns / r[0].server_ns.max(1e-9))
                .collect::<Vec<_>>(),
        );
        let (overhead, range) = if i == 0 {
            ("—".to_owned(), "—".to_owned())
        } else {
            (
                format!("{:+.1}%", (ratio - 1.0) * 100.0),
                format!("{:+.1}% … {:+.1}%", (lo - 1.0) * 100.0, (hi - 1.0) * 100.0),
            )
        };
        table.row([
            variant.name().to_string(),
            format!("{:.2} µs", ns / 1000.0),
            overhead,
            range,
            thousands(rps as u64),
        ]);
    }
    report.table(&table);
    let (bare_server_ns, _, _) =
        median_and_quartiles(&mut runs.iter().map(|r| r[0].server_ns).collect::<Vec<_>>());

    // Interleaved repetitions, the fastest kept: noise only ever adds time.
    let requests = scale.pick(200_000, 500_000);
    let mut fastest = [f64::INFINITY; 3];
    for repetition in 0..5 {
        report.progress(&format!("in-process, repetition {} of 5", repetition + 1));
        for (i, variant) in variants.iter().enumerate() {
            fastest[i] = fastest[i].min(in_process_ns(*variant, requests));
        }
    }
    let bare = fastest[0];
    let mut table = Table::new([
        "service",
        "ns per request (in-process, fastest of 5)",
        "layers' cost",
        "share of the bare server's CPU per request",
    ]);
    for (i, variant) in variants.iter().enumerate() {
        let ns = fastest[i];
        table.row([
            variant.name().to_string(),
            format!("{ns:.0}"),
            format!("{:+.0} ns", ns - bare),
            format!("{:+.1}%", 100.0 * (ns - bare) / bare_server_ns.max(1.0)),
        ]);
    }
    report.text("The same services called in-process (no sockets), which isolates the layers' own cost per request from the network stack; \
                 set against the bare server's CPU time per request above, it is a second, steadier estimate of the overhead:");
    report.table(&table);
}
