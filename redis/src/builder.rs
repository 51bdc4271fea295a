//! The builder: a limiter's settings with their defaults, checked and
//! turned into a [`RedisLimiter`] once, at [`connect`](RedisLimiterBuilder::connect),
//! so that nothing on the check path has to validate or compute them.

use super::algorithm::{RedisAlgorithm, Script, script_of};
use super::call::{Core, Limit};
use super::conn::Link;
use super::{
    Algorithm, Batching, CLUSTER_CELLS, FailurePolicy, Inner, PreAggregation, RedisLimitError,
    RedisLimiter, Target, batch, hot, scripts,
};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

/// The most limits an all-of limiter decides together
/// ([`RedisLimiterBuilder::and`]): each takes Lua locals of the one
/// script, which has room for a couple of hundred.
pub const MAX_LIMITS: usize = 16;

/// Configures and connects a [`RedisLimiter`].
///
/// ```
/// use std::time::Duration;
/// use weir_redis::{FailurePolicy, RedisLimiter};
/// use weir_rate::{Gcra, Quota};
///
/// let quota = Quota::per_minute(std::num::NonZeroU32::new(100).unwrap());
/// let builder = RedisLimiter::builder(Gcra::new(quota))
///     .prefix("api")
///     .timeout(Duration::from_millis(50))
///     .on_failure(FailurePolicy::Closed);
/// // `builder.connect(Target::server(...)).await` makes the limiter.
/// # let _ = builder;
/// ```
#[must_use = "a builder does nothing until `connect` is awaited"]
pub struct RedisLimiterBuilder {
    /// The limits, in the order given: one, or an all-of set.
    limits: Vec<Script>,
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
            limits: vec![script],
            prefix: "weir".to_owned(),
            timeout: Duration::from_millis(100),
            backoff: Duration::from_millis(100),
            policy: FailurePolicy::PerInstance,
            batching: None,
            hot: None,
        }
    }

    /// Add a limit that every key must also meet: the limiter then decides
    /// all of its limits of a key **all-or-nothing**, in one script call —
    /// a request is allowed only if every limit allows it, and only then
    /// is it spent from all of them, so a gateway limiting per second and
    /// per day does not spend the per-second budget on requests the daily
    /// limit refuses. The decision is the in-process
    /// [`AllOf`](weir_rate::AllOf)'s: the binding limit's limit, window and
    /// remaining, the latest reset and retry. Costs above the smallest
    /// capacity are [`NeverAllowed`](weir_rate::NeverAllowed). At most
    /// [`MAX_LIMITS`] limits.
    ///
    /// Each limit keeps its state in a Redis key of its own, all of one key
    /// in one Cluster slot: `<prefix>:all:{<prefix>:<key>}:<i>:<alg>` for
    /// the `i`-th limit (from 0, in the order given; `alg` as in a single
    /// limit's key). The prefix before the tag ends at its first `{`, so
    /// limiters with different prefixes never share a key, whatever the
    /// keys (a prefix `login` and a key `ip:1.2.3.4` are not the prefix
    /// `login:ip` and the key `1.2.3.4`). The limits' order and kinds name the state: a limiter built
    /// later on the same prefix with the same kinds in the same order
    /// (other quotas allowed) takes it over, as a single limit's does.
    ///
    /// ```no_run
    /// use std::num::NonZeroU32;
    /// use std::time::Duration;
    /// use weir_redis::{RedisLimiter, Target};
    /// use weir_rate::{FixedWindow, Gcra, Quota};
    ///
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// let per_second = Gcra::new(Quota::per_second(NonZeroU32::new(10).unwrap()));
    /// let per_day = FixedWindow::new(Quota::try_new(10_000, Duration::from_secs(86_400))?);
    /// let limiter = RedisLimiter::builder(per_second)
    ///     .and(per_day)
    ///     .prefix("api")
    ///     .connect(Target::server("redis://127.0.0.1:6379/"))
    ///     .await?;
    /// assert_eq!(limiter.redis_keys("u1"), ["api:all:{api:u1}:0:gcra", "api:all:{api:u1}:1:fw"]);
    /// let decision = limiter.check("u1").await;
    /// if !decision.is_allowed() {
    ///     // Neither limit was spent.
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn and(mut self, algorithm: impl RedisAlgorithm) -> Self {
        self.limits.push(script_of(&algorithm));
        self
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
    /// counters, more than [`MAX_LIMITS`] limits), and
    /// [`RedisLimitError::Redis`] for a target no connection could reach
    /// (an unparsable URL, no cluster node).
    pub async fn connect(self, target: Target) -> Result<RedisLimiter, RedisLimitError> {
        if self.prefix.contains(['{', '}']) {
            return Err(RedisLimitError::Config(
                "the key prefix contains `{` or `}`",
            ));
        }
        if self.timeout.is_zero() {
            return Err(RedisLimitError::Config("a zero timeout"));
        }
        if self.limits.len() > MAX_LIMITS {
            return Err(RedisLimitError::Config(
                "more than 16 limits in one limiter",
            ));
        }
        for limit in &self.limits {
            if let Algorithm::SlidingWindow { counters, .. } = limit.algorithm {
                if !(2..=weir_rate::SlidingWindow::MAX_COUNTERS).contains(&counters) {
                    return Err(RedisLimitError::Config(
                        "a sliding-window counter needs 2 to 1024 counters",
                    ));
                }
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
        let algorithms: Vec<Algorithm> = self.limits.iter().map(|l| l.algorithm).collect();
        let params: Vec<String> = self.limits.iter().flat_map(Script::params).collect();
        let first = self.limits[0];
        // One limit keeps the layout it always had, `<prefix>:<alg>:{<key>}`;
        // a set tags the prefix and key together, so its keys share a
        // slot whatever the key (a tag of the key alone is empty, and then
        // each whole key is hashed, for a key starting with `}`). The tag
        // alone would be ambiguous (`{a:b:c}` is the prefix `a` or `a:b`),
        // so the prefix also comes first, ended by the tag's `{`.
        let all_of = self.limits.len() > 1;
        let (source, label, key_head, limits) = if all_of {
            let limits = self
                .limits
                .iter()
                .enumerate()
                .map(|(i, l)| Limit {
                    suffix: format!(":{i}:{}", l.algorithm.tag()),
                    quota: l.quota,
                })
                .collect();
            (
                scripts::all_of_check(&algorithms),
                format!("{}:all:", self.prefix),
                format!("{0}:all:{{{0}:", self.prefix),
                limits,
            )
        } else {
            let label = format!("{}:{}:", self.prefix, first.algorithm.tag());
            let limits = vec![Limit {
                suffix: String::new(),
                quota: first.quota,
            }];
            (
                scripts::check(first.algorithm),
                label.clone(),
                format!("{label}{{"),
                limits,
            )
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
            (&source, &scripts::settle(&algorithms)),
            params,
            limits,
            (self.timeout, target.is_cluster(), cells),
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
            FailurePolicy::PerInstance if all_of => {
                let locals = self.limits.iter().map(Script::local).collect::<Option<_>>();
                let locals = locals.ok_or(RedisLimitError::Config(
                    "a sliding window whose counters do not fit its quota",
                ))?;
                FailurePolicy::per_instance_all_of(locals)
            }
            FailurePolicy::PerInstance => FailurePolicy::per_instance(first.fallback_quota()),
            policy => policy,
        };
        let batcher = self
            .batching
            .map(|b| batch::Batcher::start(core.clone(), b));
        Ok(RedisLimiter {
            inner: Arc::new(Inner {
                core,
                quota: first.quota,
                max_cost: self.limits.iter().map(|l| l.max_cost).min().unwrap_or(0),
                limits: self.limits.into_boxed_slice(),
                prefix: label,
                key_head,
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
