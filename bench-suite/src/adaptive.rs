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

use crate::contest::{self, Goal};
use crate::machine;
use crate::plot::{LinePlot, Series};
use crate::report::{Report, Table};
use axum::Router;
use axum::body::Body;
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
const CAPACITY: u32 = 32;
/// How long the backend takes per request.
const SERVICE: Duration = Duration::from_millis(50);
/// Offered load as a multiple of the capacity.
const OVERLOAD: f64 = 3.0;
/// The generator gives up on arrivals beyond this many outstanding ...
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
/// back vanish, so capacity falls as fast as requests finish. The total
/// time permits were held, and how many requests held one, measure the
/// real service time: the timer's granularity makes it a little longer
/// than [`SERVICE`].
#[derive(Clone)]
struct Backend {
    permits: Arc<Semaphore>,
    debt: Arc<AtomicU32>,
    held_ns: Arc<AtomicU64>,
    served: Arc<AtomicU64>,
}

impl Backend {
    fn new() -> Self {
        let permits = Arc::new(Semaphore::new(CAPACITY as usize));
        Self {
            permits,
            debt: Arc::default(),
            held_ns: Arc::default(),
            served: Arc::default(),
        }
    }

    /// The mean time a request held its permit.
    fn service_time(&self) -> Duration {
        Duration::from_nanos(
            self.held_ns.load(Ordering::Relaxed) / self.served.load(Ordering::Relaxed).max(1),
        )
    }

    async fn handle(self) -> &'static str {
        let permit = self.permits.acquire().await.expect("never closed");
        let start = Instant::now();
        tokio::time::sleep(SERVICE).await;
        self.held_ns.fetch_add(
            u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        self.served.fetch_add(1, Ordering::Relaxed);
        if self
            .debt
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |d| d.checked_sub(1))
            .is_ok()
        {
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
enum Contender {
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
const CONTENDERS: [Contender; 8] = [
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
    fn name(self) -> String {
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

/// tower-acc's concurrency limit, its queueing turned into 503s.
fn with_acc<A: tower_acc::Algorithm + Clone + Send + Sync + 'static>(
    base: Router,
    algorithm: A,
) -> (Router, LimitProbe) {
    let limit = Arc::new(AtomicUsize::new(INITIAL_LIMIT as usize));
    let observed = Observed {
        inner: algorithm,
        limit: Arc::clone(&limit),
    };
    let unavailable =
        HandleErrorLayer::new(|_: tower::BoxError| async { StatusCode::SERVICE_UNAVAILABLE });
    let stack = tower::ServiceBuilder::new()
        .layer(unavailable)
        .layer(tower::load_shed::LoadShedLayer::new());
    let stack = stack.layer(tower_acc::ConcurrencyLimitLayer::new(observed));
    (
        base.layer(stack),
        Arc::new(move || Some(limit.load(Ordering::Relaxed) as u32)),
    )
}

fn with_weir<A: Algorithm + Clone + Sync>(base: Router, algorithm: A) -> (Router, LimitProbe) {
    let layer = AdaptiveInflightLayer::new(
        GlobalKey,
        KeyedAdaptiveLimiter::new(algorithm, NonZeroUsize::MIN),
    );
    let probe = layer.clone();
    (
        base.layer(layer),
        Arc::new(move || probe.limiter().limit(&()).or(Some(INITIAL_LIMIT))),
    )
}

/// The backend's router behind `contender`.
///
/// `with_state` turns the handler into a route once, layers applied: axum
/// otherwise does that for every request, and a layer that makes its state
/// in `Layer::layer` (tower-acc's) would then get a fresh limit per request.
fn router(contender: Contender, backend: &Backend, unloaded_p99: Duration) -> (Router, LimitProbe) {
    let backend = backend.clone();
    let base = Router::new().route("/", get(move || backend.clone().handle()));
    let nz = |n| NonZeroU32::new(n).expect("positive");
    let (router, probe): (Router, LimitProbe) = match contender {
        Contender::NoLimit => (base, Arc::new(|| None)),
        Contender::Static(n) => (
            base.layer(InflightLayer::new(GlobalKey, n)),
            Arc::new(move || Some(n)),
        ),
        // As shipped: tower-acc's defaults are Netflix's (Gradient2 within
        // [20, 200], Vegas within [1, 1000], both starting at 20).
        Contender::AccGradient2 => with_acc(base, tower_acc::Gradient2::default()),
        Contender::AccVegas => with_acc(base, tower_acc::Vegas::default()),
        Contender::Aimd => {
            let aimd = Aimd::builder()
                .min_limit(nz(MIN_LIMIT))
                .initial_limit(nz(INITIAL_LIMIT))
                .max_limit(nz(MAX_LIMIT))
                .timeout(unloaded_p99.mul_f64(1.5))
                .build()
                .expect("valid AIMD settings");
            with_weir(base, aimd)
        }
        Contender::Vegas => with_weir(base, Vegas::default()),
        Contender::Gradient2 => with_weir(base, Gradient2::default()),
    };
    (router.with_state(()), probe)
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

/// One request of the generator: when it was sent (since the run began),
/// how long it took, how it ended.
#[derive(Debug, Clone, Copy)]
struct Record {
    sent: Duration,
    latency: Duration,
    kind: Kind,
}

/// One contender's run: its requests, the backend's mean service time,
/// and (seconds since the start, limit) every 50 ms.
struct Run {
    records: Vec<Record>,
    service: Duration,
    limits: Vec<(f64, u32)>,
}

/// The three phases (full capacity, halved, restored), each `each` long,
/// and the backend's measured capacity at full `C`, requests per second.
#[derive(Debug, Clone, Copy)]
struct Phases {
    each: Duration,
    full: f64,
}

impl Phases {
    fn total(&self) -> Duration {
        self.each * 3
    }

    /// When capacity is halved, and when restored.
    fn changes(&self) -> [Duration; 2] {
        [self.each, self.each * 2]
    }

    /// The backend's capacity (requests per second) at `t`.
    fn capacity(&self, t: Duration) -> f64 {
        let [halved, restored] = self.changes();
        if t >= halved && t < restored {
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
    let mut t = gap.sample(&mut rng);
    let mut arrivals = Vec::new();
    while t < total.as_secs_f64() {
        arrivals.push(Duration::from_secs_f64(t));
        t += gap.sample(&mut rng);
    }
    arrivals
}

/// Serves the backend behind `contender` and offers it `arrivals`, halving
/// and restoring its capacity on `phases` (none if `phases` is `None`).
fn load(
    contender: Contender,
    arrivals: &[Duration],
    phases: Option<Phases>,
    unloaded_p99: Duration,
) -> Run {
    let backend = Backend::new();
    let (app, probe) = router(contender, &backend, unloaded_p99);
    let (_server, client_rt, addr) = machine::serve_loopback(app);
    client_rt.block_on(async move {
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
                let [halved, restored] = phases.changes();
                tokio::time::sleep_until(start + halved).await;
                backend.halve();
                tokio::time::sleep_until(start + restored).await;
                backend.restore();
            })
        });
        let sampler = tokio::spawn(async move {
            let (mut limits, mut tick) =
                (Vec::new(), tokio::time::interval(Duration::from_millis(50)));
            loop {
                tick.tick().await;
                let t = start.elapsed();
                if t > end {
                    return limits;
                }
                limits.extend(probe().map(|limit| (t.as_secs_f64(), limit)));
            }
        });
        let records = Arc::new(Mutex::new(Vec::with_capacity(arrivals.len())));
        let outstanding = Arc::new(AtomicUsize::new(0));
        for &at in arrivals {
            tokio::time::sleep_until(start + at).await;
            if outstanding.load(Ordering::Relaxed) >= OUTSTANDING {
                let record = Record {
                    sent: at,
                    latency: Duration::ZERO,
                    kind: Kind::GaveUp,
                };
                records.lock().expect("records").push(record);
                continue;
            }
            outstanding.fetch_add(1, Ordering::Relaxed);
            let (client, uri) = (client.clone(), uri.clone());
            let (records, outstanding) = (Arc::clone(&records), Arc::clone(&outstanding));
            tokio::spawn(async move {
                let (sent, t0) = (start.elapsed(), Instant::now());
                let answer = tokio::time::timeout(CLIENT_TIMEOUT, async {
                    let response = client.get(uri).await.ok()?;
                    let status = response.status();
                    response.into_body().collect().await.ok()?;
                    Some(status)
                })
                .await;
                let kind = match answer {
                    Ok(Some(StatusCode::OK)) => Kind::Served,
                    Ok(Some(StatusCode::SERVICE_UNAVAILABLE)) => Kind::Refused,
                    _ => Kind::Failed,
                };
                records.lock().expect("records").push(Record {
                    sent,
                    latency: t0.elapsed(),
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
    })
}

/// The `q`-quantile of `xs` (sorted in place); zero if empty.
fn quantile(xs: &mut [Duration], q: f64) -> Duration {
    xs.sort_unstable();
    contest::quantile(xs, q).unwrap_or_default()
}

/// Latencies of the admitted (200) requests sent at times `keep` accepts.
fn served(records: &[Record], keep: impl Fn(Duration) -> bool) -> Vec<Duration> {
    records
        .iter()
        .filter(|r| r.kind == Kind::Served && keep(r.sent))
        .map(|r| r.latency)
        .collect()
}

/// What the report says about one contender: goodput (responses within
/// the SLO per second, as a share of the capacity) over the whole run and
/// outside the 2 s after each change (and the first second); latency of
/// admitted requests; shares refused (503) and failed (errors, timeouts,
/// given up); time from halving and from restoring until converged.
#[derive(Debug, Clone)]
struct Verdict {
    contender: Contender,
    goodput: f64,
    goodput_steady: f64,
    p50: Duration,
    p99: Duration,
    p99_steady: Duration,
    refused: f64,
    failed: f64,
    converged: [Option<Duration>; 2],
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
    let (width, step) = (Duration::from_millis(500), Duration::from_millis(100));
    let ok = |from: Duration, to: Duration| {
        let mut served = served(records, |t| t >= from && t < to);
        let good = served.iter().filter(|&&l| l <= slo).count() as f64;
        good >= 0.9 * phases.capacity(from) * (to - from).as_secs_f64()
            && quantile(&mut served, 0.99) <= slo
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
    let [halved, restored] = phases.changes();
    let settle = Duration::from_secs(2);
    // A steady stretch: past the first second and the 2 s after each change.
    let steady = |t: Duration| {
        t >= Duration::from_secs(1)
            && phases
                .changes()
                .iter()
                .all(|&c| !(t >= c && t < c + settle))
    };
    // Responses within the SLO over the capacity offered (integrated in
    // 10 ms steps) at the times `keep` accepts.
    let goodput = |keep: &dyn Fn(Duration) -> bool| {
        let good = served(records, keep).iter().filter(|&&l| l <= slo).count() as f64;
        let steps = (0..)
            .map(|i| Duration::from_millis(10 * i))
            .take_while(|&t| t < phases.total());
        good / steps
            .filter(|&t| keep(t))
            .map(|t| phases.capacity(t) * 0.01)
            .sum::<f64>()
    };
    let mut latencies = served(records, |_| true);
    Verdict {
        contender,
        goodput: goodput(&|_| true),
        goodput_steady: goodput(&steady),
        p50: quantile(&mut latencies, 0.5),
        p99: quantile(&mut latencies, 0.99),
        p99_steady: quantile(&mut served(records, steady), 0.99),
        refused: count(Kind::Refused) / total,
        failed: (count(Kind::Failed) + count(Kind::GaveUp)) / total,
        converged: [
            converged(records, phases, halved, restored, slo),
            converged(records, phases, restored, phases.total(), slo),
        ],
    }
}

/// p99 latency of admitted requests per 250 ms (by send time), for the plot.
fn p99_timeline(run: &Run, total: Duration) -> Vec<(f64, f64)> {
    let bucket = Duration::from_millis(250);
    let starts = (0..).map(|i| bucket * i).take_while(|&from| from < total);
    let p99 = |from: Duration| {
        let mut served = served(&run.records, |t| t >= from && t < from + bucket);
        (!served.is_empty()).then(|| {
            (
                (from + bucket / 2).as_secs_f64(),
                ms(quantile(&mut served, 0.99)),
            )
        })
    };
    starts.filter_map(p99).collect()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn seconds(d: Option<Duration>) -> String {
    d.map_or_else(|| "never".into(), |d| format!("{:.1} s", d.as_secs_f64()))
}

/// The report's section.
pub fn run(report: &mut Report) {
    let scale = report.scale();
    let phases = Phases {
        each: scale.pick(Duration::from_secs(3), Duration::from_secs(4)),
        full: full_rate(),
    };
    let [halved, restored] = phases.changes();
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
        halved.as_secs(),
        restored.as_secs(),
    ));

    // The unloaded latency: 10 % of capacity, no limit.
    report.progress("measuring the unloaded latency");
    let calm = schedule(
        full_rate() * 0.1,
        scale.pick(Duration::from_secs(2), Duration::from_secs(3)),
        7,
    );
    let mut calm_latencies = served(
        &load(Contender::NoLimit, &calm, None, SERVICE).records,
        |_| true,
    );
    let (unloaded_p50, unloaded_p99) = (
        quantile(&mut calm_latencies, 0.5),
        quantile(&mut calm_latencies, 0.99),
    );
    let slo = unloaded_p99 * 2;

    let arrivals = schedule(full_rate() * OVERLOAD, phases.total(), 30);
    let (mut verdicts, mut services) = (Vec::new(), Vec::new());
    let mut csv = String::from("contender,series,t_s,value\n");
    let (mut limit_series, mut p99_series) = (Vec::new(), Vec::new());
    for contender in CONTENDERS {
        report.progress(&contender.name());
        let run = load(contender, &arrivals, Some(phases), unloaded_p99);
        verdicts.push(verdict(contender, &run, phases, slo));
        services.push(run.service);
        let p99 = p99_timeline(&run, phases.total());
        for &(t, l) in &run.limits {
            csv += &format!("{},limit,{t:.3},{l}\n", contender.name());
        }
        for (t, p99) in &p99 {
            csv += &format!("{},p99_ms,{t:.3},{p99:.2}\n", contender.name());
        }
        if contender != Contender::Static(4 * CAPACITY) {
            if !run.limits.is_empty() {
                let points = run.limits.iter().map(|&(t, l)| (t, f64::from(l))).collect();
                limit_series.push(Series::line(contender.name(), points));
            }
            if contender != Contender::NoLimit {
                p99_series.push(Series::line(contender.name(), p99));
            }
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
    let mut table = Table::new(
        "contender | goodput | goodput steady | p50 | p99 | p99 steady | refused | failed | converged after halving | after restoring",
    );
    for v in &verdicts {
        let [goodput, steady, refused, failed] = [v.goodput, v.goodput_steady, v.refused, v.failed]
            .map(|x| format!("{:.1} %", 100.0 * x));
        let [p50, p99, p99_steady] =
            [v.p50, v.p99, v.p99_steady].map(|d| format!("{:.1} ms", ms(d)));
        let [after_halving, after_restoring] = v.converged.map(seconds);
        table.cells([
            v.contender.name(),
            goodput,
            steady,
            p50,
            p99,
            p99_steady,
            refused,
            failed,
            after_halving,
            after_restoring,
        ]);
    }
    report.table(&table);
    goals(report, &verdicts, unloaded_p99);

    let steps = (0..)
        .map(|i| Duration::from_millis(50 * i))
        .take_while(|&t| t <= phases.total());
    let capacity = steps.map(|t| {
        (
            t.as_secs_f64(),
            phases.capacity(t) / phases.full * f64::from(CAPACITY),
        )
    });
    limit_series.insert(0, Series::dashed("backend concurrency", capacity.collect()));
    report.plot(
        "adaptive-limit",
        &LinePlot {
            title: "Concurrency limit over time (capacity halved, then restored)".into(),
            x_label: "time (s)".into(),
            y_label: "limit (requests in flight)".into(),
            series: limit_series,
            references: Vec::new(),
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
            references: vec![(ms(slo), "SLO".into())],
            y_max: Some((ms(slo) * 3.0).ceil()),
        },
    );

    overhead(report);
}

/// The goals, checked for each of weir's algorithms.
fn goals(report: &mut Report, verdicts: &[Verdict], unloaded_p99: Duration) {
    let acc = || {
        verdicts
            .iter()
            .filter(|v| matches!(v.contender, Contender::AccGradient2 | Contender::AccVegas))
    };
    let best_acc_goodput = acc().map(|v| v.goodput).fold(0.0, f64::max);
    let best_acc_p99 = acc().map(|v| v.p99).min().unwrap_or(Duration::MAX);
    let tuned = verdicts
        .iter()
        .find(|v| v.contender == Contender::Static(CAPACITY))
        .map_or(0.0, |v| v.goodput);
    let goals = [
        Goal::at_least("goodput ≥ 95 % (steady)", 0.95),
        Goal::at_most("p99 ≤ 2× unloaded (steady)", 2.0),
        Goal::at_most("converged ≤ 2 s (both changes)", 2.0),
        Goal::at_least("goodput and p99 ahead of tower-acc's best", 1.0),
        Goal::at_least("goodput within 5 % of static = capacity", 0.95),
    ];
    let mut table =
        Table::with_headers(std::iter::once("algorithm").chain(goals.iter().map(|g| g.name)));
    let weir = verdicts.iter().filter(|v| {
        matches!(
            v.contender,
            Contender::Aimd | Contender::Vegas | Contender::Gradient2
        )
    });
    for v in weir {
        let converged = v
            .converged
            .iter()
            .map(|c| c.map_or(f64::INFINITY, |c| c.as_secs_f64()))
            .fold(0.0, f64::max);
        let p99 = v.p99_steady.as_secs_f64() / unloaded_p99.as_secs_f64();
        let ahead = f64::from(u8::from(
            v.goodput > best_acc_goodput && v.p99 < best_acc_p99,
        ));
        let of_tuned = v.goodput / tuned.max(1e-9);
        let figures = [v.goodput_steady, p99, converged, ahead, of_tuned];
        let [goodput, p99_ok, converged, ahead, tuned] =
            std::array::from_fn(|i| goals[i].verdict(figures[i]));
        let [halved, restored] = v.converged.map(seconds);
        let (gap, lag) = (
            100.0 * (v.goodput - best_acc_goodput),
            ms(v.p99) - ms(best_acc_p99),
        );
        table.cells([
            v.contender.name(),
            format!("{goodput} ({:.1} %)", 100.0 * v.goodput_steady),
            format!("{p99_ok} ({p99:.2}×)"),
            format!("{converged} ({halved} / {restored})"),
            format!("{ahead} ({gap:+.1} pt, {lag:+.1} ms)"),
            format!("{tuned} ({:.1} % of it)", 100.0 * of_tuned),
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
    let hello = tower::service_fn(|_: http::Request<Body>| {
        std::future::ready(Ok::<_, std::convert::Infallible>(http::Response::new(
            Body::empty(),
        )))
    });
    let limiter = || KeyedAdaptiveLimiter::new(Gradient2::default(), NonZeroUsize::MIN);
    let acc = || {
        let limit = tower_acc::ConcurrencyLimitLayer::new(tower_acc::Gradient2::default());
        tower::ServiceBuilder::new()
            .layer(tower::load_shed::LoadShedLayer::new())
            .layer(limit)
            .service(hello)
    };
    let names = [
        "bare service",
        "InflightLayer (static)",
        "AdaptiveInflightLayer (weir Gradient2)",
        "tower-acc Gradient2 + LoadShed",
    ];
    let request = || http::Request::new(Body::empty());
    // Interleaved rounds, so drifts in the machine's speed hit all alike.
    let runs = contest::rotate(
        report,
        "in-process cost",
        names.len(),
        5,
        |layer, _| match layer {
            0 => crate::http::time_service(hello, requests, request),
            1 => crate::http::time_service(
                tower::Layer::layer(&InflightLayer::new(GlobalKey, CAPACITY), hello),
                requests,
                request,
            ),
            2 => crate::http::time_service(
                tower::Layer::layer(&AdaptiveInflightLayer::new(GlobalKey, limiter()), hello),
                requests,
                request,
            ),
            _ => crate::http::time_service(acc(), requests, request),
        },
    );
    let medians: Vec<f64> = contest::spreads(&runs, |x| *x)
        .iter()
        .map(|s| s.median)
        .collect();
    let mut table = Table::new("layer | ns per request (median of 5) | over the bare service");
    for (name, ns) in names.iter().zip(&medians) {
        table.row(format!("{name} | {ns:.0} | {:+.0} ns", ns - medians[0]));
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
            let (app, _) = router(contender, &Backend::new(), SERVICE);
            let statuses = runtime.block_on(async move {
                let call = |_| tokio::spawn(app.clone().oneshot(http::Request::new(Body::empty())));
                let calls: Vec<_> = (0..300).map(call).collect();
                let mut statuses = Vec::new();
                for call in calls {
                    statuses.push(call.await.unwrap().unwrap().status());
                }
                statuses
            });
            let refused = statuses
                .iter()
                .filter(|&&s| s == StatusCode::SERVICE_UNAVAILABLE)
                .count();
            assert_eq!(
                refused == 0,
                contender == Contender::NoLimit,
                "{}: {refused} refused",
                contender.name()
            );
        }
    }
}
