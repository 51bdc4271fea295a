//! Adaptive concurrency limits judged on a real backend under overload
//! (`cargo xtask bench --only adaptive`).
//!
//! The backend is an axum server on loopback whose requests each hold one
//! of `C` permits for a fixed service time, queueing first come first
//! served for a permit: its capacity is `C / service` requests per second,
//! and beyond `C` in flight latency grows with the queue. An open-loop
//! generator (Poisson arrivals, seeded, the same schedule for everyone)
//! offers three times that capacity; `C` is halved a third of the way
//! through and restored at two thirds. The limiter under test sits in the
//! server in front of the handler, as envoy's adaptive concurrency filter
//! does, and refuses with 503. Contenders run one after another on the
//! same schedule: no limit; weir's static `InflightLayer` at the true
//! capacity and at 4× it; `tower-acc`'s Gradient2 and Vegas (its queueing
//! `poll_ready` turned into 503s by tower's `LoadShed`); weir's AIMD, Vegas
//! and Gradient2 through `AdaptiveInflightLayer`.
//!
//! The server and the client run in one-worker tokio runtimes pinned to
//! separate cores, as in the HTTP section. The generator gives up on an
//! arrival while 512 of its requests are outstanding (only the unlimited
//! backend gets there), and on a request after 2 s.

use crate::machine;
use crate::plot::{LinePlot, Series};
use crate::report::{Report, Table};
use axum::Router;
use axum::error_handling::HandleErrorLayer;
use axum::routing::get;
use http::StatusCode;
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use rand::SeedableRng;
use rand_distr::Distribution;
use std::num::{NonZeroU32, NonZeroUsize};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;
use weir_rate::adaptive::{Aimd, Algorithm, Gradient2, KeyedAdaptiveLimiter, Vegas};
use weir_rate::http::{AdaptiveInflightLayer, GlobalKey, InflightLayer};

/// Requests the backend serves at once.
pub const CAPACITY: u32 = 32;
/// How long the backend takes per request.
pub const SERVICE: Duration = Duration::from_millis(50);
/// Offered load as a multiple of the capacity.
pub const OVERLOAD: f64 = 3.0;
/// The generator gives up on arrivals beyond this many outstanding.
const OUTSTANDING: usize = 512;
/// ... and on a request after this long.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(2);
/// weir's default bounds (AIMD's are set to the same).
const MIN_LIMIT: u32 = 1;
const INITIAL_LIMIT: u32 = 20;
const MAX_LIMIT: u32 = 1000;

/// The backend's nominal capacity in requests per second at full `C`.
fn full_rate() -> f64 {
    f64::from(CAPACITY) / SERVICE.as_secs_f64()
}

/// `C` permits with a debt: halving makes the next `C / 2` permits given
/// back vanish, so capacity falls as fast as requests finish.
#[derive(Clone)]
struct Backend {
    permits: Arc<Semaphore>,
    debt: Arc<AtomicU32>,
    /// Total time permits were held, and how many requests held one: the
    /// timer's granularity makes a service a little longer than
    /// [`SERVICE`], so capacity is measured, not assumed.
    held_ns: Arc<AtomicU64>,
    served: Arc<AtomicU64>,
}

impl Backend {
    fn new() -> Self {
        Self {
            permits: Arc::new(Semaphore::new(CAPACITY as usize)),
            debt: Arc::new(AtomicU32::new(0)),
            held_ns: Arc::new(AtomicU64::new(0)),
            served: Arc::new(AtomicU64::new(0)),
        }
    }

    /// The mean time a request held its permit.
    fn service_time(&self) -> Duration {
        let served = self.served.load(Ordering::Relaxed).max(1);
        Duration::from_nanos(self.held_ns.load(Ordering::Relaxed) / served)
    }

    async fn handle(self) -> &'static str {
        let permit = self.permits.acquire().await.expect("never closed");
        let start = Instant::now();
        tokio::time::sleep(SERVICE).await;
        let held = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.held_ns.fetch_add(held, Ordering::Relaxed);
        self.served.fetch_add(1, Ordering::Relaxed);
        let owed = self
            .debt
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |d| d.checked_sub(1));
        if owed.is_ok() {
            permit.forget();
        }
        "ok"
    }

    fn halve(&self) {
        self.debt.fetch_add(CAPACITY / 2, Ordering::Relaxed);
    }

    fn restore(&self) {
        let unpaid = self.debt.swap(0, Ordering::Relaxed);
        self.permits.add_permits((CAPACITY / 2 - unpaid) as usize);
    }
}

/// Who guards the backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Contender {
    /// Nothing: every request queues at the backend.
    NoLimit,
    /// weir's `InflightLayer` with a hand-chosen limit.
    Static(u32),
    /// tower-acc 0.1's Gradient2 behind `LoadShed`.
    AccGradient2,
    /// tower-acc 0.1's Vegas behind `LoadShed`.
    AccVegas,
    /// weir's AIMD (timeout: 1.5 × the unloaded p99).
    Aimd,
    /// weir's Vegas, default settings.
    Vegas,
    /// weir's Gradient2, default settings.
    Gradient2,
}

/// Every contender, in the order they run.
pub const CONTENDERS: [Contender; 8] = [
    Contender::NoLimit,
    Contender::Static(CAPACITY),
    Contender::Static(4 * CAPACITY),
    Contender::AccGradient2,
    Contender::AccVegas,
    Contender::Aimd,
    Contender::Vegas,
    Contender::Gradient2,
];

impl Contender {
    /// Its name in the tables.
    pub fn name(self) -> String {
        match self {
            Contender::NoLimit => "no limit".into(),
            Contender::Static(n) if n == CAPACITY => format!("static {n} (= capacity)"),
            Contender::Static(n) => format!("static {n} ({}× capacity)", n / CAPACITY),
            Contender::AccGradient2 => "tower-acc Gradient2".into(),
            Contender::AccVegas => "tower-acc Vegas".into(),
            Contender::Aimd => "weir AIMD".into(),
            Contender::Vegas => "weir Vegas".into(),
            Contender::Gradient2 => "weir Gradient2".into(),
        }
    }

    fn is_weir_adaptive(self) -> bool {
        matches!(
            self,
            Contender::Aimd | Contender::Vegas | Contender::Gradient2
        )
    }
}

/// Reads a contender's current limit, where it has one.
type LimitProbe = Arc<dyn Fn() -> Option<u32> + Send + Sync>;

/// tower-acc's algorithm with its limit made visible for the plot.
#[derive(Clone)]
struct Observed<A> {
    inner: A,
    limit: Arc<AtomicUsize>,
}

impl<A: tower_acc::Algorithm> tower_acc::Algorithm for Observed<A> {
    fn max_concurrency(&self) -> usize {
        let limit = self.inner.max_concurrency();
        self.limit.store(limit, Ordering::Relaxed);
        limit
    }

    fn update(&mut self, rtt: Duration, in_flight: usize, is_error: bool, is_canceled: bool) {
        self.inner.update(rtt, in_flight, is_error, is_canceled);
    }
}

fn with_acc<A>(base: Router, algorithm: A) -> (Router, LimitProbe)
where
    A: tower_acc::Algorithm + Clone + Send + Sync + 'static,
{
    let limit = Arc::new(AtomicUsize::new(INITIAL_LIMIT as usize));
    let observed = Observed {
        inner: algorithm,
        limit: Arc::clone(&limit),
    };
    let stack = tower::ServiceBuilder::new()
        .layer(HandleErrorLayer::new(|_: tower::BoxError| async {
            StatusCode::SERVICE_UNAVAILABLE
        }))
        .layer(tower::load_shed::LoadShedLayer::new())
        .layer(tower_acc::ConcurrencyLimitLayer::new(observed));
    let probe = move || Some(limit.load(Ordering::Relaxed) as u32);
    (base.layer(stack), Arc::new(probe))
}

fn with_weir<A>(base: Router, algorithm: A) -> (Router, LimitProbe)
where
    A: Algorithm + Clone + Sync,
{
    let limiter = KeyedAdaptiveLimiter::new(algorithm, NonZeroUsize::MIN);
    let layer = AdaptiveInflightLayer::new(GlobalKey, limiter);
    let probe = layer.clone();
    let probe = move || probe.limiter().limit(&()).or(Some(INITIAL_LIMIT));
    (base.layer(layer), Arc::new(probe))
}

fn nz(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).expect("positive")
}

/// The backend's router behind `contender`.
///
/// `with_state` turns the handler into a route once, layers applied: axum
/// otherwise does that for every request, and a layer that makes its state
/// in `Layer::layer` (tower-acc's) would then get a fresh limit per request.
fn router(contender: Contender, backend: &Backend, unloaded_p99: Duration) -> (Router, LimitProbe) {
    let (router, probe) = layered(contender, backend, unloaded_p99);
    (router.with_state(()), probe)
}

fn layered(
    contender: Contender,
    backend: &Backend,
    unloaded_p99: Duration,
) -> (Router, LimitProbe) {
    let backend = backend.clone();
    let base = Router::new().route(
        "/",
        get(move || {
            let backend = backend.clone();
            async move { backend.handle().await }
        }),
    );
    match contender {
        Contender::NoLimit => (base, Arc::new(|| None)),
        Contender::Static(n) => (
            base.layer(InflightLayer::new(GlobalKey, n)),
            Arc::new(move || Some(n)),
        ),
        // As shipped: tower-acc's defaults are Netflix's (Gradient2 within
        // [20, 200], Vegas within [1, 1000], both starting at 20).
        Contender::AccGradient2 => with_acc(base, tower_acc::Gradient2::default()),
        Contender::AccVegas => with_acc(base, tower_acc::Vegas::default()),
        Contender::Aimd => with_weir(
            base,
            Aimd::builder()
                .min_limit(nz(MIN_LIMIT))
                .initial_limit(nz(INITIAL_LIMIT))
                .max_limit(nz(MAX_LIMIT))
                .timeout(unloaded_p99.mul_f64(1.5))
                .build()
                .expect("valid AIMD settings"),
        ),
        Contender::Vegas => with_weir(base, Vegas::default()),
        Contender::Gradient2 => with_weir(base, Gradient2::default()),
    }
}

/// How a request of the generator ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// 200.
    Served,
    /// 503 from the limiter.
    Refused,
    /// Another status, an error, or the client's timeout.
    Failed,
    /// Never sent: too many outstanding.
    GaveUp,
}

/// One request of the generator.
#[derive(Debug, Clone, Copy)]
struct Record {
    /// When it was sent, since the run began.
    sent: Duration,
    latency: Duration,
    kind: Kind,
}

/// One contender's run.
struct Run {
    records: Vec<Record>,
    /// The backend's mean service time.
    service: Duration,
    /// (seconds since the start, limit), every 50 ms.
    limits: Vec<(f64, u32)>,
}

/// The three phases' lengths: full capacity, halved, restored.
#[derive(Debug, Clone, Copy)]
struct Phases {
    each: Duration,
    /// The backend's measured capacity at full `C`, requests per second.
    full: f64,
}

impl Phases {
    fn total(&self) -> Duration {
        self.each * 3
    }

    fn halved_at(&self) -> Duration {
        self.each
    }

    fn restored_at(&self) -> Duration {
        self.each * 2
    }

    /// The backend's capacity (requests per second) at `t`.
    fn capacity(&self, t: Duration) -> f64 {
        if t >= self.halved_at() && t < self.restored_at() {
            self.full / 2.0
        } else {
            self.full
        }
    }
}

/// Poisson arrivals at `rate` per second for `total`, from `seed`.
fn schedule(rate: f64, total: Duration, seed: u64) -> Vec<Duration> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let gap = rand_distr::Exp::new(rate).expect("positive rate");
    let mut t = 0.0;
    let mut arrivals = Vec::new();
    loop {
        t += gap.sample(&mut rng);
        if t >= total.as_secs_f64() {
            return arrivals;
        }
        arrivals.push(Duration::from_secs_f64(t));
    }
}

/// Serves the backend behind `contender` and offers it `arrivals`, halving
/// and restoring its capacity on `phases` (none if `phases` is `None`).
fn load(
    contender: Contender,
    arrivals: &[Duration],
    phases: Option<Phases>,
    unloaded_p99: Duration,
) -> Run {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let server_rt = machine::pinned_runtime(0);
    let client_rt = machine::pinned_runtime(1 % cores);
    let backend = Backend::new();
    let (app, probe) = router(contender, &backend, unloaded_p99);
    let listener = server_rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("bind loopback");
    let addr = listener.local_addr().expect("local addr");
    let server = server_rt.spawn(async move { axum::serve(listener, app).await });
    let arrivals = arrivals.to_vec();
    let run = client_rt.block_on(async move {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(OUTSTANDING)
            .build(connector);
        let uri: http::Uri = format!("http://{addr}/").parse().expect("uri");
        // Open the first connections before the clock starts.
        for _ in 0..4 {
            if let Ok(response) = client.get(uri.clone()).await {
                let _ = response.into_body().collect().await;
            }
        }
        let start = tokio::time::Instant::now();
        let end = arrivals.last().copied().unwrap_or_default();
        let controller = phases.map(|phases| {
            let backend = backend.clone();
            tokio::spawn(async move {
                tokio::time::sleep_until(start + phases.halved_at()).await;
                backend.halve();
                tokio::time::sleep_until(start + phases.restored_at()).await;
                backend.restore();
            })
        });
        let sampler = tokio::spawn(async move {
            let mut limits = Vec::new();
            let mut tick = tokio::time::interval(Duration::from_millis(50));
            loop {
                tick.tick().await;
                let t = start.elapsed();
                if t > end {
                    return limits;
                }
                if let Some(limit) = probe() {
                    limits.push((t.as_secs_f64(), limit));
                }
            }
        });
        let records = Arc::new(Mutex::new(Vec::with_capacity(arrivals.len())));
        let outstanding = Arc::new(AtomicUsize::new(0));
        for &at in &arrivals {
            tokio::time::sleep_until(start + at).await;
            if outstanding.load(Ordering::Relaxed) >= OUTSTANDING {
                records.lock().expect("records").push(Record {
                    sent: at,
                    latency: Duration::ZERO,
                    kind: Kind::GaveUp,
                });
                continue;
            }
            outstanding.fetch_add(1, Ordering::Relaxed);
            let (client, uri) = (client.clone(), uri.clone());
            let (records, outstanding) = (Arc::clone(&records), Arc::clone(&outstanding));
            tokio::spawn(async move {
                let sent = start.elapsed();
                let t0 = Instant::now();
                let answer = tokio::time::timeout(CLIENT_TIMEOUT, async {
                    let response = client.get(uri).await.ok()?;
                    let status = response.status();
                    response.into_body().collect().await.ok()?;
                    Some(status)
                })
                .await;
                let latency = t0.elapsed();
                let kind = match answer {
                    Ok(Some(StatusCode::OK)) => Kind::Served,
                    Ok(Some(StatusCode::SERVICE_UNAVAILABLE)) => Kind::Refused,
                    _ => Kind::Failed,
                };
                records.lock().expect("records").push(Record {
                    sent,
                    latency,
                    kind,
                });
                outstanding.fetch_sub(1, Ordering::Relaxed);
            });
        }
        let drained = tokio::time::Instant::now() + CLIENT_TIMEOUT + Duration::from_millis(500);
        while outstanding.load(Ordering::Relaxed) > 0 && tokio::time::Instant::now() < drained {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        if let Some(controller) = controller {
            let _ = controller.await;
        }
        let limits = sampler.await.unwrap_or_default();
        let mut records = std::mem::take(&mut *records.lock().expect("records"));
        records.sort_by_key(|r| r.sent);
        Run {
            records,
            service: backend.service_time(),
            limits,
        }
    });
    server.abort();
    drop(server_rt);
    drop(client_rt);
    run
}

/// The `q`-quantile of `xs` (sorted in place); zero if empty.
fn quantile(xs: &mut [Duration], q: f64) -> Duration {
    if xs.is_empty() {
        return Duration::ZERO;
    }
    xs.sort_unstable();
    xs[((xs.len() - 1) as f64 * q).round() as usize]
}

/// What the report says about one contender.
#[derive(Debug, Clone)]
pub struct Verdict {
    /// Who.
    pub contender: Contender,
    /// Responses within the SLO per second, as a share of the capacity,
    /// over the whole run.
    pub goodput: f64,
    /// The same, outside the 2 s after each change (and the first second).
    pub goodput_steady: f64,
    /// Latency of admitted (200) requests.
    pub p50: Duration,
    /// Latency of admitted (200) requests.
    pub p99: Duration,
    /// p99 of admitted requests outside the 2 s after each change.
    pub p99_steady: Duration,
    /// Share of requests refused with 503.
    pub refused: f64,
    /// Share of requests failed, timed out or given up on.
    pub failed: f64,
    /// From halving until converged (none if never within the phase).
    pub converged_halved: Option<Duration>,
    /// From restoring until converged.
    pub converged_restored: Option<Duration>,
}

/// Whether `t` lies in a steady stretch: past the first second and past
/// the 2 s after each change.
fn steady(phases: Phases, t: Duration) -> bool {
    let settle = Duration::from_secs(2);
    let after = |change: Duration| t >= change && t < change + settle;
    t >= Duration::from_secs(1) && !after(phases.halved_at()) && !after(phases.restored_at())
}

/// Capacity (requests) offered by the backend over the times `keep` accepts,
/// integrated in 10 ms steps.
fn capacity_over(phases: Phases, keep: impl Fn(Duration) -> bool) -> f64 {
    let step = Duration::from_millis(10);
    let mut t = Duration::ZERO;
    let mut total = 0.0;
    while t < phases.total() {
        if keep(t) {
            total += phases.capacity(t) * step.as_secs_f64();
        }
        t += step;
    }
    total
}

/// From `change` to the first moment `u` (in 100 ms steps) such that the
/// 500 ms window from `u` (by send time) and the rest of the phase from `u`
/// each have goodput at least 90 % of the capacity and a p99 of admitted
/// requests within the SLO. (Asking it of every later window instead
/// would let one hiccup of a shared machine, long after the limiter has
/// settled, read as never converging.)
fn converged(
    records: &[Record],
    phases: Phases,
    change: Duration,
    until: Duration,
    slo: Duration,
) -> Option<Duration> {
    let width = Duration::from_millis(500);
    let step = Duration::from_millis(100);
    let ok = |from: Duration, to: Duration| {
        let inside = records.iter().filter(|r| r.sent >= from && r.sent < to);
        let mut served: Vec<Duration> = inside
            .filter(|r| r.kind == Kind::Served)
            .map(|r| r.latency)
            .collect();
        let good = served.iter().filter(|&&l| l <= slo).count() as f64;
        let capacity = phases.capacity(from) * (to - from).as_secs_f64();
        good >= 0.9 * capacity && quantile(&mut served, 0.99) <= slo
    };
    let mut from = change;
    while from + width <= until {
        if ok(from, from + width) && ok(from, until) {
            return Some(from - change);
        }
        from += step;
    }
    None
}

fn verdict(contender: Contender, run: &Run, phases: Phases, slo: Duration) -> Verdict {
    let records = &run.records;
    let phases = Phases {
        full: f64::from(CAPACITY) / run.service.as_secs_f64().max(1e-9),
        ..phases
    };
    let total = records.len().max(1) as f64;
    let count = |kind| records.iter().filter(|r| r.kind == kind).count() as f64;
    let good = |keep: &dyn Fn(Duration) -> bool| {
        records
            .iter()
            .filter(|r| r.kind == Kind::Served && r.latency <= slo && keep(r.sent))
            .count() as f64
    };
    let served = |keep: &dyn Fn(Duration) -> bool| -> Vec<Duration> {
        records
            .iter()
            .filter(|r| r.kind == Kind::Served && keep(r.sent))
            .map(|r| r.latency)
            .collect()
    };
    let all = |_: Duration| true;
    let calm = |t: Duration| steady(phases, t);
    let mut latencies = served(&all);
    let mut steady_latencies = served(&calm);
    Verdict {
        contender,
        goodput: good(&all) / capacity_over(phases, all),
        goodput_steady: good(&calm) / capacity_over(phases, calm),
        p50: quantile(&mut latencies, 0.5),
        p99: quantile(&mut latencies, 0.99),
        p99_steady: quantile(&mut steady_latencies, 0.99),
        refused: count(Kind::Refused) / total,
        failed: (count(Kind::Failed) + count(Kind::GaveUp)) / total,
        converged_halved: converged(
            records,
            phases,
            phases.halved_at(),
            phases.restored_at(),
            slo,
        ),
        converged_restored: converged(records, phases, phases.restored_at(), phases.total(), slo),
    }
}

/// p99 latency of admitted requests per 250 ms (by send time), for the plot.
fn p99_timeline(run: &Run, total: Duration) -> Vec<(f64, f64)> {
    let bucket = Duration::from_millis(250);
    let mut points = Vec::new();
    let mut from = Duration::ZERO;
    while from < total {
        let mut served: Vec<Duration> = run
            .records
            .iter()
            .filter(|r| r.kind == Kind::Served && r.sent >= from && r.sent < from + bucket)
            .map(|r| r.latency)
            .collect();
        if !served.is_empty() {
            let p99 = quantile(&mut served, 0.99);
            points.push(((from + bucket / 2).as_secs_f64(), ms(p99)));
        }
        from += bucket;
    }
    points
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn seconds(d: Option<Duration>) -> String {
    d.map_or_else(|| "never".into(), |d| format!("{:.1} s", d.as_secs_f64()))
}

/// Nanoseconds per request through `layer` around a service that answers
/// at once, called in-process on a current-thread runtime.
fn in_process_ns<L>(layer: L, requests: u32) -> f64
where
    L: tower::Layer<
            tower::util::ServiceFn<
                fn(
                    http::Request<axum::body::Body>,
                ) -> std::future::Ready<
                    Result<http::Response<axum::body::Body>, std::convert::Infallible>,
                >,
            >,
        >,
    L::Service: tower::Service<http::Request<axum::body::Body>> + Clone,
{
    use tower::ServiceExt;
    fn hello(
        _: http::Request<axum::body::Body>,
    ) -> std::future::Ready<Result<http::Response<axum::body::Body>, std::convert::Infallible>>
    {
        std::future::ready(Ok(http::Response::new(axum::body::Body::empty())))
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("tokio runtime");
    let service = layer.layer(tower::service_fn(
        hello
            as fn(
                http::Request<axum::body::Body>,
            ) -> std::future::Ready<
                Result<http::Response<axum::body::Body>, std::convert::Infallible>,
            >,
    ));
    runtime.block_on(async move {
        let request = || http::Request::new(axum::body::Body::empty());
        for _ in 0..1000 {
            let _ = service.clone().oneshot(request()).await;
        }
        let start = Instant::now();
        for _ in 0..requests {
            let response = service.clone().oneshot(request()).await;
            std::hint::black_box(response.is_ok());
        }
        start.elapsed().as_nanos() as f64 / f64::from(requests)
    })
}

/// The report's section.
pub fn run(report: &mut Report) {
    let scale = report.scale();
    let phases = Phases {
        each: scale.pick(Duration::from_secs(3), Duration::from_secs(4)),
        full: full_rate(),
    };
    report.section("Adaptive concurrency limits (issue 30)");
    report.text(&format!(
        "A loopback axum backend serves {CAPACITY} requests at once, each for {} ms \
         (capacity {:.0}/s), queueing the rest first come first served. An open-loop \
         generator offers {OVERLOAD}× that (Poisson, one seeded schedule for every \
         contender); the backend's concurrency is halved after {} s and restored after {} s. \
         The limiter sits in the server in front of the handler and refuses with 503. \
         Every algorithm runs as shipped: weir's with its defaults (limits in \
         [{MIN_LIMIT}, {MAX_LIMIT}] from {INITIAL_LIMIT}; AIMD, which needs one, with a timeout of \
         1.5× the unloaded p99), tower-acc 0.1's with its own (Netflix's: Gradient2 in [20, 200], \
         Vegas in [1, 1000], both from 20), behind tower's `LoadShed` so that it refuses instead \
         of queueing. Server and client run in one-worker \
         tokio runtimes pinned to separate cores.",
        SERVICE.as_millis(),
        full_rate(),
        phases.halved_at().as_secs(),
        phases.restored_at().as_secs(),
    ));

    // The unloaded latency: 10 % of capacity, no limit.
    report.progress("adaptive: measuring the unloaded latency");
    let calm = schedule(
        full_rate() * 0.1,
        scale.pick(Duration::from_secs(2), Duration::from_secs(3)),
        7,
    );
    let unloaded = load(Contender::NoLimit, &calm, None, SERVICE);
    let mut calm_latencies: Vec<Duration> = unloaded
        .records
        .iter()
        .filter(|r| r.kind == Kind::Served)
        .map(|r| r.latency)
        .collect();
    let unloaded_p50 = quantile(&mut calm_latencies, 0.5);
    let unloaded_p99 = quantile(&mut calm_latencies, 0.99);
    let slo = unloaded_p99 * 2;

    let arrivals = schedule(full_rate() * OVERLOAD, phases.total(), 30);
    let mut verdicts = Vec::new();
    let mut services = Vec::new();
    let mut csv = String::from("contender,series,t_s,value\n");
    let mut limit_series = Vec::new();
    let mut p99_series = Vec::new();
    for contender in CONTENDERS {
        report.progress(&format!("adaptive: {}", contender.name()));
        let run = load(contender, &arrivals, Some(phases), unloaded_p99);
        verdicts.push(verdict(contender, &run, phases, slo));
        services.push(run.service);
        for &(t, l) in &run.limits {
            csv.push_str(&format!("{},limit,{t:.3},{l}\n", contender.name()));
        }
        for (t, p99) in p99_timeline(&run, phases.total()) {
            csv.push_str(&format!("{},p99_ms,{t:.3},{p99:.2}\n", contender.name()));
        }
        if !run.limits.is_empty() && contender != Contender::Static(4 * CAPACITY) {
            let points = run.limits.iter().map(|&(t, l)| (t, f64::from(l))).collect();
            limit_series.push(Series::line(contender.name(), points));
        }
        if contender != Contender::NoLimit && contender != Contender::Static(4 * CAPACITY) {
            p99_series.push(Series::line(
                contender.name(),
                p99_timeline(&run, phases.total()),
            ));
        }
    }

    let _ = std::fs::write(report.dir().join("adaptive-timeline.csv"), csv);
    services.sort();
    let service = services.get(services.len() / 2).copied().unwrap_or(SERVICE);
    report.text(&format!(
        "The backend held a permit {:.2} ms per request on average (the timer rounds {} ms up), \
         so its real capacity is {:.0}/s at full concurrency; goodput is judged against the \
         capacity measured in each contender's own run.",
        ms(service),
        SERVICE.as_millis(),
        f64::from(CAPACITY) / service.as_secs_f64(),
    ));
    report.text(&format!(
        "Unloaded latency (no limit, 10 % of capacity): p50 {:.1} ms, p99 {:.1} ms. \
         **SLO** = 2× the unloaded p99 = {:.1} ms. **Goodput** = responses within the SLO per \
         second as a share of the backend's capacity at the time (whole run, and *steady*: \
         leaving out the first second and the 2 s after each change). **Converged** = time \
         from the change until both the next 500 ms and the rest of the phase have goodput \
         ≥ 90 % of capacity and p99 of admitted requests within the SLO. Latencies are of admitted \
         (200) requests, as the client saw them.",
        ms(unloaded_p50),
        ms(unloaded_p99),
        ms(slo),
    ));
    let mut table = Table::new([
        "contender",
        "goodput",
        "goodput steady",
        "p50",
        "p99",
        "p99 steady",
        "refused",
        "failed",
        "converged after halving",
        "after restoring",
    ]);
    for v in &verdicts {
        table.row([
            v.contender.name(),
            format!("{:.1} %", 100.0 * v.goodput),
            format!("{:.1} %", 100.0 * v.goodput_steady),
            format!("{:.1} ms", ms(v.p50)),
            format!("{:.1} ms", ms(v.p99)),
            format!("{:.1} ms", ms(v.p99_steady)),
            format!("{:.1} %", 100.0 * v.refused),
            format!("{:.1} %", 100.0 * v.failed),
            seconds(v.converged_halved),
            seconds(v.converged_restored),
        ]);
    }
    report.table(&table);
    goals(report, &verdicts, unloaded_p99);

    let mut capacity = Vec::new();
    let mut t = Duration::ZERO;
    while t <= phases.total() {
        let c = phases.capacity(t) / phases.full * f64::from(CAPACITY);
        capacity.push((t.as_secs_f64(), c));
        t += Duration::from_millis(50);
    }
    limit_series.insert(0, Series::dashed("backend concurrency", capacity));
    report.plot(
        "adaptive-limit",
        &LinePlot {
            title: "Concurrency limit over time (capacity halved, then restored)".into(),
            x_label: "time (s)".into(),
            y_label: "limit (requests in flight)".into(),
            series: limit_series,
            reference: None,
            y_max: Some(f64::from(3 * CAPACITY)),
        },
    );
    report.plot(
        "adaptive-p99",
        &LinePlot {
            title: "p99 latency of admitted requests per 250 ms".into(),
            x_label: "time (s)".into(),
            y_label: "p99 latency (ms)".into(),
            series: p99_series,
            reference: Some((ms(slo), "SLO".into())),
            y_max: Some((ms(slo) * 3.0).ceil()),
        },
    );

    overhead(report);
}

/// The goals, checked for each of weir's algorithms.
fn goals(report: &mut Report, verdicts: &[Verdict], unloaded_p99: Duration) {
    let find = |c| verdicts.iter().find(|v| v.contender == c);
    let best_acc_goodput = verdicts
        .iter()
        .filter(|v| matches!(v.contender, Contender::AccGradient2 | Contender::AccVegas))
        .map(|v| v.goodput)
        .fold(0.0, f64::max);
    let best_acc_p99 = verdicts
        .iter()
        .filter(|v| matches!(v.contender, Contender::AccGradient2 | Contender::AccVegas))
        .map(|v| v.p99)
        .min()
        .unwrap_or(Duration::MAX);
    let tuned = find(Contender::Static(CAPACITY)).map_or(0.0, |v| v.goodput);
    let mark = |ok: bool| if ok { "yes" } else { "**no**" };
    let mut table = Table::new([
        "algorithm",
        "goodput ≥ 95 % (steady)",
        "p99 ≤ 2× unloaded (steady)",
        "converged ≤ 2 s (both changes)",
        "goodput and p99 ahead of tower-acc's best",
        "goodput within 5 % of static = capacity",
    ]);
    for v in verdicts.iter().filter(|v| v.contender.is_weir_adaptive()) {
        let converged = [v.converged_halved, v.converged_restored]
            .iter()
            .all(|c| c.is_some_and(|c| c <= Duration::from_secs(2)));
        table.row([
            v.contender.name(),
            format!(
                "{} ({:.1} %)",
                mark(v.goodput_steady >= 0.95),
                100.0 * v.goodput_steady
            ),
            format!(
                "{} ({:.2}×)",
                mark(v.p99_steady <= unloaded_p99 * 2),
                v.p99_steady.as_secs_f64() / unloaded_p99.as_secs_f64()
            ),
            format!(
                "{} ({} / {})",
                mark(converged),
                seconds(v.converged_halved),
                seconds(v.converged_restored)
            ),
            format!(
                "{} ({:+.1} pt, {:+.1} ms)",
                mark(v.goodput > best_acc_goodput && v.p99 < best_acc_p99),
                100.0 * (v.goodput - best_acc_goodput),
                ms(v.p99) - ms(best_acc_p99)
            ),
            format!(
                "{} ({:.1} % of it)",
                mark(v.goodput >= 0.95 * tuned),
                100.0 * v.goodput / tuned.max(1e-9)
            ),
        ]);
    }
    report.text(
        "The issue's goals, for weir's algorithms (whole-run figures where not marked steady):",
    );
    report.table(&table);
}

/// In-process cost per request of the layers, around a service that
/// answers at once.
fn overhead(report: &mut Report) {
    let requests = report.scale().pick(200_000, 1_000_000);
    let limiter = || KeyedAdaptiveLimiter::new(Gradient2::default(), NonZeroUsize::MIN);
    let acc = || {
        tower::ServiceBuilder::new()
            .layer(tower::load_shed::LoadShedLayer::new())
            .layer(tower_acc::ConcurrencyLimitLayer::new(
                tower_acc::Gradient2::default(),
            ))
    };
    let mut rows: Vec<(&str, Vec<f64>)> = vec![
        ("bare service", Vec::new()),
        ("InflightLayer (static)", Vec::new()),
        ("AdaptiveInflightLayer (weir Gradient2)", Vec::new()),
        ("tower-acc Gradient2 + LoadShed", Vec::new()),
    ];
    // Interleaved rounds, so drifts in the machine's speed hit all alike.
    for _ in 0..5 {
        rows[0]
            .1
            .push(in_process_ns(tower::layer::util::Identity::new(), requests));
        rows[1].1.push(in_process_ns(
            InflightLayer::new(GlobalKey, CAPACITY),
            requests,
        ));
        rows[2].1.push(in_process_ns(
            AdaptiveInflightLayer::new(GlobalKey, limiter()),
            requests,
        ));
        rows[3].1.push(in_process_ns(acc(), requests));
    }
    let median = |xs: &mut Vec<f64>| {
        xs.sort_by(f64::total_cmp);
        xs[xs.len() / 2]
    };
    let bare = median(&mut rows[0].1.clone());
    let mut table = Table::new([
        "layer",
        "ns per request (median of 5)",
        "over the bare service",
    ]);
    for (name, xs) in &mut rows {
        let ns = median(xs);
        table.row([
            (*name).to_string(),
            format!("{ns:.0}"),
            format!("{:+.0} ns", ns - bare),
        ]);
    }
    report.text(
        "In-process cost per request (no sockets): a service that answers at once, called \
         through each layer on a current-thread runtime; the adaptive layers also read the \
         clock twice and feed the algorithm once per request.",
    );
    report.table(&table);
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::ServiceExt;

    /// Every contender but "no limit" must refuse beyond its limit, or the
    /// comparison measures nothing.
    #[test]
    fn each_limiting_contender_refuses_beyond_its_limit() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        for contender in CONTENDERS {
            let backend = Backend::new();
            let (app, _) = router(contender, &backend, SERVICE);
            let statuses = runtime.block_on(async move {
                let calls: Vec<_> = (0..300)
                    .map(|_| {
                        let app = app.clone();
                        tokio::spawn(async move {
                            let request = http::Request::new(axum::body::Body::empty());
                            app.oneshot(request).await.unwrap().status()
                        })
                    })
                    .collect();
                let mut statuses = Vec::new();
                for call in calls {
                    statuses.push(call.await.unwrap());
                }
                statuses
            });
            let refused = statuses
                .iter()
                .filter(|&&s| s == StatusCode::SERVICE_UNAVAILABLE)
                .count();
            if contender == Contender::NoLimit {
                assert_eq!(refused, 0);
            } else {
                assert!(refused > 0, "{}: nothing refused", contender.name());
            }
        }
    }
}
