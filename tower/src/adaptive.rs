//! [`AdaptiveInflightLayer`]: [`InflightLayer`](super::InflightLayer)'s
//! per-key in-flight limit, with each key's limit learned from latency by
//! an [`adaptive`](weir_adaptive) algorithm instead of chosen by hand.
//!
//! A request beyond its key's limit is answered 503 with `Retry-After`
//! at once: the layer never queues (a queue in front of a slow origin is
//! the latency the limit exists to avoid). An admitted request's guard
//! travels in the response future and then in the body: its latency is
//! reported when the response head arrives (classified by status, see
//! [`AdaptiveInflightLayer::classify`]), and it counts in flight until its
//! body has ended or been dropped. A refusal by a weir layer inside this
//! one (a client's rate limit or in-flight limit) teaches nothing,
//! whatever its status: it is about the client, not the origin. The
//! latency sample runs from the call to the response head, so it includes
//! the time the origin spends reading the request's body from the client.
//!
//! A request whose future is dropped before its answer (the client went
//! away, or a layer outside this one cut it short) releases its place and
//! teaches the limit nothing: a client can cancel at will, and cancels
//! counted as drops would let a few clients hold a shared limit at its
//! minimum. Put a timeout *inside* this layer (between it and the origin),
//! so that a slow origin fails the request with the timeout's error, which
//! reports a drop. A client that sends its request body slowly makes that
//! timeout fire too: behind a shared key, read request bodies in full
//! before this layer, or key it per client. For the same reason put a
//! shaping [`RateLimitLayer`](super::RateLimitLayer) (a
//! [`LeakyBucket`](weir_rate::LeakyBucket) shaper) outside this layer: inside,
//! its delay would count as the origin's latency, and each delayed request
//! would hold a shared place while it waits.

use super::body::CountedBody;
use super::key::GlobalKey;
use super::key::KeyExtractor;
use super::response::{Refused, Unkeyed, overloaded};
use super::telemetry::{Admissions, Standing};
use http::{Request, Response, StatusCode};
use pin_project_lite::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tower::{Layer, Service};
use weir_adaptive::{AdaptiveGuard, AdaptiveLimiter, Algorithm, KeyedAdaptiveLimiter, Outcome};
use weir_rate::clock::{Clock, MonotonicClock};

/// A tower layer limiting in-flight requests to a learned limit: one the
/// whole service shares ([`shared`](Self::shared)), or one per key
/// ([`new`](Self::new)).
///
/// ```
/// use axum::{Router, routing::get};
/// use weir_adaptive::{AdaptiveLimiter, Gradient2};
/// use weir_tower::AdaptiveInflightLayer;
///
/// // One learned limit for the whole service; 503 beyond it.
/// let limiter = AdaptiveLimiter::new(Gradient2::default());
/// let app: Router = Router::new()
///     .route("/", get(|| async { "hello" }))
///     .layer(AdaptiveInflightLayer::shared(limiter.clone()).name("api"));
/// // A clone reads the shared limit as it learns.
/// assert_eq!((limiter.limit(), limiter.in_flight()), (20, 0));
/// # let _ = app;
/// ```
#[derive(Debug)]
pub struct AdaptiveInflightLayer<X, A, C = MonotonicClock> {
    limits: Limits<A, C>,
    extractor: X,
    unkeyed: Unkeyed,
    classify: fn(StatusCode) -> Outcome,
    name: Arc<str>,
    admissions: Arc<Admissions>,
}

/// Where a layer's limits live.
#[derive(Debug)]
enum Limits<A, C> {
    /// One limit for every request.
    Shared(AdaptiveLimiter<A, C>),
    /// One limit per key.
    Keyed(Arc<KeyedAdaptiveLimiter<A, C>>),
}

// By hand: a derive would demand `A: Clone` and `C: Clone` of the shared
// limiter's parameters.
impl<A, C: Clone> Clone for Limits<A, C> {
    fn clone(&self) -> Self {
        match self {
            Self::Shared(l) => Self::Shared(l.clone()),
            Self::Keyed(l) => Self::Keyed(Arc::clone(l)),
        }
    }
}

impl<X: Clone, A, C: Clone> Clone for AdaptiveInflightLayer<X, A, C> {
    fn clone(&self) -> Self {
        Self {
            limits: self.limits.clone(),
            extractor: self.extractor.clone(),
            unkeyed: self.unkeyed.clone(),
            classify: self.classify,
            name: Arc::clone(&self.name),
            admissions: Arc::clone(&self.admissions),
        }
    }
}

/// The default classification: the statuses an overloaded origin or
/// gateway answers with (502, 503, 504) are drops; other server errors,
/// and 429 (a client over its own limit, not the origin over capacity),
/// say nothing about load; everything else is a success.
///
/// ```
/// use http::StatusCode;
/// use weir_adaptive::Outcome;
/// use weir_tower::classify_status;
///
/// assert_eq!(classify_status(StatusCode::SERVICE_UNAVAILABLE), Outcome::Dropped);
/// assert_eq!(classify_status(StatusCode::TOO_MANY_REQUESTS), Outcome::Ignored);
/// assert_eq!(classify_status(StatusCode::INTERNAL_SERVER_ERROR), Outcome::Ignored);
/// assert_eq!(classify_status(StatusCode::NOT_FOUND), Outcome::Success);
/// ```
pub fn classify_status(status: StatusCode) -> Outcome {
    Outcome::of_status(status.as_u16())
}

impl<A: Algorithm + Clone, C: Clock + Clone> AdaptiveInflightLayer<GlobalKey, A, C> {
    /// One learned limit for every request through the layer (and its
    /// clones): keep a clone of `limiter` to read its limit, requests in
    /// flight and no-load latency.
    pub fn shared(limiter: AdaptiveLimiter<A, C>) -> Self {
        Self::with_limits(GlobalKey, Limits::Shared(limiter))
    }
}

impl<X, A: Algorithm + Clone, C: Clock + Clone> AdaptiveInflightLayer<X, A, C> {
    /// Limits each key `extractor` finds with its own state in `limiter`.
    /// Clones of the layer share the limiter.
    pub fn new(extractor: X, limiter: KeyedAdaptiveLimiter<A, C>) -> Self {
        Self::with_limits(extractor, Limits::Keyed(Arc::new(limiter)))
    }

    fn with_limits(extractor: X, limits: Limits<A, C>) -> Self {
        Self {
            limits,
            extractor,
            unkeyed: Unkeyed::new("AdaptiveInflightLayer", "x-inflight-error"),
            classify: classify_status,
            name: Arc::from("adaptive"),
            admissions: Arc::default(),
        }
    }

    /// The layer's name in metrics (default `adaptive`): the `limiter`
    /// label, as a rate-limit layer's policy name is.
    pub fn name(mut self, name: impl Into<Arc<str>>) -> Self {
        self.name = name.into();
        self.admissions = Arc::default();
        self
    }

    /// How a response's status teaches the algorithm (default
    /// [`classify_status`]). An error from the inner service is always a
    /// drop.
    ///
    /// ```
    /// use std::num::NonZeroUsize;
    /// use weir_adaptive::{KeyedAdaptiveLimiter, Outcome, Vegas};
    /// use weir_tower::{AdaptiveInflightLayer, PeerIp};
    ///
    /// let per_client = KeyedAdaptiveLimiter::new(Vegas::default(), NonZeroUsize::new(1024).unwrap());
    /// // Any 5xx is an overload signal.
    /// let layer = AdaptiveInflightLayer::new(PeerIp::new(), per_client).classify(|status| {
    ///     if status.is_server_error() { Outcome::Dropped } else { Outcome::Success }
    /// });
    /// # let _ = layer;
    /// ```
    pub fn classify(mut self, classify: fn(StatusCode) -> Outcome) -> Self {
        self.classify = classify;
        self
    }

    /// The status a request without a key is refused with (default 500),
    /// with `x-inflight-error: no-key; ...`; the first is logged through
    /// `tracing`.
    pub fn missing_key_status(mut self, status: StatusCode) -> Self {
        self.unkeyed = self.unkeyed.with_status(status);
        self
    }

    /// The per-key limiter of a layer made with [`new`](Self::new), to read
    /// each key's limit and count (`None` for a [`shared`](Self::shared)
    /// one, whose limiter its caller keeps).
    ///
    /// ```
    /// use std::num::NonZeroUsize;
    /// use weir_adaptive::{Aimd, KeyedAdaptiveLimiter};
    /// use weir_tower::{AdaptiveInflightLayer, PeerIp};
    ///
    /// let limiter = KeyedAdaptiveLimiter::new(Aimd::default(), NonZeroUsize::new(1024).unwrap());
    /// let layer = AdaptiveInflightLayer::new(PeerIp::new(), limiter);
    /// let client: std::net::IpAddr = [192, 0, 2, 1].into();
    /// assert_eq!(layer.keyed_limiter().map(|l| l.in_flight(&client)), Some(0));
    /// ```
    pub fn keyed_limiter(&self) -> Option<&KeyedAdaptiveLimiter<A, C>> {
        match &self.limits {
            Limits::Keyed(l) => Some(l),
            Limits::Shared(_) => None,
        }
    }

    /// Admit a request of `key`, counting the decision.
    fn admit<K: std::hash::Hash + ?Sized>(&self, key: &K) -> Option<AdaptiveGuard<A, C>> {
        let (guard, standing) = match &self.limits {
            Limits::Shared(l) => {
                let guard = l.try_acquire().ok();
                let standing = Standing {
                    limit: l.limit(),
                    in_flight: l.in_flight(),
                    no_load: l.no_load(),
                };
                (guard, Some(standing))
            }
            Limits::Keyed(l) => (l.try_acquire(key).ok(), None),
        };
        self.admissions.count(&self.name, guard.is_some(), standing);
        guard
    }
}

impl<S, X: Clone, A, C: Clone> Layer<S> for AdaptiveInflightLayer<X, A, C> {
    type Service = AdaptiveInflightService<S, X, A, C>;

    fn layer(&self, inner: S) -> Self::Service {
        AdaptiveInflightService {
            inner,
            layer: Arc::new(self.clone()),
        }
    }
}

/// The service [`AdaptiveInflightLayer`] produces.
///
/// ```
/// use http::{Request, Response};
/// use std::convert::Infallible;
/// use tower::{Layer, Service, ServiceExt};
/// use weir_tower::{
///     AdaptiveBody, AdaptiveFuture, AdaptiveInflightLayer, AdaptiveInflightService, GlobalKey,
/// };
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let inner = tower::service_fn(|_: Request<String>| async {
///     Ok::<_, Infallible>(Response::new(String::from("hello")))
/// });
/// let limiter = weir_adaptive::KeyedAdaptiveLimiter::new(
///     weir_adaptive::Aimd::default(),
///     std::num::NonZeroUsize::MIN,
/// );
/// let layer = AdaptiveInflightLayer::new(GlobalKey, limiter);
/// let mut service: AdaptiveInflightService<_, _, _, _> = layer.layer(inner);
/// let future: AdaptiveFuture<_, _, _, _> = service.ready().await.unwrap().call(Request::new(String::new()));
/// let response = future.await.unwrap();
/// assert_eq!(response.status(), 200);
/// // The request's latency sample stays open until its body is done.
/// let body: AdaptiveBody<String, _, _> = response.into_body();
/// drop(body);
/// # });
/// ```
#[derive(Debug)]
pub struct AdaptiveInflightService<S, X, A, C = MonotonicClock> {
    inner: S,
    /// Shared: services are cloned per connection (and by axum per request).
    layer: Arc<AdaptiveInflightLayer<X, A, C>>,
}

impl<S: Clone, X, A, C> Clone for AdaptiveInflightService<S, X, A, C> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            layer: Arc::clone(&self.layer),
        }
    }
}

impl<S, X, A, C, ReqBody, ResBody> Service<Request<ReqBody>> for AdaptiveInflightService<S, X, A, C>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    X: KeyExtractor<ReqBody>,
    A: Algorithm + Clone,
    C: Clock + Clone,
    ResBody: Default,
{
    type Response = Response<AdaptiveBody<ResBody, A, C>>;
    type Error = S::Error;
    type Future = AdaptiveFuture<S::Future, ResBody, A, C>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let Some(key) = self.layer.extractor.extract(&request) else {
            return AdaptiveFuture::rejected(self.layer.unkeyed.respond());
        };
        match self.layer.admit(&key) {
            Some(guard) => AdaptiveFuture {
                state: AdaptiveFutureState::Running {
                    future: self.inner.call(request),
                    guard: Awaiting {
                        guard: Some(guard),
                        polling: false,
                    },
                    classify: self.layer.classify,
                },
            },
            None => AdaptiveFuture::rejected(overloaded()),
        }
    }
}

pin_project! {
    /// The response future of [`AdaptiveInflightService`]: holds the
    /// request's guard until it hands it to the response body, or is
    /// dropped (which releases it, teaching nothing).
    ///
    /// The [`AdaptiveInflightService`] example names it.
    pub struct AdaptiveFuture<F, B, A: Algorithm, C: Clock> {
        #[pin]
        state: AdaptiveFutureState<F, B, A, C>,
    }
}

pin_project! {
    #[project = AdaptiveProj]
    enum AdaptiveFutureState<F, B, A: Algorithm, C: Clock> {
        Rejected { response: Option<Response<B>> },
        Running {
            #[pin] future: F,
            guard: Awaiting<A, C>,
            classify: fn(StatusCode) -> Outcome,
        },
    }
}

/// An admitted request's guard while its answer is awaited. Dropped still
/// holding it, the request was cancelled: released as ignored, not as the
/// guard's default drop. An origin that panicked failed, and keeps that
/// default: a poll that never returned marks it, whenever the future is
/// dropped (during the unwinding, or later by whoever caught the panic).
struct Awaiting<A: Algorithm, C: Clock> {
    guard: Option<AdaptiveGuard<A, C>>,
    polling: bool,
}

impl<A: Algorithm, C: Clock> Drop for Awaiting<A, C> {
    fn drop(&mut self) {
        if let Some(guard) = self.guard.take()
            && !self.polling
        {
            guard.ignore();
        }
    }
}

impl<F, B, A: Algorithm, C: Clock> AdaptiveFuture<F, B, A, C> {
    fn rejected(response: Response<B>) -> Self {
        Self {
            state: AdaptiveFutureState::Rejected {
                response: Some(response),
            },
        }
    }
}

impl<F, B, E, A: Algorithm, C: Clock> Future for AdaptiveFuture<F, B, A, C>
where
    F: Future<Output = Result<Response<B>, E>>,
    B: Default,
{
    type Output = Result<Response<AdaptiveBody<B, A, C>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            AdaptiveProj::Rejected { response } => match response.take() {
                Some(response) => Poll::Ready(Ok(response.map(CountedBody::uncounted))),
                None => panic!("AdaptiveFuture polled after completion"),
            },
            AdaptiveProj::Running {
                future,
                guard,
                classify,
            } => {
                guard.polling = true;
                let polled = future.poll(cx);
                guard.polling = false;
                let result = std::task::ready!(polled);
                let mut guard = guard.guard.take();
                match result {
                    Ok(response) => {
                        if let Some(guard) = guard.as_mut() {
                            // A weir layer inside refused a client: nothing
                            // about the origin's load.
                            guard.record(if response.extensions().get::<Refused>().is_some() {
                                Outcome::Ignored
                            } else {
                                classify(response.status())
                            });
                        }
                        Poll::Ready(Ok(response.map(|inner| CountedBody::counted(inner, guard))))
                    }
                    // No body to stream: the guard reports a drop here.
                    Err(e) => Poll::Ready(Err(e)),
                }
            }
        }
    }
}

/// The response body of [`AdaptiveInflightLayer`]: the request stays
/// counted in flight, and its latency sample open, until the body has
/// ended (or failed, or been dropped).
///
/// The [`AdaptiveInflightService`] example names it.
pub type AdaptiveBody<B, A, C> = CountedBody<B, AdaptiveGuard<A, C>>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{GlobalKey, PeerIp};
    use std::convert::Infallible;
    use std::num::{NonZeroU32, NonZeroUsize};
    use std::time::Duration;
    use tokio::sync::Semaphore;
    use tower::ServiceExt;
    use weir_adaptive::{Aimd, Constant};
    use weir_rate::clock::ManualClock;

    fn fixed(n: u32) -> KeyedAdaptiveLimiter<Constant, ManualClock> {
        KeyedAdaptiveLimiter::with_clock(
            Constant::new(NonZeroU32::new(n).unwrap()),
            NonZeroUsize::new(8).unwrap(),
            ManualClock::new(),
        )
    }

    /// Answers `status` once a permit is released.
    fn gated(
        gate: Arc<Semaphore>,
        status: StatusCode,
    ) -> impl Service<Request<()>, Response = Response<String>, Error = Infallible, Future: Send> + Clone
    {
        tower::service_fn(move |_req: Request<()>| {
            let gate = Arc::clone(&gate);
            async move {
                gate.acquire().await.expect("gate open").forget();
                let mut response = Response::new("ok".to_string());
                *response.status_mut() = status;
                Ok::<_, Infallible>(response)
            }
        })
    }

    #[tokio::test]
    async fn refuses_at_the_limit_without_queueing_and_recovers() {
        let gate = Arc::new(Semaphore::new(0));
        let layer = AdaptiveInflightLayer::new(GlobalKey, fixed(1));
        let service = layer.layer(gated(Arc::clone(&gate), StatusCode::OK));
        let first = tokio::spawn(service.clone().oneshot(Request::new(())));
        while layer.keyed_limiter().unwrap().in_flight(&()) < 1 {
            tokio::task::yield_now().await;
        }
        let refused = service.clone().oneshot(Request::new(())).await.unwrap();
        assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(refused.headers()[http::header::RETRY_AFTER], "1");
        gate.add_permits(1);
        assert_eq!(first.await.unwrap().unwrap().status(), StatusCode::OK);
        assert_eq!(layer.keyed_limiter().unwrap().in_flight(&()), 0);
        gate.add_permits(1);
        let again = service.oneshot(Request::new(())).await.unwrap();
        assert_eq!(again.status(), StatusCode::OK);
    }

    /// AIMD that backs off on every single drop (and never probes, so its
    /// limit is never pinned).
    fn twitchy() -> KeyedAdaptiveLimiter<Aimd, ManualClock> {
        let aimd = Aimd::builder()
            .window(Duration::ZERO)
            .window_samples(NonZeroU32::new(1).unwrap())
            .probe_interval(None)
            .build()
            .unwrap();
        KeyedAdaptiveLimiter::with_clock(aimd, NonZeroUsize::new(8).unwrap(), ManualClock::new())
    }

    #[tokio::test]
    async fn an_overloaded_origin_lowers_the_limit_and_a_broken_one_does_not() {
        let layer = AdaptiveInflightLayer::new(GlobalKey, twitchy());
        let busy = layer.layer(gated(
            Arc::new(Semaphore::new(10)),
            StatusCode::SERVICE_UNAVAILABLE,
        ));
        let response = busy.oneshot(Request::new(())).await.unwrap();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        drop(response);
        assert_eq!(
            layer.keyed_limiter().unwrap().limit(&()),
            Some(18),
            "20 × 0.9"
        );
        // A 500 says nothing about load.
        let broken = layer.layer(gated(
            Arc::new(Semaphore::new(10)),
            StatusCode::INTERNAL_SERVER_ERROR,
        ));
        drop(broken.oneshot(Request::new(())).await.unwrap());
        assert_eq!(layer.keyed_limiter().unwrap().limit(&()), Some(18));
    }

    /// A client can cancel at will (close the connection, reset an HTTP/2
    /// stream): counted as drops, a few cancels a second would hold a
    /// shared limit at its minimum and refuse everyone else. So a request
    /// cancelled before its answer releases its place and teaches nothing.
    ///
    /// Written first against the layer that reported a drop per cancel, it
    /// failed: the limit fell from 20 to 1.
    #[tokio::test]
    async fn a_client_cancelling_teaches_the_limit_nothing() {
        let layer = AdaptiveInflightLayer::new(GlobalKey, twitchy());
        let service = layer.layer(gated(Arc::new(Semaphore::new(0)), StatusCode::OK));
        for _ in 0..200 {
            let pending = tokio::spawn(service.clone().oneshot(Request::new(())));
            while layer.keyed_limiter().unwrap().in_flight(&()) < 1 {
                tokio::task::yield_now().await;
            }
            pending.abort();
            let _ = pending.await;
            assert_eq!(layer.keyed_limiter().unwrap().in_flight(&()), 0);
        }
        assert_eq!(layer.keyed_limiter().unwrap().limit(&()), Some(20));
    }

    /// A client's own refusals, by a weir layer inside this one (a
    /// per-client rate limit's 429, a per-client in-flight limit's 503),
    /// or a 429 from the origin, say nothing about the origin's load: one
    /// client hammering its own limit must not shrink the limit it shares
    /// with everyone. (Written first, this failed: 20 fell to 1.)
    #[tokio::test]
    async fn a_clients_own_refusals_teach_the_shared_limit_nothing() {
        use crate::{InflightLayer, KeyFn, RateLimitLayer};
        use weir_rate::{Gcra, KeyedLimiter, Quota};
        let by_client = || {
            KeyFn::new(|r: &Request<()>| r.headers().get("client").map(|v| v.as_bytes().to_vec()))
        };
        let per_client =
            KeyedLimiter::new(Gcra::new(Quota::per_minute(NonZeroU32::new(5).unwrap())));
        let layer = AdaptiveInflightLayer::new(GlobalKey, twitchy());
        let from = |client: &str| {
            Request::builder()
                .header("client", client)
                .body(())
                .unwrap()
        };
        let limited = layer.layer(
            RateLimitLayer::new(per_client, by_client())
                .layer(gated(Arc::new(Semaphore::new(100)), StatusCode::OK)),
        );
        let mut refused = 0;
        for _ in 0..50 {
            let response = limited.clone().oneshot(from("greedy")).await.unwrap();
            refused += u32::from(response.status() == StatusCode::TOO_MANY_REQUESTS);
        }
        assert_eq!(refused, 45);
        // A per-client in-flight limit's 503: one request held, the next
        // refused.
        let held = layer.layer(
            InflightLayer::new(by_client(), 1)
                .layer(gated(Arc::new(Semaphore::new(0)), StatusCode::OK)),
        );
        let first = tokio::spawn(held.clone().oneshot(from("slow")));
        while layer.keyed_limiter().unwrap().in_flight(&()) < 1 {
            tokio::task::yield_now().await;
        }
        let busy = held.oneshot(from("slow")).await.unwrap();
        assert_eq!(busy.status(), StatusCode::SERVICE_UNAVAILABLE);
        drop(busy);
        first.abort();
        let _ = first.await;
        // An origin's 429 is a client's, too.
        let origin = layer.layer(gated(
            Arc::new(Semaphore::new(1)),
            StatusCode::TOO_MANY_REQUESTS,
        ));
        drop(origin.oneshot(Request::new(())).await.unwrap());
        assert_eq!(layer.keyed_limiter().unwrap().limit(&()), Some(20));
    }

    /// An origin that panics failed: a drop, not a client's cancel.
    #[tokio::test]
    async fn an_origin_that_panics_counts_as_a_drop() {
        let layer = AdaptiveInflightLayer::new(GlobalKey, twitchy());
        let panicking = layer.layer(tower::service_fn(|_req: Request<()>| async {
            if true {
                panic!("the origin failed");
            }
            Ok::<_, Infallible>(Response::new(String::new()))
        }));
        let joined = tokio::spawn(panicking.clone().oneshot(Request::new(()))).await;
        assert!(joined.unwrap_err().is_panic());
        assert_eq!(layer.keyed_limiter().unwrap().in_flight(&()), 0);
        assert_eq!(
            layer.keyed_limiter().unwrap().limit(&()),
            Some(18),
            "20 × 0.9"
        );
        // Caught where it was polled (as tower-http's CatchPanicLayer does)
        // and dropped after the unwinding: still a drop.
        let mut service = panicking;
        let mut future = Box::pin(service.call(Request::new(())));
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _ = future.as_mut().poll(&mut cx);
        }));
        assert!(caught.is_err());
        drop(future);
        assert_eq!(layer.keyed_limiter().unwrap().in_flight(&()), 0);
        assert_eq!(
            layer.keyed_limiter().unwrap().limit(&()),
            Some(16),
            "18 × 0.9"
        );
    }

    /// An origin that fails (or a timeout layered inside this one, which
    /// fails the request with its error) still reports a drop.
    #[tokio::test]
    async fn an_origin_error_counts_as_a_drop() {
        let layer = AdaptiveInflightLayer::new(GlobalKey, twitchy());
        let failing = layer.layer(tower::service_fn(|_req: Request<()>| async {
            Err::<Response<String>, &'static str>("timed out")
        }));
        assert!(failing.oneshot(Request::new(())).await.is_err());
        assert_eq!(layer.keyed_limiter().unwrap().in_flight(&()), 0);
        assert_eq!(
            layer.keyed_limiter().unwrap().limit(&()),
            Some(18),
            "20 × 0.9"
        );
    }

    #[tokio::test]
    async fn a_streaming_body_counts_until_it_ends() {
        let layer = AdaptiveInflightLayer::new(GlobalKey, fixed(1));
        let origin = tower::service_fn(|_req: Request<()>| async {
            Ok::<_, Infallible>(Response::new(http_body_util::Full::new(&b"0123"[..])))
        });
        let service = layer.layer(origin);
        let mut response = service.clone().oneshot(Request::new(())).await.unwrap();
        assert_eq!(
            layer.keyed_limiter().unwrap().in_flight(&()),
            1,
            "the body is unread"
        );
        let refused = service.clone().oneshot(Request::new(())).await.unwrap();
        assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
        let body = Pin::new(response.body_mut());
        let mut body = body;
        while std::future::poll_fn(|cx| http_body::Body::poll_frame(body.as_mut(), cx))
            .await
            .is_some()
        {}
        assert_eq!(
            layer.keyed_limiter().unwrap().in_flight(&()),
            0,
            "released at the end"
        );
    }

    #[tokio::test]
    async fn requests_without_a_key_get_500() {
        let layer = AdaptiveInflightLayer::new(PeerIp::new(), fixed(1));
        let service = layer.layer(gated(Arc::new(Semaphore::new(1)), StatusCode::OK));
        let response = service.oneshot(Request::new(())).await.unwrap();
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert!(response.headers().contains_key("x-inflight-error"));
    }
    /// The review's case, through the layer: one learned limit shared by
    /// everyone (the default Gradient2) in front of an origin whose work
    /// takes 5 ms, and one client's 40 requests for a missing path,
    /// answered at once (a 404 is a success to the layer). Fed to a mean
    /// that could lower the no-load latency, they took the shared limit
    /// from 20 to 2; it must stay at least half of what it was.
    #[tokio::test]
    async fn one_clients_instant_404s_leave_the_shared_limit_to_the_origin() {
        use weir_adaptive::{AdaptiveLimiter, Gradient2};
        let clock = ManualClock::new();
        let limiter = AdaptiveLimiter::with_clock(Gradient2::default(), clock.clone());
        let origin = {
            let clock = clock.clone();
            tower::service_fn(move |request: Request<()>| {
                let missing = request.uri().path() == "/missing";
                clock.advance(if missing {
                    Duration::from_micros(50)
                } else {
                    Duration::from_millis(5)
                });
                let status = if missing {
                    StatusCode::NOT_FOUND
                } else {
                    StatusCode::OK
                };
                let mut response = Response::new(String::new());
                *response.status_mut() = status;
                std::future::ready(Ok::<_, Infallible>(response))
            })
        };
        let service = AdaptiveInflightLayer::shared(limiter.clone()).layer(origin);
        let send = |path: &'static str| {
            let request = Request::builder().uri(path).body(()).unwrap();
            service.clone().oneshot(request)
        };
        for _ in 0..400 {
            assert_eq!(send("/").await.unwrap().status(), StatusCode::OK);
        }
        let before = limiter.limit();
        for _ in 0..40 {
            assert_eq!(
                send("/missing").await.unwrap().status(),
                StatusCode::NOT_FOUND
            );
            clock.advance(Duration::from_millis(1));
        }
        for _ in 0..300 {
            assert_eq!(send("/").await.unwrap().status(), StatusCode::OK);
        }
        let after = limiter.limit();
        assert!(
            after >= before / 2,
            "the shared limit fell from {before} to {after}"
        );
        assert_eq!(limiter.no_load(), Some(Duration::from_millis(5)));
    }
}
