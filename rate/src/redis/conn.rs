//! One connection type for a single server and for a cluster.

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};
use std::time::Duration;

/// Where the limits live.
///
/// ```
/// use weir_rate::redis::Target;
///
/// let single = Target::server("redis://127.0.0.1:6379/");
/// let cluster = Target::cluster(["redis://127.0.0.1:7000/", "redis://127.0.0.1:7001/"]);
/// assert!(matches!(single, Target::Server(_)));
/// assert!(matches!(cluster, Target::Cluster(ref n) if n.len() == 2));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// One Redis server (a `redis://` URL), through a connection manager
    /// that reconnects in the background after a failure.
    Server(String),
    /// A Redis Cluster, given by some of its nodes; the client learns the
    /// slot map, follows `MOVED`/`ASK` and refreshes the map after a
    /// failover.
    Cluster(Vec<String>),
}

impl Target {
    /// A single server.
    pub fn server(url: impl Into<String>) -> Self {
        Self::Server(url.into())
    }

    /// A cluster, from one or more of its nodes.
    pub fn cluster<I, S>(nodes: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self::Cluster(nodes.into_iter().map(Into::into).collect())
    }

    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self, Self::Cluster(_))
    }
}

/// A cheap-to-clone multiplexed connection to either kind of target.
#[derive(Clone)]
pub(crate) enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl Conn {
    /// Connect, giving up after `timeout`. The connection's own response
    /// timeout is set to `timeout` as well, so no request waits longer on
    /// the wire than the caller would.
    pub(crate) async fn connect(target: &Target, timeout: Duration) -> redis::RedisResult<Self> {
        match target {
            Target::Server(url) => {
                let client = redis::Client::open(url.as_str())?;
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(timeout))
                    .set_response_timeout(Some(timeout))
                    .set_min_delay(Duration::from_millis(20))
                    .set_max_delay(Duration::from_millis(500))
                    .set_number_of_retries(3);
                Ok(Self::Single(
                    ConnectionManager::new_with_config(client, config).await?,
                ))
            }
            Target::Cluster(nodes) => {
                let client = ClusterClient::builder(nodes.iter().map(String::as_str))
                    .connection_timeout(timeout)
                    .response_timeout(timeout)
                    .retries(2)
                    .min_retry_wait(10)
                    .max_retry_wait(200)
                    .build()?;
                Ok(Self::Cluster(client.get_async_connection().await?))
            }
        }
    }
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
