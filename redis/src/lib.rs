//! Limits shared by many processes through Redis or Redis Cluster.
//!
//! A [`RedisLimiter`] answers the same question as the in-process limiters
//! of this crate — may this key spend `cost` units now? — with the same
//! [`Quota`] and the same [`Decision`], but keeps the state in Redis so
//! that every instance of a service draws from one limit.
//!
//! The in-process [`Limiter`](weir_rate::Limiter) trait is a synchronous step
//! function over state the caller holds; here the state lives in Redis and
//! a decision is a network round trip, so [`RedisLimiter`] offers the same
//! operations as the in-process containers — [`check`](RedisLimiter::check),
//! cost-weighted [`check_n`](RedisLimiter::check_n) with the same
//! [`NeverAllowed`] error — as `async` methods, and each algorithm's script
//! computes what the in-process algorithm of the same name computes
//! (`remaining`, `reset_after`, `retry_after` included; the tests compare
//! them decision by decision).
//!
//! # Design
//!
//! * **Atomicity.** Each algorithm ([`RedisAlgorithm`]: token bucket, GCRA, fixed
//!   window, sliding-window counter) is one Lua script that reads the key,
//!   decides and writes it back. Redis runs a script to completion before
//!   serving anyone else, so two instances can never both spend the last
//!   unit. Scripts are sent as `EVALSHA`; when the server answers `NOSCRIPT`
//!   (its cache is empty after a restart, a failover to a replica that never
//!   saw the script, `SCRIPT FLUSH`, or eviction) the script is loaded and
//!   the call repeated (a few times at most, all within the deadline). On a
//!   cluster the client sends the load to every node, so it fails while
//!   any node is unreachable, and keys of a master that lost its scripts
//!   then go to the failure policy until every node answers again.
//! * **Clock.** Time is the Redis server's `TIME`, read inside the script,
//!   so the clocks of the clients, which drift, never matter. Resolution is
//!   one microsecond. The token bucket and GCRA compute in nanoseconds
//!   from the server's `now` and store a time as a whole second plus the
//!   nanoseconds from it, so no unit is lost to rounding, however high the
//!   rate: with the same request times they decide exactly as the
//!   in-process [`TokenBucket`](weir_rate::TokenBucket) and
//!   [`Gcra`](weir_rate::Gcra) (to the doubles' 2⁻⁵³ for the token bucket's
//!   fractional refill), durations rounded up to whole microseconds. A
//!   server whose clock steps back (a failover to a node that lags) never
//!   takes a fixed window back to an earlier one; a sliding window counts
//!   sub-windows newer than that clock only once it has caught up.
//! * **Keys.** One Redis key per limiter key and limit: `{prefix}:{alg}:{<key>}`,
//!   passed in `KEYS[]` (never built inside a script) and hash-tagged with
//!   the limiter key, so everything about one limiter key lives in one
//!   Cluster slot. The state is one string per key, a few packed doubles
//!   (read with `MGET`, written with one `SET` only when a decision changed
//!   it); the sliding-window counter keeps its whole ring of sub-window
//!   counters in that one string, never in per-window keys that a script
//!   would have to name itself: Redis's time per decision, which every
//!   instance shares, is what the scripts are written for. A key that
//!   itself contains `}` still maps to one slot, just through a shorter tag.
//!   A window algorithm's state is laid out by its window (and a sliding
//!   window's counters): two limiters on one prefix whose fixed or sliding
//!   windows differ in length or counters reset each other's counts, which
//!   switches the limit off while both run (a rolling deploy of a new
//!   window). Give a new window a new prefix; limits, bursts and the other
//!   algorithms change in place.
//! * **TTL.** Every key carries an expiry no earlier than the moment its
//!   state becomes indistinguishable from a fresh key (a full bucket, a
//!   passed arrival time, a past window), so idle keys vanish on their own.
//!   Keys expire at the whole second after that moment (+1 s): while that
//!   deadline does not move, a write overwrites the value in place and
//!   keeps the key's expiry (`SETRANGE`, cheaper in a script than any
//!   `SET`), and otherwise replaces it with a new expiry (`SET … PXAT`);
//!   the deadline is known from the stored state (the rate algorithms
//!   store it), so the script always knows which applies. Idle keys
//!   therefore linger at most two seconds (a refund's mark on a cluster,
//!   below, four timeouts and a second). After a quota change (a new
//!   limiter on the same prefix) keys keep an expiry covering the new
//!   quota: the token bucket and GCRA store their expiry second itself,
//!   and a token bucket that the new quota would refill only after that
//!   second is written again with a later one, even on a denial, so no key
//!   comes back with a full burst early. Needs Redis 6.2 or later (7 or
//!   later for a demoted server to be noticed: 6.2 reports a script's
//!   write on a replica as a script error, not `READONLY`).
//! * **Failure policy.** Every call has a deadline ([`RedisLimiterBuilder::timeout`]).
//!   When Redis is unreachable, slow, or answers with an error, the caller
//!   gets the decision of the configured [`FailurePolicy`] — by default
//!   the same quota kept by each instance on its own, or deny, allow, or
//!   ask an in-process limiter ([`CheckKey`](weir_rate::CheckKey)) — and never waits longer than
//!   the deadline, never sees a panic. No default switches a limit off. After a failure, Redis is skipped
//!   for a short back-off ([`RedisLimiterBuilder::backoff`]) except for one probe call,
//!   so an outage costs callers nothing but the policy's answer; once a
//!   probe succeeds, decisions come from Redis again. Redis absent at
//!   start-up is such a failure, not a build error. A single server's
//!   connection that can never decide again — its server demoted to a replica
//!   (`READONLY`, `MASTERDOWN`) or loading, the socket broken, or a call
//!   unanswered for half a timeout — is dropped, and the next probe
//!   connects again by name, reaching the server the name (a DNS name or
//!   virtual IP of a managed primary) leads to after a failover. A
//!   cluster connection is never dropped whole: the cluster client
//!   remakes its connection to each node on its own, so one faulty master
//!   only sends its own slots to the failure policy. A probe that ends
//!   without an answer (its caller dropped the future mid-call) is handed
//!   to the next caller at once, so a cancelled probe never keeps Redis,
//!   and its limit, out of the way for another back-off.
//! * **All-or-nothing** ([`RedisLimiterBuilder::and`]). Several limits of
//!   one key (per second and per day, say) are decided in one script call:
//!   the script peeks every limit and spends from all of them only if all
//!   allow, as the in-process [`AllOf`](weir_rate::AllOf) does, so a refusal
//!   by one spends nothing of the others (redis-cell's issue 22). Each
//!   limit keeps its state in a Redis key of its own, all of one key in
//!   one Cluster slot (`<prefix>:all:{<prefix>:<key>}:<i>:<alg>`); plain and batched
//!   paths alike. The default failure policy keeps them all-or-nothing
//!   too, in process.
//! * **Refunds and forced charges** ([`RedisLimiter::refund`],
//!   [`RedisLimiter::charge`]). A decision from Redis carries a receipt
//!   naming the server's instant; a refund gives back what that spending
//!   still counts for by [`Limiter::refund`](weir_rate::Limiter::refund)'s
//!   rules, and a charge spends past the limit as
//!   [`Limiter::charge`](weir_rate::Limiter::charge) does, both computed by a
//!   script against the server's `TIME`, on every limit. Each goes where
//!   the spending was counted: while Redis is down, a charge goes to the
//!   failure policy's local limiter, and a refund of a receipt the local
//!   limiter issued goes back to it; a refund of a Redis receipt that
//!   Redis cannot take is an error, never given to the fallback (which
//!   never counted it). On a Redis Cluster a refund is applied once however
//!   often its call reaches Redis (the cluster client resends a call whose
//!   reply it lost, within four timeouts): it leaves a mark key in the
//!   key's slot (`<base>:refund:<token>`, where the key's state is
//!   `<base>` or, for several limits, `<base>:<i>:<alg>`), living four
//!   timeouts plus a second, and a call that finds its mark gives nothing
//!   back. So marks add at most refunds per second × that lifetime keys.
//!   Three cases go unmarked, and a resent refund of theirs gives back
//!   twice: a key whose hash tag is empty (it starts with `}`, so Redis
//!   hashes the whole name and a mark would land in another slot), a
//!   refund that meets its slot migrating between masters (Redis refuses
//!   a script naming a key one side lacks, so it goes again on the state
//!   alone: twice only if an earlier attempt ran and lost its reply), and
//!   a mark evicted early (`volatile-*` eviction policies pick keys with an
//!   expiry first). During a migration a single limit's refund works
//!   wherever its state is; several limits' refund fails (an error, so
//!   nothing is given back) while their keys are split between the two
//!   masters. A single server's connection never sends a call twice, so
//!   its refunds carry no mark.
//! * **Local overload** is not a Redis failure. A caller that finds the
//!   batching queue full, or whose deadline passes while it waits in the
//!   queue behind this instance's own load (no call to Redis failed
//!   meanwhile), is *shed*: denied, with [`Source::Shed`] and
//!   [`RedisLimitError::Overloaded`], whatever the failure policy — a
//!   flood is never let through unchecked — and Redis is not taken for
//!   down, so every other caller is still decided by Redis. A call counts
//!   as a Redis failure when it errs or goes unanswered for half a timeout.
//! * **Batching** ([`RedisLimiterBuilder::batching`]). Concurrent callers' decisions are
//!   queued to one background task that drains the queue into one script
//!   call deciding many keys (grouped by Cluster slot, since a script may
//!   only touch one slot), with a bounded number of calls in flight. Each
//!   decision is the same as on the plain path: the script decides the keys
//!   in queue order, atomically, reading a repeated key once. The cost is
//!   queueing delay under light load, nothing else. The gain is the
//!   per-call work shared by the batch: on both sides a script call has a
//!   fixed cost (the round trip's system calls and wake-ups, the script's
//!   set-up) beside each key's read, decision and write, so the gain grows
//!   with the batch, which closed-loop callers bound (each waits for its
//!   answer before asking again). The report (`cargo xtask bench --only
//!   redis`) gives decisions per call and each side's CPU per decision by
//!   number of callers, and what each per-key step costs inside a script.
//! * **Pre-aggregation** ([`RedisLimiterBuilder::pre_aggregate`], see [`PreAggregation`]).
//!   For hot keys an instance leases `lease` units at once from Redis (one
//!   ordinary decision of cost `lease`) and answers from the lease locally.
//!   It does so only while the key is far from its limit (the last Redis
//!   answer left at least `2 × lease` units) and a lease lives at most
//!   `max_age` (the next one is fetched in the background when half is
//!   used). Its error, documented on [`PreAggregation`], is a shift in time,
//!   never uncounted units: every unit admitted was counted in Redis, at
//!   most `2 × max_age` earlier, so the excess over any window is below
//!   `1.5 × lease` per instance.
//!
//! # Example
//!
//! ```no_run
//! use std::num::NonZeroU32;
//! use std::time::Duration;
//! use weir_rate::{Gcra, Quota};
//! use weir_redis::{RedisLimiter, Target};
//!
//! # async fn demo() -> Result<(), weir_redis::RedisLimitError> {
//! let quota = Quota::per_minute(NonZeroU32::new(100).unwrap());
//! let limiter = RedisLimiter::builder(Gcra::new(quota))
//!     .prefix("api")
//!     .timeout(Duration::from_millis(50))
//!     .connect(Target::server("redis://127.0.0.1:6379/"))
//!     .await?;
//! let decision = limiter.check("customer-42").await;
//! if !decision.is_allowed() {
//!     // 429 with decision.headers("api")
//! }
//! # Ok(())
//! # }
//! ```

mod algorithm;
mod batch;
mod builder;
mod call;
mod conn;
mod error;
mod failure;
mod hot;
mod inner;
mod outcome;
mod scripts;
mod settle;
mod telemetry;

use algorithm::Algorithm;
pub use algorithm::RedisAlgorithm;
pub use batch::Batching;
pub use builder::{MAX_LIMITS, RedisLimiterBuilder};
pub use conn::{Target, cluster_slot};
pub use error::RedisLimitError;
pub use failure::FailurePolicy;
pub use hot::PreAggregation;
use inner::{CallTimer, Inner, Probe};
pub use outcome::{Outcome, Source};

use call::Core;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;
use weir_rate::Quota;
use weir_rate::{Decision, NeverAllowed};

/// Back-off cells: one for a single server; for a cluster one per 64
/// consecutive slots, so a dead master only sends its own slots' keys to
/// the failure policy while the other masters keep deciding.
const CLUSTER_CELLS: usize = 256;

/// A rate limiter whose state lives in Redis. Cheap to clone; clones share
/// the connection, the batching task and the leases.
///
/// See the [module documentation](self) for the design.
///
/// ```no_run
/// use std::num::NonZeroU32;
/// use weir_redis::{RedisLimiter, Target};
/// use weir_rate::{Gcra, Quota};
///
/// # async fn demo() -> Result<(), weir_redis::RedisLimitError> {
/// let quota = Quota::per_second(NonZeroU32::new(10).unwrap());
/// let limiter = RedisLimiter::builder(Gcra::new(quota))
///     .connect(Target::server("redis://127.0.0.1:6379/"))
///     .await?;
/// let shared = limiter.clone(); // clones share the connection
/// assert!(shared.check("alice").await.is_allowed());
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RedisLimiter {
    inner: Arc<Inner>,
}

impl fmt::Debug for RedisLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisLimiter")
            .field("limits", &self.inner.limits)
            .field("prefix", &self.inner.prefix)
            .field("policy", &self.inner.policy)
            .finish_non_exhaustive()
    }
}

impl RedisLimiter {
    /// Start configuring a limiter running `algorithm` (with its quota),
    /// the same value an in-process limiter would take.
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use weir_redis::RedisLimiter;
    /// use weir_rate::{Gcra, Quota};
    ///
    /// let quota = Quota::per_second(NonZeroU32::new(10).unwrap());
    /// let builder = RedisLimiter::builder(Gcra::new(quota)).prefix("login");
    /// # let _ = builder;
    /// ```
    pub fn builder(algorithm: impl RedisAlgorithm) -> RedisLimiterBuilder {
        RedisLimiterBuilder::new(algorithm::script_of(&algorithm))
    }

    /// The largest cost the algorithm can ever allow at once.
    pub(crate) fn max_cost(&self) -> u32 {
        self.inner.max_cost
    }

    /// Every limit's quota, in the order the builder was given them.
    pub fn quotas(&self) -> Vec<Quota> {
        self.inner.limits.iter().map(|l| l.quota).collect()
    }

    /// The Redis keys holding `key`'s state, one per limit: for a single
    /// limit `{prefix}:{alg}:{<key>}`, for an all-of limiter
    /// `<prefix>:all:{<prefix>:<key>}:<i>:<alg>` (see
    /// [`RedisLimiterBuilder::and`]).
    pub fn redis_keys(&self, key: &str) -> Vec<String> {
        let base = self.base_key(key);
        if self.inner.limits.len() == 1 {
            return vec![base];
        }
        self.inner
            .limits
            .iter()
            .enumerate()
            .map(|(i, l)| format!("{base}:{i}:{}", l.algorithm.tag()))
            .collect()
    }

    /// What `key`'s Redis keys start with (all of them, for one limit):
    /// their hash tag included, so it names their Cluster slot.
    fn base_key(&self, key: &str) -> String {
        let head = &self.inner.key_head;
        let mut s = String::with_capacity(head.len() + key.len() + 1);
        s.push_str(head);
        s.push_str(key);
        s.push('}');
        s
    }

    /// The back-off cell of a key base: one per 64 Cluster slots.
    fn cell_of(&self, base: &str) -> usize {
        let cells = self.inner.down_until.len();
        if cells > 1 {
            usize::from(cluster_slot(base)) * cells / 16384
        } else {
            0
        }
    }

    /// Spend one unit for `key`. Always answers within the timeout (with
    /// pre-aggregation, within three: a wait for a lease being fetched, a
    /// fetch of its own, then the plain call, each with a timeout of its
    /// own): from Redis, a lease, or the failure policy (or a denial when
    /// shed).
    pub async fn check(&self, key: &str) -> Decision {
        match self.check_verbose(key, 1).await {
            Ok(v) => v.decision,
            // A cost of one is never beyond the max cost (limit and burst are
            // at least one); deny rather than panic if that ever changes.
            Err(_) => self.closed(),
        }
    }

    /// Spend `cost` units for `key`; an error only when `cost` exceeds
    /// what the quota can ever allow at once.
    ///
    /// # Errors
    ///
    /// [`NeverAllowed`] when `cost` exceeds what the limiter can ever allow
    /// at once (its max cost); a denial is an `Ok` decision.
    pub async fn check_n(&self, key: &str, cost: u32) -> Result<Decision, NeverAllowed> {
        self.check_verbose(key, cost).await.map(|v| v.decision)
    }

    /// Like [`check_n`](Self::check_n), also telling who decided and why
    /// the failure policy did, if it did.
    ///
    /// # Errors
    ///
    /// [`NeverAllowed`] when `cost` exceeds what the limiter can ever allow
    /// at once (its max cost); a denial is an `Ok` decision.
    pub async fn check_verbose(&self, key: &str, cost: u32) -> Result<Outcome, NeverAllowed> {
        NeverAllowed::check(cost, self.inner.max_cost)?;
        let outcome = self.decide(key, cost).await;
        self.inner.outcomes.decided(
            &self.inner.prefix,
            outcome.source,
            outcome.decision.is_allowed(),
        );
        Ok(outcome)
    }

    /// [`check_verbose`](Self::check_verbose) for a cost within the max cost.
    async fn decide(&self, key: &str, cost: u32) -> Outcome {
        if let Some(hot) = &self.inner.hot {
            if let Some(v) = hot.check(self, key, cost).await {
                return v;
            }
        }
        match self.try_check_n(key, cost).await {
            Ok(d) => Outcome {
                decision: d,
                source: Source::Redis,
                error: None,
            },
            // Shed, whatever the failure policy: allowing the excess of a
            // flood would let it through unchecked.
            Err(e @ RedisLimitError::Overloaded) => Outcome {
                decision: self.closed(),
                source: Source::Shed,
                error: Some(e),
            },
            Err(e) => self.on_failure(key, cost, e),
        }
    }

    /// Wait until `key` may spend `cost` units, then spend them: each
    /// denial (from Redis, a lease or the failure policy) is slept off for
    /// its `Retry-After` plus `jitter` (see [`wait`](weir_rate::wait)). A wait
    /// dropped while it sleeps spends nothing more than the checks it saw
    /// answered, which were all denials; one dropped while a check is on
    /// its way to Redis may have spent that check's units (never more).
    ///
    /// # Errors
    ///
    /// [`NeverAllowed`] at once for a cost the quota can never allow.
    pub async fn until_ready(
        &self,
        key: &str,
        cost: u32,
        jitter: weir_rate::wait::Jitter,
    ) -> Result<Decision, NeverAllowed> {
        weir_rate::wait::until_allowed(|| self.check_n(key, cost), jitter).await
    }

    /// Ask Redis only: no lease, no failure policy (the back-off after a
    /// failure still applies). For callers that handle errors themselves.
    ///
    /// # Errors
    ///
    /// Every [`RedisLimitError`]: Redis unreachable, slow or failing, a
    /// reply that cannot be read, this instance overloaded, or a cost the
    /// quota can never allow.
    pub async fn try_check_n(&self, key: &str, cost: u32) -> Result<Decision, RedisLimitError> {
        NeverAllowed::check(cost, self.inner.max_cost).map_err(RedisLimitError::NeverAllowed)?;
        self.ask(key, cost).await
    }

    /// One Redis decision, through the batcher if there is one, honouring
    /// the back-off.
    pub(crate) async fn ask(&self, key: &str, cost: u32) -> Result<Decision, RedisLimitError> {
        let base = self.base_key(key);
        let cell = self.cell_of(&base);
        let core = &self.inner.core;
        self.on_redis(cell, |deadline, asked| async move {
            match &self.inner.batcher {
                Some(b) => b.submit(base, cost, deadline, cell, asked).await,
                None => core
                    .eval(&[base.as_str()], &[cost], deadline)
                    .await
                    .and_then(|mut v| {
                        v.pop()
                            .ok_or_else(|| RedisLimitError::BadReply("no record".to_owned()))
                    }),
            }
        })
        .await
    }

    /// A call to Redis for back-off cell `cell_index` (`call` gets its
    /// deadline and the time it was asked, in ns since the core's epoch),
    /// or [`RedisLimitError::BackingOff`] while the back-off after a
    /// failure there holds; records a failure, or the end of one.
    async fn on_redis<T, F, Fut>(&self, cell_index: usize, call: F) -> Result<T, RedisLimitError>
    where
        F: FnOnce(Instant, u64) -> Fut,
        Fut: Future<Output = Result<T, RedisLimitError>>,
    {
        let inner = &*self.inner;
        let cell = &inner.down_until[cell_index];
        // One clock reading serves the back-off check and the deadline.
        let asked = Instant::now();
        let now = inner.core.nanos_at(asked);
        let down = cell.load(Ordering::Relaxed);
        let mut probe = None;
        if down != 0 {
            // One caller per back-off period probes; the rest skip Redis.
            let claimed = now.saturating_add(inner.backoff_nanos());
            if now < down
                || cell
                    .compare_exchange(down, claimed, Ordering::Relaxed, Ordering::Relaxed)
                    .is_err()
            {
                return Err(RedisLimitError::BackingOff);
            }
            probe = Some(Probe {
                cell,
                claimed,
                expired: down,
            });
        }
        let deadline = inner.core.deadline(asked);
        let timed = CallTimer {
            limiter: self,
            started: asked,
        };
        let result = call(deadline, now).await;
        match &result {
            Ok(_) => {
                if cell.load(Ordering::Relaxed) != 0 {
                    cell.store(0, Ordering::Relaxed);
                }
            }
            // This instance's own saturation says nothing about Redis: a
            // probe that met it is handed on (by dropping it below).
            Err(RedisLimitError::Overloaded) => return result,
            Err(_) => {
                let until = inner.now_nanos().saturating_add(inner.backoff_nanos());
                cell.store(until.max(1), Ordering::Relaxed);
            }
        }
        if let Some(probe) = probe {
            probe.answered();
        }
        drop(timed);
        result
    }

    /// Whether Redis is being skipped for `key` after a recent failure.
    pub fn is_backing_off(&self, key: &str) -> bool {
        let i = self.cell_of(&self.base_key(key));
        let down = self.inner.down_until[i].load(Ordering::Relaxed);
        down != 0 && self.inner.now_nanos() < down
    }
}

/// The Redis limiter decides for any key it can name: the key's `Display`
/// form becomes the Redis key (inside the limiter's hash tag), so the
/// tower layer can limit by IP address, user id or any other key.
impl<Q: fmt::Display + ?Sized> weir_rate::CheckKeyAsync<Q> for RedisLimiter {
    type Future = Pin<Box<dyn Future<Output = Result<Decision, NeverAllowed>> + Send>>;

    fn check_key_async(&self, key: &Q, cost: u32) -> Self::Future {
        let limiter = self.clone();
        let key = key.to_string();
        Box::pin(async move { limiter.check_n(&key, cost).await })
    }
}

/// The README's examples, run as doc tests so it cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
mod readme {}
