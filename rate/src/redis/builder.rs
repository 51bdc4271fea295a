//! The builder: a limiter's settings with their defaults, checked and
//! turned into a [`RedisLimiter`] once, at [`connect`](RedisLimiterBuilder::connect),
//! so that nothing on the check path has to validate or compute them.

use super::algorithm::Script;
use super::call::Core;
use super::conn::Link;
use super::{
    Algorithm, Batching, CLUSTER_CELLS, FailurePolicy, Inner, PreAggregation, RedisLimitError,
    RedisLimiter, Target, batch, hot, scripts,
};
use crate::quota::Quota;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

/// Configures and connects a [`RedisLimiter`].
#[must_use = "a builder does nothing until `connect` is awaited"]
pub struct RedisLimiterBuilder {
    algorithm: Algorithm,
    quota: Quota,
    capacity: u32,
    prefix: String,
    timeout: Duration,
    backoff: Duration,
    policy: FailurePolicy,
    batching: Option<Batching>,
    hot: Option<PreAggregation>,
}

impl RedisLimiterBuilder {
    /// A builder for `algorithm` over `quota`, with every other setting at
    /// its default ([`RedisLimiter::builder`]).
    pub(crate) fn new(script: Script) -> Self {
        Self {
            algorithm: script.algorithm,
            quota: script.quota,
            capacity: script.capacity,
            prefix: "weir".to_owned(),
            timeout: Duration::from_millis(100),
            backoff: Duration::from_millis(100),
            policy: FailurePolicy::PerInstance,
            batching: None,
            hot: None,
        }
    }

    /// The prefix of every Redis key (default `weir`); must not contain
    /// `{` or `}`. Use one prefix per policy: two quotas on one prefix and
    /// algorithm share state.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// The deadline of one decision, connection set-up included
    /// (default 100 ms).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// How long to skip Redis after a failure, except for one probe call
    /// per period (default 100 ms).
    pub fn backoff(mut self, backoff: Duration) -> Self {
        self.backoff = backoff;
        self
    }

    /// What callers get when Redis cannot answer (default
    /// [`FailurePolicy::PerInstance`]: each instance keeps the quota on
    /// its own).
    pub fn on_failure(mut self, policy: FailurePolicy) -> Self {
        self.policy = policy;
        self
    }

    /// Batch concurrent decisions into shared script calls.
    pub fn batching(mut self, batching: Batching) -> Self {
        self.batching = Some(batching);
        self
    }

    /// Answer hot keys from local leases ([`PreAggregation`]).
    pub fn pre_aggregate(mut self, hot: PreAggregation) -> Self {
        self.hot = Some(hot);
        self
    }

    /// Connect to `target` and start the batching task if configured.
    /// Must be called inside a tokio runtime.
    ///
    /// Redis being down is not an error here: when no connection is made
    /// within the timeout (at least one second), the limiter is returned
    /// all the same, answers by its failure policy, and connects at the
    /// first probe after the back-off. A service restarted during a Redis
    /// incident comes up, limited meanwhile.
    ///
    /// # Errors
    ///
    /// [`RedisLimitError::Config`] for settings that cannot work (a prefix
    /// with `{` or `}`, a zero timeout, zero batching sizes, bad
    /// pre-aggregation settings, a sliding window outside 2 to 1024
    /// counters), and [`RedisLimitError::Redis`] for a target no connection
    /// could reach (an unparsable URL, no cluster node).
    pub async fn connect(self, target: Target) -> Result<RedisLimiter, RedisLimitError> {
        if self.prefix.contains(['{', '}']) {
            return Err(RedisLimitError::Config(
                "the key prefix contains `{` or `}`",
            ));
        }
        if self.timeout.is_zero() {
            return Err(RedisLimitError::Config("a zero timeout"));
        }
        if let Algorithm::SlidingWindow { counters, .. } = self.algorithm {
            if !(2..=crate::SlidingWindow::MAX_COUNTERS).contains(&counters) {
                return Err(RedisLimitError::Config(
                    "a sliding-window counter needs 2 to 1024 counters",
                ));
            }
        }
        if let Some(b) = &self.batching {
            if b.max_batch == 0 || b.max_in_flight == 0 || b.queue == 0 {
                return Err(RedisLimitError::Config("a zero batching size"));
            }
            if b.queue > batch::MAX_QUEUE || b.max_in_flight > batch::MAX_QUEUE {
                return Err(RedisLimitError::Config(
                    "a batching queue or call limit above 2^61 - 1",
                ));
            }
        }
        if let Some(h) = &self.hot {
            h.validate()?;
        }
        let q = &self.quota;
        // Microseconds with their fraction, printed exactly (shortest
        // round-trip form) for the script's doubles.
        let us = |ns: f64| format!("{}", ns / 1000.0);
        let window_us = us(q.window_nanos() as f64);
        let burst = q.burst().to_string();
        let limit = q.limit().to_string();
        let (source, params) = match self.algorithm {
            // Refill at exactly limit / window, as `TokenBucket` does: ns
            // per token with its fraction.
            Algorithm::TokenBucket => (
                scripts::token_bucket(),
                vec![
                    format!("{}", q.window_nanos() as f64 / f64::from(q.limit())),
                    burst,
                ],
            ),
            // The value's own emission interval (whole ns).
            Algorithm::Gcra { interval_nanos } => {
                (scripts::gcra(), vec![interval_nanos.to_string(), burst])
            }
            Algorithm::FixedWindow => (scripts::fixed_window(), vec![window_us, limit]),
            // The value's own whole-ns sub-windows.
            Algorithm::SlidingWindow {
                counters,
                sub_window_nanos,
            } => (
                scripts::sliding_window(),
                vec![us(sub_window_nanos as f64), limit, counters.to_string()],
            ),
        };
        let link = Link::new(&target, self.timeout)?;
        // Connect now if Redis is there; if it is not (refused, or no
        // answer within the timeout, at least a second), start all the
        // same and let the back-off's probes connect later: a service
        // restarted during a Redis incident must come up, limited by its
        // failure policy meanwhile.
        let connect_timeout = self.timeout.max(Duration::from_secs(1));
        let connected = matches!(
            tokio::time::timeout(connect_timeout, link.get()).await,
            Ok(Ok(_))
        );
        let cells = if target.is_cluster() {
            CLUSTER_CELLS
        } else {
            1
        };
        let core = Arc::new(Core::new(
            link,
            &source,
            params,
            self.timeout,
            target.is_cluster(),
            cells,
        ));
        // Not connected: skip Redis for one back-off, as after any failure.
        let down = if connected {
            0
        } else {
            let backoff = weir_primitives::time::duration_to_nanos(self.backoff);
            core.nanos_at(std::time::Instant::now())
                .saturating_add(backoff)
                .max(1)
        };
        let policy = match self.policy {
            FailurePolicy::PerInstance => FailurePolicy::per_instance(self.quota),
            policy => policy,
        };
        let batcher = self
            .batching
            .map(|b| batch::Batcher::start(core.clone(), b));
        Ok(RedisLimiter {
            inner: Arc::new(Inner {
                core,
                algorithm: self.algorithm,
                quota: self.quota,
                capacity: self.capacity,
                prefix: format!("{}:{}:", self.prefix, self.algorithm.tag()),
                policy,
                backoff: self.backoff,
                down_until: (0..cells).map(|_| AtomicU64::new(down)).collect(),
                batcher,
                hot: self.hot.map(hot::Hot::new),
                outcomes: Default::default(),
            }),
        })
    }
}
