//! What a store-backed limiter's decision carries: who decided, and why
//! the failure policy answered if it did.

// The failure policy and the leases sit above this module (they make its
// answers): the docs below link to them by relative path, not through an
// import, which would make a loop of modules.
use crate::error::StoreError;
use weir_rate::Decision;

/// Who decided.
///
/// ```
/// use weir_store::Source;
///
/// assert_eq!(Source::Lease.label(), "lease");
/// assert!(Source::Local.is_fallback());
/// assert!(!Source::Store.is_fallback());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Source {
    /// The store (a script on Redis, a counter on Memcached).
    Store,
    /// A lease held locally ([`PreAggregation`](struct.PreAggregation.html)).
    Lease,
    /// [`FailurePolicy::Open`](enum.FailurePolicy.html#variant.Open).
    FailOpen,
    /// [`FailurePolicy::Closed`](enum.FailurePolicy.html#variant.Closed) (also a local limiter that can never allow the cost).
    FailClosed,
    /// [`FailurePolicy::Local`](enum.FailurePolicy.html#variant.Local) or [`FailurePolicy::PerInstance`](enum.FailurePolicy.html#variant.PerInstance).
    Local,
    /// Shed: this instance had more decisions to send to the store than it
    /// could ([`StoreError::Overloaded`]), or lost too many compare-and-swap
    /// writes in a row on one key ([`StoreError::Contended`]). A denial
    /// with a `Retry-After` of one second, whatever the failure policy; the
    /// store is not taken for down.
    Shed,
}

impl Source {
    /// Every source, in the order of their metric labels.
    pub const ALL: [Source; 6] = [
        Source::Store,
        Source::Lease,
        Source::FailOpen,
        Source::FailClosed,
        Source::Local,
        Source::Shed,
    ];

    /// The source's label in metrics and logs: `store`, `lease`,
    /// `fail_open`, `fail_closed`, `local`, `shed`.
    pub const fn label(self) -> &'static str {
        match self {
            Source::Store => "store",
            Source::Lease => "lease",
            Source::FailOpen => "fail_open",
            Source::FailClosed => "fail_closed",
            Source::Local => "local",
            Source::Shed => "shed",
        }
    }

    /// Whether the failure policy answered (the store could not).
    pub const fn is_fallback(self) -> bool {
        matches!(self, Source::FailOpen | Source::FailClosed | Source::Local)
    }

    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    pub(crate) const fn index(self) -> usize {
        match self {
            Source::Store => 0,
            Source::Lease => 1,
            Source::FailOpen => 2,
            Source::FailClosed => 3,
            Source::Local => 4,
            Source::Shed => 5,
        }
    }
}

/// A decision, who decided, and the error that forced the failure policy
/// (or shed the caller), if one did.
///
/// ```
/// use std::time::Duration;
/// use weir_rate::Decision;
/// use weir_store::{Answer, Source};
///
/// let answer = Answer {
///     decision: Decision::allow(10, Duration::from_secs(1), 9, Duration::ZERO),
///     source: Source::Store,
///     error: None,
/// };
/// if answer.source != Source::Store {
///     eprintln!("answered locally: {:?}", answer.error);
/// }
/// ```
#[derive(Debug, Clone)]
#[must_use = "an answer holds the decision: drop it and the decision is lost"]
pub struct Answer {
    /// The decision, as the in-process limiters give it.
    pub decision: Decision,
    /// Who decided.
    pub source: Source,
    /// Why the failure policy answered instead of the store, or why the
    /// caller was shed.
    pub error: Option<StoreError>,
}
