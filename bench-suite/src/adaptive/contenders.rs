//! The backend and who guards it: `C` permits with a debt, and each
//! contender's limiter layered in front of the handler.

use super::{CAPACITY, INITIAL_LIMIT, MAX_LIMIT, MIN_LIMIT, SERVICE};
use axum::Router;
use axum::error_handling::HandleErrorLayer;
use axum::routing::get;
use http::StatusCode;
use std::num::{NonZeroU32, NonZeroUsize};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;
use weir_rate::adaptive::{Aimd, Algorithm, Gradient2, KeyedAdaptiveLimiter, Vegas};
use weir_rate::http::{AdaptiveInflightLayer, GlobalKey, InflightLayer};

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
    pub(super) fn new() -> Self {
        let permits = Arc::new(Semaphore::new(CAPACITY as usize));
        Self {
            permits,
            debt: Arc::default(),
            held_ns: Arc::default(),
            served: Arc::default(),
        }
    }

    /// The mean time a request held its permit.
    pub(super) fn service_time(&self) -> Duration {
        Duration::from_nanos(
            self.held_ns.load(Ordering::Relaxed) / self.served.load(Ordering::Relaxed).max(1),
        )
    }

    pub(super) async fn handle(self) -> &'static str {
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

    pub(super) fn halve(&self) {
        self.debt.fetch_add(CAPACITY / 2, Ordering::Relaxed);
    }

    pub(super) fn restore(&self) {
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
    /// weir's AIMD (timeout: 1.5 × the unloaded p99).
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
pub(super) type LimitProbe = Arc<dyn Fn() -> Option<u32> + Send + Sync>;

/// tower-acc's algorithm with its limit made visible for the plot.
#[derive(Clone)]
pub(super) struct Observed<A> {
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
pub(super) fn with_acc<A: tower_acc::Algorithm + Clone + Send + Sync + 'static>(
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

pub(super) fn with_weir<A: Algorithm + Clone + Sync>(
    base: Router,
    algorithm: A,
) -> (Router, LimitProbe) {
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
pub(super) fn router(
    contender: Contender,
    backend: &Backend,
    unloaded_p99: Duration,
) -> (Router, LimitProbe) {
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
