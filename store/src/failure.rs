//! The failure policy: what callers get while the store cannot answer —
//! allow, deny, or ask an in-process limiter ([`CheckKey`]) — and the
//! fail-closed denial that shedding shares. When the policy applies (and
//! how the store is skipped during the back-off after a failure) is decided
//! on the check path (`limiter.rs`); this file holds only the answers.

use crate::answer::{Answer, Source};
use crate::error::{ConfigError, StoreError};
use crate::limit::{Limit, LocalLimit};
use std::fmt;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;
use weir_rate::clock::WallClock;
use weir_rate::{AllOf, CheckKey, Decision, KeyedLimiter, Quota, Shape, SketchLimiter};

/// What callers get when the store is slow, unreachable, or failing.
///
/// The default, [`PerInstance`](Self::PerInstance), keeps a limit: no
/// store fault, and no attacker able to slow the store down, switches the
/// limits off unless [`Open`](Self::Open) is asked for by name.
///
/// ```
/// use weir_store::FailurePolicy;
///
/// // Protection over availability: while the store is down, deny. Give it
/// // to the limiter's builder (`on_failure`).
/// let policy = FailurePolicy::Closed;
/// # let _ = policy;
/// ```
#[derive(Clone, Default)]
#[non_exhaustive]
pub enum FailurePolicy {
    /// Each instance enforces the limiter's own quota on its own, in
    /// bounded memory. A rate (GCRA, token bucket) is kept in a GCRA
    /// [`SketchLimiter`] of 4 × 65 536 cells (2 MiB), which keeps wrong
    /// denials near 0.1% while an instance sees up to about 11 000 times
    /// the per-key rate in checks a second (its
    /// [sizing rule](weir_rate::SketchLimiter::shape_for_load); 110 000
    /// checks a second at 10 a second per key). For more, give
    /// [`Local`](Self::Local) a limiter sized for the load.
    ///
    /// A window (fixed or sliding), or several limits all-or-nothing
    /// ([`StoreLimiterBuilder::and`](crate::StoreLimiterBuilder::and)), is kept by an exact
    /// [`KeyedLimiter`] of the same algorithms and quotas (an [`AllOf`] of
    /// them), remembering up to 65 536 keys (beyond that it forgets the
    /// keys closest to idle, never loosening a limit; see its memory
    /// bound). Its windows fall on the Unix epoch's grid, on the
    /// [`WallClock`], as the stores' do: a daily window ends at UTC
    /// midnight on the store and in the fallback alike.
    /// Every instance counts what the store allowed it against this
    /// fallback too, and for one window of the limits after the store last
    /// failed a request needs the fallback's room as well as the store's
    /// (the store never saw what the fallback let through). So over any
    /// window of the limit, one instance admits at most one limit through
    /// the store and its fallback together, and `N` instances at most
    /// `N ×` the limit, however often the store stalls, flaps or goes
    /// down: the bound does not grow with the number of outages (a
    /// request a store spent on and the fallback then refused stays spent:
    /// tighter, never looser). What the store gives back (a refund), the
    /// fallback gives back too. A colliding key in the
    /// sketch can only be held tighter, never looser (for as long as a
    /// forced charge's debt lasts, when requests are charged by the
    /// response: see [`SketchLimiter::charge`]). Answers carry
    /// [`Source::Local`].
    ///
    /// ```
    /// use weir_store::FailurePolicy;
    ///
    /// assert!(matches!(FailurePolicy::default(), FailurePolicy::PerInstance));
    /// ```
    #[default]
    PerInstance,
    /// Allow the request (availability over protection): while the store
    /// is down there is no limit at all, so anyone who can slow the store
    /// down switches it off. The decision reports nothing remaining and a reset
    /// after the back-off: nothing counted the request, so it promises
    /// nothing.
    Open,
    /// Deny the request (protection over availability), with a
    /// `Retry-After` of one second.
    Closed,
    /// Ask an in-process limiter, so each instance enforces the limit
    /// on its own share of the traffic (typically `limit / instances`). A
    /// cost it can never allow is denied as [`Closed`](Self::Closed) would.
    /// It is charged with what the store allows this instance, and asked
    /// too for one window after a failure, as
    /// [`PerInstance`](Self::PerInstance)'s limiter is.
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use std::sync::Arc;
    /// use weir_store::FailurePolicy;
    /// use weir_rate::{Gcra, KeyedLimiter, Quota};
    ///
    /// // 100 per second shared by 4 instances: 25 per instance while the store is down.
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
    /// The policy for `limits`, made concrete: [`PerInstance`](Self::PerInstance)
    /// becomes the in-process limiter it stands for, also returned typed
    /// (so that a change of the limits can reach it).
    pub(crate) fn concrete(
        self,
        limits: &[Limit],
    ) -> Result<(Self, Option<Fallback>), ConfigError> {
        let fallback = match (self, limits) {
            // A rate keeps no window: the sketch holds it in fixed memory.
            (Self::PerInstance, [one]) if !one.has_windows() => Fallback::Sketch(Arc::new(
                SketchLimiter::new(one.quota(), PER_INSTANCE_SHAPE),
            )),
            // Windows, or several limits: the same algorithms per key, with
            // windows on the Unix epoch's grid, as the stores count them.
            (Self::PerInstance, limits) => {
                let local = KeyedLimiter::<String, _>::builder(locals(limits)?)
                    .clock(WallClock::new())
                    .max_keys(PER_INSTANCE_KEYS)
                    .build();
                Fallback::Keyed(Arc::new(local))
            }
            (policy, _) => return Ok((policy, None)),
        };
        let local: Arc<dyn CheckKey<str>> = match &fallback {
            Fallback::Sketch(sketch) => Arc::clone(sketch) as _,
            Fallback::Keyed(keyed) => Arc::clone(keyed) as _,
        };
        Ok((Self::Local(local), Some(fallback)))
    }

    /// The policy's answer for `cost` units of `key`, with the `error`
    /// that kept the store from deciding: `quota` is what a denial or a
    /// fail-open answer reports, `backoff` when a fail-open answer says to
    /// ask again.
    pub(crate) fn answer(
        &self,
        key: &str,
        cost: u32,
        error: StoreError,
        quota: &Quota,
        backoff: Duration,
    ) -> Answer {
        let (decision, source) = match self {
            // Allowed, but nothing counted it: promise nothing more, and
            // ask again after the back-off.
            FailurePolicy::Open => (
                Decision::allow(quota.limit(), quota.window(), 0, backoff),
                Source::FailOpen,
            ),
            FailurePolicy::Closed => (closed(quota), Source::FailClosed),
            // Made concrete when the limiter is built; never stored.
            FailurePolicy::PerInstance => (closed(quota), Source::FailClosed),
            FailurePolicy::Local(local) => match local.check_n(key, cost) {
                Ok(d) => (d, Source::Local),
                Err(_) => (closed(quota), Source::FailClosed),
            },
        };
        Answer {
            decision,
            source,
            error: Some(error),
        }
    }

    /// The in-process limiter answering for the store, if the policy has one.
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

/// The in-process limiter of a [`FailurePolicy::PerInstance`], typed.
pub(crate) enum Fallback {
    /// One rate (GCRA, token bucket): a sketch.
    Sketch(Arc<SketchLimiter>),
    /// Windows, or several limits: a keyed limiter of the same algorithms.
    Keyed(Arc<KeyedLimiter<String, AllOf<LocalLimit>, WallClock>>),
}

impl Fallback {
    /// Limit by `limits` from now on (the algorithms and their order
    /// unchanged), keeping what each key has spent.
    ///
    /// # Errors
    ///
    /// A sliding window whose counters do not fit its quota.
    pub(crate) fn set_limits(&self, limits: &[Limit]) -> Result<(), ConfigError> {
        match self {
            Self::Sketch(sketch) => sketch.set_limit(limits[0].quota()),
            Self::Keyed(keyed) => keyed.set_limit(locals(limits)?),
        }
        Ok(())
    }
}

/// The in-process algorithms of `limits`, all-or-nothing.
fn locals(limits: &[Limit]) -> Result<AllOf<LocalLimit>, ConfigError> {
    let locals: Option<Vec<LocalLimit>> = limits.iter().map(Limit::local).collect();
    locals.map(AllOf::new).ok_or(ConfigError::Invalid(
        "a sliding window whose counters do not fit its quota",
    ))
}

/// The fail-closed denial: nothing remaining, retry after one second. Also
/// what a shed caller gets.
pub(crate) fn closed(quota: &Quota) -> Decision {
    let second = Duration::from_secs(1);
    Decision::deny(quota.limit(), quota.window(), 0, second, second)
}
