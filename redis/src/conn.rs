//! One connection type for a single server and for a cluster, and the
//! link that makes it on first use and again after a failover.

use parking_lot::Mutex;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Where the limits live.
///
/// ```
/// use weir_redis::Target;
///
/// let single = Target::server("redis://127.0.0.1:6379/");
/// let cluster = Target::cluster(["redis://127.0.0.1:7000/", "redis://127.0.0.1:7001/"]);
/// assert_ne!(single, cluster);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target(Nodes);

#[derive(Debug, Clone, PartialEq, Eq)]
enum Nodes {
    Server(String),
    Cluster(Vec<String>),
}

impl Target {
    /// One Redis server (a `redis://` URL), through a connection manager
    /// that reconnects in the background after a failure.
    pub fn server(url: impl Into<String>) -> Self {
        Self(Nodes::Server(url.into()))
    }

    /// A Redis Cluster, given by one or more of its nodes; the client
    /// learns the slot map, follows `MOVED`/`ASK` and refreshes the map
    /// after a failover.
    pub fn cluster<I, S>(nodes: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self(Nodes::Cluster(nodes.into_iter().map(Into::into).collect()))
    }

    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self.0, Nodes::Cluster(_))
    }

    /// The target for a log line, without credentials: the server, or the
    /// cluster's seed nodes and the first slot of a range.
    pub(crate) fn describe(&self, slot: Option<usize>) -> String {
        match (&self.0, slot) {
            (Nodes::Server(url), _) => redact(url),
            (Nodes::Cluster(nodes), slot) => {
                let nodes: Vec<String> = nodes.iter().map(|n| redact(n)).collect();
                match slot {
                    Some(slot) => format!("cluster {} (slots from {slot})", nodes.join(", ")),
                    None => format!("cluster {}", nodes.join(", ")),
                }
            }
        }
    }
}

/// A cheap-to-clone multiplexed connection to either kind of target.
#[derive(Clone)]
pub(crate) enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

/// A target's client, parsed once: what a (re)connection starts from.
enum Client {
    Single(redis::Client),
    Cluster(Box<ClusterClient>),
}

/// The connection to the target, made on first use and made again after a
/// fault that the connection itself will not get over.
///
/// Two faults leave a connection that answers but can never decide again,
/// and a connection manager keeps it: the server behind a stable name was
/// demoted in a failover (it answers `READONLY`, or `MASTERDOWN` as a
/// replica of a dead master, forever), and Redis absent when the service
/// started (there is no connection to manage yet). Either would leave every
/// decision to the failure policy until a restart. So the link is
/// discarded on such errors ([`Link::discard`]) and the next call, which
/// the back-off makes a single probe, connects again by name, reaching
/// whatever the name leads to now.
pub(crate) struct Link {
    client: Client,
    timeout: Duration,
    /// The connection in use and its generation, or none until the next
    /// call connects.
    current: Mutex<Option<(u64, Conn)>>,
    /// Generations handed out so far.
    made: AtomicU64,
    /// Held while connecting, so concurrent callers wait for one attempt
    /// instead of each opening a connection.
    connecting: tokio::sync::Mutex<()>,
}

impl Link {
    /// A link to `target`, not yet connected. Fails only on settings no
    /// connection could fix (an unparsable URL, an empty node list).
    /// Each request waits at most `timeout` on the wire, as callers do.
    pub(crate) fn new(target: &Target, timeout: Duration) -> redis::RedisResult<Self> {
        let client = match &target.0 {
            Nodes::Server(url) => Client::Single(redis::Client::open(url.as_str())?),
            Nodes::Cluster(nodes) => Client::Cluster(Box::new(
                ClusterClient::builder(nodes.iter().map(String::as_str))
                    .connection_timeout(timeout)
                    .response_timeout(timeout)
                    .retries(2)
                    .min_retry_wait(10)
                    .max_retry_wait(200)
                    .build()?,
            )),
        };
        Ok(Self {
            client,
            timeout,
            current: Mutex::new(None),
            made: AtomicU64::new(0),
            connecting: tokio::sync::Mutex::new(()),
        })
    }

    /// The connection in use, connecting first if there is none; with its
    /// generation, for [`discard`](Self::discard).
    pub(crate) async fn get(&self) -> redis::RedisResult<(u64, Conn)> {
        if let Some(c) = self.current.lock().clone() {
            return Ok(c);
        }
        let _one_attempt = self.connecting.lock().await;
        if let Some(c) = self.current.lock().clone() {
            return Ok(c);
        }
        let conn = self.connect().await?;
        let generation = self.made.fetch_add(1, Ordering::Relaxed) + 1;
        *self.current.lock() = Some((generation, conn.clone()));
        Ok((generation, conn))
    }

    async fn connect(&self) -> redis::RedisResult<Conn> {
        match &self.client {
            Client::Single(client) => {
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(self.timeout))
                    .set_response_timeout(Some(self.timeout))
                    .set_min_delay(Duration::from_millis(20))
                    .set_max_delay(Duration::from_millis(500))
                    .set_number_of_retries(3);
                Ok(Conn::Single(
                    ConnectionManager::new_with_config(client.clone(), config).await?,
                ))
            }
            Client::Cluster(client) => Ok(Conn::Cluster(client.get_async_connection().await?)),
        }
    }

    /// Forget connection `generation` if `error` says it will never decide
    /// again; a newer connection is kept.
    pub(crate) fn discard_on(&self, generation: u64, error: &redis::RedisError) {
        if needs_new_connection(error) {
            self.discard(generation);
        }
    }

    /// Forget connection `generation`, so the next call connects again.
    ///
    /// Only a single server's: a cluster connection holds one connection
    /// per node, which the cluster client remakes on its own, node by
    /// node, and it refreshes the slot map after a failover (`MOVED`,
    /// `READONLY`). Discarding the whole of it for one node's fault would
    /// send every slot, not only that node's, to the failure policy while
    /// it reconnected to every node, the faulty one included.
    pub(crate) fn discard(&self, generation: u64) {
        if matches!(self.client, Client::Cluster(_)) {
            return;
        }
        let mut current = self.current.lock();
        if current.as_ref().is_some_and(|(g, _)| *g == generation) {
            *current = None;
        }
    }
}

/// Errors after which the same single-server connection cannot be
/// trusted to decide again: the server no longer takes writes (demoted, replica of a lost
/// master, loading a dataset after a restart) or the connection itself is
/// broken. A fresh connection by name reaches whatever the name leads to
/// now; a connection manager alone would keep the old one.
fn needs_new_connection(error: &redis::RedisError) -> bool {
    use redis::{ErrorKind, ServerErrorKind};
    matches!(
        error.kind(),
        ErrorKind::Server(
            ServerErrorKind::ReadOnly | ServerErrorKind::MasterDown | ServerErrorKind::BusyLoading
        )
    ) || error.is_io_error()
        || error.is_connection_dropped()
        || error.is_connection_refusal()
        || error.is_unrecoverable_error()
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Single(c) => c.req_packed_command(cmd),
            Self::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Self::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Single(c) => c.get_db(),
            Self::Cluster(c) => c.get_db(),
        }
    }
}

/// `url` without the user and password it may carry.
fn redact(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let rest = match rest.split_once('@') {
        Some((_, host)) => host,
        None => rest,
    };
    if scheme.is_empty() {
        rest.to_owned()
    } else {
        format!("{scheme}://{rest}")
    }
}

/// The Redis Cluster slot of a Redis key: CRC16 (XMODEM) of its hash tag
/// (the text between the first `{` and the next `}`, when non-empty) or of
/// the whole key, modulo 16384 — what `CLUSTER KEYSLOT` answers.
///
/// ```
/// use weir_redis::cluster_slot;
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
