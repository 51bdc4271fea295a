//! Limits shared by many processes through Redis or Redis Cluster.
//!
//! A [`RedisLimiter`] answers the same question as the in-process limiters
//! of this crate — may this key spend `cost` units now? — with the same
//! [`Quota`] and the same [`Decision`], but keeps the state in Redis so
//! that every instance of a service draws from one limit.
//!
//! The in-process [`Limiter`](crate::Limiter) trait is a synchronous step
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
//! * **Atomicity.** Each algorithm ([`Algorithm`]: token bucket, GCRA, fixed
//!   window, sliding-window counter) is one Lua script that reads the key,
//!   decides and writes it back. Redis runs a script to completion before
//!   serving anyone else, so two instances can never both spend the last
//!   unit. Scripts are sent as `EVALSHA`; when the server answers `NOSCRIPT`
//!   (its cache is empty after a restart, a failover to a replica that never
//!   saw the script, `SCRIPT FLUSH`, or eviction) the script is loaded and
//!   the call repeated (a few times at most, all within the deadline).
//! * **Clock.** Time is the Redis server's `TIME`, read inside the script,
//!   so the clocks of the clients, which drift, never matter. Resolution is
//!   one microsecond. The token bucket and GCRA compute in nanoseconds
//!   from the server's `now` and store a time as a whole second plus the
//!   nanoseconds from it, so no unit is lost to rounding, however high the
//!   rate: with the same request times they decide exactly as the
//!   in-process [`TokenBucket`](crate::TokenBucket) and
//!   [`Gcra`](crate::Gcra) (to the doubles' 2⁻⁵³ for the token bucket's
//!   fractional refill), durations rounded up to whole microseconds.
//! * **Keys.** One Redis key per limiter key: `{prefix}:{alg}:{<key>}`,
//!   passed in `KEYS[]` (never built inside a script) and hash-tagged with
//!   the limiter key, so everything about one limiter key lives in one
//!   Cluster slot. The state is one string per key, a few packed doubles
//!   (read with `MGET`, written with one `SET` only when a decision changed
//!   it); the sliding-window counter keeps its whole ring of sub-window
//!   counters in that one string, never in per-window keys that a script
//!   would have to name itself. Redis's time per decision, which every
//!   instance shares, is what the scripts are written for: the measured
//!   costs behind this layout are in the `scripts` module's source. A key that itself contains `}`
//!   still maps to one slot, just through a shorter tag.
//! * **TTL.** Every key carries an expiry no earlier than the moment its
//!   state becomes indistinguishable from a fresh key (a full bucket, a
//!   passed arrival time, a past window), so idle keys vanish on their own.
//!   Keys expire at the whole second after that moment (+1 s): while that
//!   deadline does not move, a write overwrites the value in place and
//!   keeps the key's expiry (`SETRANGE`, cheaper in a script than any
//!   `SET`), and otherwise replaces it with a new expiry (`SET … PXAT`);
//!   the deadline is known from the stored state (the rate algorithms
//!   store it), so the script always knows which applies. Idle keys
//!   therefore linger at most two seconds. After a quota change (a new
//!   limiter on the same prefix) keys keep an expiry covering the new
//!   quota: the token bucket and GCRA store their expiry second itself,
//!   and a token bucket that the new quota would refill only after that
//!   second is written again with a later one, even on a denial, so no key
//!   comes back with a full burst early. Needs Redis 6.2 or later.
//! * **Failure policy.** Every call has a deadline ([`Builder::timeout`]).
//!   When Redis is unreachable, slow, or answers with an error, the caller
//!   gets the decision of the configured [`FailurePolicy`] — allow, deny, or
//!   ask an in-process [`Fallback`] limiter — and never waits longer than
//!   the deadline, never sees a panic. After a failure, Redis is skipped
//!   for a short back-off ([`Builder::backoff`]) except for one probe call,
//!   so an outage costs callers nothing but the policy's answer; once a
//!   probe succeeds, decisions come from Redis again.
//! * **Local overload** is not a Redis failure. A caller that finds the
//!   batching queue full, or whose deadline passes while it waits in the
//!   queue behind this instance's own load (no call to Redis failed
//!   meanwhile), is *shed*: denied, with [`Source::Shed`] and
//!   [`RedisLimitError::Overloaded`], whatever the failure policy — a
//!   flood is never let through unchecked — and Redis is not taken for
//!   down, so every other caller is still decided by Redis. A call counts
//!   as a Redis failure when it errs or goes unanswered for half a timeout.
//! * **Batching** ([`Builder::batching`]). Concurrent callers' decisions are
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
//! * **Pre-aggregation** ([`Builder::pre_aggregate`], see [`PreAggregation`]).
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
//! use weir_rate::Quota;
//! use weir_rate::redis::{Algorithm, FailurePolicy, RedisLimiter, Target};
//!
//! # async fn demo() -> Result<(), weir_rate::redis::RedisLimitError> {
//! let quota = Quota::per_minute(NonZeroU32::new(100).unwrap());
//! let limiter = RedisLimiter::builder(Algorithm::Gcra, quota)
//!     .prefix("api")
//!     .timeout(Duration::from_millis(50))
//!     .on_failure(FailurePolicy::Open)
//!     .connect(Target::server("redis://127.0.0.1:6379/"))
//!     .await?;
//! let decision = limiter.check("customer-42").await;
//! if !decision.is_allowed() {
//!     // 429 with decision.headers("api")
//! }
//! # Ok(())
//! # }
//! ```

mod batch;
mod conn;
mod hot;
mod scripts;

pub use conn::Target;
pub use hot::PreAggregation;

use crate::decision::{Decision, NeverAllowed};
use crate::quota::Quota;
use conn::Conn;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The Redis Cluster slot of a Redis key: CRC16 (XMODEM) of its hash tag
/// (the text between the first `{` and the next `}`, when non-empty) or of
/// the whole key, modulo 16384 — what `CLUSTER KEYSLOT` answers.
///
/// ```
/// use weir_rate::redis::cluster_slot;
///
/// assert_eq!(cluster_slot("123456789"), 12739); // the CRC16/XMODEM check value
/// assert_eq!(cluster_slot("api:gcra:{user1}"), cluster_slot("user1"));
/// ```
pub fn cluster_slot(key: &str) -> u16 {
    let b = key.as_bytes();
    let tagged = b.iter().position(|&c| c == b'{').and_then(|open| {
        let rest = &b[open + 1..];
        let close = rest.iter().position(|&c| c == b'}')?;
        (close > 0).then(|| &rest[..close])
    });
    let mut crc: u16 = 0;
    for &byte in tagged.unwrap_or(b) {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

/// Back-off cells: one for a single server; for a cluster one per 64
/// consecutive slots, so a dead master only sends its own slots' keys to
/// the failure policy while the other masters keep deciding.
const CLUSTER_CELLS: usize = 256;

/// Which algorithm the Redis script runs. All read the [`Quota`] the way
/// the in-process limiters do: window algorithms allow `limit` per
/// `window`; rate algorithms refill at `limit / window` up to `burst`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Algorithm {
    /// A bucket of `burst` tokens refilled continuously (fractional tokens
    /// kept). State: one time, when the bucket was empty.
    TokenBucket,
    /// The generic cell rate algorithm: one theoretical arrival time per
    /// key, as redis-cell and governor keep.
    Gcra,
    /// `limit` units per window of the server clock; up to 2× at a window
    /// boundary.
    FixedWindow,
    /// The sliding-window counter over `counters` counters (`2` is the
    /// classic current + weighted previous window).
    SlidingWindow {
        /// Number of counters, at least 2.
        counters: u32,
    },
}

impl Algorithm {
    fn tag(self) -> &'static str {
        match self {
            Self::TokenBucket => "tb",
            Self::Gcra => "gcra",
            Self::FixedWindow => "fw",
            Self::SlidingWindow { .. } => "sw",
        }
    }

    /// The largest cost that can ever be allowed at once.
    fn capacity(self, quota: &Quota) -> u32 {
        match self {
            Self::TokenBucket | Self::Gcra => quota.burst(),
            Self::FixedWindow | Self::SlidingWindow { .. } => quota.limit(),
        }
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TokenBucket => f.write_str("token bucket"),
            Self::Gcra => f.write_str("GCRA"),
            Self::FixedWindow => f.write_str("fixed window"),
            Self::SlidingWindow { counters } => {
                write!(f, "sliding-window counter ({counters} counters)")
            }
        }
    }
}

/// An in-process limiter to ask while Redis cannot answer
/// ([`FailurePolicy::Local`]). Any keyed limiter fits; a closure does too.
///
/// ```
/// use std::sync::Arc;
/// use weir_rate::redis::{FailurePolicy, Fallback};
/// use weir_rate::Decision;
///
/// struct Deny;
/// impl Fallback for Deny {
///     fn check_n(&self, _key: &str, _cost: u32) -> Option<Decision> {
///         None // no local answer: the limiter falls back to fail-closed
///     }
/// }
/// let policy = FailurePolicy::Local(Arc::new(Deny));
/// # let _ = policy;
/// ```
pub trait Fallback: Send + Sync {
    /// Decide `cost` units for `key` locally; `None` when it cannot (the
    /// limiter then denies, as [`FailurePolicy::Closed`]).
    fn check_n(&self, key: &str, cost: u32) -> Option<Decision>;
}

impl<F> Fallback for F
where
    F: Fn(&str, u32) -> Option<Decision> + Send + Sync,
{
    fn check_n(&self, key: &str, cost: u32) -> Option<Decision> {
        self(key, cost)
    }
}

/// A [`KeyedLimiter`](crate::KeyedLimiter) keyed by `String` is the usual
/// fallback: each instance then enforces its own quota on its own traffic.
///
/// ```
/// use std::num::NonZeroU32;
/// use std::sync::Arc;
/// use weir_rate::redis::{FailurePolicy, Fallback};
/// use weir_rate::{Gcra, KeyedLimiter, Quota};
///
/// // 100 per second shared by 4 instances: 25 per instance while Redis is down.
/// let local = KeyedLimiter::<String, _>::new(Gcra::new(Quota::per_second(NonZeroU32::new(25).unwrap())));
/// assert!(Fallback::check_n(&local, "k", 1).is_some_and(|d| d.is_allowed()));
/// let policy = FailurePolicy::Local(Arc::new(local));
/// # let _ = policy;
/// ```
impl<L, C> Fallback for crate::KeyedLimiter<String, L, C>
where
    L: crate::Limiter + Clone,
    C: crate::clock::Clock,
    crate::KeyedLimiter<String, L, C>: Send + Sync,
{
    fn check_n(&self, key: &str, cost: u32) -> Option<Decision> {
        // Borrowed: allocates only when the key first spends.
        crate::KeyedLimiter::check_n(self, key, cost).ok()
    }
}

/// What callers get when Redis is slow, unreachable, or failing.
#[derive(Clone, Default)]
#[non_exhaustive]
pub enum FailurePolicy {
    /// Allow the request (availability over protection). The decision
    /// reports the full limit as remaining.
    #[default]
    Open,
    /// Deny the request (protection over availability), with a
    /// `Retry-After` of one second.
    Closed,
    /// Ask an in-process limiter, so each instance enforces the limit
    /// on its own share of the traffic (typically `limit / instances`).
    Local(Arc<dyn Fallback>),
}

impl fmt::Debug for FailurePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Open => f.write_str("Open"),
            Self::Closed => f.write_str("Closed"),
            Self::Local(_) => f.write_str("Local(..)"),
        }
    }
}

/// Where a decision came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Source {
    /// A script run on Redis.
    Redis,
    /// A lease held locally ([`PreAggregation`]).
    Lease,
    /// [`FailurePolicy::Open`].
    FailOpen,
    /// [`FailurePolicy::Closed`] (also a [`Fallback`] that had no answer).
    FailClosed,
    /// [`FailurePolicy::Local`].
    Local,
    /// Shed: this instance had more decisions to send to Redis than it
    /// could ([`RedisLimitError::Overloaded`]). A denial with a
    /// `Retry-After` of one second, whatever the failure policy; Redis is
    /// not taken for down.
    Shed,
}

/// A decision, where it came from, and the error that forced the failure
/// policy (or shed the caller), if one did.
#[derive(Debug, Clone)]
#[must_use = "a verdict holds the decision: drop it and the answer is lost"]
pub struct Verdict {
    /// The decision, as the in-process limiters give it.
    pub decision: Decision,
    /// Who decided.
    pub source: Source,
    /// Why the failure policy answered instead of Redis, or why the caller
    /// was shed.
    pub error: Option<RedisLimitError>,
}

/// Why Redis could not decide.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum RedisLimitError {
    /// The call did not complete within the configured timeout.
    Timeout(Duration),
    /// Redis, the connection, or the script returned an error.
    Redis(Arc<redis::RedisError>),
    /// The reply did not have the expected shape.
    BadReply(String),
    /// Skipped during the back-off after a failure.
    BackingOff,
    /// This instance could not send the decision in time: the batching
    /// queue was full, the caller's deadline passed while it was queued
    /// behind this instance's own load (no call to Redis failing
    /// meanwhile), or the batching task is gone. Local saturation, not a
    /// Redis failure: it starts no back-off, and
    /// [`check_verbose`](RedisLimiter::check_verbose) answers it with a
    /// denial from [`Source::Shed`], never with the failure policy.
    Overloaded,
    /// The cost can never be allowed.
    NeverAllowed(NeverAllowed),
    /// The builder's settings cannot work.
    Config(&'static str),
}

impl fmt::Display for RedisLimitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Timeout(d) => write!(f, "Redis did not answer within {d:?}"),
            Self::Redis(e) => write!(f, "Redis error: {e}"),
            Self::BadReply(s) => write!(f, "unexpected reply from the rate-limit script: {s}"),
            Self::BackingOff => f.write_str("Redis skipped while backing off after a failure"),
            Self::Overloaded => {
                f.write_str("shed: more decisions than this instance could send to Redis")
            }
            Self::NeverAllowed(n) => n.fmt(f),
            Self::Config(s) => write!(f, "invalid Redis limiter settings: {s}"),
        }
    }
}

impl std::error::Error for RedisLimitError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Redis(e) => Some(&**e),
            Self::NeverAllowed(n) => Some(n),
            _ => None,
        }
    }
}

impl From<redis::RedisError> for RedisLimitError {
    fn from(e: redis::RedisError) -> Self {
        Self::Redis(Arc::new(e))
    }
}

/// One key's answer as the script returns it, before it becomes a
/// [`Decision`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Raw {
    pub(crate) allowed: bool,
    pub(crate) remaining: u64,
    pub(crate) reset_after_us: u64,
    pub(crate) retry_after_us: u64,
}

/// Settings for the batching path ([`Builder::batching`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Batching {
    /// Most decisions in one script call.
    pub max_batch: usize,
    /// Most script calls in flight at once (per limiter).
    pub max_in_flight: usize,
    /// Queue length; callers finding it full are shed
    /// ([`Source::Shed`]).
    pub queue: usize,
}

impl Default for Batching {
    fn default() -> Self {
        Self {
            max_batch: 256,
            max_in_flight: 2,
            queue: 16_384,
        }
    }
}

/// The part of a limiter that talks to Redis, shared with the batcher.
pub(crate) struct Core {
    conn: Conn,
    script: redis::Script,
    params: Vec<String>,
    timeout: Duration,
    cluster: bool,
    /// The origin of the nanosecond times below and of the back-off's.
    epoch: Instant,
    /// Per back-off cell: when a script call there last failed (an error,
    /// or no answer within half a timeout), in ns since `epoch`; 0 = never.
    /// Tells a caller late in the batching queue behind a failing Redis
    /// from one late because this instance had too much to send.
    failed: Box<[AtomicU64]>,
}

impl Core {
    /// Nanoseconds from `epoch` to `at` (saturating: ~584 years).
    fn nanos_at(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX)
    }

    /// Record that a script call for `cell` failed at `at`.
    pub(crate) fn failed_at(&self, cell: usize, at: Instant) {
        self.failed[cell].fetch_max(self.nanos_at(at).max(1), Ordering::Relaxed);
    }

    /// The error of a caller (on `cell`, asked at `asked` ns) whose deadline
    /// passed before Redis answered it, its call not being slow itself: a
    /// timeout if a call for its cell failed meanwhile (it waited behind a
    /// failing Redis), otherwise [`RedisLimitError::Overloaded`] (it waited
    /// behind this instance's own load).
    pub(crate) fn late(&self, cell: usize, asked: u64) -> RedisLimitError {
        if self.failed[cell].load(Ordering::Relaxed) >= asked.max(1) {
            RedisLimitError::Timeout(self.timeout)
        } else {
            RedisLimitError::Overloaded
        }
    }

    /// The deadline of a decision asked at `now`: the configured timeout
    /// later (a timeout too long to represent never comes).
    pub(crate) fn deadline(&self, now: Instant) -> Instant {
        now.checked_add(self.timeout)
            .unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 24 * 3600))
    }

    /// One script call deciding `keys[i]` at `costs[i]`, given up at
    /// `deadline`. Equal keys must be adjacent (see [`scripts`]).
    pub(crate) async fn eval(
        &self,
        keys: &[&str],
        costs: &[u32],
        deadline: Instant,
    ) -> Result<Vec<Raw>, RedisLimitError> {
        tokio::time::timeout_at(
            tokio::time::Instant::from_std(deadline),
            self.query(keys, costs),
        )
        .await
        .unwrap_or(Err(RedisLimitError::Timeout(self.timeout)))
    }

    /// One script call, with no deadline of its own (the batcher bounds
    /// it by its callers' deadlines).
    pub(crate) async fn query(
        &self,
        keys: &[&str],
        costs: &[u32],
    ) -> Result<Vec<Raw>, RedisLimitError> {
        debug_assert!(
            keys.iter()
                .enumerate()
                .all(|(i, k)| i == 0 || keys[i - 1] == *k || !keys[..i].contains(k)),
            "equal keys must be adjacent"
        );
        let mut cmd = redis::Cmd::new();
        cmd.arg("EVALSHA")
            .arg(self.script.get_hash())
            .arg(keys.len())
            .arg(keys)
            .arg(&self.params);
        // One cost stands for all when they are equal (the usual case), which
        // spares Redis an argument and a number to parse per decision.
        match costs {
            [first, rest @ ..] if rest.iter().all(|c| c == first) => cmd.arg(first),
            _ => cmd.arg(costs),
        };
        let mut conn = self.conn.clone();
        // On NOSCRIPT the script is loaded and the call sent once more; a
        // second NOSCRIPT (the cache emptied again in between, e.g.
        // repeated `SCRIPT FLUSH` or a failover) is retried a few times,
        // all within the same deadline.
        let attempts = async {
            let mut tries = 0;
            loop {
                match cmd.query_async::<Vec<u8>>(&mut conn).await {
                    Err(e)
                        if tries < 4
                            && e.kind()
                                == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) =>
                    {
                        tries += 1;
                        self.script.load_async(&mut conn).await?;
                    }
                    r => return r,
                }
            }
        };
        let reply = attempts.await?;
        if reply.len() != keys.len() * scripts::RECORD {
            return Err(RedisLimitError::BadReply(format!(
                "{} bytes for {} keys",
                reply.len(),
                keys.len()
            )));
        }
        Ok(reply
            .chunks_exact(scripts::RECORD)
            .map(scripts::decode)
            .collect())
    }
}

/// Configures and connects a [`RedisLimiter`].
#[must_use = "a builder does nothing until `connect` is awaited"]
pub struct Builder {
    algorithm: Algorithm,
    quota: Quota,
    prefix: String,
    timeout: Duration,
    backoff: Duration,
    policy: FailurePolicy,
    batching: Option<Batching>,
    hot: Option<PreAggregation>,
}

impl Builder {
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
    /// [`FailurePolicy::Open`]).
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

    /// Connect to `target` (within the timeout, at least one second) and
    /// start the batching task if configured. Must be called inside a tokio
    /// runtime.
    pub async fn connect(self, target: Target) -> Result<RedisLimiter, RedisLimitError> {
        if self.prefix.contains(['{', '}']) {
            return Err(RedisLimitError::Config(
                "the key prefix contains `{` or `}`",
            ));
        }
        if self.timeout.is_zero() {
            return Err(RedisLimitError::Config("a zero timeout"));
        }
        if let Algorithm::SlidingWindow { counters } = self.algorithm {
            if !(2..=1024).contains(&counters) {
                return Err(RedisLimitError::Config(
                    "a sliding-window counter needs 2 to 1024 counters",
                ));
            }
        }
        if let Some(b) = &self.batching {
            if b.max_batch == 0 || b.max_in_flight == 0 || b.queue == 0 {
                return Err(RedisLimitError::Config("a zero batching size"));
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
            // Emission interval rounded up to a whole ns, as `Gcra` does.
            Algorithm::Gcra => (
                scripts::gcra(),
                vec![q.emission_interval_nanos().to_string(), burst],
            ),
            Algorithm::FixedWindow => (scripts::fixed_window(), vec![window_us, limit]),
            Algorithm::SlidingWindow { counters } => {
                // Whole-ns sub-windows, as `SlidingWindow` computes them.
                let sub = q.window_nanos() / u64::from(counters - 1);
                if sub == 0 {
                    return Err(RedisLimitError::Config("sub-windows shorter than 1 ns"));
                }
                (
                    scripts::sliding_window(),
                    vec![us(sub as f64), limit, counters.to_string()],
                )
            }
        };
        let connect_timeout = self.timeout.max(Duration::from_secs(1));
        let conn = match tokio::time::timeout(connect_timeout, Conn::connect(&target, self.timeout))
            .await
        {
            Ok(c) => c?,
            Err(_) => return Err(RedisLimitError::Timeout(connect_timeout)),
        };
        let cells = if target.is_cluster() {
            CLUSTER_CELLS
        } else {
            1
        };
        let core = Arc::new(Core {
            conn,
            script: redis::Script::new(&source),
            params,
            timeout: self.timeout,
            cluster: target.is_cluster(),
            epoch: Instant::now(),
            failed: (0..cells).map(|_| AtomicU64::new(0)).collect(),
        });
        let batcher = self
            .batching
            .map(|b| batch::Batcher::start(core.clone(), b));
        Ok(RedisLimiter {
            inner: Arc::new(Inner {
                core,
                algorithm: self.algorithm,
                quota: self.quota,
                prefix: format!("{}:{}:", self.prefix, self.algorithm.tag()),
                policy: self.policy,
                backoff: self.backoff,
                down_until: (0..cells).map(|_| AtomicU64::new(0)).collect(),
                batcher,
                hot: self.hot.map(hot::Hot::new),
            }),
        })
    }
}

struct Inner {
    core: Arc<Core>,
    algorithm: Algorithm,
    quota: Quota,
    prefix: String,
    policy: FailurePolicy,
    backoff: Duration,
    /// Per back-off cell: nanoseconds since the core's `epoch` until which
    /// Redis is skipped; 0 = healthy.
    down_until: Box<[AtomicU64]>,
    batcher: Option<batch::Batcher>,
    hot: Option<hot::Hot>,
}

impl Inner {
    /// Nanoseconds since the core's `epoch` (saturating: ~584 years).
    fn now_nanos(&self) -> u64 {
        self.core.nanos_at(Instant::now())
    }

    /// The back-off in nanoseconds (saturating, so any `Duration` works).
    fn backoff_nanos(&self) -> u64 {
        u64::try_from(self.backoff.as_nanos()).unwrap_or(u64::MAX)
    }
}

/// A rate limiter whose state lives in Redis. Cheap to clone; clones share
/// the connection, the batching task and the leases.
///
/// See the [module documentation](self) for the design.
#[derive(Clone)]
pub struct RedisLimiter {
    inner: Arc<Inner>,
}

impl fmt::Debug for RedisLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisLimiter")
            .field("algorithm", &self.inner.algorithm)
            .field("quota", &self.inner.quota)
            .field("prefix", &self.inner.prefix)
            .field("policy", &self.inner.policy)
            .finish_non_exhaustive()
    }
}

impl RedisLimiter {
    /// Start configuring a limiter running `algorithm` over `quota`.
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use weir_rate::Quota;
    /// use weir_rate::redis::{Algorithm, RedisLimiter};
    ///
    /// let quota = Quota::per_second(NonZeroU32::new(10).unwrap());
    /// let builder = RedisLimiter::builder(Algorithm::SlidingWindow { counters: 2 }, quota)
    ///     .prefix("login");
    /// # let _ = builder;
    /// ```
    pub fn builder(algorithm: Algorithm, quota: Quota) -> Builder {
        Builder {
            algorithm,
            quota,
            prefix: "weir".to_owned(),
            timeout: Duration::from_millis(100),
            backoff: Duration::from_millis(100),
            policy: FailurePolicy::Open,
            batching: None,
            hot: None,
        }
    }

    /// The algorithm.
    pub fn algorithm(&self) -> Algorithm {
        self.inner.algorithm
    }

    /// The quota.
    pub fn quota(&self) -> Quota {
        self.inner.quota
    }

    /// The Redis key holding `key`'s state: `{prefix}:{alg}:{<key>}`.
    ///
    /// ```no_run
    /// # async fn demo(limiter: weir_rate::redis::RedisLimiter) {
    /// assert_eq!(limiter.redis_key("u1"), "weir:gcra:{u1}");
    /// # }
    /// ```
    pub fn redis_key(&self, key: &str) -> String {
        let mut s = String::with_capacity(self.inner.prefix.len() + key.len() + 2);
        s.push_str(&self.inner.prefix);
        s.push('{');
        s.push_str(key);
        s.push('}');
        s
    }

    /// Spend one unit for `key`. Always answers within the timeout: from
    /// Redis, a lease, or the failure policy (or a denial when shed).
    pub async fn check(&self, key: &str) -> Decision {
        match self.check_verbose(key, 1).await {
            Ok(v) => v.decision,
            // A cost of one is never beyond capacity (limit and burst are
            // at least one); deny rather than panic if that ever changes.
            Err(_) => self.closed(),
        }
    }

    /// Spend `cost` units for `key`; an error only when `cost` exceeds
    /// what the quota can ever allow at once.
    pub async fn check_n(&self, key: &str, cost: u32) -> Result<Decision, NeverAllowed> {
        self.check_verbose(key, cost).await.map(|v| v.decision)
    }

    /// Like [`check_n`](Self::check_n), also telling who decided and why
    /// the failure policy did, if it did.
    pub async fn check_verbose(&self, key: &str, cost: u32) -> Result<Verdict, NeverAllowed> {
        let capacity = self.inner.algorithm.capacity(&self.inner.quota);
        NeverAllowed::check(cost, capacity)?;
        if let Some(hot) = &self.inner.hot {
            if let Some(v) = hot.check(self, key, cost).await {
                return Ok(v);
            }
        }
        Ok(match self.try_check_n(key, cost).await {
            Ok(d) => Verdict {
                decision: d,
                source: Source::Redis,
                error: None,
            },
            // Shed, whatever the failure policy: allowing the excess of a
            // flood would let it through unchecked.
            Err(e @ RedisLimitError::Overloaded) => Verdict {
                decision: self.closed(),
                source: Source::Shed,
                error: Some(e),
            },
            Err(e) => self.on_failure(key, cost, e),
        })
    }

    /// Ask Redis only: no lease, no failure policy (the back-off after a
    /// failure still applies). For callers that handle errors themselves.
    pub async fn try_check_n(&self, key: &str, cost: u32) -> Result<Decision, RedisLimitError> {
        let capacity = self.inner.algorithm.capacity(&self.inner.quota);
        NeverAllowed::check(cost, capacity).map_err(RedisLimitError::NeverAllowed)?;
        let raw = self.raw(key, cost).await?;
        Ok(self.decision(raw))
    }

    /// One Redis decision, through the batcher if there is one, honouring
    /// the back-off.
    pub(crate) async fn raw(&self, key: &str, cost: u32) -> Result<Raw, RedisLimitError> {
        let inner = &*self.inner;
        let rkey = self.redis_key(key);
        let cell_index = if inner.down_until.len() > 1 {
            usize::from(cluster_slot(&rkey)) * inner.down_until.len() / 16384
        } else {
            0
        };
        let cell = &inner.down_until[cell_index];
        // One clock reading serves the back-off check and the deadline.
        let asked = Instant::now();
        let now = inner.core.nanos_at(asked);
        let down = cell.load(Ordering::Relaxed);
        if down != 0 {
            // One caller per back-off period probes; the rest skip Redis.
            if now < down
                || cell
                    .compare_exchange(
                        down,
                        now.saturating_add(inner.backoff_nanos()),
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    )
                    .is_err()
            {
                return Err(RedisLimitError::BackingOff);
            }
        }
        let deadline = inner.core.deadline(asked);
        let result = match &inner.batcher {
            Some(b) => b.submit(rkey, cost, deadline, cell_index, now).await,
            None => inner
                .core
                .eval(&[rkey.as_str()], &[cost], deadline)
                .await
                .and_then(|mut v| {
                    v.pop()
                        .ok_or_else(|| RedisLimitError::BadReply("no record".to_owned()))
                }),
        };
        match &result {
            Ok(_) => {
                if cell.load(Ordering::Relaxed) != 0 {
                    cell.store(0, Ordering::Relaxed);
                }
            }
            // This instance's own saturation says nothing about Redis.
            Err(RedisLimitError::Overloaded) => {}
            Err(_) => {
                let until = inner.now_nanos().saturating_add(inner.backoff_nanos());
                cell.store(until.max(1), Ordering::Relaxed);
            }
        }
        result
    }

    pub(crate) fn decision(&self, raw: Raw) -> Decision {
        let q = &self.inner.quota;
        let remaining = u32::try_from(raw.remaining).unwrap_or(u32::MAX);
        let reset = raw.reset_after_us.saturating_mul(1000);
        if raw.allowed {
            Decision::allow(q.limit(), q.window(), remaining, reset)
        } else {
            Decision::deny(
                q.limit(),
                q.window(),
                remaining,
                reset,
                raw.retry_after_us.saturating_mul(1000),
            )
        }
    }

    fn closed(&self) -> Decision {
        let q = &self.inner.quota;
        Decision::deny(q.limit(), q.window(), 0, 1_000_000_000, 1_000_000_000)
    }

    fn on_failure(&self, key: &str, cost: u32, error: RedisLimitError) -> Verdict {
        let q = &self.inner.quota;
        let (decision, source) = match &self.inner.policy {
            FailurePolicy::Open => (
                Decision::allow(q.limit(), q.window(), q.limit(), 0),
                Source::FailOpen,
            ),
            FailurePolicy::Closed => (self.closed(), Source::FailClosed),
            FailurePolicy::Local(f) => match f.check_n(key, cost) {
                Some(d) => (d, Source::Local),
                None => (self.closed(), Source::FailClosed),
            },
        };
        Verdict {
            decision,
            source,
            error: Some(error),
        }
    }

    /// Whether Redis is being skipped for `key` after a recent failure.
    pub fn is_backing_off(&self, key: &str) -> bool {
        let cells = &self.inner.down_until;
        let i = if cells.len() > 1 {
            usize::from(cluster_slot(&self.redis_key(key))) * cells.len() / 16384
        } else {
            0
        };
        let down = cells[i].load(Ordering::Relaxed);
        down != 0 && self.inner.now_nanos() < down
    }
}
