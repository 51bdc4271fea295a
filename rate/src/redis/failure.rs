//! The failure policy: what callers get while Redis cannot answer — allow,
//! deny, or ask an in-process [`Fallback`] limiter — and the fail-closed
//! denial that shedding shares. When the policy applies (and how Redis is
//! skipped during the back-off after a failure) is decided on the check
//! path in the parent module; this file holds only the answers.

use super::{Outcome, RedisLimitError, RedisLimiter, Source};
use crate::decision::Decision;
use std::fmt;
use std::sync::Arc;

/// An in-process limiter to ask while Redis cannot answer
/// ([`FailurePolicy::Local`]). Any keyed limiter fits; a closure does too.
///
/// ```
/// use std::sync::Arc;
/// use weir_rate::redis::{FailurePolicy, Fallback};
/// use weir_rate::Decision;
///
/// struct Deny;
/// impl Fallback for Deny {
///     fn check_n(&self, _key: &str, _cost: u32) -> Option<Decision> {
///         None // no local answer: the limiter falls back to fail-closed
///     }
/// }
/// let policy = FailurePolicy::Local(Arc::new(Deny));
/// # let _ = policy;
/// ```
pub trait Fallback: Send + Sync {
    /// Decide `cost` units for `key` locally; `None` when it cannot (the
    /// limiter then denies, as [`FailurePolicy::Closed`]).
    fn check_n(&self, key: &str, cost: u32) -> Option<Decision>;
}

impl<F> Fallback for F
where
    F: Fn(&str, u32) -> Option<Decision> + Send + Sync,
{
    fn check_n(&self, key: &str, cost: u32) -> Option<Decision> {
        self(key, cost)
    }
}

/// A [`KeyedLimiter`](crate::KeyedLimiter) keyed by `String` is the usual
/// fallback: each instance then enforces its own quota on its own traffic.
///
/// ```
/// use std::num::NonZeroU32;
/// use std::sync::Arc;
/// use weir_rate::redis::{FailurePolicy, Fallback};
/// use weir_rate::{Gcra, KeyedLimiter, Quota};
///
/// // 100 per second shared by 4 instances: 25 per instance while Redis is down.
/// let local = KeyedLimiter::<String, _>::new(Gcra::new(Quota::per_second(NonZeroU32::new(25).unwrap())));
/// assert!(Fallback::check_n(&local, "k", 1).is_some_and(|d| d.is_allowed()));
/// let policy = FailurePolicy::Local(Arc::new(local));
/// # let _ = policy;
/// ```
impl<L, C> Fallback for crate::KeyedLimiter<String, L, C>
where
    L: crate::Limiter + Clone,
    C: crate::clock::Clock,
    crate::KeyedLimiter<String, L, C>: Send + Sync,
{
    fn check_n(&self, key: &str, cost: u32) -> Option<Decision> {
        // Borrowed: allocates only when the key first spends.
        crate::KeyedLimiter::check_n(self, key, cost).ok()
    }
}

/// What callers get when Redis is slow, unreachable, or failing.
#[derive(Clone, Default)]
#[non_exhaustive]
pub enum FailurePolicy {
    /// Allow the request (availability over protection). The decision
    /// reports the full limit as remaining.
    #[default]
    Open,
    /// Deny the request (protection over availability), with a
    /// `Retry-After` of one second.
    Closed,
    /// Ask an in-process limiter, so each instance enforces the limit
    /// on its own share of the traffic (typically `limit / instances`).
    Local(Arc<dyn Fallback>),
}

impl fmt::Debug for FailurePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Open => f.write_str("Open"),
            Self::Closed => f.write_str("Closed"),
            Self::Local(_) => f.write_str("Local(..)"),
        }
    }
}

impl RedisLimiter {
    /// The fail-closed denial: nothing remaining, retry after one second.
    /// Also what a shed caller gets.
    pub(crate) fn closed(&self) -> Decision {
        let q = &self.inner.quota;
        Decision::deny(q.limit(), q.window(), 0, 1_000_000_000, 1_000_000_000)
    }

    /// The failure policy's answer for `cost` units of `key`, with the
    /// `error` that kept Redis from deciding.
    pub(crate) fn on_failure(&self, key: &str, cost: u32, error: RedisLimitError) -> Outcome {
        let q = &self.inner.quota;
        let (decision, source) = match &self.inner.policy {
            FailurePolicy::Open => (
                Decision::allow(q.limit(), q.window(), q.limit(), 0),
                Source::FailOpen,
            ),
            FailurePolicy::Closed => (self.closed(), Source::FailClosed),
            FailurePolicy::Local(f) => match f.check_n(key, cost) {
                Some(d) => (d, Source::Local),
                None => (self.closed(), Source::FailClosed),
            },
        };
        Outcome {
            decision,
            source,
            error: Some(error),
        }
    }
}
