//! The backend and who guards it (`C` permits with a debt, each
//! contender's limiter in front of the handler), and the open-loop load
//! offered to it.

use super::{CAPACITY, CHEAPER, CLIENT_TIMEOUT, INITIAL_LIMIT, OUTSTANDING, SERVICE};
use crate::harness::machine;
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
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;
use weir_adaptive::{AdaptiveLimiter, Aimd, Algorithm, Gradient2, Vegas};
use weir_tower::{AdaptiveInflightLayer, GlobalKey, InflightLayer};

/// `C` permits with a debt: halving makes the next `C / 2` permits given
/// back vanish, so capacity falls as fast as requests finish. The total
/// time permits were held, and how many requests held one, measure the
/// real service time: the timer's granularity makes it a little longer
/// than [`SERVICE`].
#[derive(Clone)]
pub(super) struct Backend {
    permits: Arc<Semaphore>,
    debt: Arc<AtomicU32>,
    held_ns: Arc<AtomicU64>,
    served: Arc<AtomicU64>,
}

impl Backend {
    fn new() -> Self {
        let permits = Arc::new(Semaphore::new(CAPACITY as usize));
        let (debt, held_ns, served) = Default::default();
        Self {
            permits,
            debt,
            held_ns,
            served,
        }
    }

    /// The mean time an expensive request held its permit.
    fn service_time(&self) -> Duration {
        let served = self.served.load(Ordering::Relaxed).max(1);
        Duration::from_nanos(self.held_ns.load(Ordering::Relaxed) / served)
    }

    /// One request: a permit held for `work`.
    async fn handle(self, work: Duration) -> &'static str {
        let permit = self.permits.acquire().await.expect("never closed");
        let start = Instant::now();
        tokio::time::sleep(work).await;
        if work == SERVICE {
            let held = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
            self.held_ns.fetch_add(held, Ordering::Relaxed);
            self.served.fetch_add(1, Ordering::Relaxed);
        }
        let owed = |d: u32| d.checked_sub(1);
        if self
            .debt
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, owed)
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
pub(super) enum Contender {
    /// Nothing: every request queues at the backend.
    NoLimit,
    /// weir's `InflightLayer` with a hand-chosen limit.
    Static(u32),
    /// tower-acc 0.1's Gradient2 behind `LoadShed`.
    AccGradient2,
    /// tower-acc 0.1's Vegas behind `LoadShed`.
    AccVegas,
    /// weir's AIMD, default settings.
    Aimd,
    /// weir's Vegas, default settings.
    Vegas,
    /// weir's Gradient2, default settings.
    Gradient2,
}

/// Every contender, in the order they run.
pub(super) const CONTENDERS: [Contender; 8] = [
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
    pub(super) fn name(self) -> String {
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
    let (inner, probe) = (algorithm, Arc::clone(&limit));
    let observed = Observed {
        inner,
        limit: probe,
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
    let limiter = AdaptiveLimiter::new(algorithm);
    let probe = limiter.clone();
    (
        base.layer(AdaptiveInflightLayer::shared(limiter)),
        Arc::new(move || Some(probe.limit())),
    )
}

/// The backend's router behind `contender`.
///
/// `with_state` turns the handler into a route once, layers applied: axum
/// otherwise does that for every request, and a layer that makes its state
/// in `Layer::layer` (tower-acc's) would then get a fresh limit per request.
fn router(contender: Contender, backend: &Backend) -> (Router, LimitProbe) {
    let (expensive, cheap) = (backend.clone(), backend.clone());
    // Any other path is a 404, answered at once (through the limiter).
    let base = Router::new()
        .route("/", get(move || expensive.clone().handle(SERVICE)))
        .route(
            "/cheap",
            get(move || cheap.clone().handle(SERVICE / CHEAPER)),
        );
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
        Contender::Aimd => with_weir(base, Aimd::default()),
        Contender::Vegas => with_weir(base, Vegas::default()),
        Contender::Gradient2 => with_weir(base, Gradient2::default()),
    };
    (router.with_state(()), probe)
}

/// How a request of the generator ended: 200, 503 from the limiter,
/// another status or error or the client's timeout, or never sent (too
/// many outstanding).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Served,
    Refused,
    Failed,
    GaveUp,
}

/// What a request asks of the backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Class {
    /// `/`: a permit for [`SERVICE`].
    Expensive,
    /// `/cheap`: a permit for [`SERVICE`] / [`CHEAPER`].
    Cheap,
    /// A missing path: a 404 at once, from a hostile client.
    Missing,
}

impl Class {
    fn path(self) -> &'static str {
        match self {
            Self::Expensive => "/",
            Self::Cheap => "/cheap",
            Self::Missing => "/missing",
        }
    }
}

/// One request of the generator: when it was sent (since the run began),
/// what it asked, how long it took, how it ended.
#[derive(Debug, Clone, Copy)]
pub(super) struct Record {
    pub(super) sent: Duration,
    pub(super) class: Class,
    pub(super) latency: Duration,
    pub(super) kind: Kind,
}

/// One contender's run: its requests, the backend's mean service time,
/// and (seconds since the start, limit) every 50 ms.
pub(super) struct Run {
    pub(super) records: Vec<Record>,
    pub(super) service: Duration,
    pub(super) limits: Vec<(f64, u32)>,
}

/// The three phases (full capacity, halved, restored), each `each` long,
/// and the backend's capacity at full `C`, requests per second.
#[derive(Debug, Clone, Copy)]
pub(super) struct Phases {
    pub(super) each: Duration,
    pub(super) full: f64,
}

impl Phases {
    pub(super) fn total(&self) -> Duration {
        self.each * 3
    }

    /// When capacity is halved, and when restored.
    pub(super) fn changes(&self) -> [Duration; 2] {
        [self.each, self.each * 2]
    }

    /// The backend's capacity (requests per second) at `t`.
    pub(super) fn capacity(&self, t: Duration) -> f64 {
        let [halved, restored] = self.changes();
        if t >= halved && t < restored {
            self.full / 2.0
        } else {
            self.full
        }
    }
}

/// One request to send: when (since the run began) and what.
pub(super) type Arrival = (Duration, Class);

/// Poisson arrivals at `rate` per second for `total`, from `seed`; each is
/// cheap with probability `cheap(t)`, else expensive.
pub(super) fn schedule(
    rate: f64,
    total: Duration,
    seed: u64,
    cheap: impl Fn(Duration) -> f64,
) -> Vec<Arrival> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let gap = rand_distr::Exp::new(rate).expect("positive rate");
    let unit = rand_distr::Uniform::new(0.0, 1.0).expect("a range");
    let mut t = 0.0;
    let mut arrivals = Vec::new();
    loop {
        t += gap.sample(&mut rng);
        if t >= total.as_secs_f64() {
            return arrivals;
        }
        let at = Duration::from_secs_f64(t);
        let class = if unit.sample(&mut rng) < cheap(at) {
            Class::Cheap
        } else {
            Class::Expensive
        };
        arrivals.push((at, class));
    }
}

/// `arrivals` with one client's bursts of `burst` requests for a missing
/// path, 1 ms apart, making up `share` of all requests, spread evenly.
pub(super) fn with_bursts(mut arrivals: Vec<Arrival>, share: f64, burst: u32) -> Vec<Arrival> {
    let Some(&(end, _)) = arrivals.last() else {
        return arrivals;
    };
    let hostile = arrivals.len() as f64 * share / (1.0 - share);
    let bursts = (hostile / f64::from(burst)).round().max(1.0);
    let every = end.div_f64(bursts);
    let mut start = every / 2;
    while start < end {
        arrivals.extend(
            (0..burst).map(|i| (start + Duration::from_millis(u64::from(i)), Class::Missing)),
        );
        start += every;
    }
    arrivals.sort_by_key(|a| a.0);
    arrivals
}

/// Serves the backend behind `contender` and offers it `arrivals`, halving
/// and restoring its capacity on `phases` (never if `None`).
pub(super) fn load(contender: Contender, arrivals: &[Arrival], phases: Option<Phases>) -> Run {
    let backend = Backend::new();
    let (app, probe) = router(contender, &backend);
    let (_server, client_rt, addr) = machine::serve_loopback(app);
    client_rt.block_on(async move {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(OUTSTANDING)
            .build(connector);
        let uri_of = |class: Class| -> http::Uri {
            format!("http://{addr}{}", class.path())
                .parse()
                .expect("uri")
        };
        let uri = uri_of(Class::Expensive);
        // Open the first connections before the clock starts.
        for _ in 0..4 {
            if let Ok(response) = client.get(uri.clone()).await {
                let _ = response.into_body().collect().await;
            }
        }
        let start = tokio::time::Instant::now();
        let end = arrivals.last().map(|a| a.0).unwrap_or_default();
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
        for &(at, class) in arrivals {
            tokio::time::sleep_until(start + at).await;
            if outstanding.load(Ordering::Relaxed) >= OUTSTANDING {
                let gave_up = Record {
                    sent: at,
                    class,
                    latency: Duration::ZERO,
                    kind: Kind::GaveUp,
                };
                records.lock().expect("records").push(gave_up);
                continue;
            }
            outstanding.fetch_add(1, Ordering::Relaxed);
            let (client, uri, records, outstanding) = (
                client.clone(),
                uri_of(class),
                records.clone(),
                outstanding.clone(),
            );
            tokio::spawn(async move {
                let (sent, t0) = (start.elapsed(), Instant::now());
                let answer = tokio::time::timeout(CLIENT_TIMEOUT, async {
                    let response = client.get(uri).await.ok()?;
                    let status = response.status();
                    response.into_body().collect().await.ok()?;
                    Some(status)
                });
                let kind = match answer.await {
                    Ok(Some(StatusCode::OK | StatusCode::NOT_FOUND)) => Kind::Served,
                    Ok(Some(StatusCode::SERVICE_UNAVAILABLE)) => Kind::Refused,
                    _ => Kind::Failed,
                };
                let latency = t0.elapsed();
                records.lock().expect("records").push(Record {
                    sent,
                    class,
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
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
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
            let (app, _) = router(contender, &Backend::new());
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
