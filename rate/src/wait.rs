//! Waiting until a limit allows, instead of being told no.
//!
//! Every container has an `until_ready` (single limit) or
//! `until_key_ready` (keyed) method: an `async` check that, while the
//! answer is no, sleeps for the decision's `Retry-After` (plus a
//! [`Jitter`], so that waiters told the same instant do not all come back
//! at once) and asks again. It returns the allowing [`Decision`].
//!
//! * **Never early.** Only an allowing check ends the wait, so the waiters
//!   of a key are released at the quota's rate, whatever their number.
//!   Waiters told the same instant are released in the order their sleeps
//!   wake: the order they arrived in, on one runtime thread and without
//!   jitter.
//! * **Cancellation spends nothing.** A denied check spends nothing, and
//!   the one allowed check completes in the same poll that returns it, so
//!   dropping a wait (a client gone, a `timeout` around it) at any point
//!   leaves the limit as if it had never waited (but see shapers below).
//! * **Shapers' delays are waited too.** A shaper
//!   ([`LeakyBucket::try_shaper`](crate::LeakyBucket::try_shaper)) admits
//!   a unit at once and says when it may leave ([`Decision::delay`]); the
//!   wait ends then. A wait dropped during that delay leaves the unit
//!   spent, its departure unused: stricter, never looser.
//! * **Impossible costs fail at once** with [`NeverAllowed`], instead of
//!   waiting forever.
//! * **Cheap sleeps.** The waits sleep on `weir-timeout`, whose deadlines
//!   round up to its tick (never early, at most one tick late) and share
//!   one timer per tick. They follow tokio's paused test clock; give the
//!   limiter a [`TokioClock`] so its time follows it too.
//!
//! ```
//! use std::num::NonZeroU32;
//! use weir_rate::wait::Jitter;
//! use weir_rate::{Gcra, Quota, RateLimiter};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), weir_rate::NeverAllowed> {
//! let limiter = RateLimiter::new(Gcra::new(Quota::per_second(NonZeroU32::new(100).unwrap())));
//! for _ in 0..3 {
//!     let decision = limiter.until_ready(1, Jitter::NONE).await?;
//!     assert!(decision.is_allowed());
//! }
//! # Ok(())
//! # }
//! ```

use crate::clock::Clock;
use crate::decision::{Decision, NeverAllowed};
use std::future::Future;
use std::sync::OnceLock;
use std::time::Duration;
use weir_primitives::random::SplitMix64;
use weir_primitives::time::duration_to_nanos;

/// A random extra delay added to each sleep of a wait, uniform in
/// `[0, max)`, so waiters told the same `Retry-After` spread out.
///
/// ```
/// use std::time::Duration;
/// use weir_rate::wait::Jitter;
///
/// let spread = Jitter::up_to(Duration::from_millis(20));
/// let replayable = spread.seeded(7); // the same delays on every run
/// assert_ne!(replayable, spread);
/// assert_eq!(Jitter::up_to(Duration::ZERO), Jitter::NONE);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Jitter {
    max: Duration,
    seed: Option<u64>,
}

impl Jitter {
    /// No jitter: each sleep lasts exactly the `Retry-After`.
    pub const NONE: Self = Self {
        max: Duration::ZERO,
        seed: None,
    };

    /// Up to `max` more per sleep, from a seed of its own per wait.
    pub const fn up_to(max: Duration) -> Self {
        Self { max, seed: None }
    }

    /// The same jitter from a fixed seed, so tests replay exactly.
    pub const fn seeded(self, seed: u64) -> Self {
        Self {
            max: self.max,
            seed: Some(seed),
        }
    }

    /// The delays of one wait.
    fn delays(self) -> Delays {
        let seed = self.seed.unwrap_or_else(|| {
            // Distinct per wait without a global lock: the address of a
            // fresh stack value mixed with the time.
            let here = 0u8;
            (std::ptr::addr_of!(here) as u64)
                ^ duration_to_nanos(
                    std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .unwrap_or_default(),
                )
        });
        Delays {
            max: duration_to_nanos(self.max),
            rng: SplitMix64::new(seed),
        }
    }
}

struct Delays {
    max: u64,
    rng: SplitMix64,
}

impl Delays {
    fn next(&mut self) -> Duration {
        if self.max == 0 {
            return Duration::ZERO;
        }
        Duration::from_nanos(self.rng.next_u64() % self.max)
    }
}

/// Ask `check` until it allows, sleeping each denial's `Retry-After`
/// (plus `jitter`) in between, and a shaper's delay after the allowing
/// answer: the loop behind every container's `until_ready` and
/// `until_key_ready`, for limiters of your own (a store's, say) to wait
/// the same way.
///
/// ```
/// use std::num::NonZeroU32;
/// use weir_rate::wait::{Jitter, until_allowed};
/// use weir_rate::{Gcra, KeyedLimiter, Quota};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), weir_rate::NeverAllowed> {
/// let per_user = KeyedLimiter::<String, _>::new(Gcra::new(Quota::per_second(NonZeroU32::new(50).unwrap())));
/// let ask = || std::future::ready(per_user.check_n("alice", 1));
/// assert!(until_allowed(ask, Jitter::NONE).await?.is_allowed());
/// # Ok(())
/// # }
/// ```
///
/// # Errors
///
/// The first [`NeverAllowed`] `check` answers, at once.
pub async fn until_allowed<F, Fut>(mut check: F, jitter: Jitter) -> Result<Decision, NeverAllowed>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Decision, NeverAllowed>>,
{
    let mut delays = jitter.delays();
    loop {
        let decision = check().await?;
        if decision.is_allowed() {
            // A shaper admits now and says when the unit may leave: ready
            // means that time has come.
            let delay = decision.delay();
            if !delay.is_zero() {
                weir_timeout::sleep(delay).await;
            }
            return Ok(decision);
        }
        // A denial always carries its retry-after; a missing one would be
        // a bug, and a millisecond keeps it from spinning.
        let retry = decision.retry_after().unwrap_or(Duration::from_millis(1));
        weir_timeout::sleep(retry.saturating_add(delays.next())).await;
    }
}

/// A clock that reads tokio's time, so a limiter follows tokio's paused
/// test clock (`tokio::time::pause`, `#[tokio::test(start_paused =
/// true)]`) as the waits do. Outside a paused runtime it is the monotonic
/// clock. All instances share one epoch: the first reading in the process.
///
/// ```
/// use std::num::NonZeroU32;
/// use std::time::Duration;
/// use weir_rate::wait::{Jitter, TokioClock};
/// use weir_rate::{Gcra, Quota, RateLimiter};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), weir_rate::NeverAllowed> {
/// let limiter = RateLimiter::with_clock(Gcra::new(Quota::per_hour(NonZeroU32::MIN)), TokioClock::new());
/// let start = tokio::time::Instant::now();
/// limiter.until_ready(1, Jitter::NONE).await?;
/// limiter.until_ready(1, Jitter::NONE).await?; // an hour of virtual time
/// assert!(start.elapsed() >= Duration::from_secs(3600));
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct TokioClock {
    _private: (),
}

impl TokioClock {
    /// The clock.
    pub fn new() -> Self {
        Self::default()
    }
}

impl Clock for TokioClock {
    fn now_nanos(&self) -> u64 {
        static EPOCH: OnceLock<tokio::time::Instant> = OnceLock::new();
        let now = tokio::time::Instant::now();
        let epoch = *EPOCH.get_or_init(|| now);
        duration_to_nanos(now.saturating_duration_since(epoch))
    }
}
