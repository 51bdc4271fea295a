//! [`InflightLayer`]: limit how many requests per key are in progress at
//! once, answering 503 beyond it — pingora's per-origin connection limit.
//!
//! Each request is counted on entry and uncounted when its response body
//! has ended or is dropped: the permit travels in the response future and
//! then in the body ([`InflightBody`]), so a streaming download counts
//! until its last byte, and a cancelled request or an abandoned body is
//! uncounted too.
//!
//! Counts are exact, in a sharded map from key to count that drops a key
//! when its count returns to zero. A count-min sketch (`weir_limits::Inflight`,
//! which pingora's API keeps) would bound memory by its shape instead, but
//! it overestimates: keys sprayed across its cells (the /64s of one /48)
//! make it refuse honest clients that have nothing in flight. An exact map
//! needs no such bound: it holds one entry per key with a request in
//! flight, so its size is bounded by the server's concurrency, and a key
//! is refused only for its own requests.

use super::body::CountedBody;
use super::key::KeyExtractor;
use super::response::{Unkeyed, overloaded};
use hashbrown::HashTable;
use http::{Request, Response, StatusCode};
use pin_project_lite::pin_project;
use std::future::Future;
use std::hash::Hash;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tower::{Layer, Service};
use weir_primitives::shards::Shards;
use weir_primitives::sync::SpinLock;

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
    table: Arc<Table>,
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
            table: Arc::new(Table::new()),
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
        self.table.get(self.table.hash(key))
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
        self.table.len()
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
        let table = &self.layer.table;
        let hash = table.hash(&key);
        let (admitted, exceeded) = table.enter(hash, self.layer.limit, self.layer.shadow);
        if !admitted {
            return InflightFuture::rejected(overloaded());
        }
        InflightFuture {
            state: InflightFutureState::Running {
                future: self.inner.call(request),
                guard: Some(InflightPermit {
                    table: Arc::clone(table),
                    hash,
                }),
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
pub struct InflightPermit {
    table: Arc<Table>,
    hash: u64,
}

impl Drop for InflightPermit {
    fn drop(&mut self) {
        self.table.leave(self.hash);
    }
}

/// Shards of the map: enough that two cores rarely meet on one lock.
const SHARDS: usize = 64;

/// Requests in flight per key: a map from the key's 64-bit hash to its
/// count, in shards each behind its own lock.
///
/// Keys are told apart by a 64-bit hash under a per-process random seed
/// rather than stored, so the layer needs no type for them (its extractor
/// may key any request body type). Two keys share a count only if their
/// hashes collide: for a fresh key, with probability (keys in flight) /
/// 2^64, and the seed is unknown to clients, who therefore cannot aim for
/// a busy key's hash.
struct Table(Shards<Shard>);

/// One shard: the counts of its keys, by hash. The lock is held for a
/// lookup and an increment, so it spins rather than parks.
type Shard = SpinLock<HashTable<(u64, usize)>>;

/// A shard this much larger than its entries gives memory back: a spray
/// that has drained leaves no table behind.
const SHRINK_BELOW: usize = 4;

impl Table {
    fn new() -> Self {
        Self(Shards::new(SHARDS, |_| SpinLock::new(HashTable::new())))
    }

    fn hash<K: Hash + ?Sized>(&self, key: &K) -> u64 {
        self.0.hash_of(key)
    }

    fn shard(&self, hash: u64) -> &Shard {
        self.0.shard(hash)
    }

    /// Count a request of `hash` if it is under `limit` (or always, in
    /// `shadow` mode): whether it was counted, and whether it is over.
    fn enter(&self, hash: u64, limit: usize, shadow: bool) -> (bool, bool) {
        let mut map = self.shard(hash).lock();
        let entry = map.entry(hash, |e| e.0 == hash, |e| e.0);
        let count = match &entry {
            hashbrown::hash_table::Entry::Occupied(e) => e.get().1,
            hashbrown::hash_table::Entry::Vacant(_) => 0,
        };
        let exceeded = count >= limit;
        if exceeded && !shadow {
            return (false, true);
        }
        entry.or_insert((hash, 0)).into_mut().1 += 1;
        (true, exceeded)
    }

    fn leave(&self, hash: u64) {
        let mut map = self.shard(hash).lock();
        let map = &mut *map;
        let Ok(mut entry) = map.find_entry(hash, |e| e.0 == hash) else {
            return;
        };
        entry.get_mut().1 -= 1;
        if entry.get().1 > 0 {
            return;
        }
        let _ = entry.remove();
        if map.capacity() > 64 && map.len() * SHRINK_BELOW < map.capacity() {
            map.shrink_to(map.len() * 2, |e| e.0);
        }
    }

    fn get(&self, hash: u64) -> usize {
        self.shard(hash)
            .lock()
            .find(hash, |e| e.0 == hash)
            .map_or(0, |e| e.1)
    }

    fn len(&self) -> usize {
        self.0.iter().map(|s| s.lock().len()).sum()
    }
}

impl std::fmt::Debug for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table")
            .field("keys_in_flight", &self.len())
            .finish_non_exhaustive()
    }
}

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

    #[test]
    fn racing_threads_never_hold_more_than_the_limit() {
        use std::sync::atomic::Ordering::SeqCst;
        const LIMIT: usize = 3;
        let table = Arc::new(Table::new());
        let held = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let hash = table.hash(&"one key");
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let (table, held) = (Arc::clone(&table), Arc::clone(&held));
                std::thread::spawn(move || {
                    // Each thread asks for the whole limit at once, so the
                    // two contend for it.
                    for _ in 0..10_000 {
                        let mut mine = 0;
                        for _ in 0..LIMIT {
                            if table.enter(hash, LIMIT, false).0 {
                                mine += 1;
                                let now = held.fetch_add(1, SeqCst) + 1;
                                assert!(now <= LIMIT, "{now} in flight over a limit of {LIMIT}");
                            }
                        }
                        for _ in 0..mine {
                            held.fetch_sub(1, SeqCst);
                            table.leave(hash);
                        }
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        assert_eq!(table.len(), 0);
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
