//! [`AnyLimiter`]: any keyed limiter behind one type, so that which one a
//! service runs (in process, Redis, Sentinel, Memcached) can be chosen from
//! its configuration at run time.
//!
//! [`CheckKeyAsync`] and [`SettleKey`] name their futures as associated
//! types, which keeps an in-process check free of allocation but makes the
//! traits unusable as trait objects. `AnyLimiter` erases the limiter behind
//! a private object-safe trait whose futures are one enum each: a decision
//! the limiter had at once (every in-process limiter's) is carried inline,
//! and only one that must wait (a round trip to a store) is boxed, so the
//! indirection costs an in-process check one virtual call and no
//! allocation, and a store's check the box its limiter already made.

use crate::check::{CheckKeyAsync, SettleKey};
use crate::decision::{Decision, NeverAllowed};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

/// Any keyed limiter that checks and settles (every weir limiter: the
/// in-process [`KeyedLimiter`](crate::KeyedLimiter) and
/// [`SketchLimiter`](crate::SketchLimiter), and the store-backed ones of
/// weir-redis and weir-memcached), as one type: cheap to clone, and
/// itself a [`CheckKeyAsync`] and [`SettleKey`] for a tower layer.
///
/// ```
/// use weir_rate::{nonzero, AnyLimiter, CheckKeyAsync, Gcra, KeyedLimiter, Quota, SketchLimiter};
///
/// let quota = Quota::per_second(nonzero!(10));
/// let exact = std::env::var("LIMITS").map_or(true, |v| v != "sketch");
/// // One type, whichever the configuration picks (a store-backed limiter
/// // goes in the same way, once connected).
/// let limiter: AnyLimiter<str> = if exact {
///     AnyLimiter::new(KeyedLimiter::<String, _>::new(Gcra::new(quota)))
/// } else {
///     AnyLimiter::new(SketchLimiter::new(quota, weir_rate::Shape::rows::<4, 4096>()))
/// };
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// assert!(limiter.check_n_async("alice", 1).await?.is_allowed());
/// # Ok::<(), weir_rate::NeverAllowed>(())
/// # }).unwrap();
/// ```
pub struct AnyLimiter<Q: ?Sized + 'static> {
    inner: Arc<dyn Erased<Q>>,
}

impl<Q: ?Sized + 'static> AnyLimiter<Q> {
    /// `limiter`, behind the one type.
    pub fn new<L: SettleKey<Q>>(limiter: L) -> Self {
        Self {
            inner: Arc::new(limiter),
        }
    }
}

impl<Q: ?Sized + 'static> Clone for AnyLimiter<Q> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<Q: ?Sized + 'static> fmt::Debug for AnyLimiter<Q> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AnyLimiter")
            .field("limiter", &self.inner.type_name())
            .finish()
    }
}

impl<Q: ?Sized + 'static> CheckKeyAsync<Q> for AnyLimiter<Q> {
    type Future = AnyCheck;

    #[inline]
    fn check_n_async(&self, key: &Q, cost: u32) -> AnyCheck {
        self.inner.check(key, cost)
    }
}

impl<Q: ?Sized + 'static> SettleKey<Q> for AnyLimiter<Q> {
    type Error = SettleError;
    type Settling = AnySettling;

    fn settle(&self, key: &Q, admitted: &Decision, from: u32, to: u32) -> AnySettling {
        self.inner.settle(key, admitted, from, to)
    }
}

/// The object-safe face of a limiter: its futures as the enums below.
trait Erased<Q: ?Sized>: Send + Sync {
    fn check(&self, key: &Q, cost: u32) -> AnyCheck;
    fn settle(&self, key: &Q, admitted: &Decision, from: u32, to: u32) -> AnySettling;
    fn type_name(&self) -> &'static str;
}

impl<Q: ?Sized, L: SettleKey<Q>> Erased<Q> for L {
    #[inline]
    fn check(&self, key: &Q, cost: u32) -> AnyCheck {
        let mut check = self.check_n_async(key, cost);
        match Pin::new(&mut check).poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(decided) => AnyCheck(Inner::Ready(Some(decided))),
            Poll::Pending => AnyCheck(Inner::Waiting(Box::pin(check))),
        }
    }

    fn settle(&self, key: &Q, admitted: &Decision, from: u32, to: u32) -> AnySettling {
        let mut settling = SettleKey::settle(self, key, admitted, from, to);
        match Pin::new(&mut settling).poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(settled) => {
                AnySettling(Inner::Ready(Some(settled.map_err(SettleError::of))))
            }
            Poll::Pending => AnySettling(Inner::Waiting(Box::pin(async move {
                settling.await.map_err(SettleError::of)
            }))),
        }
    }

    fn type_name(&self) -> &'static str {
        std::any::type_name::<L>()
    }
}

/// An outcome had at once, or a future still waiting for one.
enum Inner<T> {
    Ready(Option<T>),
    Waiting(Pin<Box<dyn Future<Output = T> + Send>>),
}

impl<T> Inner<T> {
    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<T> {
        match self {
            // Polled again after it answered: a caller's bug, answered
            // with a panic as std's `Ready` does.
            Self::Ready(outcome) => Poll::Ready(
                outcome
                    .take()
                    .unwrap_or_else(|| panic!("an AnyLimiter future polled after it completed")),
            ),
            Self::Waiting(future) => future.as_mut().poll(cx),
        }
    }
}

/// The decision of an [`AnyLimiter`]'s check: already there for an
/// in-process limiter (no allocation), boxed for one that must wait.
///
/// ```
/// use weir_rate::{nonzero, AnyCheck, AnyLimiter, CheckKeyAsync, Gcra, KeyedLimiter, Quota};
///
/// let limiter: AnyLimiter<str> = AnyLimiter::new(KeyedLimiter::<String, _>::new(Gcra::new(Quota::per_second(nonzero!(1)))));
/// let check: AnyCheck = limiter.check_n_async("k", 1);
/// # let _ = check;
/// ```
pub struct AnyCheck(Inner<Result<Decision, NeverAllowed>>);

impl Future for AnyCheck {
    type Output = Result<Decision, NeverAllowed>;

    #[inline]
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.0.poll(cx)
    }
}

impl fmt::Debug for AnyCheck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.0 {
            Inner::Ready(_) => "AnyCheck(ready)",
            Inner::Waiting(_) => "AnyCheck(waiting)",
        })
    }
}

/// The settlement of an [`AnyLimiter`]: already done in process, boxed for
/// a limiter that must wait.
///
/// ```
/// use weir_rate::{nonzero, AnyLimiter, Gcra, KeyedLimiter, Quota, SettleKey};
///
/// let limiter: AnyLimiter<str> = AnyLimiter::new(KeyedLimiter::<String, _>::new(Gcra::new(Quota::per_second(nonzero!(5)))));
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let admitted = weir_rate::CheckKeyAsync::check_n_async(&limiter, "k", 5).await?;
/// limiter.settle("k", &admitted, 5, 1).await.expect("in process, settling cannot fail");
/// # Ok::<(), weir_rate::NeverAllowed>(())
/// # }).unwrap();
/// ```
pub struct AnySettling(Inner<Result<(), SettleError>>);

impl Future for AnySettling {
    type Output = Result<(), SettleError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.0.poll(cx)
    }
}

impl fmt::Debug for AnySettling {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.0 {
            Inner::Ready(_) => "AnySettling(ready)",
            Inner::Waiting(_) => "AnySettling(waiting)",
        })
    }
}

/// Why an [`AnyLimiter`]'s settlement failed: the limiter's own error
/// (for a store-backed one, its `StoreError`), as the source.
///
/// ```
/// use weir_rate::SettleError;
///
/// fn report(e: &SettleError) -> String {
///     format!("settling failed: {e}")
/// }
/// # let _ = report;
/// ```
#[derive(Debug, Clone)]
pub struct SettleError(Arc<dyn std::error::Error + Send + Sync>);

impl SettleError {
    fn of(error: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self(Arc::new(error))
    }
}

impl fmt::Display for SettleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for SettleError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::{Gcra, KeyedLimiter, Quota};
    use std::num::NonZeroU32;

    fn limiter() -> AnyLimiter<str> {
        let quota = Quota::per_second(NonZeroU32::new(3).unwrap());
        AnyLimiter::new(KeyedLimiter::<String, _, _>::with_clock(
            Gcra::new(quota),
            ManualClock::new(),
        ))
    }

    /// An in-process limiter's decisions come back inline, and settle on
    /// the limiter's own state.
    #[test]
    fn an_in_process_limiter_decides_inline_and_settles() {
        let any = limiter();
        let check = any.check_n_async("k", 2);
        assert!(matches!(check.0, Inner::Ready(Some(Ok(_)))));
        let admitted = futures_ready(check).expect("a cost within the limit");
        assert!(admitted.is_allowed());
        assert!(
            !futures_ready(any.check_n_async("k", 2))
                .unwrap()
                .is_allowed()
        );
        futures_ready(SettleKey::settle(&any, "k", &admitted, 2, 0)).expect("settled");
        assert!(
            futures_ready(any.check_n_async("k", 3))
                .unwrap()
                .is_allowed()
        );
    }

    /// A limiter whose futures wait is boxed, and still answers.
    #[test]
    fn a_waiting_limiter_is_boxed_and_answers() {
        #[derive(Clone)]
        struct Slow;
        impl CheckKeyAsync<str> for Slow {
            type Future = Pin<Box<dyn Future<Output = Result<Decision, NeverAllowed>> + Send>>;
            fn check_n_async(&self, _: &str, _: u32) -> Self::Future {
                Box::pin(async {
                    tokio::task::yield_now().await;
                    Ok(Decision::allow(
                        1,
                        std::time::Duration::from_secs(1),
                        0,
                        std::time::Duration::ZERO,
                    ))
                })
            }
        }
        impl SettleKey<str> for Slow {
            type Error = std::io::Error;
            type Settling = Pin<Box<dyn Future<Output = Result<(), std::io::Error>> + Send>>;
            fn settle(&self, _: &str, _: &Decision, _: u32, _: u32) -> Self::Settling {
                Box::pin(async {
                    tokio::task::yield_now().await;
                    Err(std::io::Error::other("the store is gone"))
                })
            }
        }
        let any = AnyLimiter::new(Slow);
        let check = any.check_n_async("k", 1);
        assert!(matches!(check.0, Inner::Waiting(_)));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let decided = runtime.block_on(check).unwrap();
        assert!(decided.is_allowed());
        let failed = runtime
            .block_on(SettleKey::settle(&any, "k", &decided, 1, 0))
            .unwrap_err();
        assert!(failed.to_string().contains("gone"));
        assert!(std::error::Error::source(&failed).is_some());
    }

    fn futures_ready<F: Future + Unpin>(mut f: F) -> F::Output {
        match Pin::new(&mut f).poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(v) => v,
            Poll::Pending => panic!("not ready"),
        }
    }
}
