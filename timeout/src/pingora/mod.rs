//! pingora-timeout 0.9, item for item, on weir's timers.
//!
//! Existing pingora code switches with one line and compiles unchanged:
//!
//! ```
//! use weir_timeout::pingora as pingora_timeout;
//!
//! use pingora_timeout::{sleep, timeout, Elapsed};
//! use std::time::Duration;
//! # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
//!
//! let quick = timeout(Duration::from_secs(1), async { 7 }).await;
//! assert_eq!(quick.unwrap(), 7);
//!
//! let slow = timeout(Duration::from_millis(20), sleep(Duration::from_secs(60))).await;
//! assert!(matches!(slow, Err(Elapsed)));
//! # });
//! ```
//!
//! Every public item of pingora-timeout 0.9 is here under the same path and
//! with the same signature: [`timeout`], [`sleep`], [`tokio_timeout`],
//! [`Timeout`], [`Elapsed`], [`ToTimeout`], [`TokioTimeout`], the
//! [`fast_timeout`] module (with the threshold above which tokio's timer
//! is used) and the [`timer`] module. The fast timers are weir's
//! ([`crate::sleep`] on the global [`TimerManager`](crate::manager::TimerManager)), so
//! callers get its fixes: no lost wake-ups, timers late by at most one tick
//! plus wake-up latency, tokio's paused test clock honoured, no wake-ups
//! while idle, cancelled timers freed at once, `Duration::MAX` saturating
//! and a forked child whose timers work at once. Where the behaviour
//! differs from pingora's the item's docs say so under "Differences from
//! pingora".
//!
//! Beyond pingora's surface: [`Elapsed`] derives more traits and converts
//! into `std::io::Error` (kind `TimedOut`), and [`TokioTimeout`] is `Debug`.

pub mod fast_timeout;
pub mod timer;

pub use fast_timeout::fast_sleep as sleep;
pub use fast_timeout::fast_timeout as timeout;

use pin_project_lite::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

/// How a [`Timeout`] makes its timer, as in pingora: `create` keeps the
/// duration, `timeout` starts the timer (at the first poll that waits).
///
/// Users don't need this trait: the types that implement it come from
/// [`timeout`], [`tokio_timeout`] and [`fast_timeout::fast_timeout`].
///
/// ```
/// use std::time::Duration;
/// use weir_timeout::pingora::{ToTimeout, TokioTimeout};
/// # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
/// TokioTimeout::create(Duration::from_millis(1)).timeout().await;
/// # });
/// ```
pub trait ToTimeout {
    /// Start the timer: the returned future completes when it expires.
    fn timeout(&self) -> Pin<Box<dyn Future<Output = ()> + Send + Sync>>;

    /// Keep `d` for a timer started later.
    fn create(d: Duration) -> Self;

    /// Start the timer without boxing it where weir can. Not part of
    /// pingora's trait; implementors keep the default.
    // Hidden: not in the pingora-timeout API this module mirrors.
    #[doc(hidden)]
    fn start(&self) -> Delay {
        Delay(DelayKind::Boxed(self.timeout()))
    }
}

/// A started timer (weir's unboxed, or any boxed one). Not part of the API.
// Hidden: the type of the hidden `start` above, not in pingora-timeout's API.
#[doc(hidden)]
pub struct Delay(DelayKind);

enum DelayKind {
    Weir(crate::future::Sleep),
    Boxed(Pin<Box<dyn Future<Output = ()> + Send + Sync>>),
}

impl Delay {
    fn weir(duration: Duration) -> Self {
        Self(DelayKind::Weir(crate::sleep(duration)))
    }

    fn poll_expired(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        match &mut self.0 {
            DelayKind::Weir(sleep) => Pin::new(sleep).poll(cx),
            DelayKind::Boxed(boxed) => boxed.as_mut().poll(cx),
        }
    }
}

/// The timer of [`tokio_timeout`]: tokio's own `sleep`, started lazily.
///
/// Users don't need to interact with this type.
///
/// ```
/// use std::time::Duration;
/// use weir_timeout::pingora::{Timeout, TokioTimeout, tokio_timeout};
///
/// # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
/// let t: Timeout<_, TokioTimeout> = tokio_timeout(Duration::from_secs(1), async { 1 });
/// assert_eq!(t.await, Ok(1));
/// # });
/// ```
#[derive(Debug)]
pub struct TokioTimeout(Duration);

impl ToTimeout for TokioTimeout {
    fn timeout(&self) -> Pin<Box<dyn Future<Output = ()> + Send + Sync>> {
        Box::pin(tokio::time::sleep(self.0))
    }

    fn create(d: Duration) -> Self {
        Self(d)
    }
}

/// The error of a [`Timeout`] whose deadline passed first.
///
/// A unit struct, as in pingora, so `Err(Elapsed)` matches and builds it.
///
/// ```
/// use weir_timeout::pingora::Elapsed;
///
/// let e: Box<dyn std::error::Error> = Box::new(Elapsed);
/// assert_eq!(e.to_string(), "Timeout Elapsed");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Elapsed;

impl std::fmt::Display for Elapsed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // pingora's wording, for logs and callers that match on it.
        f.write_str("Timeout Elapsed")
    }
}

impl std::error::Error for Elapsed {}

impl From<crate::future::Elapsed> for Elapsed {
    fn from(_: crate::future::Elapsed) -> Self {
        Elapsed
    }
}

impl From<Elapsed> for std::io::Error {
    fn from(e: Elapsed) -> Self {
        std::io::Error::new(std::io::ErrorKind::TimedOut, e)
    }
}

/// [`tokio::time::timeout`] with the timer started only when `future`
/// first waits.
///
/// ```
/// use std::time::Duration;
/// use weir_timeout::pingora::tokio_timeout;
/// # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
/// let r = tokio_timeout(Duration::from_millis(10), std::future::pending::<()>()).await;
/// assert!(r.is_err());
/// # });
/// ```
pub fn tokio_timeout<T>(duration: Duration, future: T) -> Timeout<T, TokioTimeout>
where
    T: Future,
{
    Timeout::with_callback(future, TokioTimeout::create(duration))
}

pin_project! {
    /// The future returned by [`timeout`], [`tokio_timeout`] and
    /// [`fast_timeout::fast_timeout`]: `Ok` with the output of the inner
    /// future, or `Err(Elapsed)` once the deadline passes first.
    ///
    /// Each poll polls the inner future first; the timer is started at the
    /// first poll at which the inner future is not ready, so a future that
    /// is ready at once never touches a timer.
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir_timeout::pingora::{Elapsed, timeout};
    ///
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let late = timeout(Duration::from_millis(2), std::future::pending::<()>());
    /// assert_eq!(late.await, Err(Elapsed));
    /// # });
    /// ```
    #[must_use = "futures do nothing unless you `.await` or poll them"]
    pub struct Timeout<T, F> {
        #[pin]
        value: T,
        delay: Option<Delay>,
        callback: F,
    }
}

impl<T, F> Timeout<T, F> {
    fn with_callback(value: T, callback: F) -> Self {
        Self {
            value,
            delay: None,
            callback,
        }
    }
}

impl<T, F> Future for Timeout<T, F>
where
    T: Future,
    F: ToTimeout,
{
    type Output = Result<T::Output, Elapsed>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Poll::Ready(v) = this.value.poll(cx) {
            return Poll::Ready(Ok(v));
        }
        let callback = this.callback;
        let delay = this.delay.get_or_insert_with(|| callback.start());
        match delay.poll_expired(cx) {
            Poll::Ready(()) => Poll::Ready(Err(Elapsed)),
            Poll::Pending => Poll::Pending,
        }
    }
}
