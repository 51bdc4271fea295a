//! [`RateLimitLayer`]: check a limiter for every request, answer 429 (or 503)
//! with `Retry-After` when it says no, and put the IETF `RateLimit-Policy` /
//! `RateLimit` fields on every response.
//!
//! The limiter is anything that can decide for a key: an exact
//! [`KeyedLimiter`](weir_rate::KeyedLimiter), a bounded-memory
//! [`SketchLimiter`](weir_rate::SketchLimiter), or the Redis limiter. That is
//! [`CheckKeyAsync`]; in-process limiters answer it with an
//! already-completed future, which the service polls once and never boxes.
//!
//! A shaper ([`LeakyBucket::try_shaper`](weir_rate::LeakyBucket::try_shaper))
//! admits a burst and spaces it out: the layer holds each admitted request
//! for its decision's [`delay`](weir_rate::Decision::delay) before calling the
//! inner service (not in shadow mode), without holding the service's
//! readiness meanwhile. A waiting request is held in memory (its future,
//! boxed) until its turn: at most the shaper's queue per key, so bound the
//! keys (the limiter's capacity) or the requests in flight
//! ([`InflightLayer`](super::InflightLayer)) to bound them all. Keep the
//! shaper's `max_delay` below any timeout outside the layer (the client's
//! included): a request that times out waiting has spent its place in the
//! queue for nothing. The waits are on weir-timeout's ticks (10 ms by
//! default), so a shaper faster than a request per tick releases its
//! requests a tick's worth at a time.
//!
//! With [`settle`](RateLimitLayer::settle) the layer charges by the
//! response instead: the limiter must also be [`SettleKey`], and the
//! response body becomes a [`SettleBody`] that settles when it ends.

mod answer;
mod cost;

use super::key::KeyExtractor;
use super::response::Unkeyed;
use super::settle::{Finish, Passage, Settle, SettleBody, SettleGuard, Settler};
use crate::telemetry::Outcome;
use http::{Request, Response, StatusCode};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use tower::{Layer, Service};
use weir_rate::PolicyName;
use weir_rate::{CheckKeyAsync, Decision, NeverAllowed, SettleKey};

use answer::{Answering, DecisionHeaders, Next};
pub use cost::{Cost, UnitCost};

/// A tower layer that rate-limits requests per key.
///
/// Any limiter that decides for the extractor's key type works: in
/// process ([`KeyedLimiter`](weir_rate::KeyedLimiter) of that key type),
/// or a store limiter (weir-redis, weir-memcached), whose key is the
/// extractor's key through `Display`, so an [`OrKey`](crate::OrKey) of a
/// header and the peer address counts as the header's value or the
/// address's text on the store. A limiter of tiers
/// ([`TieredLimiter`](weir_rate::TieredLimiter), weir-store's
/// `StoreTiers`) gives each key its tier's limit, and the fields and the
/// metrics' `limiter` label name the tier instead of the layer's policy.
///
/// A request the extractor finds no key for is refused without calling
/// the service: 500 unless [`missing_key_status`](Self::missing_key_status)
/// says otherwise, with `x-ratelimit-error: no-key; ...`, and logged once
/// per layer through `tracing` with what the server is missing.
///
/// ```
/// use axum::{Router, routing::get};
/// use std::net::{IpAddr, SocketAddr};
/// use std::num::NonZeroU32;
/// use weir_rate::{Gcra, KeyedLimiter, Quota};
/// use weir_tower::{PeerIp, RateLimitLayer};
///
/// let per_ip = KeyedLimiter::<IpAddr, _>::new(Gcra::new(
///     Quota::per_second(NonZeroU32::new(50).unwrap()),
/// ));
/// let app = Router::new()
///     .route("/", get(|| async { "hello" }))
///     .layer(RateLimitLayer::new(per_ip, PeerIp::new()).policy_name("per-ip"));
/// // PeerIp finds the client in the ConnectInfo this inserts (with
/// // weir-tower's `axum` feature): `axum::serve(listener, service)`.
/// let service = app.into_make_service_with_connect_info::<SocketAddr>();
/// # let _ = service;
/// ```
///
/// `F` is the cost function ([`cost_fn`](Self::cost_fn); by default every
/// request costs 1), and `P` what happens after the response: `()`
/// (nothing, the default) or [`Settle`] once [`settle`](Self::settle) has
/// been called.
pub struct RateLimitLayer<Ch, X, F = UnitCost, P = ()> {
    checker: Arc<Ch>,
    extractor: X,
    cost: Arc<F>,
    answering: Answering,
    post: P,
}

impl<Ch, X: Clone, F, P: Clone> Clone for RateLimitLayer<Ch, X, F, P> {
    fn clone(&self) -> Self {
        Self {
            checker: Arc::clone(&self.checker),
            extractor: self.extractor.clone(),
            cost: Arc::clone(&self.cost),
            answering: self.answering.clone(),
            post: self.post.clone(),
        }
    }
}

impl<Ch, X: std::fmt::Debug, F, P: std::fmt::Debug> std::fmt::Debug
    for RateLimitLayer<Ch, X, F, P>
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimitLayer")
            .field("extractor", &self.extractor)
            .field("policy", &self.answering.policy)
            .field("denied_status", &self.answering.denied_status)
            .field("shadow", &self.answering.shadow)
            .field("missing_key_status", &self.answering.unkeyed.status())
            .field("settle", &self.post)
            .finish_non_exhaustive()
    }
}

impl<Ch, X> RateLimitLayer<Ch, X> {
    /// Limit with `checker`, keying requests with `extractor`; every request
    /// costs 1, denials answer 429, the policy is called `"default"`.
    pub fn new(checker: Ch, extractor: X) -> Self {
        Self::shared(Arc::new(checker), extractor)
    }

    /// Like [`new`](Self::new) with a limiter the caller keeps a handle to
    /// (to change its quota at run time, evict idle keys, read it).
    pub fn shared(checker: Arc<Ch>, extractor: X) -> Self {
        Self {
            checker,
            extractor,
            cost: Arc::new(UnitCost),
            answering: Answering {
                policy: Arc::from("default"),
                quoted: Arc::new(PolicyName::new("default")),
                policy_header: Arc::new(OnceLock::new()),
                denied_status: StatusCode::TOO_MANY_REQUESTS,
                shadow: false,
                unkeyed: Unkeyed::new("RateLimitLayer", "x-ratelimit-error"),
                decisions: Arc::default(),
            },
            post: (),
        }
    }
}

impl<Ch, X, F> RateLimitLayer<Ch, X, F> {
    /// Charge by the response: admit each request on a check of its
    /// up-front cost (1, or [`cost_fn`](Self::cost_fn)'s), then, once its
    /// response body has ended or been dropped (the client gone), settle
    /// at the cost `settle` finds from what was [`Sent`](super::Sent):
    /// refund the surplus or charge the shortfall, exactly once
    /// ([`Settlement`](weir_rate::Settlement) has the rule, and why a refund
    /// never loosens the limit). A key left in debt by a charge is denied
    /// until its spending has aged out.
    ///
    /// A denied request settles nothing; nor does one that never got a
    /// response (it keeps what its check charged). A settlement that fails
    /// (the limiter's backend down) keeps the check's charge, and is
    /// logged through `tracing` and counted as
    /// `weir_rate_settlements_total{outcome="error"}` (feature `metrics`).
    /// One that a backend answers later runs as a task on the current
    /// tokio runtime.
    ///
    /// Pick an algorithm that carries debt across its window (GCRA, a
    /// token bucket, a sliding window): a fixed window's debt ends with the
    /// window, whose count starts again from zero. And until a request
    /// settles, only its admission cost was spent: requests admitted
    /// together (before the first settles) are bounded by that cost alone,
    /// so bound them too with an [`InflightLayer`](crate::InflightLayer)
    /// or a larger admission cost ([`cost_fn`](Self::cost_fn)).
    ///
    /// ```
    /// use axum::body::Body;
    /// use http::{Request, StatusCode};
    /// use std::num::NonZeroU32;
    /// use tower::{Layer, ServiceExt};
    /// use weir_tower::{GlobalKey, RateLimitLayer, Settle};
    /// use weir_rate::{Gcra, KeyedLimiter, Quota};
    ///
    /// // 1000 response bytes a minute; a request needs 1 to be let in.
    /// let bytes = KeyedLimiter::new(Gcra::new(Quota::per_minute(NonZeroU32::new(1000).unwrap())));
    /// let layer = RateLimitLayer::new(bytes, GlobalKey).settle(Settle::body_bytes());
    /// let service = layer.layer(tower::service_fn(|_: Request<Body>| async {
    ///     Ok::<_, std::convert::Infallible>(http::Response::new(Body::from(vec![b'x'; 1500])))
    /// }));
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use http_body_util::BodyExt;
    /// let response = service.clone().oneshot(Request::new(Body::empty())).await.unwrap();
    /// assert_eq!(response.status(), StatusCode::OK);
    /// // Sending the body settles the request at 1500 bytes: 500 in debt.
    /// let body = response.into_body().collect().await.unwrap().to_bytes();
    /// assert_eq!(body.len(), 1500);
    /// let next = service.oneshot(Request::new(Body::empty())).await.unwrap();
    /// assert_eq!(next.status(), StatusCode::TOO_MANY_REQUESTS);
    /// # });
    /// ```
    pub fn settle(self, settle: Settle) -> RateLimitLayer<Ch, X, F, Settle> {
        RateLimitLayer {
            // Counters of this layer's own, labelled with its policy name,
            // even when one rule is given to several layers.
            post: settle.with_own_counters(),
            checker: self.checker,
            extractor: self.extractor,
            cost: self.cost,
            answering: self.answering,
        }
    }
}

impl<Ch, X, F, P> RateLimitLayer<Ch, X, F, P> {
    /// The name of the policy in the `RateLimit` header fields. Stacked
    /// layers each add their policy to the fields' lists: give them
    /// distinct names (an origin's older dictionary syntax cannot join).
    pub fn policy_name(mut self, name: &str) -> Self {
        self.answering.policy = Arc::from(name);
        self.answering.quoted = Arc::new(PolicyName::new(name));
        self.answering.policy_header = Arc::new(OnceLock::new());
        self
    }

    /// Weigh requests: `cost(request)` units instead of 1 (e.g. by route, or
    /// by the body size a `Content-Length` declares: a chunked body has
    /// none, so give it a cost of its own). The closure names the request
    /// type it is given. A panic in it reaches the caller (hyper drops the
    /// connection) before anything is checked or spent.
    ///
    /// ```
    /// use axum::body::Body;
    /// use http::Request;
    /// use std::num::NonZeroU32;
    /// use weir_tower::{PeerIp, RateLimitLayer};
    /// use weir_rate::{Gcra, KeyedLimiter, Quota};
    ///
    /// let per_ip = KeyedLimiter::<std::net::IpAddr, _>::new(Gcra::new(Quota::per_second(NonZeroU32::new(50).unwrap())));
    /// let layer = RateLimitLayer::new(per_ip, PeerIp::new())
    ///     .cost_fn(|req: &Request<Body>| if req.uri().path() == "/search" { 10 } else { 1 });
    /// # let _ = layer;
    /// ```
    pub fn cost_fn<B, G>(self, cost: G) -> RateLimitLayer<Ch, X, G, P>
    where
        G: Fn(&Request<B>) -> u32 + Send + Sync + 'static,
    {
        RateLimitLayer {
            checker: self.checker,
            extractor: self.extractor,
            cost: Arc::new(cost),
            answering: self.answering,
            post: self.post,
        }
    }

    /// The status a denial is answered with (default 429 Too Many
    /// Requests); 503 Service Unavailable suits limits that protect the
    /// server's capacity rather than police a client.
    ///
    /// ```
    /// use http::StatusCode;
    /// use std::num::NonZeroU32;
    /// use weir_rate::{Gcra, KeyedLimiter, Quota};
    /// use weir_tower::{GlobalKey, RateLimitLayer};
    ///
    /// let whole_service = KeyedLimiter::<(), _>::new(Gcra::new(Quota::per_second(NonZeroU32::new(1000).unwrap())));
    /// let layer = RateLimitLayer::new(whole_service, GlobalKey).denied_status(StatusCode::SERVICE_UNAVAILABLE);
    /// # let _ = layer;
    /// ```
    pub fn denied_status(mut self, status: StatusCode) -> Self {
        self.answering.denied_status = status;
        self
    }

    /// The status a request without a key is refused with (default 500: a
    /// server that cannot tell its clients apart is misconfigured).
    ///
    /// ```
    /// use http::{Request, StatusCode};
    /// use std::num::NonZeroU32;
    /// use weir_tower::{KeyFn, RateLimitLayer};
    /// use weir_rate::{Gcra, KeyedLimiter, Quota};
    ///
    /// // Requests without an API key are the client's fault here: 401.
    /// let by_api_key = KeyFn::new(|req: &Request<()>| {
    ///     req.headers().get("x-api-key").map(|v| v.as_bytes().to_vec())
    /// });
    /// let limiter = KeyedLimiter::<Vec<u8>, _>::new(Gcra::new(Quota::per_second(NonZeroU32::new(5).unwrap())));
    /// let layer = RateLimitLayer::new(limiter, by_api_key).missing_key_status(StatusCode::UNAUTHORIZED);
    /// # let _ = layer;
    /// ```
    pub fn missing_key_status(mut self, status: StatusCode) -> Self {
        self.answering.unkeyed = self.answering.unkeyed.with_status(status);
        self
    }

    /// Shadow (dry-run) mode: decide and report, never deny. A request the
    /// limit would have denied passes with `x-ratelimit-shadow: denied`.
    /// Outside shadow mode a denial is a real 429 (or 503) and carries no
    /// `x-ratelimit-shadow`; only an admission a shadowed limiter marks
    /// non-conforming ([`Decision::is_conforming`]) is labelled there.
    pub fn shadow(mut self, shadow: bool) -> Self {
        self.answering.shadow = shadow;
        self
    }
}

impl<S, Ch, X: Clone, F, P: Clone> Layer<S> for RateLimitLayer<Ch, X, F, P> {
    type Service = RateLimitService<S, Ch, X, F, P>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimitService {
            inner,
            layer: Arc::new(self.clone()),
        }
    }
}

/// The service [`RateLimitLayer`] produces.
///
/// ```
/// use http::{Request, Response};
/// use std::convert::Infallible;
/// use tower::{Layer, Service, ServiceExt};
/// use weir_tower::{GlobalKey, RateLimitFuture, RateLimitLayer, RateLimitService};
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let inner = tower::service_fn(|_: Request<String>| async {
///     Ok::<_, Infallible>(Response::new(String::from("hello")))
/// });
/// use weir_rate::{Gcra, KeyedLimiter, Quota};
/// let limiter = KeyedLimiter::new(Gcra::new(Quota::per_second(std::num::NonZeroU32::MIN)));
/// let layer = RateLimitLayer::new(limiter, GlobalKey);
/// let mut service: RateLimitService<_, _, _> = layer.layer(inner);
/// let future: RateLimitFuture<_, _, _> = service.ready().await.unwrap().call(Request::new(String::new()));
/// let response = future.await.unwrap();
/// assert_eq!(response.status(), 200);
/// # });
/// ```
pub struct RateLimitService<S, Ch, X, F = UnitCost, P = ()> {
    inner: S,
    /// Shared: services are cloned per connection (and by axum per request).
    layer: Arc<RateLimitLayer<Ch, X, F, P>>,
}

impl<S: Clone, Ch, X: Clone, F, P> Clone for RateLimitService<S, Ch, X, F, P> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            layer: Arc::clone(&self.layer),
        }
    }
}

impl<S: std::fmt::Debug, Ch, X: std::fmt::Debug, F, P: std::fmt::Debug> std::fmt::Debug
    for RateLimitService<S, Ch, X, F, P>
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimitService")
            .field("inner", &self.inner)
            .field("layer", &self.layer)
            .finish()
    }
}

pin_project_lite::pin_project! {
    /// The response future of [`RateLimitService`].
    ///
    /// The [`RateLimitService`] example names it.
    ///
    /// In-process limiters decide inside `call`, so the common path is the
    /// inner service's future plus precomputed headers: no allocation.
    /// Limiters that must wait (a network round trip), and a shaper's
    /// delayed admissions, take the boxed path.
    /// `T` is what an admitted request carries to its response: `()`, or
    /// a [`SettleGuard`] for a settling layer.
    pub struct RateLimitFuture<F, B, E, T = ()> {
        #[pin]
        state: RateLimitFutureState<F, B, E, T>,
    }
}

pin_project_lite::pin_project! {
    #[project = RateLimitProj]
    enum RateLimitFutureState<F, B, E, T> {
        Answered { response: Option<Response<B>> },
        Calling { #[pin] future: F, headers: Option<DecisionHeaders>, ticket: Option<T> },
        Waiting { future: Pin<Box<dyn Future<Output = Result<(Response<B>, Option<T>), E>> + Send>> },
    }
}

impl<F, B, E, T> Future for RateLimitFuture<F, B, E, T>
where
    F: Future<Output = Result<Response<B>, E>>,
    T: Finish<B>,
{
    type Output = Result<Response<T::Body>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            RateLimitProj::Answered { response } => match response.take() {
                Some(response) => Poll::Ready(Ok(T::finish(None, response))),
                None => panic!("RateLimitFuture polled after completion"),
            },
            RateLimitProj::Calling {
                future,
                headers,
                ticket,
            } => {
                // An error drops the ticket: no response, nothing settled.
                let mut response = std::task::ready!(future.poll(cx))?;
                if let Some(headers) = headers.take() {
                    headers.apply(&mut response);
                }
                Poll::Ready(Ok(T::finish(ticket.take(), response)))
            }
            RateLimitProj::Waiting { future } => {
                let (response, ticket) = std::task::ready!(future.as_mut().poll(cx))?;
                Poll::Ready(Ok(T::finish(ticket, response)))
            }
        }
    }
}

impl<S, Ch, X, F, B, ResBody> Service<Request<B>> for RateLimitService<S, Ch, X, F>
where
    F: Cost<B>,
    S: Service<Request<B>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    Ch: CheckKeyAsync<X::Key>,
    X: KeyExtractor<B>,
    B: Send + 'static,
    ResBody: Default + Send + 'static,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = RateLimitFuture<S::Future, ResBody, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        self.admit(request, |_, _, _| None)
    }
}

impl<S, Ch, X, F, B, ResBody> Service<Request<B>> for RateLimitService<S, Ch, X, F, Settle>
where
    F: Cost<B>,
    S: Service<Request<B>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    Ch: SettleKey<X::Key>,
    X: KeyExtractor<B>,
    B: Send + 'static,
    ResBody: http_body::Body + Default + Send + 'static,
{
    type Response = Response<SettleBody<ResBody, X::Key>>;
    type Error = S::Error;
    type Future = RateLimitFuture<S::Future, ResBody, S::Error, SettleGuard<X::Key>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<B>) -> Self::Future {
        let settler: Arc<dyn Settler<X::Key>> = self.layer.clone();
        let passage = Passage::of(request.extensions_mut());
        self.admit(request, move |key, decision, checked| {
            // Only a spending can be settled: a denial let through (shadow
            // mode) spent nothing and is owed nothing.
            (decision.is_allowed() && decision.is_conforming())
                .then(|| SettleGuard::new(settler, key, decision.clone(), checked, passage))
        })
    }
}

/// A settling layer settles through its limiter, reporting as its policy.
impl<Ch, X, F, K> Settler<K> for RateLimitLayer<Ch, X, F, Settle>
where
    Ch: SettleKey<K>,
    X: Send + Sync,
    F: Send + Sync,
{
    fn rule(&self) -> &Settle {
        &self.post
    }

    fn settle(&self, key: &K, admitted: &Decision, from: u32, to: u32) {
        super::settle::settle_through(
            &*self.checker,
            key,
            admitted,
            (from, to),
            &self.answering.policy,
            &self.post,
        );
    }

    fn failed(&self, from: u32, why: &dyn std::fmt::Display) {
        super::settle::failed(&self.answering.policy, &self.post, from, why);
    }
}

impl<S, Ch, X, F, P> RateLimitService<S, Ch, X, F, P> {
    /// Decide for `request`, then answer it or call the inner service;
    /// `ticket` makes what an admitted request carries to its response
    /// from its key, its decision and the cost checked.
    fn admit<B, ResBody, T: Finish<ResBody> + Send + 'static>(
        &mut self,
        request: Request<B>,
        ticket: impl FnOnce(X::Key, &Decision, u32) -> Option<T> + Send + 'static,
    ) -> RateLimitFuture<S::Future, ResBody, S::Error, T>
    where
        F: Cost<B>,
        S: Service<Request<B>, Response = Response<ResBody>> + Clone + Send + 'static,
        S::Future: Send + 'static,
        S::Error: Send + 'static,
        Ch: CheckKeyAsync<X::Key>,
        X: KeyExtractor<B>,
        B: Send + 'static,
        ResBody: Default + Send + 'static,
    {
        let Some(key) = self.layer.extractor.extract(&request) else {
            self.layer.answering.count(Outcome::Error);
            return answered(self.layer.answering.unkeyed.respond());
        };
        let cost = self.layer.cost.cost(&request);
        let mut check = self.layer.checker.check_n_async(&key, cost);
        // In-process limiters are ready at once; only a limiter that must
        // wait (a network round trip) needs the boxed path.
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let outcome = match Pin::new(&mut check).poll(&mut cx) {
            Poll::Ready(outcome) => outcome,
            Poll::Pending => return self.wait_for(check, request, (key, cost), ticket),
        };
        if !self.layer.answering.delay(outcome.as_ref().ok()).is_zero() {
            return self.wait_for(std::future::ready(outcome), request, (key, cost), ticket);
        }
        let decision = outcome.as_ref().ok().cloned();
        match self.layer.answering.next(outcome) {
            Next::Answer(response) => answered(response),
            Next::Forward(headers) => {
                let mut ticket = decision.and_then(|decision| ticket(key, &decision, cost));
                if let Some(t) = &mut ticket {
                    t.handed_on();
                }
                RateLimitFuture {
                    state: RateLimitFutureState::Calling {
                        future: self.inner.call(request),
                        headers: Some(headers),
                        ticket,
                    },
                }
            }
        }
    }

    /// The boxed path, for a decision that is not ready yet, or one that
    /// admits the request after a delay (a shaper's).
    ///
    /// The readiness `poll_ready` reserved (a concurrency permit, a buffer
    /// slot) is given back at once, by dropping the reserved service, and
    /// asked for again only once the decision admits the request and its
    /// delay has passed: a request waiting on a round trip, which may yet
    /// be denied, or waiting its turn, must not hold capacity the origin's
    /// admitted requests need.
    fn wait_for<B, ResBody, T: Finish<ResBody> + Send + 'static>(
        &mut self,
        check: impl Future<Output = Result<Decision, NeverAllowed>> + Send + Unpin + 'static,
        request: Request<B>,
        (key, cost): (X::Key, u32),
        ticket: impl FnOnce(X::Key, &Decision, u32) -> Option<T> + Send + 'static,
    ) -> RateLimitFuture<S::Future, ResBody, S::Error, T>
    where
        F: Cost<B>,
        S: Service<Request<B>, Response = Response<ResBody>> + Clone + Send + 'static,
        S::Future: Send + 'static,
        S::Error: Send + 'static,
        Ch: CheckKeyAsync<X::Key>,
        X: KeyExtractor<B>,
        B: Send + 'static,
        ResBody: Default + Send + 'static,
    {
        let mut inner = self.inner.clone();
        drop(std::mem::replace(&mut self.inner, inner.clone()));
        let answering = self.layer.answering.clone();
        // Counted from now, synchronously: a settling layer outside may be
        // dropped before this future is first polled.
        let checking = Passage::checking(request.extensions());
        let future = Box::pin(async move {
            let make_ticket = move |d: &Decision| ticket(key, d, cost);
            let mut in_flight = InFlight::new(check, make_ticket, T::SETTLES);
            let (outcome, make_ticket) = in_flight.answer().await;
            let decision = outcome.as_ref().ok().cloned();
            match answering.next(outcome) {
                Next::Answer(response) => {
                    checking.passed();
                    Ok((response, None))
                }
                Next::Forward(headers) => {
                    // Made at once: dropped while the request waits its
                    // turn, a settling layer's ticket gives back what its
                    // check spent.
                    let mut ticket = decision.as_ref().and_then(make_ticket);
                    // A shaper admits now and tells the request when to
                    // leave; forwarding it at once would pass the burst on.
                    let delay = answering.delay(decision.as_ref());
                    if !delay.is_zero() {
                        weir_timeout::sleep(delay).await;
                    }
                    std::future::poll_fn(|cx| inner.poll_ready(cx)).await?;
                    if let Some(t) = &mut ticket {
                        t.handed_on();
                    }
                    checking.passed();
                    let mut response = inner.call(request).await?;
                    headers.apply(&mut response);
                    Ok((response, ticket))
                }
            }
        });
        RateLimitFuture {
            state: RateLimitFutureState::Waiting { future },
        }
    }
}

/// A check on its way to its limiter, with what makes its request's
/// ticket from the decision. Dropped before the check answers (the client
/// hung up during a round trip to a store), a settling layer's check is
/// finished on the runtime, since the store may charge it all the same,
/// and an admission it makes becomes a ticket that is dropped unsent,
/// which gives the units back. Any other layer's is simply dropped.
struct InFlight<C, M, T>
where
    C: Future<Output = Result<Decision, NeverAllowed>> + Send + Unpin + 'static,
    M: FnOnce(&Decision) -> Option<T> + Send + 'static,
    T: Send + 'static,
{
    check: Option<C>,
    make_ticket: Option<M>,
    /// Whether the layer settles (only then is a dropped check finished).
    settles: bool,
}

impl<C, M, T> InFlight<C, M, T>
where
    C: Future<Output = Result<Decision, NeverAllowed>> + Send + Unpin + 'static,
    M: FnOnce(&Decision) -> Option<T> + Send + 'static,
    T: Send + 'static,
{
    fn new(check: C, make_ticket: M, settles: bool) -> Self {
        Self {
            check: Some(check),
            make_ticket: Some(make_ticket),
            settles,
        }
    }

    /// The check's outcome, and what makes the ticket.
    async fn answer(&mut self) -> (Result<Decision, NeverAllowed>, M) {
        let outcome = match &mut self.check {
            Some(check) => check.await,
            None => unreachable!("a check is answered once"),
        };
        self.check = None;
        let make_ticket = self
            .make_ticket
            .take()
            .unwrap_or_else(|| unreachable!("a check is answered once"));
        (outcome, make_ticket)
    }
}

impl<C, M, T> Drop for InFlight<C, M, T>
where
    C: Future<Output = Result<Decision, NeverAllowed>> + Send + Unpin + 'static,
    M: FnOnce(&Decision) -> Option<T> + Send + 'static,
    T: Send + 'static,
{
    fn drop(&mut self) {
        let (Some(check), Some(make_ticket)) = (self.check.take(), self.make_ticket.take()) else {
            return;
        };
        if !self.settles {
            return;
        }
        // A limiter that waits runs on a runtime; without one the check
        // cannot be finished, and its units stay spent (tighter, never
        // looser).
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                if let Ok(decision) = check.await {
                    // Never handed on: dropping it gives the units back.
                    drop(make_ticket(&decision));
                }
            });
        }
    }
}

fn answered<F, B, E, T>(response: Response<B>) -> RateLimitFuture<F, B, E, T> {
    RateLimitFuture {
        state: RateLimitFutureState::Answered {
            response: Some(response),
        },
    }
}

#[cfg(test)]
mod tests;
