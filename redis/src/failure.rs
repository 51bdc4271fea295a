//! The failure policy: what callers get while Redis cannot answer — allow,
//! deny, or ask an in-process limiter ([`CheckKey`]) — and the fail-closed
//! denial that shedding shares. When the policy applies (and how Redis is
//! skipped during the back-off after a failure) is decided on the check
//! path in the parent module; this file holds only the answers.

use super::algorithm::AnyLimiter;
use super::{Outcome, RedisLimitError, RedisLimiter, Source};
use std::fmt;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;
use weir_rate::Decision;
use weir_rate::Quota;
use weir_rate::{AllOf, CheckKey, KeyedLimiter};
use weir_rate::{Shape, SketchLimiter};

/// What callers get when Redis is slow, unreachable, or failing.
///
/// The default, [`PerInstance`](Self::PerInstance), keeps a limit: no
/// Redis fault, and no attacker able to slow Redis down, switches the
/// limits off unless [`Open`](Self::Open) is asked for by name.
///
/// ```
/// use std::num::NonZeroU32;
/// use weir_redis::{FailurePolicy, RedisLimiter};
/// use weir_rate::{Gcra, Quota};
///
/// // Protection over availability: while Redis is down, deny.
/// let quota = Quota::per_second(NonZeroU32::new(10).unwrap());
/// let builder = RedisLimiter::builder(Gcra::new(quota)).on_failure(FailurePolicy::Closed);
/// # let _ = builder;
/// ```
#[derive(Clone, Default)]
#[non_exhaustive]
pub enum FailurePolicy {
    /// Each instance enforces the limiter's own quota on its own, in
    /// bounded memory: a GCRA [`SketchLimiter`] of 4 × 65 536 cells
    /// (2 MiB), which keeps wrong denials near 0.1% while an instance sees
    /// up to about 11 000 times the per-key rate in checks a second (its
    /// [sizing rule](weir_rate::SketchLimiter::shape_for_load); 110 000 checks a
    /// second at 10 a second per key). For more, give
    /// [`Local`](Self::Local) a limiter sized for the load.
    ///
    /// An all-of limiter ([`RedisLimiterBuilder::and`](super::RedisLimiterBuilder::and))
    /// keeps its limits all-or-nothing here too: an exact
    /// [`KeyedLimiter`] of an [`AllOf`] of the same algorithms and quotas,
    /// remembering up to 65 536 keys (beyond that it forgets the keys
    /// closest to idle, never loosening a limit; see its memory bound).
    /// With `N` instances sharing the traffic, up to `N ×` the limit
    /// passes while Redis is down, never more; a colliding key in the
    /// sketch can only be held tighter, never looser (for as long as a
    /// forced charge's debt lasts, when requests are charged by the
    /// response: see [`SketchLimiter::charge`]). Answers carry
    /// [`Source::Local`](super::Source::Local).
    ///
    /// ```
    /// use weir_redis::FailurePolicy;
    ///
    /// assert!(matches!(FailurePolicy::default(), FailurePolicy::PerInstance));
    /// ```
    #[default]
    PerInstance,
    /// Allow the request (availability over protection): while Redis is
    /// down there is no limit at all, so anyone who can slow Redis down
    /// switches it off. The decision reports nothing remaining and a reset
    /// after the back-off: nothing counted the request, so it promises
    /// nothing.
    Open,
    /// Deny the request (protection over availability), with a
    /// `Retry-After` of one second.
    Closed,
    /// Ask an in-process limiter, so each instance enforces the limit
    /// on its own share of the traffic (typically `limit / instances`). A
    /// cost it can never allow is denied as [`Closed`](Self::Closed) would.
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use std::sync::Arc;
    /// use weir_redis::FailurePolicy;
    /// use weir_rate::{Gcra, KeyedLimiter, Quota};
    ///
    /// // 100 per second shared by 4 instances: 25 per instance while Redis is down.
    /// let local = KeyedLimiter::<String, _>::new(Gcra::new(Quota::per_second(NonZeroU32::new(25).unwrap())));
    /// let policy = FailurePolicy::Local(Arc::new(local));
    /// # let _ = policy;
    /// ```
    Local(Arc<dyn CheckKey<str>>),
}

/// The sketch behind [`FailurePolicy::PerInstance`].
const PER_INSTANCE_SHAPE: Shape = Shape::rows::<4, 65_536>();

/// The keys an all-of limiter's [`FailurePolicy::PerInstance`] remembers.
const PER_INSTANCE_KEYS: NonZeroUsize = NonZeroUsize::new(65_536).unwrap();

impl FailurePolicy {
    /// The [`PerInstance`](Self::PerInstance) policy made concrete.
    pub(crate) fn per_instance(quota: Quota) -> Self {
        Self::Local(Arc::new(SketchLimiter::new(quota, PER_INSTANCE_SHAPE)))
    }

    /// The [`PerInstance`](Self::PerInstance) policy of an all-of
    /// limiter: all of `limits`, all-or-nothing, per key.
    pub(crate) fn per_instance_all_of(limits: Vec<AnyLimiter>) -> Self {
        let local = KeyedLimiter::<String, _>::builder(AllOf::new(limits))
            .max_keys(PER_INSTANCE_KEYS)
            .build();
        Self::Local(Arc::new(local))
    }

    /// The in-process limiter answering for Redis, if the policy has one.
    pub(crate) fn local(&self) -> Option<&dyn CheckKey<str>> {
        match self {
            Self::Local(local) => Some(&**local),
            _ => None,
        }
    }
}

impl fmt::Debug for FailurePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::PerInstance => f.write_str("PerInstance"),
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
        let second = Duration::from_secs(1);
        Decision::deny(q.limit(), q.window(), 0, second, second)
    }

    /// The failure policy's answer for `cost` units of `key`, with the
    /// `error` that kept Redis from deciding.
    pub(crate) fn on_failure(&self, key: &str, cost: u32, error: RedisLimitError) -> Outcome {
        let q = &self.inner.quota;
        let (decision, source) = match &self.inner.policy {
            // Allowed, but nothing counted it: promise nothing more, and
            // ask again after the back-off.
            FailurePolicy::Open => (
                Decision::allow(q.limit(), q.window(), 0, self.inner.backoff),
                Source::FailOpen,
            ),
            FailurePolicy::Closed => (self.closed(), Source::FailClosed),
            // Made concrete when the limiter is built; never stored.
            FailurePolicy::PerInstance => (self.closed(), Source::FailClosed),
            FailurePolicy::Local(local) => match local.check_key(key, cost) {
                Ok(d) => (d, Source::Local),
                Err(_) => (self.closed(), Source::FailClosed),
            },
        };
        Outcome {
            decision,
            source,
            error: Some(error),
        }
    }
}
