//! [`InflightLayer`]: limit how many requests per key are in progress at
//! once, answering 503 beyond it — pingora's per-origin connection limit.
//!
//! Each request is counted on entry and uncounted when its response body
//! has ended or is dropped: the permit travels in the response future and
//! then in the body ([`InflightBody`]), so a streaming download counts
//! until its last byte, and a cancelled request or an abandoned body is
//! uncounted too.
//!
//! Counts are exact ([`weir_limits::ExactInflight`]): one entry per key
//! with a request in flight, so memory is bounded by the server's
//! concurrency and a key is refused only for its own requests, never for
//! a spray of others' (which a count-min sketch would let through to
//! honest clients as refusals).

use super::body::CountedBody;
use super::key::KeyExtractor;
use super::response::{Unkeyed, overloaded};
use http::{Request, Response, StatusCode};
use pin_project_lite::pin_project;
use std::future::Future;
use std::hash::Hash;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tower::{Layer, Service};
use weir_limits::{ExactInflight, ExactInflightGuard};

/// A tower layer limiting in-flight requests per key.
///
/// ```
/// use axum::{Router, routing::get};
/// use std::net::SocketAddr;
/// use weir_tower::{InflightLayer, PeerIp};
///
/// // At most 100 requests per client IP in progress; the 101st gets 503.
/// let app = Router::new()
///     .route("/", get(|| async { "hello" }))
///     .layer(InflightLayer::new(PeerIp::new(), 100));
/// // PeerIp finds the client in the ConnectInfo this inserts (with
/// // weir-tower's `axum` feature): `axum::serve(listener, service)`.
/// let service = app.into_make_service_with_connect_info::<SocketAddr>();
/// # let _ = service;
/// ```
#[derive(Clone, Debug)]
pub struct InflightLayer<X> {
    table: ExactInflight,
    limit: usize,
    extractor: X,
    shadow: bool,
    unkeyed: Unkeyed,
}

impl<X> InflightLayer<X> {
    /// At most `limit` requests per key in flight (0 refuses every
    /// request). Clones of the layer share the counts.
    pub fn new(extractor: X, limit: u32) -> Self {
        Self {
            table: ExactInflight::new(),
            limit: limit as usize,
            extractor,
            shadow: false,
            unkeyed: Unkeyed::new("InflightLayer", "x-inflight-error"),
        }
    }

    /// Shadow mode: count and report (the `x-inflight-exceeded` response
    /// header) but never refuse.
    pub fn shadow(mut self, shadow: bool) -> Self {
        self.shadow = shadow;
        self
    }

    /// The status a request without a key is refused with (default 500),
    /// with `x-inflight-error: no-key; ...`; the first is logged through
    /// `tracing`.
    ///
    /// ```
    /// use http::StatusCode;
    /// use weir_tower::{InflightLayer, PeerIp};
    ///
    /// let layer = InflightLayer::new(PeerIp::new(), 100).missing_key_status(StatusCode::BAD_REQUEST);
    /// # let _ = layer;
    /// ```
    pub fn missing_key_status(mut self, status: StatusCode) -> Self {
        self.unkeyed = self.unkeyed.with_status(status);
        self
    }

    /// How many requests of `key` are in flight. `key` must be of the
    /// extractor's key type: it is found by its hash.
    ///
    /// ```
    /// use weir_tower::{GlobalKey, InflightLayer};
    ///
    /// let layer = InflightLayer::new(GlobalKey, 10);
    /// assert_eq!(layer.in_flight(&()), 0);
    /// ```
    pub fn in_flight<K: Hash + ?Sized>(&self, key: &K) -> usize {
        self.table.get(key)
    }

    /// How many keys have requests in flight: the entries the layer holds,
    /// never more than the requests in flight.
    ///
    /// ```
    /// use weir_tower::{GlobalKey, InflightLayer};
    ///
    /// assert_eq!(InflightLayer::new(GlobalKey, 10).keys_in_flight(), 0);
    /// ```
    pub fn keys_in_flight(&self) -> usize {
        self.table.keys()
    }
}

impl<S, X: Clone> Layer<S> for InflightLayer<X> {
    type Service = InflightService<S, X>;

    fn layer(&self, inner: S) -> Self::Service {
        InflightService {
            inner,
            layer: Arc::new(self.clone()),
        }
    }
}

/// The service [`InflightLayer`] produces.
///
/// ```
/// use http::{Request, Response};
/// use std::convert::Infallible;
/// use tower::{Layer, Service, ServiceExt};
/// use weir_tower::{InflightFuture, InflightLayer, InflightService, GlobalKey};
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let inner = tower::service_fn(|_: Request<String>| async {
///     Ok::<_, Infallible>(Response::new(String::from("hello")))
/// });
/// let layer = InflightLayer::new(GlobalKey, 10);
/// let mut service: InflightService<_, _> = layer.layer(inner);
/// let future: InflightFuture<_, _> = service.ready().await.unwrap().call(Request::new(String::new()));
/// let response = future.await.unwrap();
/// assert_eq!(response.status(), 200);
/// # });
/// ```
#[derive(Debug)]
pub struct InflightService<S, X> {
    inner: S,
    /// Shared: services are cloned per connection (and by axum per request).
    layer: Arc<InflightLayer<X>>,
}

// By hand: a derive would demand `X: Clone`, which cloning an `Arc` does
// not need.
impl<S: Clone, X> Clone for InflightService<S, X> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            layer: Arc::clone(&self.layer),
        }
    }
}

impl<S, X, ReqBody, ResBody> Service<Request<ReqBody>> for InflightService<S, X>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    X: KeyExtractor<ReqBody>,
    ResBody: Default,
{
    type Response = Response<InflightBody<ResBody>>;
    type Error = S::Error;
    type Future = InflightFuture<S::Future, ResBody>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let Some(key) = self.layer.extractor.extract(&request) else {
            return InflightFuture::rejected(self.layer.unkeyed.respond());
        };
        let (table, limit) = (&self.layer.table, self.layer.limit);
        let (guard, exceeded) = if self.layer.shadow {
            table.enter_anyway(&key, limit)
        } else {
            match table.try_enter(&key, limit) {
                Some(guard) => (guard, false),
                None => return InflightFuture::rejected(overloaded()),
            }
        };
        InflightFuture {
            state: InflightFutureState::Running {
                future: self.inner.call(request),
                guard: Some(InflightPermit(guard)),
                shadow_exceeded: exceeded,
            },
        }
    }
}

pin_project! {
    /// The response future of [`InflightService`]; holds the in-flight
    /// count until it hands it to the response body, or is dropped.
    ///
    /// The [`InflightService`] example names it.
    pub struct InflightFuture<F, B> {
        #[pin]
        state: InflightFutureState<F, B>,
    }
}

pin_project! {
    #[project = InflightProj]
    enum InflightFutureState<F, B> {
        Rejected { response: Option<Response<B>> },
        Running { #[pin] future: F, guard: Option<InflightPermit>, shadow_exceeded: bool },
    }
}

impl<F, B> InflightFuture<F, B> {
    fn rejected(response: Response<B>) -> Self {
        Self {
            state: InflightFutureState::Rejected {
                response: Some(response),
            },
        }
    }
}

impl<F, B, E> Future for InflightFuture<F, B>
where
    F: Future<Output = Result<Response<B>, E>>,
    B: Default,
{
    type Output = Result<Response<InflightBody<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            InflightProj::Rejected { response } => match response.take() {
                Some(response) => Poll::Ready(Ok(response.map(CountedBody::uncounted))),
                None => panic!("InflightFuture polled after completion"),
            },
            InflightProj::Running {
                future,
                guard,
                shadow_exceeded,
            } => {
                // An error drops the guard here: there is no body to stream.
                let mut response = std::task::ready!(future.poll(cx))?;
                if *shadow_exceeded {
                    response
                        .headers_mut()
                        .insert("x-inflight-exceeded", http::HeaderValue::from_static("1"));
                }
                let guard = guard.take();
                Poll::Ready(Ok(response.map(|inner| CountedBody::counted(inner, guard))))
            }
        }
    }
}

/// The response body of [`InflightLayer`]: the request stays counted in
/// flight until the body has ended (or failed, or been dropped).
///
/// The [`CountedBody`](super::CountedBody) example names it.
pub type InflightBody<B> = CountedBody<B, InflightPermit>;

/// One request counted in flight; uncounts it when dropped. The layer
/// keeps it in the response future and then in the [`InflightBody`].
///
/// ```
/// use std::convert::Infallible;
/// use http::{Request, Response};
/// use tower::{Layer, Service};
/// use weir_tower::{GlobalKey, InflightLayer};
///
/// let layer = InflightLayer::new(GlobalKey, 1);
/// let mut service = layer.layer(tower::service_fn(|_: Request<()>| async {
///     Ok::<_, Infallible>(Response::new(String::new()))
/// }));
/// let pending = service.call(Request::new(()));
/// assert_eq!(layer.in_flight(&()), 1, "the future holds the permit");
/// drop(pending);
/// assert_eq!(layer.in_flight(&()), 0);
/// ```
#[derive(Debug)]
pub struct InflightPermit(
    // Dropping it uncounts the request.
    #[allow(dead_code)] ExactInflightGuard,
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{GlobalKey, PeerAddr, PeerIp};
    use std::convert::Infallible;
    use std::sync::Arc;
    use tokio::sync::Semaphore;
    use tower::ServiceExt;

    /// A service that answers 200 once a permit is released.
    fn gated(
        gate: Arc<Semaphore>,
    ) -> impl Service<Request<()>, Response = Response<String>, Error = Infallible, Future: Send> + Clone
    {
        tower::service_fn(move |_req: Request<()>| {
            let gate = Arc::clone(&gate);
            async move {
                gate.acquire().await.expect("gate open").forget();
                Ok::<_, Infallible>(Response::new("ok".to_string()))
            }
        })
    }

    #[tokio::test]
    async fn refuses_beyond_the_limit_and_recovers_when_requests_finish() {
        let gate = Arc::new(Semaphore::new(0));
        let layer = InflightLayer::new(GlobalKey, 2);
        let service = layer.layer(gated(Arc::clone(&gate)));
        let first = tokio::spawn(service.clone().oneshot(Request::new(())));
        let second = tokio::spawn(service.clone().oneshot(Request::new(())));
        while layer.in_flight(&()) < 2 {
            tokio::task::yield_now().await;
        }
        let refused = service.clone().oneshot(Request::new(())).await.unwrap();
        assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(refused.headers()[http::header::RETRY_AFTER], "1");
        assert_eq!(layer.in_flight(&()), 2, "a refusal must not stay counted");

        gate.add_permits(2);
        assert_eq!(first.await.unwrap().unwrap().status(), StatusCode::OK);
        assert_eq!(second.await.unwrap().unwrap().status(), StatusCode::OK);
        assert_eq!(layer.in_flight(&()), 0);
        gate.add_permits(1);
        let again = service.oneshot(Request::new(())).await.unwrap();
        assert_eq!(again.status(), StatusCode::OK);
    }

    #[tokio::test]
    async fn cancelled_requests_are_uncounted() {
        let gate = Arc::new(Semaphore::new(0));
        let layer = InflightLayer::new(GlobalKey, 1);
        let service = layer.layer(gated(gate));
        let pending = tokio::spawn(service.oneshot(Request::new(())));
        while layer.in_flight(&()) < 1 {
            tokio::task::yield_now().await;
        }
        pending.abort();
        let _ = pending.await;
        assert_eq!(layer.in_flight(&()), 0);
    }

    #[tokio::test]
    async fn shadow_mode_marks_but_never_refuses() {
        let gate = Arc::new(Semaphore::new(0));
        let layer = InflightLayer::new(GlobalKey, 1).shadow(true);
        let service = layer.layer(gated(Arc::clone(&gate)));
        let first = tokio::spawn(service.clone().oneshot(Request::new(())));
        while layer.in_flight(&()) < 1 {
            tokio::task::yield_now().await;
        }
        let second = tokio::spawn(service.oneshot(Request::new(())));
        gate.add_permits(2);
        let first = first.await.unwrap().unwrap();
        let second = second.await.unwrap().unwrap();
        assert_eq!(first.status(), StatusCode::OK);
        assert_eq!(second.status(), StatusCode::OK);
        assert_eq!(second.headers()["x-inflight-exceeded"], "1");
    }

    /// A response body that yields one chunk when its sender says so:
    /// a download still streaming.
    #[derive(Default)]
    struct Streaming(Option<tokio::sync::oneshot::Receiver<&'static str>>);

    impl http_body::Body for Streaming {
        type Data = &'static [u8];
        type Error = Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Infallible>>> {
            let Some(rx) = self.0.as_mut() else {
                return Poll::Ready(None);
            };
            let chunk = std::task::ready!(Pin::new(rx).poll(cx)).unwrap_or("");
            self.0 = None;
            Poll::Ready(Some(Ok(http_body::Frame::data(chunk.as_bytes()))))
        }
    }

    #[tokio::test]
    async fn a_request_counts_until_its_body_has_streamed() {
        let (send, receive) = tokio::sync::oneshot::channel();
        let receive = Arc::new(std::sync::Mutex::new(Some(receive)));
        let origin = tower::service_fn(move |_req: Request<()>| {
            let body = Streaming(receive.lock().unwrap().take());
            async move { Ok::<_, Infallible>(Response::new(body)) }
        });
        let layer = InflightLayer::new(GlobalKey, 1);
        let service = layer.layer(origin);
        let mut streaming = service.clone().oneshot(Request::new(())).await.unwrap();
        assert_eq!(streaming.status(), StatusCode::OK);
        assert_eq!(
            service
                .clone()
                .oneshot(Request::new(()))
                .await
                .unwrap()
                .status(),
            StatusCode::SERVICE_UNAVAILABLE,
            "the first request's body is still streaming"
        );
        send.send("the whole file").unwrap();
        let body = streaming.body_mut();
        let mut body = Pin::new(body);
        while std::future::poll_fn(|cx| http_body::Body::poll_frame(body.as_mut(), cx))
            .await
            .is_some()
        {}
        assert_eq!(layer.in_flight(&()), 0, "released when the body ended");
        assert_eq!(
            service.oneshot(Request::new(())).await.unwrap().status(),
            StatusCode::OK
        );
    }

    #[tokio::test]
    async fn requests_without_a_key_get_500() {
        let layer = InflightLayer::new(PeerIp::new(), 10);
        let service = layer.layer(gated(Arc::new(Semaphore::new(1))));
        let response = service.clone().oneshot(Request::new(())).await.unwrap();
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let mut req = Request::new(());
        req.extensions_mut()
            .insert(PeerAddr("127.0.0.1:9".parse().unwrap()));
        assert_eq!(service.oneshot(req).await.unwrap().status(), StatusCode::OK);
    }
}
