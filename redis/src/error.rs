//! The error type of the Redis limiter: why Redis could not decide, or
//! why a limiter could not be built. It is one type for both because a
//! decision's errors and the builder's share their causes (Redis errors,
//! timeouts); callers of the check path without a failure policy
//! ([`try_check_n`](super::RedisLimiter::try_check_n)) and of the builder
//! get it directly, the others in the [`Outcome`](super::Outcome) that the
//! failure policy answered.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;
use weir_rate::NeverAllowed;

/// Why Redis could not decide.
///
/// ```
/// use std::time::Duration;
/// use weir_redis::RedisLimitError;
///
/// let slow = RedisLimitError::Timeout(Duration::from_millis(50));
/// assert!(slow.to_string().contains("50ms"));
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum RedisLimitError {
    /// The call did not complete within the configured timeout.
    Timeout(Duration),
    /// Redis, the connection, or the script returned an error.
    Redis(Arc<redis::RedisError>),
    /// The reply did not have the expected shape.
    BadReply(String),
    /// Skipped during the back-off after a failure.
    BackingOff,
    /// This instance could not send the decision in time: the batching
    /// queue was full, the caller's deadline passed while it was queued
    /// behind this instance's own load (no call to Redis failing
    /// meanwhile), or the batching task is gone. Local saturation, not a
    /// Redis failure: it starts no back-off, and
    /// [`check_verbose`](super::RedisLimiter::check_verbose) answers it with
    /// a denial from [`Source::Shed`](super::Source::Shed), never with the
    /// failure policy.
    Overloaded,
    /// The cost can never be allowed.
    NeverAllowed(NeverAllowed),
    /// The builder's settings cannot work.
    Config(&'static str),
}

impl fmt::Display for RedisLimitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Timeout(d) => write!(f, "Redis did not answer within {d:?}"),
            Self::Redis(e) => write!(f, "Redis error: {e}"),
            Self::BadReply(s) => write!(f, "unexpected reply from the rate-limit script: {s}"),
            Self::BackingOff => f.write_str("Redis skipped while backing off after a failure"),
            Self::Overloaded => {
                f.write_str("shed: more decisions than this instance could send to Redis")
            }
            Self::NeverAllowed(n) => n.fmt(f),
            Self::Config(s) => write!(f, "invalid Redis limiter settings: {s}"),
        }
    }
}

impl std::error::Error for RedisLimitError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Redis(e) => Some(&**e),
            Self::NeverAllowed(n) => Some(n),
            _ => None,
        }
    }
}

impl From<redis::RedisError> for RedisLimitError {
    fn from(e: redis::RedisError) -> Self {
        Self::Redis(Arc::new(e))
    }
}
