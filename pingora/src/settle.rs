//! [`Settle`]: what an admitted request turned out to cost, read in
//! `logging` from what pingora sent, and settled against its check.
//!
//! A request is checked in `request_filter` at its up-front cost (one
//! unit); when it is over, [`RateLimit::logging`](crate::RateLimit::logging)
//! asks the rule what it cost and settles the difference through the
//! limiter's [`SettleKey`]: the surplus refunded, the shortfall charged
//! (weir-rate's `Settlement`). An in-process limiter settles at once; a
//! limit on a store settles on a task of pingora's runtime, so the
//! connection is not held for the round trip. A settlement that fails is
//! logged, and the key keeps what its check charged.

use crate::inflight::UpstreamFull;
use pingora::Error;
use pingora::proxy::Session;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use weir_rate::{Decision, SettleKey};

type CostFn = Arc<dyn Fn(&Sent<'_>) -> u32 + Send + Sync>;

/// How a [`RateLimit`](crate::RateLimit) finds what a request cost once
/// its response has been sent ([`RateLimit::settle`](crate::RateLimit::settle)).
///
/// Whatever the rule, a request that a weir limit after this one refused
/// (a later [`RateLimit`](crate::RateLimit)'s 429, or an upstream
/// permit's 503) costs nothing: the origin did no work for it.
///
/// ```
/// use weir_pingora::Settle;
///
/// let bytes = Settle::body_bytes();
/// let failures = Settle::server_errors();
/// let tokens = Settle::count_in("x-tokens-used", 4096);
/// let kib = Settle::by(|sent| u32::try_from(sent.body_bytes().div_ceil(1024)).unwrap_or(u32::MAX));
/// # let _ = (bytes, failures, tokens, kib);
/// ```
#[derive(Clone)]
pub struct Settle {
    cost: CostFn,
    keep: Option<Arc<str>>,
}

impl fmt::Debug for Settle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Settle")
            .field("keep", &self.keep)
            .finish_non_exhaustive()
    }
}

impl Settle {
    /// The request costs `cost(&sent)` units.
    pub fn by(cost: impl Fn(&Sent<'_>) -> u32 + Send + Sync + 'static) -> Self {
        Self {
            cost: Arc::new(cost),
            keep: None,
        }
    }

    /// Keep the value of the upstream's response header `name` (read in
    /// `response_filter`) for the cost function's [`Sent::header`]. One
    /// header only, replacing any kept before.
    pub fn keeping(mut self, name: &str) -> Self {
        self.keep = Some(name.into());
        self
    }

    /// One unit per byte of body sent to the client
    /// ([`Sent::body_bytes`]), saturating at `u32::MAX`. This limits
    /// bytes, not requests: a response without a body costs nothing once
    /// settled.
    pub fn body_bytes() -> Self {
        Self::by(|sent| u32::try_from(sent.body_bytes()).unwrap_or(u32::MAX))
    }

    /// Only server errors count: a 5xx sent to the client (the
    /// upstream's, or pingora's own 502 when the upstream failed) keeps
    /// what its check charged; any other status, or none, is refunded in
    /// full.
    pub fn server_errors() -> Self {
        Self::by(|sent| match sent.status() {
            Some(500..=599) => sent.admitted(),
            _ => 0,
        })
    }

    /// The count (a decimal integer) in the upstream's response header
    /// `name`, such as the tokens an LLM call used. A request that ends
    /// before the header was seen (the upstream failed, the client hung
    /// up) is charged `if_cut_short`, the most one request can count, so
    /// that hanging up never costs less than reading the count; a response
    /// without a readable count keeps what its check charged.
    ///
    /// The count is trusted as the upstream wrote it (a `0` refunds the
    /// whole admission): use it for a header your own upstream sets.
    pub fn count_in(name: &str, if_cut_short: u32) -> Self {
        Self::by(move |sent| match (sent.count(), sent.answered) {
            (Some(count), _) => count,
            (None, true) => sent.admitted(),
            (None, false) => if_cut_short.max(sent.admitted()),
        })
        .keeping(name)
    }

    pub(crate) fn kept_header(&self) -> Option<&str> {
        self.keep.as_deref()
    }
}

/// What a request's response turned out to be, for a [`Settle`] cost
/// function.
///
/// ```
/// use weir_pingora::{Sent, Settle};
///
/// // At least one unit a request, one more per started kilobyte.
/// let rule = Settle::by(|sent: &Sent<'_>| {
///     1 + u32::try_from(sent.body_bytes().div_ceil(1024)).unwrap_or(u32::MAX - 1)
/// });
/// # let _ = rule;
/// ```
#[derive(Debug)]
pub struct Sent<'a> {
    status: Option<u16>,
    body_bytes: u64,
    completed: bool,
    answered: bool,
    admitted: u32,
    kept: Option<&'a str>,
}

impl Sent<'_> {
    /// The status sent to the client, if a response was written.
    pub fn status(&self) -> Option<u16> {
        self.status
    }

    /// The bytes of body sent to the client.
    pub fn body_bytes(&self) -> u64 {
        self.body_bytes
    }

    /// The request ended without an error (the response was sent whole).
    pub fn completed(&self) -> bool {
        self.completed
    }

    /// The units the request's check spent.
    pub fn admitted(&self) -> u32 {
        self.admitted
    }

    /// The kept header's value ([`Settle::keeping`]), if the upstream sent
    /// it as text.
    pub fn header(&self) -> Option<&str> {
        self.kept
    }

    /// The kept header's value as a count, if it is a decimal integer.
    pub fn count(&self) -> Option<u32> {
        self.kept?.trim().parse().ok()
    }
}

/// One admission waiting for its settlement: what the check spent and
/// what the response head said.
#[derive(Debug, Clone)]
pub(crate) struct Owed {
    pub(crate) key: String,
    pub(crate) checked: u32,
    /// The upstream's response head was seen (`response_filter` ran).
    pub(crate) answered: bool,
    pub(crate) kept: Option<String>,
}

/// Settle `owed` (the admission `admitted`) through `limiter` by `rule`,
/// from what `session` sent and how the request ended (`error`);
/// `stopped_after` says a later weir limit refused it.
pub(crate) fn settle<L: SettleKey<str>>(
    limiter: &L,
    rule: &Settle,
    (admitted, owed): (&Decision, &Owed),
    session: &Session,
    error: Option<&Error>,
    stopped_after: bool,
) {
    let refused_after = stopped_after
        || error.is_some_and(|e| e.cause.as_deref().is_some_and(|c| c.is::<UpstreamFull>()));
    let cost = if refused_after {
        Ok(0)
    } else {
        let sent = Sent {
            status: session.response_written().map(|r| r.status.as_u16()),
            body_bytes: session.body_bytes_sent() as u64,
            completed: error.is_none(),
            answered: owed.answered,
            admitted: owed.checked,
            kept: owed.kept.as_deref(),
        };
        // A panicking cost function must not take the connection down.
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (rule.cost)(&sent)))
    };
    let Ok(cost) = cost else {
        log::warn!(
            "weir-pingora: a settlement's cost function panicked; the key keeps the {} units its check charged",
            owed.checked
        );
        return;
    };
    let mut settling = limiter.settle(&owed.key, admitted, owed.checked, cost);
    // In-process limiters have settled by now; only a round trip waits,
    // and it waits on a task rather than holding the connection.
    let mut cx = Context::from_waker(Waker::noop());
    let checked = owed.checked;
    match Pin::new(&mut settling).poll(&mut cx) {
        Poll::Ready(result) => report(result, checked, cost),
        Poll::Pending => match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move { report(settling.await, checked, cost) });
            }
            Err(_) => report::<std::io::Error>(
                Err(std::io::Error::other("no tokio runtime to finish it on")),
                checked,
                cost,
            ),
        },
    }
}

fn report<E: std::error::Error>(result: Result<(), E>, from: u32, to: u32) {
    if let Err(error) = result {
        log::warn!(
            "weir-pingora: a settlement failed ({error}); the key keeps the {from} units its check charged instead of {to}"
        );
    }
}
