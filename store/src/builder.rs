//! [`StoreLimiterBuilder`]: a store-backed limiter's settings with their defaults,
//! checked and turned into a [`StoreLimiter`] once, at
//! [`connect`](StoreLimiterBuilder::connect), so that nothing on the check path has to
//! validate or compute them.

use crate::backend::{Backend, Plan};
use crate::batch::{self, Batcher, Batching};
use crate::caller::Caller;
use crate::error::ConfigError;
use crate::failure::FailurePolicy;
use crate::health::Health;
use crate::leases::{Leases, PreAggregation};
use crate::limit::{Kind, Limit, StoreAlgorithm};
use crate::limiter::StoreLimiter;
use crate::limiter::{Inner, Tuned};
use crate::telemetry::AnswerMetrics;
use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;
use weir_primitives::sync::RwLock;

/// The most limits an all-of limiter decides together ([`StoreLimiterBuilder::and`]).
pub const MAX_LIMITS: usize = 16;

impl<B: Backend> StoreLimiter<B> {
    /// Start configuring a limiter keeping `algorithm` (with its quota) on
    /// the store `B`: the same value an in-process limiter would take.
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use std::time::Duration;
    /// use weir_rate::{Gcra, Quota};
    /// use weir_store::{FailurePolicy, StoreLimiter};
    /// # use std::future::{Future, ready};
    /// # use weir_rate::{Decision, Receipt};
    /// # use weir_store::{Backend, ConfigError, Placement, Plan, StoreError};
    /// # struct Yes;
    /// # impl Backend for Yes {
    /// #     const NAME: &'static str = "yes";
    /// #     type Target = ();
    /// #     type Key = String;
    /// #     async fn connect(_: (), _: &Plan) -> Result<(Self, bool), ConfigError> { Ok((Yes, true)) }
    /// #     fn place(&self, key: &str) -> Placement<String> { Placement::alone(key.to_owned()) }
    /// #     fn decide(&self, keys: &[String], _: &[u32]) -> impl Future<Output = Result<Vec<Result<Decision, StoreError>>, StoreError>> + Send {
    /// #         ready(Ok(vec![Ok(Decision::allow(1, Duration::from_secs(1), 0, Duration::ZERO)); keys.len()]))
    /// #     }
    /// #     fn charge(&self, _: &String, cost: u32) -> impl Future<Output = Result<Receipt, StoreError>> + Send { ready(Ok(Receipt::remote(0, cost))) }
    /// #     fn refund(&self, _: &String, _: Receipt) -> impl Future<Output = Result<(), StoreError>> + Send { ready(Ok(())) }
    /// # }
    ///
    /// let quota = Quota::per_minute(NonZeroU32::new(100).unwrap());
    /// let builder = StoreLimiter::<Yes>::builder(Gcra::new(quota))
    ///     .prefix("api")
    ///     .timeout(Duration::from_millis(50))
    ///     .on_failure(FailurePolicy::Closed);
    /// // `builder.connect(target).await` makes the limiter.
    /// # let _ = builder;
    /// ```
    pub fn builder(algorithm: impl StoreAlgorithm) -> StoreLimiterBuilder<B> {
        Self::builder_with(vec![Limit::of(&algorithm)])
    }

    /// A builder of `limits` (all-or-nothing when there are several).
    pub(crate) fn builder_with(limits: Vec<Limit>) -> StoreLimiterBuilder<B> {
        StoreLimiterBuilder {
            plan: Plan::new(limits),
            name: None,
            backoff: Duration::from_millis(100),
            policy: FailurePolicy::PerInstance,
            batching: None,
            leases: None,
            store: PhantomData,
        }
    }
}

/// Configures and connects a [`StoreLimiter`]; from
/// [`StoreLimiter::builder`].
#[must_use = "a builder does nothing until `connect` is awaited"]
pub struct StoreLimiterBuilder<B: Backend> {
    plan: Plan,
    name: Option<String>,
    backoff: Duration,
    policy: FailurePolicy,
    batching: Option<Batching>,
    leases: Option<PreAggregation>,
    store: PhantomData<fn() -> B>,
}

impl<B: Backend> std::fmt::Debug for StoreLimiterBuilder<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreLimiterBuilder")
            .field("store", &B::NAME)
            .field("plan", &self.plan)
            .field("name", &self.name)
            .field("backoff", &self.backoff)
            .field("policy", &self.policy)
            .field("batching", &self.batching)
            .field("leases", &self.leases)
            .finish()
    }
}

impl<B: Backend> StoreLimiterBuilder<B> {
    /// Add a limit that every key must also meet: the limiter then decides
    /// all of its limits of a key **all-or-nothing**, in one store call —
    /// a request is allowed only if every limit allows it, and only then
    /// is it spent from all of them, so a gateway limiting per second and
    /// per day does not spend the per-second budget on requests the daily
    /// limit refuses. The decision is the in-process
    /// [`AllOf`](weir_rate::AllOf)'s: the binding limit's limit, window and
    /// remaining, the latest reset and retry. Costs above the smallest
    /// max cost are [`NeverAllowed`](weir_rate::NeverAllowed). At most
    /// [`MAX_LIMITS`] limits, on a store that can decide them together
    /// ([`connect`](Self::connect) says when it cannot: Memcached decides
    /// windows only, on counters, never looser than exact).
    pub fn and(mut self, algorithm: impl StoreAlgorithm) -> Self {
        self.plan.limits.push(Limit::of(&algorithm));
        self
    }

    /// The prefix of every store key (default `weir`); each store says
    /// which characters it allows. Use one prefix per policy: two quotas
    /// on one prefix and algorithm share state.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.plan.prefix = prefix.into();
        self
    }

    /// The limiter's name in metrics and logs (default: its prefix). Give
    /// it the policy name of the layer in front of it, so both count under
    /// one `limiter` label.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// The deadline of one decision, connection set-up included
    /// (default 100 ms).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.plan.timeout = timeout;
        self
    }

    /// How long to skip the store after a failure, except for one probe
    /// call per period (default 100 ms).
    pub fn backoff(mut self, backoff: Duration) -> Self {
        self.backoff = backoff;
        self
    }

    /// What callers get when the store cannot answer (default
    /// [`FailurePolicy::PerInstance`]: each instance keeps the quota on
    /// its own).
    pub fn on_failure(mut self, policy: FailurePolicy) -> Self {
        self.policy = policy;
        self
    }

    /// Batch concurrent decisions into shared store calls.
    pub fn batching(mut self, batching: Batching) -> Self {
        self.batching = Some(batching);
        self
    }

    /// Answer hot keys from local leases ([`PreAggregation`]).
    pub fn pre_aggregate(mut self, leases: PreAggregation) -> Self {
        self.leases = Some(leases);
        self
    }

    /// Connect to `target` and start the batching task if configured.
    /// Must be called inside a tokio runtime.
    ///
    /// The store being down is not an error here: when it does not answer
    /// (within the timeout, at least one second), the limiter is returned
    /// all the same, answers by its failure policy, logs that the store is
    /// unreachable, and connects at the first probe after the back-off. A
    /// service restarted during a store incident comes up, limited
    /// meanwhile.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] for settings that cannot work (a zero timeout, zero
    /// batching sizes, bad pre-aggregation settings, a sliding window
    /// outside 2 to 1024 counters, more than [`MAX_LIMITS`] limits), for
    /// what the store cannot run, and when the store refuses the target's
    /// credentials or certificates (see each store).
    pub async fn connect(self, target: B::Target) -> Result<StoreLimiter<B>, ConfigError> {
        self.check()?;
        let (backend, connected) = B::connect(target, &self.plan).await?;
        let limits = self.plan.limits;
        let (policy, fallback) = self.policy.concrete(&limits)?;
        let name = self.name.unwrap_or_else(|| self.plan.prefix.clone());
        let prefix = self.plan.prefix.clone();
        let caller = Arc::new(Caller {
            timeout: self.plan.timeout,
            health: Health::new(backend.cells(), self.backoff, !connected),
            metrics: AnswerMetrics::new(name.clone(), B::NAME),
            backend,
        });
        if !connected {
            tracing::warn!(
                limiter = %name,
                store = B::NAME,
                server = %caller.backend.describe(0),
                policy = ?policy,
                "store unreachable at start-up: the failure policy decides until it answers"
            );
        }
        let batcher = self
            .batching
            .map(|b| Batcher::start(Arc::clone(&caller), b));
        let tuned = Tuned::new(&limits);
        let leases = self.leases.map(|cfg| {
            Arc::new(Leases::new(
                cfg,
                tuned.quota,
                tuned.max_cost,
                caller.timeout,
            ))
        });
        Ok(StoreLimiter {
            inner: Arc::new(Inner {
                caller,
                tuned: RwLock::new(tuned),
                name,
                prefix,
                policy,
                fallback,
                batcher,
                leases,
                waiting_refunds: AtomicUsize::new(0),
            }),
        })
    }

    /// The settings no store can work with.
    fn check(&self) -> Result<(), ConfigError> {
        if self.plan.timeout.is_zero() {
            return Err(ConfigError::Invalid("a zero timeout"));
        }
        if self.plan.limits.len() > MAX_LIMITS {
            return Err(ConfigError::Invalid("more than 16 limits in one limiter"));
        }
        for limit in &self.plan.limits {
            if let Kind::SlidingWindow { counters, .. } = limit.kind()
                && !(2..=weir_rate::SlidingWindow::MAX_COUNTERS).contains(&counters)
            {
                return Err(ConfigError::Invalid(
                    "a sliding-window counter needs 2 to 1024 counters",
                ));
            }
        }
        if let Some(b) = &self.batching {
            if b.max_batch == 0 || b.max_in_flight == 0 || b.queue == 0 {
                return Err(ConfigError::Invalid("a zero batching size"));
            }
            if b.queue > batch::MAX_QUEUE || b.max_in_flight > batch::MAX_QUEUE {
                return Err(ConfigError::Invalid(
                    "a batching queue or call limit above 2^61 - 1",
                ));
            }
        }
        if let Some(leases) = &self.leases {
            leases.validate()?;
        }
        Ok(())
    }
}
