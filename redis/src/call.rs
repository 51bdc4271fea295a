//! One script call: the part of the Redis store that talks to Redis
//! ([`Core`]). The plain path and the batcher share it, so a call is sent,
//! retried after `NOSCRIPT` and decoded the same way on both.

use super::link::{Conn, Link, refused};
use super::scripts::{self, Raw, Settle};
use super::slot::cluster_slot;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use weir_primitives::sync::RwLock;
use weir_rate::{Decision, Quota, Receipt};
use weir_store::StoreError;

/// A Redis error as the store's error.
pub(crate) fn store_error(error: redis::RedisError) -> StoreError {
    StoreError::store(error)
}

/// The Redis error inside a store error, if it holds one.
fn redis_error(error: &StoreError) -> Option<&redis::RedisError> {
    match error {
        StoreError::Store(e) => e.downcast_ref::<redis::RedisError>(),
        _ => None,
    }
}

/// One limit of a limiter as its calls see it.
pub(crate) struct Limit {
    /// What follows a key's base in the limit's Redis key (empty for a
    /// single limit, whose base is the whole key).
    pub(crate) suffix: String,
}

/// What the limits are now: the scripts' parameters and the quotas the
/// decisions report, swapped whole when the limits change while serving,
/// so that one call decides by one set of limits, never a mix.
pub(crate) struct Tuned {
    pub(crate) params: Vec<String>,
    pub(crate) quotas: Box<[Quota]>,
}

/// The part of the Redis store that talks to Redis.
pub(crate) struct Core {
    link: Arc<Link>,
    /// Decides each key's limits (one, or all-or-nothing a set).
    script: redis::Script,
    /// Forced charges and refunds ([`scripts::settle`]).
    settle: redis::Script,
    tuned: RwLock<Arc<Tuned>>,
    limits: Box<[Limit]>,
    timeout: Duration,
    pub(crate) cluster: bool,
}

impl Core {
    /// A core deciding with the script `source` and settling with
    /// `settle`, both taking the parameters of `tuned`, over `link`, for
    /// `limits`.
    pub(crate) fn new(
        link: Arc<Link>,
        (source, settle): (&str, &str),
        tuned: Tuned,
        limits: Vec<Limit>,
        (timeout, cluster): (Duration, bool),
    ) -> Self {
        Self {
            link,
            script: redis::Script::new(source),
            settle: redis::Script::new(settle),
            tuned: RwLock::new(Arc::new(tuned)),
            limits: limits.into_boxed_slice(),
            timeout,
            cluster,
        }
    }

    /// The limits now.
    fn tuned(&self) -> Arc<Tuned> {
        Arc::clone(&self.tuned.read())
    }

    /// Decide by `tuned` from the next call on (the scripts and keys stay:
    /// the algorithms and their order are the same).
    pub(crate) fn retune(&self, tuned: Tuned) {
        *self.tuned.write() = Arc::new(tuned);
    }

    /// The connection, made now if it is not, with the scripts loaded and
    /// the user's permissions proved on probe keys of base `probe_base`
    /// (for connecting at start-up: a user not permitted to load the
    /// scripts, to run a command they call or to touch the limiter's keys
    /// is refused here, not at the first decision).
    pub(crate) async fn connect(&self, probe_base: &str) -> redis::RedisResult<()> {
        let (_, mut conn) = self.link.get().await?;
        self.script.load_async(&mut conn).await?;
        self.settle.load_async(&mut conn).await?;
        // Every key shape a call names: each limit's, and on a Cluster a
        // refund's mark, which `ASKING` may precede.
        let mut probes: Vec<String> = self
            .limits
            .iter()
            .map(|l| format!("{probe_base}{}:probe", l.suffix))
            .collect();
        if self.cluster {
            probes.push(format!("{probe_base}:refund:probe"));
            redis::cmd("ASKING").query_async::<()>(&mut conn).await?;
        }
        // A `SCRIPT FLUSH` between loading the proof and running it is
        // answered by loading it again, as a decision's call is.
        let proof = redis::Script::new(scripts::PROOF);
        let invocation = proof.key(probes);
        let mut loads = 0;
        loop {
            match invocation.invoke_async::<()>(&mut conn).await {
                Err(e)
                    if loads < 4
                        && e.kind()
                            == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) =>
                {
                    loads += 1;
                }
                result => return result,
            }
        }
    }

    /// How long a call may go unanswered before its connection is
    /// suspect: half a timeout.
    fn slow(&self) -> Duration {
        self.timeout / 2
    }

    /// One script call deciding the key of base `keys[i]` at `costs[i]`,
    /// with no deadline of its own (its callers bound it). Equal keys must
    /// be adjacent (see [`scripts`]).
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
    ) -> Result<Vec<Decision>, StoreError> {
        let result = self.query_once(keys, costs).await;
        let moving = matches!(&result, Err(e) if redis_error(e).is_some_and(slot_moving));
        if !moving || keys.iter().all(|k| *k == keys[0]) {
            return result;
        }
        let mut decisions = Vec::with_capacity(keys.len());
        let mut start = 0;
        while start < keys.len() {
            let end = start
                + keys[start..]
                    .iter()
                    .take_while(|k| **k == keys[start])
                    .count();
            decisions.extend(
                self.query_once(&keys[start..end], &costs[start..end])
                    .await?,
            );
            start = end;
        }
        Ok(decisions)
    }

    async fn query_once(&self, keys: &[&str], costs: &[u32]) -> Result<Vec<Decision>, StoreError> {
        debug_assert!(
            keys.iter()
                .enumerate()
                .all(|(i, k)| i == 0 || keys[i - 1] == *k || !keys[..i].contains(k)),
            "equal keys must be adjacent"
        );
        // Every limit's Redis key for each key base, limit by limit; a
        // single limit's base is its key.
        let (owned, expanded): (Vec<String>, Vec<&str>);
        let names = match &*self.limits {
            [one] if one.suffix.is_empty() => keys,
            limits => {
                owned = keys
                    .iter()
                    .flat_map(|base| limits.iter().map(move |l| format!("{base}{}", l.suffix)))
                    .collect();
                expanded = owned.iter().map(String::as_str).collect();
                &expanded
            }
        };
        let tuned = self.tuned();
        let mut cmd = redis::Cmd::new();
        cmd.arg("EVALSHA")
            .arg(self.script.get_hash())
            .arg(names.len())
            .arg(names)
            .arg(&tuned.params);
        // One cost stands for all when they are equal (the usual case), which
        // spares Redis an argument and a number to parse per decision.
        match costs {
            [first, rest @ ..] if rest.iter().all(|c| c == first) => cmd.arg(first),
            _ => cmd.arg(costs),
        };
        let reply = self.send(&cmd, &self.script).await?;
        let l = self.limits.len();
        let records = scripts::split_reply(&reply)
            .filter(|(_, records)| records.len() == keys.len() * l * scripts::RECORD);
        let Some((now_us, records)) = records else {
            return Err(StoreError::BadReply(format!(
                "{} bytes for {} keys of {l} limits",
                reply.len(),
                keys.len()
            )));
        };
        let at_ns = now_us.saturating_mul(1000);
        Ok(records
            .chunks_exact(scripts::RECORD * l)
            .zip(costs)
            .map(|(answers, &cost)| decision_of(answers, &tuned.quotas, at_ns, cost))
            .collect())
    }
}

/// One key's decision from its limits' records (one per limit, in order,
/// of `quotas`): combined as the in-process [`AllOf`](weir_rate::AllOf)
/// combines its limits' decisions, and when allowed, charged at the
/// server's `at_ns`.
fn decision_of(answers: &[u8], quotas: &[Quota], at_ns: u64, cost: u32) -> Decision {
    let mut combined: Option<Decision> = None;
    for (record, quota) in answers.chunks_exact(scripts::RECORD).zip(quotas) {
        let d = decision(scripts::decode(record), quota);
        combined = Some(match combined {
            Some(c) => c.combine(d),
            None => d,
        });
    }
    let d = combined.unwrap_or_else(|| Decision::allow(0, Duration::ZERO, 0, Duration::ZERO));
    if cost > 0 {
        d.with_receipt(Receipt::remote(at_ns, cost))
    } else {
        d
    }
}

impl Core {
    /// Charge `cost` units to, or refund the receipt of `cost` units at
    /// `at_us` (server µs) from, every limit of the key of base `key`;
    /// returns the server's time (epoch µs).
    pub(crate) async fn settle(
        &self,
        key: &str,
        (op, cost, at_us): (Settle, u32, u64),
    ) -> Result<u64, StoreError> {
        let names: Vec<String> = self
            .limits
            .iter()
            .map(|l| format!("{key}{}", l.suffix))
            .collect();
        // The cluster client is told not to resend a call, but what sits
        // between a client and a Cluster may (a proxy that retries), and a
        // refund applied twice gives back twice. A mark in another slot
        // than the state (a key whose hash tag is empty) would make every
        // refund of that key a cross-slot error, so such a key goes
        // unmarked.
        let mark = (op == Settle::Refund && self.cluster)
            .then(|| refund_mark(key))
            .filter(|mark| cluster_slot(mark) == cluster_slot(&names[0]));
        let tuned = self.tuned();
        let command = |mark: Option<&String>| {
            let mut cmd = redis::Cmd::new();
            cmd.arg("EVALSHA")
                .arg(self.settle.get_hash())
                .arg(names.len() + usize::from(mark.is_some()))
                .arg(&names)
                .arg(mark)
                .arg(&tuned.params)
                .arg(op.code())
                .arg(cost)
                .arg(at_us)
                .arg(self.mark_lifetime_ms());
            cmd
        };
        let mut reply = self.send(&command(mark.as_ref()), &self.settle).await;
        if let Some(again) = mark.as_ref().and_then(|m| resend_with(&reply, m)) {
            reply = self.send(&command(again), &self.settle).await;
        }
        let reply = reply?;
        match scripts::split_reply(&reply) {
            Some((now_us, [])) => Ok(now_us),
            _ => Err(StoreError::BadReply(format!(
                "{} bytes for a charge or refund",
                reply.len()
            ))),
        }
    }

    /// How long a refund's mark lives (ms): four timeouts and a second,
    /// longer than anything resends a call its caller has given up on,
    /// capped at a day.
    fn mark_lifetime_ms(&self) -> u64 {
        let ms = self.timeout.as_millis().saturating_mul(4) + 1000;
        u64::try_from(ms).unwrap_or(u64::MAX).min(86_400_000)
    }

    /// Send `cmd`, an `EVALSHA` of `script`, loading the script on
    /// `NOSCRIPT` and, on a Cluster, following a redirection to the node
    /// that holds the keys now; the connection is dropped on an error it
    /// cannot get over, or when the call goes unanswered for half a timeout.
    async fn send(&self, cmd: &redis::Cmd, script: &redis::Script) -> Result<Vec<u8>, StoreError> {
        let (generation, mut conn) = self.link.get().await.map_err(store_error)?;
        let outstanding = Outstanding {
            link: &self.link,
            generation: AtomicU64::new(generation),
            sent: Instant::now(),
            slow: self.slow(),
        };
        // On NOSCRIPT the script is loaded and the call sent once more; a
        // second NOSCRIPT (the cache emptied again in between, e.g.
        // repeated `SCRIPT FLUSH` or a failover) is retried a few times,
        // all within the same deadline. A redirection is followed twice at
        // most (`ASK` to the importing node, then perhaps `MOVED` as the
        // migration ends): each one means the script did not run.
        //
        // A connection found broken (the server restarted, a proxy closed
        // an idle socket) says nothing yet about the server: the call goes
        // once more on a fresh connection, within the same deadline. If
        // the first did run, its reply lost, its units are spent twice:
        // tighter, never looser (a refund carries its mark). A server that
        // is down refuses the new connection and the call fails as before.
        let attempts = async {
            let (mut loads, mut redirects, mut reconnected) = (0, 0, false);
            let mut to: Option<Redirect> = None;
            loop {
                let reply = match &to {
                    None => cmd.query_async::<Vec<u8>>(&mut conn).await,
                    // Boxed: rare, and it keeps the type of every
                    // decision's future shallow.
                    Some(to) => Box::pin(to.send(&mut conn, cmd)).await,
                };
                match reply {
                    Err(e)
                        if loads < 4
                            && e.kind()
                                == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) =>
                    {
                        loads += 1;
                        script.load_async(&mut conn).await?;
                    }
                    Err(e) if !reconnected && !self.cluster && e.is_connection_dropped() => {
                        reconnected = true;
                        self.link
                            .discard(outstanding.generation.load(Ordering::Relaxed));
                        let (generation, fresh) = self.link.get().await?;
                        outstanding.generation.store(generation, Ordering::Relaxed);
                        conn = fresh;
                    }
                    Err(e) if self.cluster && redirects < 2 => match Redirect::of(&e) {
                        Some(next) => {
                            redirects += 1;
                            to = Some(next);
                        }
                        None => return Err(e),
                    },
                    r => return r,
                }
            }
        };
        let reply = attempts.await;
        let generation = outstanding.generation.load(Ordering::Relaxed);
        outstanding.answered();
        reply
            .inspect_err(|e| self.link.discard_on(generation, e))
            .map_err(|e| {
                if refused(&e) {
                    StoreError::refused(e)
                } else {
                    store_error(e)
                }
            })
    }
}

/// Where a Cluster node sent a call instead of running it.
///
/// The cluster client is told not to follow redirections itself: it sends
/// `ASKING` and then the call as two requests on a connection other
/// callers share, so another caller's request can come between them and
/// take the `ASKING`, and ours bounces between the two masters of a
/// migrating slot until the deadline. Here `ASKING` and the call go as
/// one pipeline, written together, so nothing comes between them.
enum Redirect {
    /// The slot is being migrated and the key is on the importing node.
    Ask { host: String, port: u16 },
    /// The slot belongs to another node now.
    Moved { host: String, port: u16 },
}

impl Redirect {
    fn of(error: &redis::RedisError) -> Option<Self> {
        use redis::{ErrorKind::Server, ServerErrorKind};
        // The node as `host:port`, then the slot.
        let (node, _slot) = error.redirect_node()?;
        let (host, port) = node.rsplit_once(':')?;
        let (node, port) = (host.to_owned(), port.parse().ok()?);
        match error.kind() {
            Server(ServerErrorKind::Ask) => Some(Self::Ask { host: node, port }),
            Server(ServerErrorKind::Moved) => Some(Self::Moved { host: node, port }),
            _ => None,
        }
    }

    async fn send(&self, conn: &mut Conn, cmd: &redis::Cmd) -> redis::RedisResult<Vec<u8>> {
        use redis::cluster_routing::SingleNodeRoutingInfo;
        let Conn::Cluster(cluster) = conn else {
            return Err((redis::ErrorKind::Client, "a redirection off a cluster").into());
        };
        let (asking, host, port) = match self {
            Self::Ask { host, port } => (true, host, *port),
            Self::Moved { host, port } => (false, host, *port),
        };
        let mut pipe = redis::pipe();
        if asking {
            pipe.cmd("ASKING");
        }
        pipe.add_command(cmd.clone());
        let route = SingleNodeRoutingInfo::ByAddress {
            host: host.clone(),
            port,
        };
        let offset = usize::from(asking);
        let reply = cluster.route_pipeline(pipe, offset, 1, route).await?;
        let value = reply
            .into_iter()
            .next()
            .ok_or_else(|| redis::RedisError::from((redis::ErrorKind::Parse, "no reply")))?
            .extract_error()?;
        Ok(redis::from_redis_value(value)?)
    }
}

/// The key marking one refund of the key of base `key` as applied (same
/// hash tag, so the same Cluster slot, unless the tag is empty): a count of
/// this process's refunds with its process id, hashed with random keys.
/// The id tells apart the workers a parent forked (they inherit its
/// count and keys); the keys, instances on other hosts.
fn refund_mark(key: &str) -> String {
    static SENT: AtomicU64 = AtomicU64::new(0);
    static KEYS: OnceLock<ahash::RandomState> = OnceLock::new();
    let n = SENT.fetch_add(1, Ordering::Relaxed);
    let token = KEYS
        .get_or_init(ahash::RandomState::new)
        .hash_one((std::process::id(), n));
    format!("{key}:refund:{token:016x}")
}

/// A limit's decision from its record: rounded as the in-process limiters
/// round (see [`scripts::decode`]), with `quota`'s limit and window.
fn decision(raw: Raw, quota: &Quota) -> Decision {
    let remaining = u32::try_from(raw.remaining).unwrap_or(u32::MAX);
    let reset = Duration::from_micros(raw.reset_after_us);
    if raw.allowed {
        Decision::allow(quota.limit(), quota.window(), remaining, reset)
    } else {
        Decision::deny(
            quota.limit(),
            quota.window(),
            remaining,
            reset,
            Duration::from_micros(raw.retry_after_us),
        )
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
    /// The connection the call is on (a fresh one after a broken one).
    generation: AtomicU64,
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
            self.link.discard(self.generation.load(Ordering::Relaxed));
        }
    }
}

/// How a marked refund whose `reply` is an error goes again, if it does.
/// Something between client and Cluster may have resent it, so an earlier
/// attempt may have run (its reply lost). A slot that has moved on (`MOVED`) takes the
/// marked call again at its new master: the mark keeps that harmless. A
/// slot being migrated (`TRYAGAIN`, `ASK`) refuses any script naming a key
/// one of its two masters lacks, which a new mark always is: the refund
/// goes again unmarked, on the state alone (given back twice only if an
/// earlier attempt ran).
fn resend_with<'m>(
    reply: &Result<Vec<u8>, StoreError>,
    mark: &'m String,
) -> Option<Option<&'m String>> {
    use redis::{ErrorKind::Server, ServerErrorKind};
    let e = reply.as_ref().err().and_then(redis_error)?;
    match e.kind() {
        Server(ServerErrorKind::Moved) => Some(Some(mark)),
        Server(ServerErrorKind::TryAgain | ServerErrorKind::Ask) => Some(None),
        _ => None,
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
