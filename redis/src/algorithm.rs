//! The algorithms a limiter's script can run: weir-rate's own algorithm
//! values ([`Gcra`], [`TokenBucket`], [`FixedWindow`], [`SlidingWindow`]),
//! each carrying its [`Quota`], and what the script takes from it: the
//! value's own step (GCRA's emission interval, the sliding window's
//! sub-window) and max cost, so Redis and in-process limiting cannot drift
//! apart.

use std::fmt;
use weir_rate::Quota;
use weir_rate::{Decision, NeverAllowed, Receipt};
use weir_rate::{
    FixedWindow, FixedWindowState, Gcra, SlidingWindow, SlidingWindowState, TokenBucket,
    TokenBucketState,
};
use weir_rate::{Limiter, Mode};

/// An algorithm the Redis limiter can run, given as the same value an
/// in-process limiter takes, so the quota reads the same way in both:
/// window algorithms allow `limit` per `window`; rate algorithms refill at
/// `limit / window` up to `burst`. Implemented by [`Gcra`],
/// [`TokenBucket`], [`FixedWindow`] and [`SlidingWindow`] (2 to 1024
/// counters); the others have no script.
///
/// ```
/// use std::num::NonZeroU32;
/// use weir_redis::RedisLimiter;
/// use weir_rate::{Quota, SlidingWindow};
///
/// let quota = Quota::per_second(NonZeroU32::new(10).unwrap());
/// let builder = RedisLimiter::builder(SlidingWindow::try_new(quota, 2)?);
/// # let _ = builder;
/// # Ok::<(), weir_rate::QuotaError>(())
/// ```
pub trait RedisAlgorithm: sealed::Sealed {}

mod sealed {
    /// What the builder needs from an algorithm value; sealed so that only
    /// algorithms with a script implement [`RedisAlgorithm`](super::RedisAlgorithm).
    pub trait Sealed {
        fn script(&self) -> super::Script;
    }
}

macro_rules! runs_on_redis {
    ($($ty:ident => |$value:ident| $kind:expr),* $(,)?) => {$(
        impl sealed::Sealed for $ty {
            fn script(&self) -> Script {
                let $value = self;
                Script {
                    algorithm: $kind,
                    quota: $value.quota(),
                    max_cost: Limiter::max_cost($value),
                }
            }
        }
        impl RedisAlgorithm for $ty {}
    )*};
}

runs_on_redis! {
    TokenBucket => |_a| Algorithm::TokenBucket,
    Gcra => |a| Algorithm::Gcra { interval_nanos: a.interval_nanos() },
    FixedWindow => |_a| Algorithm::FixedWindow,
    SlidingWindow => |a| Algorithm::SlidingWindow {
        counters: a.counters(),
        sub_window_nanos: a.sub_window_nanos(),
    },
}

/// What a limiter's script is built from: taken from the algorithm value.
#[derive(Debug, Clone, Copy)]
pub struct Script {
    pub(crate) algorithm: Algorithm,
    pub(crate) quota: Quota,
    /// The largest cost the algorithm can ever allow at once.
    pub(crate) max_cost: u32,
}

/// The script `algorithm` runs.
pub(crate) fn script_of(algorithm: &impl RedisAlgorithm) -> Script {
    sealed::Sealed::script(algorithm)
}

impl Script {
    /// The script's parameters (`ARGV[1..P]`), from the algorithm value.
    pub(crate) fn params(&self) -> Vec<String> {
        let q = &self.quota;
        // Microseconds with their fraction, printed exactly (shortest
        // round-trip form) for the script's doubles.
        let us = |ns: f64| format!("{}", ns / 1000.0);
        match self.algorithm {
            // Refill at exactly limit / window, as `TokenBucket` does: ns
            // per token with its fraction.
            Algorithm::TokenBucket => vec![
                format!("{}", q.window_nanos() as f64 / f64::from(q.limit())),
                q.burst().to_string(),
            ],
            // The value's own emission interval (whole ns).
            Algorithm::Gcra { interval_nanos } => {
                vec![interval_nanos.to_string(), q.burst().to_string()]
            }
            Algorithm::FixedWindow => vec![us(q.window_nanos() as f64), q.limit().to_string()],
            // The value's own whole-ns sub-windows.
            Algorithm::SlidingWindow {
                counters,
                sub_window_nanos,
            } => vec![
                us(sub_window_nanos as f64),
                q.limit().to_string(),
                counters.to_string(),
            ],
        }
    }

    /// The quota of a single limit's default fallback (a GCRA sketch): a
    /// window algorithm ignores its quota's burst (its max cost is its
    /// limit), and so does its fallback.
    pub(crate) fn fallback_quota(&self) -> Quota {
        match (
            self.algorithm,
            std::num::NonZeroU32::new(self.quota.limit()),
        ) {
            (Algorithm::FixedWindow | Algorithm::SlidingWindow { .. }, Some(limit)) => {
                self.quota.allow_burst(limit)
            }
            _ => self.quota,
        }
    }

    /// The in-process algorithm the script computes; `None` for a sliding
    /// window whose counters do not fit its quota (the builder refuses it).
    pub(crate) fn local(&self) -> Option<AnyLimiter> {
        Some(match self.algorithm {
            Algorithm::TokenBucket => AnyLimiter::TokenBucket(TokenBucket::new(self.quota)),
            Algorithm::Gcra { .. } => AnyLimiter::Gcra(Gcra::new(self.quota)),
            Algorithm::FixedWindow => AnyLimiter::FixedWindow(FixedWindow::new(self.quota)),
            Algorithm::SlidingWindow { counters, .. } => {
                AnyLimiter::SlidingWindow(SlidingWindow::try_new(self.quota, counters).ok()?)
            }
        })
    }
}

/// Any algorithm with a script, as one in-process [`Limiter`] type: an
/// all-of set's local fallback is an [`AllOf`](weir_rate::AllOf) of these, so
/// that it decides all-or-nothing like the set's script.
#[derive(Debug, Clone)]
pub(crate) enum AnyLimiter {
    Gcra(Gcra),
    TokenBucket(TokenBucket),
    FixedWindow(FixedWindow),
    SlidingWindow(SlidingWindow),
}

/// [`AnyLimiter`]'s state.
#[derive(Debug, Clone)]
pub(crate) enum AnyState {
    /// GCRA's state is its theoretical arrival time.
    Gcra(u64),
    TokenBucket(TokenBucketState),
    FixedWindow(FixedWindowState),
    SlidingWindow(SlidingWindowState),
}

/// `$body` with `$l` the algorithm and `$s` its state; a state of
/// another kind (which no container hands over: the fallback's limits
/// never change) is replaced with a fresh one and `$again` runs.
macro_rules! on_state {
    ($self:ident, $state:ident, $now:expr, |$l:ident, $s:ident| $body:expr, $again:expr) => {
        match ($self, &mut *$state) {
            (AnyLimiter::Gcra($l), AnyState::Gcra($s)) => $body,
            (AnyLimiter::TokenBucket($l), AnyState::TokenBucket($s)) => $body,
            (AnyLimiter::FixedWindow($l), AnyState::FixedWindow($s)) => $body,
            (AnyLimiter::SlidingWindow($l), AnyState::SlidingWindow($s)) => $body,
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
            (AnyLimiter::Gcra($l), AnyState::Gcra($s)) => $body,
            (AnyLimiter::TokenBucket($l), AnyState::TokenBucket($s)) => $body,
            (AnyLimiter::FixedWindow($l), AnyState::FixedWindow($s)) => $body,
            (AnyLimiter::SlidingWindow($l), AnyState::SlidingWindow($s)) => $body,
            _ => $other,
        }
    };
}

impl Limiter for AnyLimiter {
    type State = AnyState;

    fn max_cost(&self) -> u32 {
        match self {
            Self::Gcra(l) => l.max_cost(),
            Self::TokenBucket(l) => l.max_cost(),
            Self::FixedWindow(l) => l.max_cost(),
            Self::SlidingWindow(l) => l.max_cost(),
        }
    }

    fn new_state(&self, now_ns: u64) -> AnyState {
        match self {
            Self::Gcra(l) => AnyState::Gcra(l.new_state(now_ns)),
            Self::TokenBucket(l) => AnyState::TokenBucket(l.new_state(now_ns)),
            Self::FixedWindow(l) => AnyState::FixedWindow(l.new_state(now_ns)),
            Self::SlidingWindow(l) => AnyState::SlidingWindow(l.new_state(now_ns)),
        }
    }

    fn check(
        &self,
        state: &mut AnyState,
        now_ns: u64,
        cost: u32,
        mode: Mode,
    ) -> Result<Decision, NeverAllowed> {
        on_state!(
            self,
            state,
            now_ns,
            |l, s| l.check(s, now_ns, cost, mode),
            self.check(state, now_ns, cost, mode)
        )
    }

    fn refund(&self, state: &mut AnyState, now_ns: u64, receipt: Receipt) {
        on_state!(
            self,
            state,
            now_ns,
            |l, s| l.refund(s, now_ns, receipt),
            self.refund(state, now_ns, receipt)
        )
    }

    fn charge(&self, state: &mut AnyState, now_ns: u64, cost: u32) -> Receipt {
        on_state!(
            self,
            state,
            now_ns,
            |l, s| l.charge(s, now_ns, cost),
            self.charge(state, now_ns, cost)
        )
    }

    fn is_idle(&self, state: &AnyState, now_ns: u64) -> bool {
        // A state of another kind would be replaced with a fresh one.
        read_state!(self, state, |l, s| l.is_idle(s, now_ns), true)
    }

    fn idle_at(&self, state: &AnyState, now_ns: u64) -> u64 {
        read_state!(self, state, |l, s| l.idle_at(s, now_ns), now_ns)
    }

    fn spent_until(&self, idle_at: u64, now_ns: u64) -> AnyState {
        match self {
            Self::Gcra(l) => AnyState::Gcra(l.spent_until(idle_at, now_ns)),
            Self::TokenBucket(l) => AnyState::TokenBucket(l.spent_until(idle_at, now_ns)),
            Self::FixedWindow(l) => AnyState::FixedWindow(l.spent_until(idle_at, now_ns)),
            Self::SlidingWindow(l) => AnyState::SlidingWindow(l.spent_until(idle_at, now_ns)),
        }
    }
}

/// Which script runs, with the parameters the quota does not hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// A bucket of `burst` tokens refilled continuously (fractional tokens
    /// kept). State: one time, when the bucket was empty.
    TokenBucket,
    /// The generic cell rate algorithm: one theoretical arrival time per
    /// key, as redis-cell and governor keep.
    Gcra {
        /// [`Gcra::interval_nanos`].
        interval_nanos: u64,
    },
    /// `limit` units per window of the server clock; up to 2× at a window
    /// boundary.
    FixedWindow,
    /// The sliding-window counter over `counters` counters (`2` is the
    /// classic current + weighted previous window).
    SlidingWindow {
        /// Number of counters, at least 2.
        counters: u32,
        /// [`SlidingWindow::sub_window_nanos`].
        sub_window_nanos: u64,
    },
}

impl Algorithm {
    pub(crate) fn tag(self) -> &'static str {
        match self {
            Self::TokenBucket => "tb",
            Self::Gcra { .. } => "gcra",
            Self::FixedWindow => "fw",
            Self::SlidingWindow { .. } => "sw",
        }
    }
}

impl fmt::Display for Algorithm {
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
