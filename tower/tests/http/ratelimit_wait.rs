//! While `RateLimitLayer` waits for a limiter that answers later (a Redis
//! round trip), it must not hold the inner service's readiness: that
//! reservation (a concurrency permit, a buffer slot) belongs to requests
//! the origin is serving, not to ones that may yet be denied.
#![cfg(not(loom))]

use http::{Request, Response, StatusCode};
use std::convert::Infallible;
use std::future::Future;
use std::num::NonZeroU32;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use tokio::sync::Semaphore;
use tower::{Layer, Service, ServiceExt};
use weir_rate::{CheckKeyAsync, Decision, FixedWindow, KeyedLimiter, NeverAllowed, Quota};
use weir_tower::{GlobalKey, RateLimitLayer};

/// An origin with `slots` concurrency, reserved in `poll_ready` and held
/// until the response is produced, as tower's `ConcurrencyLimit` holds its
/// permit; a clone starts with no reservation, and dropping a reserved
/// clone gives its slot back.
struct Reserving {
    free: Arc<AtomicUsize>,
    waiting: Arc<Mutex<Vec<Waker>>>,
    held: bool,
}

impl Reserving {
    fn new(slots: usize) -> Self {
        Self {
            free: Arc::new(AtomicUsize::new(slots)),
            waiting: Arc::new(Mutex::new(Vec::new())),
            held: false,
        }
    }

    fn release(free: &AtomicUsize, waiting: &Mutex<Vec<Waker>>) {
        free.fetch_add(1, Ordering::SeqCst);
        for waker in waiting.lock().unwrap().drain(..) {
            waker.wake();
        }
    }
}

impl Clone for Reserving {
    fn clone(&self) -> Self {
        Self {
            free: Arc::clone(&self.free),
            waiting: Arc::clone(&self.waiting),
            held: false,
        }
    }
}

impl Drop for Reserving {
    fn drop(&mut self) {
        if self.held {
            Self::release(&self.free, &self.waiting);
        }
    }
}

impl Service<Request<()>> for Reserving {
    type Response = Response<String>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Response<String>, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        if self.held {
            return Poll::Ready(Ok(()));
        }
        self.waiting.lock().unwrap().push(cx.waker().clone());
        let taken = self
            .free
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        if taken.is_ok() {
            self.held = true;
            return Poll::Ready(Ok(()));
        }
        Poll::Pending
    }

    fn call(&mut self, _: Request<()>) -> Self::Future {
        assert!(self.held, "called without a reservation");
        self.held = false;
        // The origin answers at once and frees its slot.
        Self::release(&self.free, &self.waiting);
        std::future::ready(Ok(Response::new("hello".to_string())))
    }
}

/// A limiter that decides only when the test says so: a network backend
/// in the middle of its round trip.
struct Gated {
    limiter: KeyedLimiter<(), FixedWindow>,
    open: Arc<Semaphore>,
}

impl CheckKeyAsync<()> for Gated {
    type Future = Pin<Box<dyn Future<Output = Result<Decision, NeverAllowed>> + Send>>;

    fn check_n_async(&self, key: &(), cost: u32) -> Self::Future {
        let outcome = self.limiter.check_n(key, cost);
        let open = Arc::clone(&self.open);
        Box::pin(async move {
            open.acquire().await.expect("never closed").forget();
            outcome
        })
    }
}

fn gated(limit: u32) -> (Gated, Arc<Semaphore>) {
    let open = Arc::new(Semaphore::new(0));
    let quota = Quota::per_minute(NonZeroU32::new(limit).unwrap());
    let limiter = KeyedLimiter::new(FixedWindow::new(quota));
    (
        Gated {
            limiter,
            open: Arc::clone(&open),
        },
        open,
    )
}

fn ready_now<S: Service<Request<()>>>(service: &mut S) -> bool {
    let mut cx = Context::from_waker(Waker::noop());
    matches!(service.poll_ready(&mut cx), Poll::Ready(Ok(())))
}

#[tokio::test(flavor = "current_thread")]
async fn a_request_waiting_for_its_decision_holds_no_reservation() {
    let (limiter, open) = gated(1);
    let origin = Reserving::new(1);
    let mut service = RateLimitLayer::new(limiter, GlobalKey).layer(origin);
    service.ready().await.unwrap();
    // Admitted by the limiter, but only once the round trip ends.
    let waiting = tokio::spawn(service.call(Request::new(())));
    tokio::task::yield_now().await;
    // Another request must be able to get the origin's one slot meanwhile.
    let mut other = service.clone();
    assert!(
        ready_now(&mut other),
        "the origin's slot is held by a request still waiting for its decision"
    );
    drop(other);
    open.add_permits(1);
    let admitted = waiting.await.unwrap().unwrap();
    assert_eq!(admitted.status(), StatusCode::OK);
    assert_eq!(admitted.body(), "hello");
}

#[tokio::test(flavor = "current_thread")]
async fn a_denied_request_never_touches_the_origin() {
    let (limiter, open) = gated(1);
    let origin = Reserving::new(1);
    let free = Arc::clone(&origin.free);
    let service = RateLimitLayer::new(limiter, GlobalKey).layer(origin);
    let first = tokio::spawn(service.clone().oneshot(Request::new(())));
    let second = tokio::spawn(service.clone().oneshot(Request::new(())));
    // End both round trips whenever they start.
    open.add_permits(2);
    let mut statuses = [
        first.await.unwrap().unwrap().status(),
        second.await.unwrap().unwrap().status(),
    ];
    statuses.sort();
    assert_eq!(statuses, [StatusCode::OK, StatusCode::TOO_MANY_REQUESTS]);
    assert_eq!(free.load(Ordering::SeqCst), 1, "the slot came back");
}
