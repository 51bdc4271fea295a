//! Charging by the response ([`RateLimitLayer::settle`](super::RateLimitLayer::settle)):
//! a request is admitted on a check of its up-front cost, and once its
//! response has been sent (its body ended, failed, or was dropped with the
//! client gone) the cost it turned out to have is settled against the
//! check: the surplus refunded or the shortfall charged
//! ([`Settlement`](weir_rate::Settlement)), exactly once.
//!
//! The response's head (status, one kept header, a [`Usage`]) is read when
//! the service answers; the body is counted as it streams, through the
//! same [`CountedBody`] the in-flight layers hold their count in; the
//! settlement runs when that body lets go of its [`SettleGuard`].
//!
//! A settlement that fails, or that a backend has not answered by the time
//! its runtime shuts down, is logged (and counted as an error, with the
//! `metrics` feature); the key then
//! keeps what its check charged (or, cut off mid-call, whatever the
//! backend made of the call).

use super::body::{CountedBody, Seen};
use crate::response::Refused;
use crate::telemetry::{Settled, Settlements};
use http::{HeaderMap, HeaderName, HeaderValue, Response, StatusCode};
pub(crate) use passage::Passage;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, Waker};
use weir_rate::{Decision, SettleKey, Settlement};

type CostFn = Arc<dyn Fn(&Sent<'_>) -> u32 + Send + Sync>;

/// How a [`RateLimitLayer`](super::RateLimitLayer) finds what a request
/// cost once its response has been sent.
///
/// The common rules are one line each; [`by`](Self::by) takes any
/// function of what was [`Sent`].
///
/// ```
/// use http::HeaderName;
/// use weir_tower::Settle;
///
/// let bytes = Settle::body_bytes();
/// let failures = Settle::server_errors();
/// let tokens = Settle::count_in(HeaderName::from_static("x-tokens-used"), 4096);
/// let streamed_tokens = Settle::usage();
/// let kib = Settle::by(|sent| u32::try_from(sent.body_bytes().div_ceil(1024)).unwrap_or(u32::MAX));
/// # let _ = (bytes, failures, tokens, streamed_tokens, kib);
/// ```
#[derive(Clone)]
pub struct Settle {
    cost: CostFn,
    keep: Option<HeaderName>,
    /// The cost reads the trailers: a body cut short is read on for them.
    owed_trailers: bool,
    settlements: Arc<Settlements>,
}

impl fmt::Debug for Settle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Settle")
            .field("keep", &self.keep)
            .finish_non_exhaustive()
    }
}

impl Settle {
    /// The request costs what its check charged: nothing to settle, but
    /// for the rule every settling layer follows. A request that a weir
    /// layer *inside* this one refused (a 429 or 503 it answered itself,
    /// not the origin's) costs nothing, whatever the rule: the origin did
    /// no work. So put a limit outside another on one route with this rule
    /// and a refusal by the inner one gives back what the outer one spent.
    ///
    /// ```
    /// use std::net::IpAddr;
    /// use weir_rate::{nonzero, Gcra, KeyedLimiter, Quota};
    /// use weir_tower::{PeerIp, RateLimitLayer, Settle};
    ///
    /// let per_client = KeyedLimiter::<IpAddr, _>::new(Gcra::new(Quota::per_second(nonzero!(10))));
    /// let bytes = KeyedLimiter::<IpAddr, _>::new(Gcra::new(Quota::per_minute(nonzero!(1 << 20))));
    /// let requests = RateLimitLayer::new(per_client, PeerIp::new()).settle(Settle::admitted());
    /// let downloads = RateLimitLayer::new(bytes, PeerIp::new()).settle(Settle::body_bytes());
    /// // `requests` outside `downloads`: a download refused for bytes costs no request.
    /// let stack = tower::ServiceBuilder::new().layer(requests).layer(downloads);
    /// # let _ = stack;
    /// ```
    pub fn admitted() -> Self {
        Self::by(|sent| sent.admitted())
    }

    /// The request costs `cost(&sent)` units.
    pub fn by(cost: impl Fn(&Sent<'_>) -> u32 + Send + Sync + 'static) -> Self {
        Self {
            cost: Arc::new(cost),
            keep: None,
            owed_trailers: false,
            settlements: Arc::default(),
        }
    }

    /// Keep the response header `name` from the head until the
    /// settlement, so the cost function can read it with
    /// [`Sent::header`]. One header only, replacing any kept before:
    /// copying every response's headers would cost every request.
    pub fn keeping(mut self, name: HeaderName) -> Self {
        self.keep = Some(name);
        self
    }

    pub(crate) fn with_own_counters(self) -> Self {
        Self {
            settlements: Arc::default(),
            ..self
        }
    }

    /// One unit per byte of body sent ([`Sent::body_bytes`]), saturating
    /// at `u32::MAX`. This limits bytes, not requests: a response with no
    /// body (`HEAD`, 204, 304, an empty 401) costs nothing once settled, so
    /// where requests themselves must be limited (a login route), stack a
    /// layer that counts them.
    ///
    /// **Sent is not received.** A frame counts when the server takes it
    /// from the body, so a client that hangs up mid-download is charged
    /// for what still sat in the buffers on the way: hyper's write queue
    /// (at most 16 frames), the server socket's send buffer and the
    /// client's receive window. With the kernel's autotuned send buffer
    /// that can be megabytes beyond what the client read. To bound it, set
    /// the send buffer on the listening socket (accepted connections
    /// inherit it; Linux doubles the value asked for) and stream frames of
    /// a modest size:
    ///
    /// ```no_run
    /// # async fn serve() -> std::io::Result<()> {
    /// // A cut download is charged at most ~2 × 64 KiB + 16 frames (+ the
    /// // client's window) beyond what the client received.
    /// let socket = tokio::net::TcpSocket::new_v4()?;
    /// socket.set_send_buffer_size(64 * 1024)?;
    /// socket.bind("0.0.0.0:8080".parse().unwrap())?;
    /// let listener = socket.listen(1024)?;
    /// # let _ = listener;
    /// // axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>())
    /// # Ok(())
    /// # }
    /// ```
    pub fn body_bytes() -> Self {
        Self::by(|sent| saturate(sent.body_bytes()))
    }

    /// Only server errors count: a 5xx keeps what its check charged, any
    /// other status is refunded in full (limit failing requests, as a
    /// circuit breaker or a login throttle does).
    pub fn server_errors() -> Self {
        Self::by(|sent| {
            if sent.status().is_server_error() {
                sent.admitted()
            } else {
                0
            }
        })
    }

    /// The count in the header `name` (a decimal integer, e.g. the tokens
    /// an LLM call used), read from the trailers if the body produced
    /// them, else from the response head.
    ///
    /// A response cut short before its count (the client hung up, the
    /// body failed) is read on for trailers its source had already
    /// produced; if it has none, it is charged `if_cut_short`, the most
    /// one request can count (an LLM call's token ceiling), so hanging up
    /// before the count never costs less than reading it. A response that
    /// ends without a readable count keeps what its check charged.
    ///
    /// The count is trusted as the upstream wrote it: a `0` refunds the
    /// whole admission. Use it for a header your own service or a backend
    /// you trust sets, never one a client can put through (strip it at
    /// the edge, or read it with [`by`](Self::by) and a floor).
    ///
    /// ```
    /// use http::HeaderName;
    /// use weir_tower::Settle;
    ///
    /// // Tokens from the upstream's `x-tokens-used`; at most 4096 a call.
    /// let tokens = Settle::count_in(HeaderName::from_static("x-tokens-used"), 4096);
    /// # let _ = tokens;
    /// ```
    pub fn count_in(name: HeaderName, if_cut_short: u32) -> Self {
        let read = name.clone();
        let mut rule = Self::by(move |sent| match sent.count(&read) {
            Some(count) => count,
            None if sent.completed() => sent.admitted(),
            None => if_cut_short.max(sent.admitted()),
        })
        .keeping(name);
        rule.owed_trailers = true;
        rule
    }

    /// The count in the response's [`Usage`] extension, as it stands when
    /// the body ends (the handler may add to it while it streams). A
    /// response without one keeps what its check charged.
    pub fn usage() -> Self {
        Self::by(|sent| sent.usage().map_or(sent.admitted(), saturate))
    }
}

fn saturate(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// What a response turned out to be, for a [`Settle`] cost function.
///
/// ```
/// use weir_tower::{Sent, Settle};
///
/// // Charge a request by the kilobytes its response sent, at least one.
/// let by_kilobyte = Settle::by(|sent: &Sent<'_>| {
///     u32::try_from(sent.body_bytes() / 1024).unwrap_or(u32::MAX).max(1)
/// });
/// # let _ = by_kilobyte;
/// ```
#[derive(Debug)]
pub struct Sent<'a> {
    status: StatusCode,
    body_bytes: u64,
    completed: bool,
    admitted: u32,
    kept: Option<(&'a HeaderName, &'a HeaderValue)>,
    trailers: Option<&'a HeaderMap>,
    usage: Option<u64>,
}

impl Sent<'_> {
    /// The response's status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// Bytes of body data handed to the server to send: all of it for a
    /// body that ended, what went out before the client left for one cut
    /// short (a frame the server had taken but not yet written counts).
    pub fn body_bytes(&self) -> u64 {
        self.body_bytes
    }

    /// Whether the body reached its end; `false` when it failed or was
    /// dropped first (the client went away, the connection broke).
    pub fn completed(&self) -> bool {
        self.completed
    }

    /// What the check admitting the request charged.
    pub fn admitted(&self) -> u32 {
        self.admitted
    }

    /// The trailers, if the body sent them.
    pub fn trailers(&self) -> Option<&HeaderMap> {
        self.trailers
    }

    /// The header `name`: from the trailers if they have it, else from the
    /// response head if the [`Settle`] keeps it ([`Settle::keeping`]).
    pub fn header(&self, name: &HeaderName) -> Option<&HeaderValue> {
        self.trailers.and_then(|t| t.get(name)).or_else(|| {
            self.kept
                .and_then(|(kept, value)| (kept == name).then_some(value))
        })
    }

    /// The decimal count in the header `name` ([`header`](Self::header)),
    /// saturating at `u32::MAX`; `None` if it is absent or not a number.
    pub fn count(&self, name: &HeaderName) -> Option<u32> {
        let digits = self.header(name)?.to_str().ok()?.trim();
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        Some(saturate(digits.bytes().fold(0u64, |n, b| {
            n.saturating_mul(10).saturating_add(u64::from(b - b'0'))
        })))
    }

    /// The count of the response's [`Usage`] extension, if it had one.
    pub fn usage(&self) -> Option<u64> {
        self.usage
    }
}

/// A count a handler reports with its response, for [`Settle::usage`]:
/// put a clone in the response's extensions and add to it while the body
/// streams (the tokens of a streamed LLM answer); the layer reads it when
/// the body ends.
///
/// ```
/// use axum::body::Body;
/// use axum::response::Response;
/// use weir_tower::Usage;
///
/// async fn generate() -> Response {
///     let usage = Usage::new();
///     let mut response = Response::new(Body::from("one two three"));
///     response.extensions_mut().insert(usage.clone());
///     usage.add(3); // as the tokens are produced
///     response
/// }
/// # let _ = generate;
/// ```
#[derive(Debug, Clone, Default)]
pub struct Usage(Arc<AtomicU64>);

impl Usage {
    /// A count of zero.
    pub fn new() -> Self {
        Self::default()
    }

    /// Add `n`, saturating.
    pub fn add(&self, n: u64) {
        let _ = self
            .0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |c| {
                Some(c.saturating_add(n))
            });
    }

    /// Replace the count with `n`.
    pub fn set(&self, n: u64) {
        self.0.store(n, Ordering::Relaxed);
    }

    /// The count now.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Settles one admission: what a settling layer holds for it.
pub(crate) trait Settler<K>: Send + Sync {
    /// The layer's rule.
    fn rule(&self) -> &Settle;

    /// Settle `admitted` (a check of `from` units) for `key` at `to`,
    /// reporting a failure.
    fn settle(&self, key: &K, admitted: &Decision, from: u32, to: u32);

    /// Report a settlement of a check of `from` units that could not even
    /// be attempted.
    fn failed(&self, from: u32, why: &dyn fmt::Display);
}

/// Settle through `checker`, and report what happened: a settlement that
/// fails (now, or in the task that finishes one a backend answers later)
/// is counted and logged, never dropped silently.
pub(crate) fn settle_through<Ch, K>(
    checker: &Ch,
    key: &K,
    admitted: &Decision,
    (from, to): (u32, u32),
    policy: &Arc<str>,
    rule: &Settle,
) where
    Ch: SettleKey<K> + ?Sized,
    K: ?Sized,
{
    let settled = match Settlement::of(admitted, from, to) {
        Settlement::Keep => return,
        Settlement::Refund(_) => Settled::Refund,
        Settlement::Charge(_) => Settled::Charge,
    };
    let report = Report {
        policy: Arc::clone(policy),
        settlements: Arc::clone(&rule.settlements),
        from,
        to,
        settled,
    };
    let mut settling = checker.settle(key, admitted, from, to);
    // In-process limiters have settled by now; only a round trip waits.
    let mut cx = Context::from_waker(Waker::noop());
    match Pin::new(&mut settling).poll(&mut cx) {
        Poll::Ready(result) => report.outcome(result),
        Poll::Pending => match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                let unfinished = Unfinished(Some(report));
                runtime.spawn(async move { unfinished.finish(settling.await) });
            }
            Err(_) => report.failure(&"no tokio runtime to finish it on"),
        },
    }
}

/// Where a settlement's outcome is told.
struct Report {
    policy: Arc<str>,
    settlements: Arc<Settlements>,
    from: u32,
    to: u32,
    settled: Settled,
}

impl Report {
    fn outcome<E: std::error::Error>(&self, result: Result<(), E>) {
        match result {
            Ok(()) => self.settlements.count(&self.policy, self.settled),
            Err(error) => self.failure(&error),
        }
    }

    fn failure(&self, why: &dyn fmt::Display) {
        self.settlements.count(&self.policy, Settled::Error);
        tracing::warn!(
            limiter = %self.policy,
            from = self.from,
            to = self.to,
            "weir-tower: a settlement failed ({why}); the key keeps the {} units its check charged instead of {}",
            self.from,
            self.to,
        );
    }

    /// The task finishing a settlement was dropped before the backend
    /// answered: the call may or may not have been made.
    fn cut_off(&self) {
        self.settlements.count(&self.policy, Settled::Error);
        tracing::warn!(
            limiter = %self.policy,
            from = self.from,
            to = self.to,
            "weir-tower: a settlement failed to finish (its task was dropped before the backend answered, e.g. by a runtime shutting down); the key keeps the {} units its check charged or {}, as far as the backend got",
            self.from,
            self.to,
        );
    }
}

/// A settlement a spawned task finishes. A runtime that shuts down (or a
/// settling future that panics) drops the task before it ends; the drop
/// reports it then, so it is never lost in silence.
struct Unfinished(Option<Report>);

impl Unfinished {
    fn finish<E: std::error::Error>(mut self, result: Result<(), E>) {
        if let Some(report) = self.0.take() {
            report.outcome(result);
        }
    }
}

impl Drop for Unfinished {
    fn drop(&mut self) {
        if let Some(report) = self.0.take() {
            report.cut_off();
        }
    }
}

/// Report a settlement of a check of `from` units that could not be
/// attempted.
pub(crate) fn failed(policy: &Arc<str>, rule: &Settle, from: u32, why: &dyn fmt::Display) {
    Report {
        policy: Arc::clone(policy),
        settlements: Arc::clone(&rule.settlements),
        from,
        to: from,
        settled: Settled::Error,
    }
    .failure(why);
}

/// What the head of a response told, kept until the settlement.
struct Head {
    status: StatusCode,
    kept: Option<HeaderValue>,
    usage: Option<Usage>,
    /// A weir layer inside refused the request: it costs nothing.
    refused: bool,
}

/// One admitted request's claim to a settlement: carried by the response
/// future, then held by the response body ([`SettleBody`]) until it ends;
/// the settlement runs when it is dropped, exactly once. A request that
/// never got a response (its future dropped, the service failed) keeps
/// what its check charged, unless it never reached the service inside:
/// its client hung up while this layer's check was on its way to a store
/// (the check is finished in the background and its units given back),
/// while it waited its turn, or while a weir layer inside was still
/// deciding. Nothing was done for it, and it costs nothing.
///
/// ```
/// use axum::body::Body;
/// use http::{Request, Response};
/// use std::num::NonZeroU32;
/// use tower::{Layer, ServiceExt};
/// use weir_tower::{GlobalKey, RateLimitLayer, Settle, SettleBody};
/// use weir_rate::{Gcra, KeyedLimiter, Quota};
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let bytes = KeyedLimiter::new(Gcra::new(Quota::per_minute(NonZeroU32::new(1000).unwrap())));
/// let layer = RateLimitLayer::new(bytes, GlobalKey).settle(Settle::body_bytes());
/// let service = layer.layer(tower::service_fn(|_: Request<Body>| async {
///     Ok::<_, std::convert::Infallible>(Response::new(Body::from("hello")))
/// }));
/// let response = service.oneshot(Request::new(Body::empty())).await.unwrap();
/// // The body holds the request's SettleGuard: dropping it settles at
/// // the bytes sent so far (none).
/// let body: SettleBody<Body, ()> = response.into_body();
/// drop(body);
/// # });
/// ```
pub struct SettleGuard<K> {
    settler: Arc<dyn Settler<K>>,
    key: K,
    admitted: Decision,
    /// The cost the admitting check asked for.
    checked: u32,
    head: Option<Head>,
    body_bytes: u64,
    trailers: Option<HeaderMap>,
    completed: bool,
    /// How far the request got through the weir layers inside.
    passage: Passage,
    /// The request went on to the service inside this layer.
    handed_on: bool,
}

/// The response body of a settling [`RateLimitLayer`](super::RateLimitLayer):
/// counted as it streams, settled when it ends or is dropped.
///
/// The [`SettleGuard`] example names it.
pub type SettleBody<B, K> = CountedBody<B, SettleGuard<K>>;

impl<K> fmt::Debug for SettleGuard<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SettleGuard")
            .field("checked", &self.checked)
            .field("body_bytes", &self.body_bytes)
            .field("completed", &self.completed)
            .finish_non_exhaustive()
    }
}

impl<K> SettleGuard<K> {
    pub(crate) fn new(
        settler: Arc<dyn Settler<K>>,
        key: K,
        admitted: Decision,
        checked: u32,
        passage: Passage,
    ) -> Self {
        Self {
            settler,
            key,
            admitted,
            checked,
            head: None,
            body_bytes: 0,
            trailers: None,
            completed: false,
            passage,
            handed_on: false,
        }
    }

    fn seen(&mut self, seen: Seen<'_>) {
        match seen {
            Seen::Data(n) => self.body_bytes = self.body_bytes.saturating_add(n),
            Seen::Trailers(trailers) => self.trailers = Some(trailers.clone()),
            Seen::End => self.completed = true,
        }
    }
}

impl<K> Drop for SettleGuard<K> {
    fn drop(&mut self) {
        let Some(head) = self.head.take() else {
            // Never handed on (its client left while the check answered
            // or the request waited its turn), or stopped at a weir check
            // inside: nothing was done for it.
            if !self.handed_on || self.passage.stopped_inside() {
                self.settler
                    .settle(&self.key, &self.admitted, self.checked, 0);
            }
            return;
        };
        let rule = self.settler.rule();
        let sent = Sent {
            status: head.status,
            body_bytes: self.body_bytes,
            completed: self.completed,
            admitted: self.checked,
            kept: rule.keep.as_ref().zip(head.kept.as_ref()),
            trailers: self.trailers.as_ref(),
            usage: head.usage.as_ref().map(Usage::get),
        };
        // A panicking cost function must not take the connection down
        // (nor abort the process, were this drop part of an unwind).
        let cost = if head.refused {
            Ok(0)
        } else {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (rule.cost)(&sent)))
        };
        match cost {
            Ok(cost) => self
                .settler
                .settle(&self.key, &self.admitted, self.checked, cost),
            Err(_) => self
                .settler
                .failed(self.checked, &"the cost function panicked"),
        }
    }
}

/// How a response future hands its response on: as it is, or wrapped to
/// settle when its body ends. Not nameable outside the crate.
#[allow(unnameable_types)] // sealed: the crate's two ways of handing on a response
pub trait Finish<B>: Sized {
    /// The body of the response handed on.
    type Body;

    /// Whether a ticket settles: a check dropped before it answers is then
    /// finished in the background, and what it spent given back.
    #[doc(hidden)]
    const SETTLES: bool = false;

    /// The request goes on to the service inside, carrying this ticket.
    #[doc(hidden)]
    fn handed_on(&mut self) {}

    /// `response`, with `ticket` (if any) attached.
    fn finish(ticket: Option<Self>, response: Response<B>) -> Response<Self::Body>;
}

impl<B> Finish<B> for () {
    type Body = B;

    #[inline]
    fn finish(_: Option<()>, response: Response<B>) -> Response<B> {
        response
    }
}

impl<B: http_body::Body, K> Finish<B> for SettleGuard<K> {
    type Body = SettleBody<B, K>;

    const SETTLES: bool = true;

    fn handed_on(&mut self) {
        self.handed_on = true;
    }

    fn finish(ticket: Option<Self>, response: Response<B>) -> Response<Self::Body> {
        let Some(mut guard) = ticket else {
            return response.map(CountedBody::uncounted);
        };
        let kept = guard
            .settler
            .rule()
            .keep
            .as_ref()
            .and_then(|name| response.headers().get(name))
            .cloned();
        guard.head = Some(Head {
            status: response.status(),
            kept,
            usage: response.extensions().get::<Usage>().cloned(),
            refused: response.extensions().get::<Refused>().is_some(),
        });
        let owed_trailers = guard.settler.rule().owed_trailers;
        response.map(|body| CountedBody::watched(body, guard, Self::seen, owed_trailers))
    }
}

mod passage;
#[cfg(test)]
mod tests;
