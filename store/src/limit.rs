//! The limits a store can keep: weir-rate's own algorithm values
//! ([`Gcra`], [`TokenBucket`], [`FixedWindow`], [`SlidingWindow`]), each
//! carrying its [`Quota`], and what a store takes from them: the value's
//! own step (GCRA's emission interval, the sliding window's sub-window)
//! and max cost, so a store and in-process limiting cannot drift apart.

use std::fmt;
use std::time::Duration;
use weir_rate::{
    Algorithm, Decision, FixedWindow, Forgettable, Gcra, Mode, Quota, Receipt, SlidingWindow,
    TokenBucket,
};

/// An algorithm a store can keep, given as the same value an in-process
/// limiter takes, so the quota reads the same way in both: window
/// algorithms allow `limit` per `window`; rate algorithms refill at
/// `limit / window` up to `burst`. Implemented by [`Gcra`],
/// [`TokenBucket`], [`FixedWindow`] and [`SlidingWindow`], and by a
/// [`Limit`] taken from one of them; each store says which of them it
/// runs.
///
/// ```
/// use weir_rate::{nonzero, Quota, SlidingWindow};
/// use weir_store::{Kind, Limit};
///
/// let quota = Quota::per_second(nonzero!(10));
/// let limit = Limit::of(&SlidingWindow::try_new(quota, 2)?);
/// assert!(matches!(limit.kind(), Kind::SlidingWindow { counters: 2, .. }));
/// # Ok::<(), weir_rate::ConfigError>(())
/// ```
pub trait StoreAlgorithm: sealed::Sealed {}

mod sealed {
    /// What a store needs from an algorithm value; sealed so that only
    /// the algorithms stores know implement
    /// [`StoreAlgorithm`](super::StoreAlgorithm).
    #[allow(unnameable_types)] // sealed: a store keeps only these algorithms
    pub trait Sealed {
        fn limit(&self) -> super::Limit;
    }
}

macro_rules! kept_on_stores {
    ($($ty:ident => |$value:ident| $kind:expr),* $(,)?) => {$(
        impl sealed::Sealed for $ty {
            fn limit(&self) -> Limit {
                let $value = self;
                Limit {
                    kind: $kind,
                    quota: $value.quota(),
                    max_cost: Algorithm::max_cost($value),
                }
            }
        }
        impl StoreAlgorithm for $ty {}
    )*};
}

/// A limit already taken from its algorithm (read from a file, say)
/// builds a limiter as the algorithm would.
impl sealed::Sealed for Limit {
    fn limit(&self) -> Limit {
        *self
    }
}
impl StoreAlgorithm for Limit {}

kept_on_stores! {
    TokenBucket => |_a| Kind::TokenBucket,
    Gcra => |a| Kind::Gcra { emission_interval: a.emission_interval() },
    FixedWindow => |_a| Kind::FixedWindow,
    SlidingWindow => |a| Kind::SlidingWindow {
        counters: a.counters(),
        sub_window: a.sub_window(),
    },
}

/// One limit a store keeps: its algorithm, quota and max cost, taken from
/// the algorithm value.
///
/// ```
/// use weir_rate::{nonzero, Gcra, Quota};
/// use weir_store::Limit;
///
/// let quota = Quota::per_second(nonzero!(10));
/// let limit = Limit::of(&Gcra::new(quota));
/// assert_eq!((limit.quota(), limit.max_cost(), limit.tag()), (quota, 10, "gcra"));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    kind: Kind,
    quota: Quota,
    max_cost: u32,
}

impl Limit {
    /// The limit `algorithm` describes.
    pub fn of(algorithm: &impl StoreAlgorithm) -> Self {
        sealed::Sealed::limit(algorithm)
    }

    /// The algorithm and its step.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// The quota: `limit` per `window`, `burst`.
    pub fn quota(&self) -> Quota {
        self.quota
    }

    /// The largest cost the algorithm can ever allow at once.
    pub fn max_cost(&self) -> u32 {
        self.max_cost
    }

    /// A short name of the algorithm, for store keys and labels: `tb`,
    /// `gcra`, `fw`, `sw`.
    pub fn tag(&self) -> &'static str {
        self.kind.tag()
    }

    /// Whether the algorithm counts in windows (fixed or sliding), which
    /// its fallback must count on the same grid.
    pub(crate) fn has_windows(&self) -> bool {
        matches!(self.kind, Kind::FixedWindow | Kind::SlidingWindow { .. })
    }

    /// The in-process algorithm the store computes; `None` for a sliding
    /// window whose counters do not fit its quota (the builder refuses it).
    pub(crate) fn local(&self) -> Option<LocalLimit> {
        Some(match self.kind {
            Kind::TokenBucket => LocalLimit::TokenBucket(TokenBucket::new(self.quota)),
            Kind::Gcra { .. } => LocalLimit::Gcra(Gcra::new(self.quota)),
            Kind::FixedWindow => LocalLimit::FixedWindow(FixedWindow::new(self.quota)),
            Kind::SlidingWindow { counters, .. } => {
                LocalLimit::SlidingWindow(SlidingWindow::try_new(self.quota, counters).ok()?)
            }
        })
    }
}

/// Any algorithm a store keeps, as one in-process [`Algorithm`] type: an
/// all-of set's local fallback is an [`AllOf`](weir_rate::AllOf) of these,
/// so that it decides all-or-nothing as the store does.
#[derive(Debug, Clone)]
pub(crate) enum LocalLimit {
    Gcra(Gcra),
    TokenBucket(TokenBucket),
    FixedWindow(FixedWindow),
    SlidingWindow(SlidingWindow),
}

/// [`LocalLimit`]'s state.
#[derive(Debug, Clone)]
pub(crate) enum LocalState {
    Gcra(<Gcra as Algorithm>::State),
    TokenBucket(<TokenBucket as Algorithm>::State),
    FixedWindow(<FixedWindow as Algorithm>::State),
    SlidingWindow(<SlidingWindow as Algorithm>::State),
}

/// `$body` with `$l` the algorithm and `$s` its state; a state of
/// another kind (which no container hands over: the fallback's limits
/// never change) is replaced with a fresh one and `$again` runs.
macro_rules! on_state {
    ($self:ident, $state:ident, $now:expr, |$l:ident, $s:ident| $body:expr, $again:expr) => {
        match ($self, &mut *$state) {
            (LocalLimit::Gcra($l), LocalState::Gcra($s)) => $body,
            (LocalLimit::TokenBucket($l), LocalState::TokenBucket($s)) => $body,
            (LocalLimit::FixedWindow($l), LocalState::FixedWindow($s)) => $body,
            (LocalLimit::SlidingWindow($l), LocalState::SlidingWindow($s)) => $body,
            _ => {
                *$state = $self.new_state($now);
                $again
            }
        }
    };
}

/// `$body` with `$l` the algorithm and `$s` its state, or `$other` for a
/// state of another kind.
macro_rules! read_state {
    ($self:ident, $state:ident, |$l:ident, $s:ident| $body:expr, $other:expr) => {
        match ($self, $state) {
            (LocalLimit::Gcra($l), LocalState::Gcra($s)) => $body,
            (LocalLimit::TokenBucket($l), LocalState::TokenBucket($s)) => $body,
            (LocalLimit::FixedWindow($l), LocalState::FixedWindow($s)) => $body,
            (LocalLimit::SlidingWindow($l), LocalState::SlidingWindow($s)) => $body,
            _ => $other,
        }
    };
}

impl Algorithm for LocalLimit {
    type State = LocalState;

    fn max_cost(&self) -> u32 {
        match self {
            Self::Gcra(l) => l.max_cost(),
            Self::TokenBucket(l) => l.max_cost(),
            Self::FixedWindow(l) => l.max_cost(),
            Self::SlidingWindow(l) => l.max_cost(),
        }
    }

    fn new_state(&self, now_ns: u64) -> LocalState {
        match self {
            Self::Gcra(l) => LocalState::Gcra(l.new_state(now_ns)),
            Self::TokenBucket(l) => LocalState::TokenBucket(l.new_state(now_ns)),
            Self::FixedWindow(l) => LocalState::FixedWindow(l.new_state(now_ns)),
            Self::SlidingWindow(l) => LocalState::SlidingWindow(l.new_state(now_ns)),
        }
    }

    fn decide(&self, state: &mut LocalState, now_ns: u64, cost: u32, mode: Mode) -> Decision {
        on_state!(
            self,
            state,
            now_ns,
            |l, s| l.decide(s, now_ns, cost, mode),
            self.decide(state, now_ns, cost, mode)
        )
    }

    fn refund(&self, state: &mut LocalState, now_ns: u64, receipt: Receipt) {
        on_state!(
            self,
            state,
            now_ns,
            |l, s| l.refund(s, now_ns, receipt),
            self.refund(state, now_ns, receipt)
        )
    }

    fn charge(&self, state: &mut LocalState, now_ns: u64, cost: u32) -> Receipt {
        on_state!(
            self,
            state,
            now_ns,
            |l, s| l.charge(s, now_ns, cost),
            self.charge(state, now_ns, cost)
        )
    }
}

impl Forgettable for LocalLimit {
    fn is_idle(&self, state: &LocalState, now_ns: u64) -> bool {
        // A state of another kind would be replaced with a fresh one.
        read_state!(self, state, |l, s| l.is_idle(s, now_ns), true)
    }

    fn idle_at(&self, state: &LocalState, now_ns: u64) -> u64 {
        read_state!(self, state, |l, s| l.idle_at(s, now_ns), now_ns)
    }

    fn spent_until(&self, idle_at: u64, now_ns: u64) -> LocalState {
        match self {
            Self::Gcra(l) => LocalState::Gcra(l.spent_until(idle_at, now_ns)),
            Self::TokenBucket(l) => LocalState::TokenBucket(l.spent_until(idle_at, now_ns)),
            Self::FixedWindow(l) => LocalState::FixedWindow(l.spent_until(idle_at, now_ns)),
            Self::SlidingWindow(l) => LocalState::SlidingWindow(l.spent_until(idle_at, now_ns)),
        }
    }
}

/// Which algorithm a store runs, with the step the quota does not hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A bucket of `burst` tokens refilled continuously (fractional tokens
    /// kept). State: one time, when the bucket was empty.
    TokenBucket,
    /// The generic cell rate algorithm: one theoretical arrival time per
    /// key, as redis-cell and governor keep.
    Gcra {
        /// [`Gcra::emission_interval`].
        emission_interval: Duration,
    },
    /// `limit` units per window of the store's clock; up to 2× at a window
    /// boundary.
    FixedWindow,
    /// The sliding-window counter over `counters` counters (`2` is the
    /// classic current + weighted previous window).
    SlidingWindow {
        /// Number of counters, at least 2.
        counters: u32,
        /// [`SlidingWindow::sub_window`].
        sub_window: Duration,
    },
}

impl Kind {
    fn tag(self) -> &'static str {
        match self {
            Self::TokenBucket => "tb",
            Self::Gcra { .. } => "gcra",
            Self::FixedWindow => "fw",
            Self::SlidingWindow { .. } => "sw",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TokenBucket => f.write_str("token bucket"),
            Self::Gcra { .. } => f.write_str("GCRA"),
            Self::FixedWindow => f.write_str("fixed window"),
            Self::SlidingWindow { counters, .. } => {
                write!(f, "sliding-window counter ({counters} counters)")
            }
        }
    }
}
