//! Charging by the response: `RateLimitLayer::settle`
//! admits each request on a check and settles its cost once the response
//! body has ended or been dropped, over real loopback HTTP with streamed
//! (chunked) bodies and a real hyper client.
//!
//! Every scenario runs against the in-process limiter and, with the
//! `redis` feature, against a private redis-server: the remaining count a
//! key sees is read back over HTTP, from the `RateLimit` field of a probe
//! request whose own response is empty (so it settles back to nothing or,
//! with `count_in`, keeps its admission of 1).
#![cfg(all(feature = "axum", not(loom)))]

use axum::Router;
use axum::body::{Body, Bytes};
use axum::routing::get;
use http::{HeaderMap, HeaderName, HeaderValue, Request, StatusCode};
use http_body::Frame;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::mpsc;
use weir_rate::clock::ManualClock;
use weir_rate::{
    CheckKeyAsync, Decision, FixedWindow, KeyedLimiter, NeverAllowed, Quota, SettleKey,
};
use weir_tower::{KeyFn, RateLimitLayer, Settle, Usage};

type HttpClient = Client<HttpConnector, Empty<Bytes>>;

/// Everything a test waits for is bounded by this.
const PATIENCE: Duration = Duration::from_secs(10);

/// A response body of the frames a channel brings, ending when every
/// sender is gone: a stream whose length the server cannot know, so it
/// goes out chunked, frame by frame.
struct Fed(mpsc::UnboundedReceiver<Frame<Bytes>>);

impl http_body::Body for Fed {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0.poll_recv(cx).map(|frame| frame.map(Ok))
    }
}

/// A streamed body of `chunks` chunks of `size` bytes, then `trailers`.
fn streamed(chunks: usize, size: usize, trailers: Option<HeaderMap>) -> Body {
    let (tx, rx) = mpsc::unbounded_channel();
    for i in 0..chunks {
        let byte = b'a' + (i % 26) as u8;
        tx.send(Frame::data(Bytes::from(vec![byte; size])))
            .expect("the receiver is here");
    }
    if let Some(trailers) = trailers {
        tx.send(Frame::trailers(trailers))
            .expect("the receiver is here");
    }
    Body::new(Fed(rx))
}

/// Keys requests by their `x-user` header.
fn by_user() -> KeyFn<impl Fn(&Request<Body>) -> Option<String> + Clone + Send + Sync + 'static> {
    KeyFn::new(|req: &Request<Body>| {
        req.headers()
            .get("x-user")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    })
}

/// The routes every scenario uses: `/stream/{chunks}/{size}` streams that
/// many bytes with status 200, `/fail` streams 100 bytes with status 500,
/// `/empty` answers an empty 200.
fn routes() -> Router {
    Router::new()
        .route(
            "/stream/{chunks}/{size}",
            get(
                |axum::extract::Path((chunks, size)): axum::extract::Path<(usize, usize)>| async move {
                    streamed(chunks, size, None)
                },
            ),
        )
        .route(
            "/fail",
            get(|| async { (StatusCode::INTERNAL_SERVER_ERROR, streamed(4, 25, None)) }),
        )
        .route("/empty", get(|| async {}))
}

/// Serve `app` on a free loopback port until the test's runtime ends.
async fn serve(app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let addr = listener.local_addr().expect("local addr");
    let service = app.into_make_service_with_connect_info::<SocketAddr>();
    tokio::spawn(async move { axum::serve(listener, service).await });
    addr
}

fn client() -> HttpClient {
    Client::builder(TokioExecutor::new()).build_http()
}

/// A response as the client read it, body and all.
struct Got {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
}

impl Got {
    /// `r` of the `RateLimit` field: what the key had left after this
    /// request's own admission.
    fn remaining(&self) -> u64 {
        let field = self.headers["ratelimit"].to_str().expect("ASCII");
        field
            .split(';')
            .find_map(|p| p.strip_prefix("r="))
            .and_then(|r| r.parse().ok())
            .unwrap_or_else(|| panic!("r= in {field:?}"))
    }
}

async fn get_as(client: &HttpClient, addr: SocketAddr, user: &str, path: &str) -> Got {
    let request = Request::get(format!("http://{addr}{path}"))
        .header("x-user", user)
        .body(Empty::new())
        .expect("a request");
    let response = tokio::time::timeout(PATIENCE, client.request(request))
        .await
        .expect("the server answers in time")
        .expect("HTTP succeeds");
    let (parts, body) = response.into_parts();
    let body = tokio::time::timeout(PATIENCE, body.collect())
        .await
        .expect("the body ends in time")
        .expect("the body arrives")
        .to_bytes();
    Got {
        status: parts.status,
        headers: parts.headers,
        body,
    }
}

/// What `user` has left, read from a probe of `/empty`, once it equals
/// `expected` (settling on Redis happens after the response, so the
/// probe is repeated for a while); the last value read otherwise.
async fn remaining_once(client: &HttpClient, addr: SocketAddr, user: &str, expected: u64) -> u64 {
    let (left, _) = remaining_once_each_costing(client, addr, user, expected, 0).await;
    left
}

/// [`remaining_once`] where each probe keeps `probe_cost` of its own (its
/// settlement finds nothing to go by), so each probe expects that much
/// less than the one before: the last value read and what it was expected
/// to be.
async fn remaining_once_each_costing(
    client: &HttpClient,
    addr: SocketAddr,
    user: &str,
    mut expected: u64,
    probe_cost: u64,
) -> (u64, u64) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let probe = get_as(client, addr, user, "/empty").await;
        assert_eq!(probe.status, StatusCode::OK, "the probe is admitted");
        let left = probe.remaining();
        if left == expected || tokio::time::Instant::now() > deadline {
            return (left, expected);
        }
        expected -= probe_cost;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Settles by body bytes, and tells the test what each settlement saw.
fn bytes_reported() -> (Settle, mpsc::UnboundedReceiver<(u64, bool)>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let settle = Settle::by(move |sent| {
        let _ = tx.send((sent.body_bytes(), sent.completed()));
        u32::try_from(sent.body_bytes()).unwrap_or(u32::MAX)
    });
    (settle, rx)
}

/// A key's first request costs its streamed bytes, not the 1 it was
/// admitted at; an empty response costs nothing.
async fn charges_the_bytes_streamed<Ch: SettleKey<String>>(limiter: Ch, limit: u64) {
    let (settle, mut seen) = bytes_reported();
    let app = routes().layer(RateLimitLayer::new(limiter, by_user()).settle(settle));
    let addr = serve(app).await;
    let client = client();
    let got = get_as(&client, addr, "alice", "/stream/4/500").await;
    assert_eq!(got.status, StatusCode::OK);
    assert_eq!(got.body.len(), 2000);
    assert_eq!(got.remaining(), limit - 1, "admitted at 1");
    let (bytes, completed) = tokio::time::timeout(PATIENCE, seen.recv())
        .await
        .expect("settled in time")
        .expect("a settlement");
    assert_eq!((bytes, completed), (2000, true));
    assert_eq!(
        remaining_once(&client, addr, "alice", limit - 2000 - 1).await,
        limit - 2000 - 1,
        "charged 2000 bytes, then the probe's admission of 1"
    );
    // The probes settled too, each to its empty body: nothing.
    let probes_settled = std::iter::from_fn(|| seen.try_recv().ok()).count();
    assert!(probes_settled >= 1);
    // Another key pays nothing for alice's bytes.
    assert_eq!(
        remaining_once(&client, addr, "bob", limit - 1).await,
        limit - 1
    );
}

/// A request admitted on a generous estimate gives back what it did not
/// use: part of its admission's own spending is refunded.
async fn a_generous_admission_is_partly_refunded<Ch: SettleKey<String>>(limiter: Ch, limit: u64) {
    let app = routes().layer(
        RateLimitLayer::new(limiter, by_user())
            .cost_fn(|_: &Request<Body>| 100)
            .settle(Settle::body_bytes()),
    );
    let addr = serve(app).await;
    let client = client();
    let got = get_as(&client, addr, "lee", "/stream/3/10").await;
    assert_eq!((got.status, got.body.len()), (StatusCode::OK, 30));
    assert_eq!(got.remaining(), limit - 100, "admitted at the estimate");
    // Each probe is admitted at 100 too, and refunded in full.
    assert_eq!(
        remaining_once(&client, addr, "lee", limit - 30 - 100).await,
        limit - 30 - 100,
        "70 of the 100 refunded"
    );
}

/// GET `path` as `user` on a connection of its own over `stream`: the
/// response body, and the connection's sender and task to hang up with.
async fn get_on(
    stream: tokio::net::TcpStream,
    path: &str,
    user: &str,
) -> (
    hyper::body::Incoming,
    hyper::client::conn::http1::SendRequest<Empty<Bytes>>,
    tokio::task::JoinHandle<hyper::Result<()>>,
) {
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("handshake");
    let conn = tokio::spawn(conn);
    let request = Request::get(path)
        .header("host", "weir.test")
        .header("x-user", user)
        .body(Empty::<Bytes>::new())
        .unwrap();
    let response = tokio::time::timeout(PATIENCE, sender.send_request(request))
        .await
        .expect("headers in time")
        .expect("a response");
    assert_eq!(response.status(), StatusCode::OK);
    (response.into_body(), sender, conn)
}

/// A client that hangs up mid-stream is charged for the bytes the server
/// handed out before it noticed, settled when hyper drops the body.
async fn a_client_gone_mid_stream_pays_for_what_was_sent<Ch: SettleKey<String>>(
    limiter: Ch,
    limit: u64,
) {
    const CHUNK: usize = 500;
    const MAX_CHUNKS: usize = 400;
    let (feed_tx, feed_rx) = mpsc::unbounded_channel::<Frame<Bytes>>();
    let feed = Arc::new(Mutex::new(Some(feed_rx)));
    let (settle, mut seen) = bytes_reported();
    let app = routes()
        .route(
            "/feed",
            get(move || {
                let feed = Arc::clone(&feed);
                async move {
                    let rx = feed.lock().unwrap().take().expect("one /feed request");
                    Body::new(Fed(rx))
                }
            }),
        )
        .layer(RateLimitLayer::new(limiter, by_user()).settle(settle));
    let addr = serve(app).await;

    // Two chunks ready before the request, then read them and hang up.
    for _ in 0..2 {
        feed_tx
            .send(Frame::data(Bytes::from(vec![b'x'; CHUNK])))
            .unwrap();
    }
    let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (mut body, sender, conn) = get_on(stream, "/feed", "carol").await;
    let mut read = 0;
    while read < 2 * CHUNK {
        let frame = tokio::time::timeout(PATIENCE, body.frame())
            .await
            .expect("a frame in time")
            .expect("the stream goes on")
            .expect("a frame");
        read += frame.data_ref().map_or(0, Bytes::len);
    }
    drop(body);
    drop(sender);
    conn.abort();
    let _ = conn.await;

    // Keep streaming until the server notices (a write fails and hyper
    // drops the body, which drops the feed's receiver).
    let mut fed = 2;
    let settled = loop {
        if let Ok(settled) = seen.try_recv() {
            break settled;
        }
        assert!(fed < MAX_CHUNKS, "the server never noticed the client left");
        if feed_tx
            .send(Frame::data(Bytes::from(vec![b'x'; CHUNK])))
            .is_ok()
        {
            fed += 1;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let (bytes, completed) = settled;
    assert!(!completed, "the stream was cut, not ended");
    assert!(
        bytes >= read as u64 && bytes < (MAX_CHUNKS * CHUNK) as u64,
        "{bytes} bytes settled, {read} read"
    );
    assert_eq!(bytes % CHUNK as u64, 0, "whole chunks handed out");
    assert!(seen.try_recv().is_err(), "settled exactly once");
    let client = client();
    assert_eq!(
        remaining_once(&client, addr, "carol", limit - bytes - 1).await,
        limit - bytes - 1,
        "charged the {bytes} bytes sent"
    );
}

/// `Settle::server_errors`: a key is admitted on a check of 1, refunded for
/// every answer but a 5xx; three 500s spend its quota of three.
async fn only_server_errors_count<Ch: SettleKey<String>>(limiter: Ch) {
    let app = routes().layer(
        RateLimitLayer::new(limiter, by_user())
            .policy_name("errors")
            .settle(Settle::server_errors()),
    );
    let addr = serve(app).await;
    let client = client();
    for _ in 0..10 {
        let got = get_as(&client, addr, "dave", "/stream/3/100").await;
        assert_eq!(got.status, StatusCode::OK);
        assert_eq!(got.body.len(), 300);
        assert!(got.remaining() <= 2);
        assert_eq!(
            remaining_once(&client, addr, "dave", 2).await,
            2,
            "the success (and the probes) refunded"
        );
    }
    for left in [2, 1, 0] {
        let got = get_as(&client, addr, "dave", "/fail").await;
        assert_eq!(got.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(got.body.len(), 100);
        // On Redis the refund of the request before may still be on its
        // way: never more left than the failures allow.
        assert!(got.remaining() <= left, "{} left", got.remaining());
    }
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let got = get_as(&client, addr, "dave", "/stream/1/10").await;
        if got.status == StatusCode::TOO_MANY_REQUESTS {
            assert!(got.headers.contains_key("retry-after"));
            break;
        }
        assert_eq!(got.status, StatusCode::OK);
        assert!(
            tokio::time::Instant::now() < deadline,
            "three 500s never denied the key"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A request that goes over the limit after admission leaves its key in
/// debt: the next one is denied, and the denial settles nothing.
async fn settled_debt_denies_and_denials_settle_nothing<Ch: SettleKey<String>>(limiter: Ch) {
    let settlements = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&settlements);
    let settle = Settle::by(move |sent| {
        counted.fetch_add(1, Ordering::SeqCst);
        u32::try_from(sent.body_bytes()).unwrap_or(u32::MAX)
    });
    let app = routes().layer(RateLimitLayer::new(limiter, by_user()).settle(settle));
    let addr = serve(app).await;
    let client = client();
    let got = get_as(&client, addr, "erin", "/stream/3/50").await;
    assert_eq!((got.status, got.body.len()), (StatusCode::OK, 150));
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while settlements.load(Ordering::SeqCst) < 1 {
        assert!(tokio::time::Instant::now() < deadline, "never settled");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // On Redis the charge lands after the settlement starts: wait for it,
    // asking with requests that settle back to nothing (an empty body),
    // so only the debt can deny.
    let denied = loop {
        let got = get_as(&client, addr, "erin", "/empty").await;
        if got.status == StatusCode::TOO_MANY_REQUESTS {
            break got;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the debt never denied"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(denied.headers.contains_key("retry-after"));
    let settled_before = settlements.load(Ordering::SeqCst);
    for _ in 0..3 {
        let again = get_as(&client, addr, "erin", "/empty").await;
        assert_eq!(again.status, StatusCode::TOO_MANY_REQUESTS);
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        settlements.load(Ordering::SeqCst),
        settled_before,
        "denied requests settle nothing"
    );
    // Another key is untouched by erin's debt.
    let other = get_as(&client, addr, "frank", "/stream/1/10").await;
    assert_eq!(other.status, StatusCode::OK);
}

/// Tokens in a response header, in the trailers of a streamed body, or
/// counted by the handler into a [`Usage`] while it streams.
async fn tokens_from_header_trailer_or_usage<Ch: SettleKey<String>>(
    by_header: Ch,
    by_usage: Ch,
    limit: u64,
) {
    let tokens = HeaderName::from_static("x-tokens-used");
    let app = routes()
        .route(
            "/header",
            get(|| async {
                let mut response = axum::response::Response::new(streamed(2, 10, None));
                response
                    .headers_mut()
                    .insert("x-tokens-used", HeaderValue::from_static("40"));
                response
            }),
        )
        .route(
            "/trailer",
            get(|| async {
                let mut trailers = HeaderMap::new();
                trailers.insert("x-tokens-used", HeaderValue::from_static("25"));
                streamed(2, 10, Some(trailers))
            }),
        )
        .layer(RateLimitLayer::new(by_header, by_user()).settle(Settle::count_in(tokens, 1000)));
    let addr = serve(app).await;
    let client = client();
    for path in ["/header", "/trailer"] {
        let got = get_as(&client, addr, "gina", path).await;
        assert_eq!((got.status, got.body.len()), (StatusCode::OK, 20), "{path}");
    }
    // Without the header the admission of 1 stands: each probe keeps it.
    let (left, expected) =
        remaining_once_each_costing(&client, addr, "gina", limit - 40 - 25 - 1, 1).await;
    assert_eq!(left, expected, "40 + 25 tokens charged");

    let app = Router::new()
        .route(
            "/generate",
            get(|| async {
                let usage = Usage::new();
                let (tx, rx) = mpsc::unbounded_channel();
                let counting = usage.clone();
                tokio::spawn(async move {
                    for _ in 0..3 {
                        counting.add(7);
                        if tx.send(Frame::data(Bytes::from_static(b"token "))).is_err() {
                            return;
                        }
                        tokio::time::sleep(Duration::from_millis(2)).await;
                    }
                });
                let mut response = axum::response::Response::new(Body::new(Fed(rx)));
                response.extensions_mut().insert(usage);
                response
            }),
        )
        .route("/empty", get(|| async {}))
        .layer(RateLimitLayer::new(by_usage, by_user()).settle(Settle::usage()));
    let addr = serve(app).await;
    let got = get_as(&client, addr, "hank", "/generate").await;
    assert_eq!((got.status, got.body.len()), (StatusCode::OK, 18));
    // The probe has no Usage: its admission of 1 stands.
    let (left, expected) =
        remaining_once_each_costing(&client, addr, "hank", limit - 21 - 1, 1).await;
    assert_eq!(left, expected, "3 × 7 tokens counted while streaming");
}

fn in_process(limit: u32) -> KeyedLimiter<String, FixedWindow, ManualClock> {
    // A frozen clock: no window rolls over during a test.
    KeyedLimiter::with_clock(
        FixedWindow::new(Quota::per_hour(NonZeroU32::new(limit).unwrap())),
        ManualClock::new(),
    )
}

use crate::warnings;

mod failures;
mod hangups;
mod local;
mod on_redis;
mod stacked;
mod throttled;
