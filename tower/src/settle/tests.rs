use super::*;
use crate::{GlobalKey, RateLimitLayer};
use http::Request;
use http_body::{Body, Frame};
use std::collections::VecDeque;
use std::convert::Infallible;
use std::num::NonZeroU32;
use std::sync::Mutex;
use tower::{Layer, Service, ServiceExt};
use weir_rate::clock::ManualClock;
use weir_rate::{CheckKeyAsync, FixedWindow, KeyedLimiter, NeverAllowed, Quota};

type Limiter = KeyedLimiter<(), FixedWindow, ManualClock>;

fn limiter(n: u32) -> Arc<Limiter> {
    let quota = Quota::per_minute(NonZeroU32::new(n).unwrap());
    Arc::new(KeyedLimiter::with_clock(
        FixedWindow::new(quota),
        ManualClock::new(),
    ))
}

/// Units left for the key, without spending them.
fn left(limiter: &Limiter) -> u32 {
    limiter.peek_n(&(), 0).unwrap().remaining()
}

/// A body of the given chunks, of unknown length until they are gone.
#[derive(Default)]
struct Chunks(VecDeque<&'static str>);

impl Body for Chunks {
    type Data = bytes::Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<bytes::Bytes>, Infallible>>> {
        Poll::Ready(
            self.0
                .pop_front()
                .map(|c| Ok(Frame::data(bytes::Bytes::from(c)))),
        )
    }
}

fn chunks(parts: &[&'static str]) -> Chunks {
    Chunks(parts.iter().copied().collect())
}

/// What each settlement saw: (status, body bytes, completed, admitted).
type Seen = Arc<Mutex<Vec<(u16, u64, bool, u32)>>>;

fn recording() -> (Settle, Seen) {
    let seen = Seen::default();
    let log = Arc::clone(&seen);
    let settle = Settle::by(move |sent| {
        log.lock().unwrap().push((
            sent.status().as_u16(),
            sent.body_bytes(),
            sent.completed(),
            sent.admitted(),
        ));
        saturate(sent.body_bytes())
    });
    (settle, seen)
}

async fn frames<B: Body + Unpin>(body: &mut B, n: usize) {
    for _ in 0..n {
        let frame = std::future::poll_fn(|cx| Pin::new(&mut *body).poll_frame(cx)).await;
        assert!(matches!(frame, Some(Ok(_))));
    }
}

#[tokio::test]
async fn a_body_dropped_mid_stream_settles_once_for_what_it_sent() {
    let limiter = limiter(100);
    let (settle, seen) = recording();
    let service = RateLimitLayer::shared(Arc::clone(&limiter), GlobalKey)
        .settle(settle)
        .layer(tower::service_fn(|_: Request<()>| async {
            Ok::<_, Infallible>(Response::new(chunks(&["abc", "defg", "hi"])))
        }));
    let response = service.oneshot(Request::new(())).await.unwrap();
    assert_eq!(left(&limiter), 99, "admitted at 1");
    let mut body = response.into_body();
    frames(&mut body, 2).await;
    assert!(seen.lock().unwrap().is_empty(), "still streaming");
    drop(body);
    assert_eq!(*seen.lock().unwrap(), [(200, 7, false, 1)]);
    assert_eq!(left(&limiter), 93, "charged the 7 bytes sent");
}

#[tokio::test]
async fn a_body_that_says_it_has_ended_settles_as_complete_and_empty_ones_at_once() {
    let limiter = limiter(100);
    let (settle, seen) = recording();
    let service = RateLimitLayer::shared(Arc::clone(&limiter), GlobalKey)
        .settle(settle)
        .layer(tower::service_fn(|req: Request<()>| async move {
            let body = if req.uri().path() == "/empty" {
                String::new()
            } else {
                "hello".to_string()
            };
            Ok::<_, Infallible>(Response::new(body))
        }));
    // A known-length body: its last frame ends it, and hyper drops it
    // without polling again; that is still a complete body.
    let mut body = service
        .clone()
        .oneshot(Request::new(()))
        .await
        .unwrap()
        .into_body();
    frames(&mut body, 1).await;
    assert_eq!(*seen.lock().unwrap(), [(200, 5, true, 1)]);
    drop(body);
    assert_eq!(seen.lock().unwrap().len(), 1, "exactly once");
    assert_eq!(left(&limiter), 95);
    // An empty body has ended before it is sent: settled right away.
    let request = Request::get("/empty").body(()).unwrap();
    let response = service.oneshot(request).await.unwrap();
    assert_eq!(seen.lock().unwrap()[1], (200, 0, true, 1));
    assert_eq!(left(&limiter), 95, "refunded its admission");
    drop(response);
    assert_eq!(seen.lock().unwrap().len(), 2, "exactly once");
}

#[tokio::test]
async fn requests_without_a_response_or_denied_or_let_through_settle_nothing() {
    let limiter = limiter(2);
    let (settle, seen) = recording();
    let failing = tower::service_fn(|req: Request<()>| async move {
        if req.uri().path() == "/fail" {
            Err("broken")
        } else {
            Ok(Response::new(String::new()))
        }
    });
    let service = RateLimitLayer::shared(Arc::clone(&limiter), GlobalKey)
        .settle(settle.clone())
        .layer(failing);
    // The service failed: no response, so the check's charge stands.
    let failed = service
        .clone()
        .oneshot(Request::get("/fail").body(()).unwrap())
        .await;
    assert!(failed.is_err());
    // Cancelled before the service answered: the same.
    let mut pending = service.clone();
    let future = pending.call(Request::new(()));
    drop(future);
    assert_eq!(left(&limiter), 0);
    let denied = service.oneshot(Request::new(())).await.unwrap();
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    drop(denied);
    // In shadow mode a denial is let through but spent nothing.
    let shadow = RateLimitLayer::shared(Arc::clone(&limiter), GlobalKey)
        .shadow(true)
        .settle(settle)
        .layer(tower::service_fn(|_: Request<()>| async {
            Ok::<_, Infallible>(Response::new("let through".to_string()))
        }));
    let response = shadow.oneshot(Request::new(())).await.unwrap();
    assert_eq!(response.headers()["x-ratelimit-shadow"], "denied");
    drop(response);
    assert!(seen.lock().unwrap().is_empty());
    assert_eq!(left(&limiter), 0);
}

/// A checker that answers after a real wait, settling in process.
struct Slow(Arc<Limiter>);

impl CheckKeyAsync<()> for Slow {
    type Future = Pin<Box<dyn Future<Output = Result<Decision, NeverAllowed>> + Send>>;

    fn check_n_async(&self, key: &(), cost: u32) -> Self::Future {
        let outcome = self.0.check_n(key, cost);
        Box::pin(async move {
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
            outcome
        })
    }
}

impl SettleKey<()> for Slow {
    type Error = Infallible;
    type Settling = Pin<Box<dyn Future<Output = Result<(), Infallible>> + Send>>;

    fn settle(&self, _: &(), admitted: &Decision, from: u32, to: u32) -> Self::Settling {
        let limiter = Arc::clone(&self.0);
        let admitted = admitted.clone();
        Box::pin(async move {
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
            limiter.settle(&(), &admitted, from, to).await
        })
    }
}

#[tokio::test]
async fn limiters_that_must_wait_settle_in_a_task() {
    let limiter = limiter(100);
    let service = RateLimitLayer::new(Slow(Arc::clone(&limiter)), GlobalKey)
        .cost_fn(|_: &Request<()>| 10)
        .settle(Settle::body_bytes())
        .layer(tower::service_fn(|_: Request<()>| async {
            Ok::<_, Infallible>(Response::new(chunks(&["abc", "de"])))
        }));
    let response = service.oneshot(Request::new(())).await.unwrap();
    assert_eq!(left(&limiter), 90);
    let mut body = response.into_body();
    frames(&mut body, 2).await;
    let end = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await;
    assert!(end.is_none());
    for _ in 0..200 {
        if left(&limiter) == 95 {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    panic!(
        "never refunded down to the 5 bytes sent: {} left",
        left(&limiter)
    );
}

#[tokio::test]
async fn a_panicking_cost_function_keeps_the_check_and_spares_the_connection() {
    let limiter = limiter(100);
    let service = RateLimitLayer::shared(Arc::clone(&limiter), GlobalKey)
        .cost_fn(|_: &Request<()>| 3)
        .settle(Settle::by(|_| panic!("a bug in the cost function")))
        .layer(tower::service_fn(|_: Request<()>| async {
            Ok::<_, Infallible>(Response::new(String::new()))
        }));
    let response = service.oneshot(Request::new(())).await.unwrap();
    drop(response);
    assert_eq!(left(&limiter), 97);
}

#[test]
fn counts_in_headers_are_decimal_and_saturate() {
    let name = HeaderName::from_static("x-tokens-used");
    let mut trailers = HeaderMap::new();
    let sent = |value: &'static str, trailers: &mut HeaderMap| {
        trailers.insert(name.clone(), HeaderValue::from_static(value));
    };
    let count = |trailers: &HeaderMap| {
        Sent {
            status: StatusCode::OK,
            body_bytes: 0,
            completed: true,
            admitted: 1,
            kept: None,
            trailers: Some(trailers),
            usage: None,
        }
        .count(&name)
    };
    for (value, expected) in [
        ("42", Some(42)),
        (" 7 ", Some(7)),
        ("99999999999999999999999", Some(u32::MAX)),
        ("4294967296", Some(u32::MAX)),
        ("-1", None),
        ("1e3", None),
        ("", None),
        ("0x10", None),
    ] {
        sent(value, &mut trailers);
        assert_eq!(count(&trailers), expected, "{value:?}");
    }
    let kept = HeaderValue::from_static("12");
    let head_only = Sent {
        status: StatusCode::OK,
        body_bytes: 0,
        completed: true,
        admitted: 1,
        kept: Some((&name, &kept)),
        trailers: None,
        usage: None,
    };
    assert_eq!(head_only.count(&name), Some(12));
    assert_eq!(head_only.count(&HeaderName::from_static("other")), None);
}

#[test]
fn usage_adds_saturating() {
    let usage = Usage::new();
    let shared = usage.clone();
    shared.add(5);
    usage.add(u64::MAX);
    assert_eq!(shared.get(), u64::MAX);
    usage.set(3);
    assert_eq!(shared.get(), 3);
}

/// A limit outside another on one route: a request the inner weir layer
/// refuses gives back what the outer one spent (the origin did no work),
/// and one it admits keeps it.
#[tokio::test]
async fn an_inner_refusal_gives_back_what_the_outer_limit_spent() {
    let (outer, inner) = (limiter(3), limiter(1));
    let hello = tower::service_fn(|_: Request<()>| async {
        Ok::<_, Infallible>(http::Response::new(String::new()))
    });
    let service = RateLimitLayer::shared(Arc::clone(&outer), GlobalKey)
        .settle(Settle::admitted())
        .layer(RateLimitLayer::shared(Arc::clone(&inner), GlobalKey).layer(hello));
    let statuses: Vec<u16> = {
        let mut statuses = Vec::new();
        for _ in 0..5 {
            let response = service.clone().oneshot(Request::new(())).await.unwrap();
            statuses.push(response.status().as_u16());
            drop(response); // the body ends: the outer layer settles
        }
        statuses
    };
    assert_eq!(
        statuses,
        [200, 429, 429, 429, 429],
        "the inner limit of 1 refuses"
    );
    assert_eq!(
        left(&outer),
        2,
        "only the admitted request spent the outer limit"
    );
    // Without the settling rule, the outer limit keeps what it spent.
    let (outer, inner) = (limiter(3), limiter(1));
    let plain = RateLimitLayer::shared(Arc::clone(&outer), GlobalKey).layer(
        RateLimitLayer::shared(inner, GlobalKey).layer(tower::service_fn(|_: Request<()>| async {
            Ok::<_, Infallible>(http::Response::new(String::new()))
        })),
    );
    for _ in 0..2 {
        drop(plain.clone().oneshot(Request::new(())).await.unwrap());
    }
    assert_eq!(left(&outer), 1);
}

/// A body of data frames ([`Chunks`]), then trailers carrying
/// `x-tokens-used`, all ready at once, or (no count) the trailers still to
/// come.
#[derive(Default)]
struct Tokens {
    frames: Chunks,
    count: Option<&'static str>,
}

impl Body for Tokens {
    type Data = bytes::Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<bytes::Bytes>, Infallible>>> {
        if let Poll::Ready(Some(data)) = Pin::new(&mut self.frames).poll_frame(cx) {
            return Poll::Ready(Some(data));
        }
        match self.count.take() {
            Some(count) => {
                let mut trailers = HeaderMap::new();
                trailers.insert("x-tokens-used", HeaderValue::from_static(count));
                Poll::Ready(Some(Ok(Frame::trailers(trailers))))
            }
            // Still generating: nothing more yet.
            None => Poll::Pending,
        }
    }
}

/// What a response counted in its trailers costs when its client reads
/// `read` frames of three and hangs up: the count if the origin produced
/// it (read or not), else the ceiling; `ready` says whether it had.
async fn charged_by_count(read: usize, ready: bool) -> u32 {
    let limiter = limiter(10_000);
    let tokens = HeaderName::from_static("x-tokens-used");
    let service = RateLimitLayer::shared(Arc::clone(&limiter), GlobalKey)
        .settle(Settle::count_in(tokens, 4096))
        .layer(tower::service_fn(move |_: Request<()>| async move {
            let body = Tokens {
                frames: chunks(&["one ", "two ", "three"]),
                count: ready.then_some("1000"),
            };
            Ok::<_, Infallible>(Response::new(body))
        }));
    let mut body = service.oneshot(Request::new(())).await.unwrap().into_body();
    frames(&mut body, read).await;
    drop(body);
    10_000 - left(&limiter)
}

#[tokio::test]
async fn hanging_up_before_the_count_never_costs_less_than_reading_it() {
    // Read to the end, trailers included: the count.
    assert_eq!(charged_by_count(4, true).await, 1000);
    for read in 0..=3 {
        // The origin had written its count: found though never read.
        assert_eq!(
            charged_by_count(read, true).await,
            1000,
            "{read} frames read"
        );
        // It had not: the ceiling, more than any count.
        assert_eq!(
            charged_by_count(read, false).await,
            4096,
            "{read} frames read"
        );
    }
}
