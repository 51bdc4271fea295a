//! What a Redis limiter's decision carries: where it came from, and why
//! the failure policy answered if it did.

use super::RedisLimitError;
#[allow(unused_imports)] // doc links
use super::{FailurePolicy, PreAggregation};
use weir_rate::Decision;

/// Where a decision came from.
///
/// ```
/// use weir_redis::Source;
///
/// // Where an answer came from, e.g. as a metrics label.
/// let label = |source: Source| if source == Source::Redis { "redis" } else { "local" };
/// assert_eq!(label(Source::Lease), "local");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Source {
    /// A script run on Redis.
    Redis,
    /// A lease held locally ([`PreAggregation`]).
    Lease,
    /// [`FailurePolicy::Open`].
    FailOpen,
    /// [`FailurePolicy::Closed`] (also a local limiter that can never allow the cost).
    FailClosed,
    /// [`FailurePolicy::Local`].
    Local,
    /// Shed: this instance had more decisions to send to Redis than it
    /// could ([`RedisLimitError::Overloaded`]). A denial with a
    /// `Retry-After` of one second, whatever the failure policy; Redis is
    /// not taken for down.
    Shed,
}

/// A decision, where it came from, and the error that forced the failure
/// policy (or shed the caller), if one did.
///
/// ```no_run
/// use std::num::NonZeroU32;
/// use weir_redis::{RedisLimiter, Source, Target};
/// use weir_rate::{Gcra, Quota};
///
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let quota = Quota::per_minute(NonZeroU32::new(100).unwrap());
/// let limiter = RedisLimiter::builder(Gcra::new(quota))
///     .connect(Target::server("redis://127.0.0.1:6379/"))
///     .await?;
/// let outcome = limiter.check_verbose("customer-42", 1).await?;
/// if outcome.source != Source::Redis {
///     eprintln!("answered locally: {:?}", outcome.error);
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
#[must_use = "an outcome holds the decision: drop it and the answer is lost"]
pub struct Outcome {
    /// The decision, as the in-process limiters give it.
    pub decision: Decision,
    /// Who decided.
    pub source: Source,
    /// Why the failure policy answered instead of Redis, or why the caller
    /// was shed.
    pub error: Option<RedisLimitError>,
}
