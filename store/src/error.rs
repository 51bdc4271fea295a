//! Why a store could not decide, and why a store-backed limiter could not
//! be built: two types, because the first is an everyday event a failure
//! policy answers and the second a mistake to fix before starting.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;
use weir_rate::NeverAllowed;

/// Why a store could not decide (or settle) a request.
///
/// A store-backed limiter's checks answer these with its
/// [`FailurePolicy`](crate::FailurePolicy), reporting the error in the
/// [`Answer`](crate::Answer); calls that ask the store only (`try_check_n`,
/// `charge`, `refund`) return it.
///
/// ```
/// use std::time::Duration;
/// use weir_store::StoreError;
///
/// let slow = StoreError::Timeout(Duration::from_millis(50));
/// assert!(slow.to_string().contains("50ms"));
/// assert!(!slow.is_overload());
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum StoreError {
    /// The call did not complete within the configured timeout.
    Timeout(Duration),
    /// The store, the connection, or the store's client returned an error
    /// (the store crate's own error type, e.g. `redis::RedisError`, as the
    /// source).
    Store(Arc<dyn std::error::Error + Send + Sync>),
    /// The store answered and refused the call: the limiter's credentials
    /// or permissions no longer allow what it runs (an ACL changed while it
    /// served, a password rotated). Not an outage, and logged as a refusal
    /// with the store's own error, which says what is missing; the failure
    /// policy answers meanwhile, and the back-off's probes notice the fix.
    Refused(Arc<dyn std::error::Error + Send + Sync>),
    /// The reply did not have the expected shape.
    BadReply(String),
    /// Skipped during the back-off after a failure.
    BackingOff,
    /// This instance could not send the decision in time: the batching
    /// queue was full, the caller's deadline passed while it was queued
    /// behind this instance's own load (no call to the store failing
    /// meanwhile), or the batching task is gone. Local saturation, not a
    /// store failure: it starts no back-off, and a check answers it with a
    /// denial from [`Source::Shed`](crate::Source::Shed), never with the
    /// failure policy.
    Overloaded,
    /// The cost can never be allowed.
    NeverAllowed(NeverAllowed),
    /// Compare-and-swap lost to other writers of the key more times than
    /// the store allows itself: the decision is a denial's (the request
    /// is refused, never let through unchecked), and the store is not
    /// taken for down.
    Contended {
        /// How many writes lost.
        attempts: u32,
    },
}

impl StoreError {
    /// The store's own error, as an error of type `E`.
    pub fn store(error: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self::Store(Arc::new(error))
    }

    /// The store's refusal of a call, as an error of type `E`.
    ///
    /// ```
    /// use weir_store::StoreError;
    ///
    /// let e = StoreError::refused(std::io::Error::other("NOPERM no 'mget'"));
    /// assert!(e.is_refusal() && e.to_string().contains("NOPERM"));
    /// ```
    pub fn refused(error: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self::Refused(Arc::new(error))
    }

    /// Whether the store refused the call (credentials, permissions): a
    /// fault of configuration, which no retry fixes.
    pub fn is_refusal(&self) -> bool {
        matches!(self, Self::Refused(_))
    }

    /// Whether it is this instance's own saturation (or contention on one
    /// key), not a fault of the store: it starts no back-off.
    ///
    /// ```
    /// use weir_store::StoreError;
    ///
    /// assert!(StoreError::Overloaded.is_overload());
    /// assert!(StoreError::Contended { attempts: 8 }.is_overload());
    /// assert!(!StoreError::BackingOff.is_overload());
    /// ```
    pub fn is_overload(&self) -> bool {
        matches!(self, Self::Overloaded | Self::Contended { .. })
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Timeout(d) => write!(f, "the store did not answer within {d:?}"),
            Self::Store(e) => write!(f, "store error: {e}"),
            Self::Refused(e) => write!(f, "the store refused the call: {e}"),
            Self::BadReply(s) => write!(f, "unexpected reply from the store: {s}"),
            Self::BackingOff => f.write_str("store skipped while backing off after a failure"),
            Self::Overloaded => {
                f.write_str("shed: more decisions than this instance could send to the store")
            }
            Self::NeverAllowed(n) => n.fmt(f),
            Self::Contended { attempts } => write!(
                f,
                "denied: {attempts} compare-and-swap writes in a row lost to other writers of the key"
            ),
        }
    }
}

impl std::error::Error for StoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Store(e) | Self::Refused(e) => Some(&**e),
            Self::NeverAllowed(n) => Some(n),
            _ => None,
        }
    }
}

/// Why a store-backed limiter could not be built: its settings cannot work,
/// the store cannot run what was asked of it, or the store refused the
/// connection's credentials or certificates.
///
/// ```
/// use weir_store::ConfigError;
///
/// let e = ConfigError::Invalid("a zero timeout");
/// assert_eq!(e.to_string(), "invalid settings: a zero timeout");
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum ConfigError {
    /// A setting that cannot work (a zero timeout, a prefix with a
    /// forbidden character, ...).
    Invalid(&'static str),
    /// What was asked needs something this store does not have (several
    /// limits all-or-nothing on a store without transactions, ...).
    Unsupported(&'static str),
    /// The target cannot be used as given (an unparsable URL, no server
    /// named). The store client's own error is the source.
    Target(Arc<dyn std::error::Error + Send + Sync>),
    /// The store refused the connection: a wrong password or user, a
    /// certificate it or we do not trust, a TLS handshake that failed. The
    /// store's own error is the source.
    Rejected(Arc<dyn std::error::Error + Send + Sync>),
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Invalid(why) => write!(f, "invalid settings: {why}"),
            Self::Unsupported(why) => write!(f, "not supported by this store: {why}"),
            Self::Target(e) => write!(f, "unusable target: {e}"),
            Self::Rejected(e) => write!(f, "the store refused the connection: {e}"),
        }
    }
}

impl std::error::Error for ConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Target(e) | Self::Rejected(e) => Some(&**e),
            _ => None,
        }
    }
}
