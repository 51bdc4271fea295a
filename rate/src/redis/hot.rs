//! Local pre-aggregation of hot keys through leases.

use super::{RedisLimitError, RedisLimiter, Source, Verdict};
use crate::decision::Decision;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Answer hot keys locally from leases taken from Redis in blocks.
///
/// A key becomes *hot* on an instance once it sees `hot_after` checks
/// within one second there. A hot key that was far from its limit at the
/// last Redis answer (at least `2 × lease` units left) gets a *lease*: one
/// ordinary script call spends `lease` units at once, and the next checks
/// on this instance are answered from the lease without a round trip, until
/// it is used up or `max_age` has passed. Near the limit, or while a lease
/// is being fetched, checks take the plain path (one script call each).
///
/// # Error bounds
///
/// * **No unit is admitted that Redis did not count.** Every unit answered
///   from a lease was spent in Redis when the lease was taken.
/// * **Shift in time.** A unit may be admitted up to `max_age` after Redis
///   counted it, so over any interval of length `d` an instance admits at
///   most what the limit allows over `d + max_age`. With `n` instances each
///   holding at most one lease per key, the excess over the limit in any
///   window is at most `n × lease` units (measured in the bench suite as
///   "extra admitted").
/// * **Waste.** Units of a lease that expires unused are lost: at most
///   `lease - 1` per instance per `max_age`, an under-admission.
/// * **Remaining.** A decision from a lease reports the `remaining` of the
///   Redis answer plus the lease's unused units: an estimate, stale by at
///   most `max_age`.
///
/// ```
/// use std::time::Duration;
/// use weir_rate::redis::PreAggregation;
///
/// let hot = PreAggregation { lease: 32, max_age: Duration::from_millis(50), ..Default::default() };
/// assert_eq!(hot.hot_after, PreAggregation::default().hot_after);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PreAggregation {
    /// Units taken from Redis per lease (at least 2).
    pub lease: u32,
    /// Checks per second on this instance that make a key hot (at least 1).
    pub hot_after: u32,
    /// How long an unused lease may be spent (non-zero).
    pub max_age: Duration,
    /// Most keys tracked for hotness on this instance.
    pub max_keys: usize,
}

impl Default for PreAggregation {
    fn default() -> Self {
        Self {
            lease: 64,
            hot_after: 100,
            max_age: Duration::from_millis(100),
            max_keys: 10_000,
        }
    }
}

impl PreAggregation {
    pub(crate) fn validate(&self) -> Result<(), RedisLimitError> {
        if self.lease < 2 || self.hot_after == 0 || self.max_age.is_zero() || self.max_keys == 0 {
            return Err(RedisLimitError::Config(
                "pre-aggregation needs lease >= 2, hot_after >= 1, a non-zero max_age and max_keys",
            ));
        }
        Ok(())
    }
}

#[derive(Default)]
struct Entry {
    /// The second (since the epoch) `hits` counts in.
    second: u64,
    hits: u32,
    /// Units left in the lease, and when it expires (ns since the epoch).
    left: u32,
    expires: u64,
    /// The last Redis answer's remaining units, and when it came.
    remaining: Option<(u64, u64)>,
    /// Time to reset of the last Redis answer, in ns.
    reset_ns: u64,
    fetching: bool,
}

pub(crate) struct Hot {
    cfg: PreAggregation,
    map: Mutex<HashMap<String, Entry>>,
    epoch: Instant,
}

impl Hot {
    pub(crate) fn new(cfg: PreAggregation) -> Self {
        Self {
            cfg,
            map: Mutex::new(HashMap::new()),
            epoch: Instant::now(),
        }
    }

    fn lease_decision(lim: &RedisLimiter, remaining: u64, left: u32, reset_ns: u64) -> Verdict {
        let q = lim.quota();
        let r = u32::try_from(remaining.saturating_add(u64::from(left))).unwrap_or(u32::MAX);
        Verdict {
            decision: Decision::allow(q.limit(), q.window(), r, reset_ns),
            source: Source::Lease,
            error: None,
        }
    }

    /// Answer from a lease, or take one; `None` sends the check down the
    /// plain path.
    pub(crate) async fn check(&self, lim: &RedisLimiter, key: &str, cost: u32) -> Option<Verdict> {
        let now = self.epoch.elapsed().as_nanos() as u64;
        let max_age = self.cfg.max_age.as_nanos() as u64;
        let lease = self
            .cfg
            .lease
            .min(lim.algorithm().capacity(&lim.quota()))
            .max(cost);
        {
            let mut map = self.map.lock();
            if !map.contains_key(key) && map.len() >= self.cfg.max_keys {
                let sec = now / 1_000_000_000;
                map.retain(|_, e| e.fetching || e.expires > now || e.second + 1 >= sec);
                if map.len() >= self.cfg.max_keys {
                    return None;
                }
            }
            let e = map.entry(key.to_owned()).or_default();
            let sec = now / 1_000_000_000;
            if e.second != sec {
                e.second = sec;
                e.hits = 0;
            }
            e.hits = e.hits.saturating_add(1);
            if e.left >= cost && now < e.expires {
                e.left -= cost;
                let rem = e.remaining.map_or(0, |r| r.0);
                return Some(Self::lease_decision(lim, rem, e.left, e.reset_ns));
            }
            let near_limit = match e.remaining {
                Some((r, at)) => r < 2 * u64::from(lease) && now < at + max_age,
                None => false,
            };
            if e.hits < self.cfg.hot_after || e.fetching || near_limit {
                return None;
            }
            e.fetching = true;
            e.left = 0;
        }
        let result = lim.raw(key, lease).await;
        let now = self.epoch.elapsed().as_nanos() as u64;
        let mut map = self.map.lock();
        let e = map.entry(key.to_owned()).or_default();
        e.fetching = false;
        match result {
            Ok(raw) => {
                e.remaining = Some((raw.remaining, now));
                e.reset_ns = raw.reset_after_us.saturating_mul(1000);
                if raw.allowed {
                    e.left = lease - cost;
                    e.expires = now + max_age;
                    Some(Self::lease_decision(lim, raw.remaining, e.left, e.reset_ns))
                } else {
                    None
                }
            }
            Err(_) => None,
        }
    }
}
