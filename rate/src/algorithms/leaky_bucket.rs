use super::token_bucket::{Bucket, TokenBucketState};
use super::{clamp_ns, clamp_u32};
use crate::algorithm::{Algorithm, Forgettable};
use crate::config::ConfigError;
use crate::decision::{Decision, Receipt};
use crate::mode::Mode;
use crate::quota::Quota;
use std::time::Duration;

/// The leaky bucket, in its two classic forms.
///
/// * [`LeakyBucket::meter`]: each request pours `cost` units into a bucket
///   of `burst` units that leaks at `limit / window`; a request that would
///   overflow it is denied. This is the token bucket seen from the other
///   side (the water level is the tokens spent) and allows exactly the same
///   requests; weir keeps one implementation of the arithmetic.
/// * [`LeakyBucket::try_shaper`]: a queue drained at a constant rate. Every
///   admitted request is given a [`Decision::delay`] to wait so that units
///   leave exactly `T = window / limit` apart; a request whose last unit
///   would wait longer than `max_delay` is denied (the queue is full). The
///   queue holds `⌊max_delay / T⌋ + 1` units. This smooths bursts instead of
///   passing them on, at the cost of latency. The tower layer and the
///   waits (`until_ready`) wait the delay for you; `allows` answers only
///   whether a request was admitted.
///
/// Refunds follow [`TokenBucket`](crate::TokenBucket) for a meter. A
/// shaper's refunds return nothing: every admitted request has been told
/// when to leave, and giving its departure to a later one would send two
/// at once. Forced charges ([`Algorithm::charge`]) take their units from a
/// meter as from a token bucket, and from a shaper's queue (see there).
///
/// ```
/// use std::num::NonZeroU32;
/// use std::time::Duration;
/// use weir_rate::{LeakyBucket, Algorithm, Mode, Quota};
///
/// let quota = Quota::per_second(NonZeroU32::new(10).unwrap());
/// let shaper = LeakyBucket::try_shaper(quota, Duration::from_millis(250)).unwrap();
/// let mut s = shaper.new_state(0);
/// let delays: Vec<_> = (0..3)
///     .map(|_| shaper.check(&mut s, 0, 1, Mode::Consume).unwrap().delay())
///     .collect();
/// assert_eq!(delays, [0, 100, 200].map(Duration::from_millis));
/// // The fourth would have waited 300 ms > 250 ms: denied.
/// assert!(!shaper.check(&mut s, 0, 1, Mode::Peek).unwrap().is_allowed());
/// ```
#[derive(Debug, Clone)]
pub struct LeakyBucket {
    bucket: Bucket,
    /// `None` for a meter.
    max_delay: Option<u64>,
    interval: u64,
}

/// [`LeakyBucket`]'s state: the meter's level, or for a shaper the time its
/// queue drains.
///
/// What a [`KeyedLimiter`](crate::KeyedLimiter) keeps per key; driven by
/// hand through [`Algorithm`](crate::Algorithm), times in ns:
///
/// ```
/// use std::num::NonZeroU32;
/// use weir_rate::{LeakyBucket, Algorithm, Mode, Quota};
/// let limiter = LeakyBucket::meter(Quota::per_second(NonZeroU32::MIN));
/// let mut state = limiter.new_state(0);
/// assert!(limiter.check(&mut state, 0, 1, Mode::Consume)?.is_allowed());
/// assert!(!limiter.check(&mut state, 1, 1, Mode::Consume)?.is_allowed());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LeakyBucketState {
    meter: TokenBucketState,
    drains_at: u64,
}

impl LeakyBucket {
    /// A leaky-bucket meter holding `quota.burst()` units, leaking at
    /// `limit / window`.
    pub fn meter(quota: Quota) -> Self {
        Self {
            bucket: Bucket { quota },
            max_delay: None,
            interval: quota.emission_interval_nanos(),
        }
    }

    /// A shaper releasing one unit every `window / limit` (rounded up to
    /// whole nanoseconds) and queueing at most `max_delay` of waiting.
    ///
    /// # Errors
    ///
    /// [`ConfigError::WindowTooLong`] when `max_delay` is 2⁶⁴ ns (584
    /// years) or longer.
    pub fn try_shaper(quota: Quota, max_delay: Duration) -> Result<Self, ConfigError> {
        let max_delay =
            u64::try_from(max_delay.as_nanos()).map_err(|_| ConfigError::WindowTooLong)?;
        Ok(Self {
            bucket: Bucket { quota },
            max_delay: Some(max_delay),
            interval: quota.emission_interval_nanos(),
        })
    }
}

impl Algorithm for LeakyBucket {
    type State = LeakyBucketState;

    fn max_cost(&self) -> u32 {
        match self.max_delay {
            None => self.bucket.quota.burst(),
            Some(max) => clamp_u32(u128::from(max / self.interval) + 1),
        }
    }

    fn new_state(&self, now_ns: u64) -> Self::State {
        LeakyBucketState {
            meter: TokenBucketState::default(),
            drains_at: now_ns,
        }
        .with_meter_time(now_ns)
    }

    fn decide(&self, s: &mut Self::State, now_ns: u64, cost: u32, mode: Mode) -> Decision {
        let Some(max_delay) = self.max_delay else {
            return self.bucket.decide(&mut s.meter, now_ns, cost, mode);
        };
        let t = u128::from(self.interval);
        let start = s.drains_at.max(now_ns);
        let wait = u128::from(start - now_ns);
        let last_wait = wait + u128::from(cost.saturating_sub(1)) * t;
        let (limit, window) = (self.bucket.quota.limit(), self.bucket.quota.window_nanos());
        // Units that could still join the queue: those whose wait ≤ max_delay.
        let room = |backlog: u128| {
            if backlog > u128::from(max_delay) {
                0
            } else {
                clamp_u32((u128::from(max_delay) - backlog) / t + 1)
            }
        };
        let end = u128::from(start) + u128::from(cost) * t;
        // A queue draining past the clock's range cannot be kept:
        // saturating `drains_at` would forget the cost, so at the end of
        // time the shaper denies instead.
        if last_wait <= u128::from(max_delay) && end <= u128::from(u64::MAX) {
            if mode == Mode::Consume {
                s.drains_at = end as u64;
            }
            let backlog = end - u128::from(now_ns);
            let mut d = Decision::allow_ns(limit, window, room(backlog), clamp_ns(backlog));
            d.delay_ns = clamp_ns(wait);
            d.charged(mode, now_ns, cost)
        } else {
            let retry = clamp_ns(last_wait.saturating_sub(u128::from(max_delay)));
            Decision::deny_ns(limit, window, room(wait), clamp_ns(wait), retry)
        }
    }

    fn refund(&self, s: &mut Self::State, now_ns: u64, receipt: Receipt) {
        if self.max_delay.is_none() {
            self.bucket.refund(&mut s.meter, now_ns, receipt);
        }
    }

    /// A meter charges as a token bucket does. A shaper's charge takes the
    /// next `cost·T` of its queue (`drains_at = max(drains_at, now) +
    /// cost·T`, saturating), so requests admitted after it wait that much
    /// longer, and are denied while the wait would exceed `max_delay`.
    fn charge(&self, s: &mut Self::State, now_ns: u64, cost: u32) -> Receipt {
        if self.max_delay.is_none() {
            return self.bucket.charge(&mut s.meter, now_ns, cost);
        }
        let debt = u128::from(cost) * u128::from(self.interval);
        s.drains_at = clamp_ns(u128::from(s.drains_at.max(now_ns)) + debt);
        Receipt::new(now_ns, cost)
    }
}

impl Forgettable for LeakyBucket {
    fn is_idle(&self, s: &Self::State, now_ns: u64) -> bool {
        match self.max_delay {
            None => self.bucket.is_idle(&s.meter, now_ns),
            Some(_) => s.drains_at <= now_ns,
        }
    }

    fn idle_at(&self, s: &Self::State, now_ns: u64) -> u64 {
        match self.max_delay {
            None => self.bucket.idle_at(&s.meter, now_ns),
            Some(_) => s.drains_at.max(now_ns),
        }
    }

    /// A meter's level as a token bucket's; a shaper's queue draining then.
    fn spent_until(&self, idle_at: u64, now_ns: u64) -> Self::State {
        let mut s = self.new_state(now_ns);
        match self.max_delay {
            None => s.meter = self.bucket.spent_until(idle_at, now_ns),
            Some(_) => s.drains_at = idle_at.max(now_ns),
        }
        s
    }
}

impl LeakyBucketState {
    fn with_meter_time(mut self, now_ns: u64) -> Self {
        self.meter = TokenBucketState::starting_at(now_ns);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::num::NonZeroU32;

    /// A shaper has told every admitted request when to leave. A and B are
    /// admitted at 0 to leave at 0 and 100 ms; refunding A must not give
    /// C a departure that B already holds.
    #[test]
    fn a_refund_never_hands_out_a_departure_already_promised() {
        let quota = Quota::per_second(NonZeroU32::new(10).unwrap());
        let shaper = LeakyBucket::try_shaper(quota, Duration::from_millis(250)).unwrap();
        let mut s = shaper.new_state(0);
        let admit = |s: &mut LeakyBucketState| shaper.check(s, 0, 1, Mode::Consume).unwrap();
        let a = admit(&mut s);
        assert_eq!(a.delay(), Duration::ZERO);
        let b = admit(&mut s);
        assert_eq!(b.delay(), Duration::from_millis(100));
        shaper.refund(&mut s, 0, a.receipt().unwrap());
        let c = admit(&mut s);
        assert!(
            !c.is_allowed() || c.delay() >= b.delay() + Duration::from_millis(100),
            "C leaves at {:?}, B at {:?}",
            c.delay(),
            b.delay()
        );
    }
}
