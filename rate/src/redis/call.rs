//! One script call: the part of a limiter that talks to Redis ([`Core`]).
//! The plain path and the batcher share it, so a call is sent, retried
//! after `NOSCRIPT`, bounded and decoded the same way on both, and a
//! failed call is remembered where the batcher can tell a failing Redis
//! from this instance's own load.

use super::RedisLimitError;
use super::conn::Link;
use super::scripts::{self, Raw};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use weir_primitives::time::duration_to_nanos;

/// The part of a limiter that talks to Redis, shared with the batcher.
pub(crate) struct Core {
    link: Link,
    script: redis::Script,
    params: Vec<String>,
    pub(crate) timeout: Duration,
    pub(crate) cluster: bool,
    /// The origin of the nanosecond times below and of the back-off's.
    epoch: Instant,
    /// Per back-off cell: when a script call there last failed (an error,
    /// or no answer within half a timeout), in ns since `epoch`; 0 = never.
    /// Tells a caller late in the batching queue behind a failing Redis
    /// from one late because this instance had too much to send.
    failed: Box<[AtomicU64]>,
}

impl Core {
    /// A core running the script `source` with `params` over `link`, with
    /// `cells` back-off cells; its `epoch` is now.
    pub(crate) fn new(
        link: Link,
        source: &str,
        params: Vec<String>,
        timeout: Duration,
        cluster: bool,
        cells: usize,
    ) -> Self {
        Self {
            link,
            script: redis::Script::new(source),
            params,
            timeout,
            cluster,
            epoch: Instant::now(),
            failed: (0..cells).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Nanoseconds from `epoch` to `at` (saturating: ~584 years).
    pub(crate) fn nanos_at(&self, at: Instant) -> u64 {
        duration_to_nanos(at.saturating_duration_since(self.epoch))
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
        if self.failed_since(cell, asked) {
            RedisLimitError::Timeout(self.timeout)
        } else {
            RedisLimitError::Overloaded
        }
    }

    /// How long a call may go unanswered before it counts as slow, a
    /// failure for the back-off: half a timeout. A queued caller with less
    /// than that left is not sent after such a failure either.
    pub(crate) fn slow(&self) -> Duration {
        self.timeout / 2
    }

    /// Whether a call for `cell` failed (or was slow) at or after `asked`.
    pub(crate) fn failed_since(&self, cell: usize, asked: u64) -> bool {
        self.failed[cell].load(Ordering::Relaxed) >= asked.max(1)
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
    ///
    /// While a Cluster slot migrates, a script naming several keys of it
    /// fails with `TRYAGAIN` as soon as one of them has moved (or with an
    /// `ASK` redirection the client cannot follow for all of them), and
    /// keeps failing until the migration ends. That says nothing about
    /// each key, so such a call is repeated key by key (runs of one key
    /// stay together), each call following its own redirection, rather
    /// than sending the whole batch, and its slot's back-off cell, to the
    /// failure policy.
    pub(crate) async fn query(
        &self,
        keys: &[&str],
        costs: &[u32],
    ) -> Result<Vec<Raw>, RedisLimitError> {
        let result = self.query_once(keys, costs).await;
        let moving = matches!(&result, Err(RedisLimitError::Redis(e)) if slot_moving(e));
        if !moving || keys.iter().all(|k| *k == keys[0]) {
            return result;
        }
        let mut raws = Vec::with_capacity(keys.len());
        let mut start = 0;
        while start < keys.len() {
            let end = start
                + keys[start..]
                    .iter()
                    .take_while(|k| **k == keys[start])
                    .count();
            raws.extend(
                self.query_once(&keys[start..end], &costs[start..end])
                    .await?,
            );
            start = end;
        }
        Ok(raws)
    }

    async fn query_once(&self, keys: &[&str], costs: &[u32]) -> Result<Vec<Raw>, RedisLimitError> {
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
        let (generation, mut conn) = self.link.get().await?;
        let outstanding = Outstanding {
            link: &self.link,
            generation,
            sent: Instant::now(),
            slow: self.slow(),
        };
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
        let reply = attempts.await;
        outstanding.answered();
        let reply = reply.inspect_err(|e| self.link.discard_on(generation, e))?;
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

/// A call sent on connection `generation` and not yet answered. Dropped
/// unanswered after half a timeout or more (given up at its callers'
/// deadlines), it discards the connection: a server that vanished without
/// closing it (a failover behind a virtual IP, a host gone) would
/// otherwise keep every later call waiting on the same dead socket until
/// the deadline, forever. Dropped sooner, it says nothing about Redis (a
/// caller went away), so a client cannot make the limiter reconnect at will.
struct Outstanding<'a> {
    link: &'a Link,
    generation: u64,
    sent: Instant,
    slow: Duration,
}

impl Outstanding<'_> {
    fn answered(self) {
        std::mem::forget(self);
    }
}

impl Drop for Outstanding<'_> {
    fn drop(&mut self) {
        if self.sent.elapsed() >= self.slow {
            self.link.discard(self.generation);
        }
    }
}

/// Whether `error` comes from a slot being migrated between Cluster
/// masters rather than from any one key.
fn slot_moving(error: &redis::RedisError) -> bool {
    use redis::{ErrorKind, ServerErrorKind};
    matches!(
        error.kind(),
        ErrorKind::Server(
            ServerErrorKind::TryAgain | ServerErrorKind::Ask | ServerErrorKind::Moved
        )
    )
}
