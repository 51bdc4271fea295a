//! weir inside a real pingora proxy: what each way of limiting costs the
//! proxy per request, against bare proxying and against pingora's own
//! `rate_limiter` example (pingora-limits' `Rate`), all served by one
//! pingora server before one loopback origin, loaded by the same
//! keep-alive clients, interleaved slice by slice ([`slices`]).

use crate::harness::machine;
use crate::harness::report::{Report, thousands};
use crate::harness::slices::{self, Slice};
use async_trait::async_trait;
use axum::Router;
use axum::routing::get;
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use pingora::http::ResponseHeader;
use pingora::prelude::*;
use pingora::proxy::{ProxyHttp, Session, http_proxy_service_with_name};
use pingora_limits::rate::Rate;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::num::{NonZeroU32, NonZeroUsize};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use weir_adaptive::{Gradient2, KeyedAdaptiveLimiter};
use weir_pingora::{AdaptivePermit, ClientIp, HeaderKey, Passage, RateLimit, UpstreamAdaptive};
use weir_rate::{Gcra, KeyedLimiter, Quota};
use weir_redis::{RedisLimiter, Target};
use weir_test_support::redis_server::RedisServer;

/// The variants, by the index a request's context carries.
const NAMES: [&str; 6] = [
    "proxying (bare)",
    "pingora-limits Rate, 1 s window by `appid` (pingora's rate_limiter example)",
    "weir RateLimit: per-IP GCRA in process, with the RateLimit fields",
    "weir RateLimit: the same, fields only on refusals",
    "weir RateLimit: per-`appid` GCRA on Redis, with the RateLimit fields",
    "weir UpstreamAdaptive: Gradient2 per upstream",
];
const PINGORA_EXAMPLE: usize = 1;
const PER_IP: usize = 2;
const PER_IP_NO_FIELDS: usize = 3;
const ON_REDIS: usize = 4;
const ADAPTIVE: usize = 5;
const N: usize = NAMES.len();

/// pingora's example answers a request over its limit with a 429 and
/// closes the connection; the limit here is one no load reaches, so every
/// request is counted and passes.
const PINGORA_LIMIT: isize = 1 << 40;

/// The proxy of the run: every variant, the one answering chosen when a
/// request's context is made.
struct Bench {
    origin: SocketAddr,
    current: Arc<AtomicUsize>,
    dispatched: Arc<[AtomicU64; N]>,
    refused: Arc<[AtomicU64; N]>,
    window: Rate,
    per_ip: RateLimit<KeyedLimiter<String, Gcra>, ClientIp>,
    on_redis: RateLimit<RedisLimiter, HeaderKey>,
    adaptive: UpstreamAdaptive<Gradient2>,
    /// The proxy's runtime, for reading its thread's CPU clock.
    runtime: Arc<OnceLock<tokio::runtime::Handle>>,
}

struct Ctx {
    variant: usize,
    passage: Passage,
    permit: Option<AdaptivePermit<Gradient2>>,
}

#[async_trait]
impl ProxyHttp for Bench {
    type CTX = Ctx;

    fn new_ctx(&self) -> Ctx {
        let variant = self.current.load(Ordering::Relaxed);
        self.dispatched[variant].fetch_add(1, Ordering::Relaxed);
        if self.runtime.get().is_none()
            && let Ok(handle) = tokio::runtime::Handle::try_current()
        {
            let _ = self.runtime.set(handle);
        }
        Ctx {
            variant,
            passage: Passage::default(),
            permit: None,
        }
    }

    async fn request_filter(&self, session: &mut Session, ctx: &mut Ctx) -> Result<bool> {
        let refused = match ctx.variant {
            PINGORA_EXAMPLE => pingora_example(&self.window, session).await?,
            PER_IP | PER_IP_NO_FIELDS => {
                self.per_ip
                    .request_filter(session, &mut ctx.passage)
                    .await?
            }
            ON_REDIS => {
                self.on_redis
                    .request_filter(session, &mut ctx.passage)
                    .await?
            }
            _ => false,
        };
        if refused {
            self.refused[ctx.variant].fetch_add(1, Ordering::Relaxed);
        }
        Ok(refused)
    }

    async fn upstream_peer(&self, _: &mut Session, ctx: &mut Ctx) -> Result<Box<HttpPeer>> {
        let peer = HttpPeer::new(self.origin, false, String::new());
        if ctx.variant == ADAPTIVE {
            match self.adaptive.acquire(&peer) {
                Ok(permit) => ctx.permit = Some(permit),
                Err(e) => {
                    self.refused[ADAPTIVE].fetch_add(1, Ordering::Relaxed);
                    return Err(e);
                }
            }
        }
        Ok(Box::new(peer))
    }

    async fn response_filter(
        &self,
        _: &mut Session,
        response: &mut ResponseHeader,
        ctx: &mut Ctx,
    ) -> Result<()> {
        match ctx.variant {
            PER_IP => self.per_ip.response_filter(response, &mut ctx.passage),
            ON_REDIS => self.on_redis.response_filter(response, &mut ctx.passage),
            _ => Ok(()),
        }
    }

    async fn logging(&self, session: &mut Session, error: Option<&Error>, ctx: &mut Ctx) {
        if let Some(permit) = ctx.permit.take() {
            permit.finish(session, error);
        }
    }
}

/// What pingora's `rate_limiter` example does in `request_filter`: count
/// the request in the `appid`'s window and, past the limit, answer 429
/// with its `X-Rate-Limit-*` headers and close the connection.
async fn pingora_example(window: &Rate, session: &mut Session) -> Result<bool> {
    let Some(appid) = session
        .req_header()
        .headers
        .get("appid")
        .and_then(|v| v.to_str().ok())
    else {
        return Ok(false);
    };
    if window.observe(&appid, 1) <= PINGORA_LIMIT {
        return Ok(false);
    }
    let mut header = ResponseHeader::build(429, None)?;
    header.insert_header("X-Rate-Limit-Limit", PINGORA_LIMIT.to_string())?;
    header.insert_header("X-Rate-Limit-Remaining", "0")?;
    header.insert_header("X-Rate-Limit-Reset", "1")?;
    session.set_keepalive(None);
    session
        .write_response_header(Box::new(header), true)
        .await?;
    Ok(true)
}

/// The report section.
pub fn run(report: &mut Report) {
    let scale = report.scale();
    let (slice, cycles, connections) = (Duration::from_millis(50), scale.pick(30, 120), 32);
    report.section("pingora: weir's limits inside a pingora proxy (loopback load run)");
    let Some(redis) = RedisServer::start_or_skip("the pingora section").expect("redis fixture")
    else {
        report.text("Skipped: no `redis-server` to run the Redis variant against.");
        return;
    };
    let round_trip = machine::cross_core_round_trip_ns(100_000);
    report.text(&format!(
        "One pingora server (one service thread, pinned to core 0) proxies to a hello-world axum origin on 127.0.0.1, \
         loaded by {connections} keep-alive hyper clients in the same process (origin and clients share core 1), each \
         client from its own loopback address (127.0.0.2, …) and with its own `appid` header. The proxy serves every \
         variant, switching which one answers every {slice:?}, in {cycles} cycles (the order rotating). **Proxy CPU per \
         request** is the proxy thread's CPU time over the requests it took in a variant's slices; the overhead is its \
         ratio to bare proxying. No rate limit refuses at this load (the quotas are out of reach), so every such request does \
         the same work beyond the limit's own; the adaptive limit learns the saturated proxy's own queueing as \
         latency and sheds what the `refused` column counts (each a quick 503). The Redis variant's `redis-server` runs on this machine too, its CPU not \
         counted. Cross-core round trip on this run: {round_trip:.0} ns."
    ));
    report.progress(&format!("load run: {cycles} cycles of {N} × {slice:?}"));
    let (measured, refused) = load_interleaved(&redis, connections, slice, cycles);
    let refused = |i: usize| thousands(refused[i]);
    report.table(&slices::overhead_table(
        &measured,
        (NAMES, "proxy CPU per request"),
        Some(("refused", &refused)),
    ));
}

fn load_interleaved(
    redis: &RedisServer,
    connections: usize,
    slice: Duration,
    cycles: usize,
) -> (Vec<[Slice; N]>, [u64; N]) {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let side = machine::pinned_runtime(1 % cores);
    let origin = side
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("bind the origin");
    let origin_addr = origin.local_addr().expect("origin address");
    let hello = Router::new().route("/", get(|| async { "hello" }));
    side.spawn(axum::serve(origin, hello).into_future());
    let quota = Quota::per_second(NonZeroU32::MAX);
    let on_redis = side
        .block_on(
            RedisLimiter::builder(Gcra::new(quota))
                .prefix("pingora-bench")
                .connect(Target::server(redis.url())),
        )
        .expect("connect to redis");
    let current = Arc::new(AtomicUsize::new(0));
    let dispatched = Arc::new([const { AtomicU64::new(0) }; N]);
    let refused = Arc::new([const { AtomicU64::new(0) }; N]);
    let runtime = Arc::new(OnceLock::new());
    let bench = Bench {
        origin: origin_addr,
        current: Arc::clone(&current),
        dispatched: Arc::clone(&dispatched),
        refused: Arc::clone(&refused),
        window: Rate::new(Duration::from_secs(1)),
        per_ip: RateLimit::new(
            ClientIp::new(),
            KeyedLimiter::new(Gcra::new(quota)),
            "per-ip",
        ),
        on_redis: RateLimit::new(HeaderKey::new("appid"), on_redis, "per-app"),
        adaptive: UpstreamAdaptive::new(KeyedAdaptiveLimiter::new(
            Gradient2::default(),
            NonZeroUsize::MIN,
        )),
        runtime: Arc::clone(&runtime),
    };
    let listen = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
        probe.local_addr().expect("its address")
    };
    // The proxy runs until the process ends (pingora's servers do not stop
    // but by signal).
    std::thread::spawn(move || {
        let mut server = Server::new(None).expect("a pingora server");
        server.bootstrap();
        let mut service = http_proxy_service_with_name(&server.configuration, bench, "bench proxy");
        service.add_tcp(&listen.to_string());
        server.add_service(service);
        server.run_forever();
    });
    while std::net::TcpStream::connect(listen).is_err() {
        std::thread::sleep(Duration::from_millis(10));
    }

    let stop = Arc::new(AtomicBool::new(false));
    let uri: http::Uri = format!("http://{listen}/").parse().expect("uri");
    let workers: Vec<_> = (0..connections)
        .map(|i| {
            let (uri, stop) = (uri.clone(), Arc::clone(&stop));
            side.spawn(async move {
                let mut connector = HttpConnector::new();
                let octet = u8::try_from(2 + i % 250).unwrap_or(2);
                connector.set_local_address(Some(IpAddr::V4(Ipv4Addr::new(127, 0, 0, octet))));
                let client: Client<_, Empty<Bytes>> =
                    Client::builder(TokioExecutor::new()).build(connector);
                let appid = format!("app-{i}");
                while !stop.load(Ordering::Relaxed) {
                    let request = http::Request::get(uri.clone())
                        .header("appid", &appid)
                        .body(Empty::new())
                        .expect("a request");
                    let Ok(response) = client.request(request).await else {
                        tokio::time::sleep(Duration::from_millis(1)).await;
                        continue;
                    };
                    let _ = response.into_body().collect().await;
                }
            })
        })
        .collect();
    let measured = side.block_on(async {
        // Let the connections open, the proxy's runtime be seen, the
        // caches warm.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let handle = loop {
            if let Some(handle) = runtime.get() {
                break handle.clone();
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        handle
            .spawn(async { machine::pin_to_cpu(0) })
            .await
            .expect("pin the proxy");
        let proxy_cpu_ns = || {
            let read = handle.spawn(async { machine::thread_cpu_nanos().unwrap_or(0) });
            async move { read.await.unwrap_or(0) }
        };
        let measured = slices::interleave(cycles, slice, &current, &dispatched, proxy_cpu_ns).await;
        stop.store(true, Ordering::Relaxed);
        for worker in workers {
            let _ = worker.await;
        }
        measured
    });
    let refused = std::array::from_fn(|i| refused[i].load(Ordering::Relaxed));
    // The origin and the clients' runtime would block dropping here while
    // the proxy keeps connections open; it lives as long as the process.
    std::mem::forget(side);
    (measured, refused)
}
