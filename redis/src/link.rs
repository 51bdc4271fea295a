//! The connection to a [`Target`](crate::Target), shared by the limiters
//! connected with its clones: made on first use, made again after a fault
//! the connection itself will not get over, and told apart from a refusal
//! (wrong credentials, an untrusted certificate) that no reconnection fixes.

use crate::spec::{Nodes, Spec};
use parking_lot::Mutex;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{Cmd, IntoConnectionInfo, Pipeline, RedisFuture, RedisResult, Value};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use weir_store::ConfigError;

/// A cheap-to-clone multiplexed connection to either kind of target.
#[derive(Clone)]
pub(crate) enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

/// A target's client, parsed once: what a (re)connection starts from.
enum Client {
    Single(redis::Client),
    Cluster(Vec<redis::ConnectionInfo>),
    /// Asked for the master at every (re)connection.
    Sentinel(tokio::sync::Mutex<SentinelClient>),
}

/// The connection in use.
#[derive(Clone)]
struct Current {
    generation: u64,
    conn: Conn,
    /// The wire timeout it was made with.
    timeout: Duration,
}

/// The connection to the target, made on first use and made again after a
/// fault that the connection itself will not get over.
///
/// Three faults leave a connection that answers but can never decide
/// again, and a connection manager keeps it: the server behind a stable
/// name was demoted in a failover (it answers `READONLY`, or `MASTERDOWN`
/// as a replica of a dead master, forever); Sentinel named a new master
/// (the manager reconnects to the old address); and Redis absent when the
/// service started (there is no connection to manage yet). Any of them
/// would leave every decision to the failure policy until a restart. So
/// the link is discarded on such errors ([`Link::discard`]) and the next
/// call, which the back-off makes a single probe, connects again by name
/// or asks the Sentinels again, reaching whatever the name leads to now.
pub(crate) struct Link {
    spec: Spec,
    client: Client,
    /// The longest timeout of the limiters sharing the link (ns): the
    /// connection waits on the wire this long, so no limiter's calls are
    /// cut short by another's shorter deadline.
    timeout_ns: AtomicU64,
    /// The connection in use, or none until the next call connects.
    current: Mutex<Option<Current>>,
    /// Generations handed out so far.
    made: AtomicU64,
    /// Held while connecting, so concurrent callers wait for one attempt
    /// instead of each opening a connection.
    connecting: tokio::sync::Mutex<()>,
}

impl Link {
    /// A link to `spec`, not yet connected, for a limiter whose calls take
    /// up to `timeout`. Fails only on settings no connection could fix (an
    /// unparsable URL, an empty node list, TLS without the feature).
    pub(crate) fn new(spec: &Spec, timeout: Duration) -> Result<Self, ConfigError> {
        #[cfg(feature = "tls")]
        install_crypto_provider();
        #[cfg(not(feature = "tls"))]
        if spec.urls().any(|url| url.starts_with("rediss:")) {
            return Err(ConfigError::Unsupported(
                "`rediss://` (TLS) needs weir-redis's `tls` feature",
            ));
        }
        let target = |e: redis::RedisError| ConfigError::Target(Arc::new(e));
        let client = match &spec.nodes {
            Nodes::Sentinel { .. } => {
                Client::Sentinel(tokio::sync::Mutex::new(sentinel(spec).map_err(target)?))
            }
            _ if spec.master_auth.is_some() => {
                return Err(ConfigError::Invalid(
                    "master credentials are for a Sentinel target; a server's go in its URL",
                ));
            }
            Nodes::Server(url) => Client::Single(server(url, spec).map_err(target)?),
            Nodes::Cluster(nodes) => {
                let nodes = nodes
                    .iter()
                    .map(|n| n.as_str().into_connection_info())
                    .collect::<RedisResult<Vec<_>>>()
                    .map_err(target)?;
                if nodes.is_empty() {
                    return Err(ConfigError::Invalid("a cluster needs at least one node"));
                }
                let client = Client::Cluster(nodes);
                // Built once now for its checks (TLS certificates parse).
                cluster(&client, spec, timeout).map_err(target)?;
                client
            }
        };
        Ok(Self {
            spec: spec.clone(),
            client,
            timeout_ns: AtomicU64::new(nanos(timeout)),
            current: Mutex::new(None),
            made: AtomicU64::new(0),
            connecting: tokio::sync::Mutex::new(()),
        })
    }

    /// Another limiter shares the link, with calls taking up to `timeout`.
    /// A longer timeout than the connection was made with has the next
    /// call connect again with it.
    pub(crate) fn admit(&self, timeout: Duration) {
        self.timeout_ns.fetch_max(nanos(timeout), Ordering::Relaxed);
    }

    fn timeout(&self) -> Duration {
        Duration::from_nanos(self.timeout_ns.load(Ordering::Relaxed))
    }

    /// The connection in use, connecting first if there is none (or it was
    /// made for shorter calls than a limiter now sharing it makes); with
    /// its generation, for [`discard`](Self::discard).
    pub(crate) async fn get(&self) -> RedisResult<(u64, Conn)> {
        let usable = || {
            let timeout = self.timeout();
            self.current
                .lock()
                .clone()
                .filter(|c| c.timeout >= timeout)
                .map(|c| (c.generation, c.conn))
        };
        if let Some(c) = usable() {
            return Ok(c);
        }
        let _one_attempt = self.connecting.lock().await;
        if let Some(c) = usable() {
            return Ok(c);
        }
        let timeout = self.timeout();
        // Boxed: connecting is rare, and the clients' connection futures
        // (Sentinel's most of all) would otherwise nest inside the type of
        // every decision's future.
        let conn = Box::pin(self.connect(timeout)).await?;
        let generation = self.made.fetch_add(1, Ordering::Relaxed) + 1;
        *self.current.lock() = Some(Current {
            generation,
            conn: conn.clone(),
            timeout,
        });
        Ok((generation, conn))
    }

    async fn connect(&self, timeout: Duration) -> RedisResult<Conn> {
        let managed = |client: redis::Client| {
            let config = ConnectionManagerConfig::new()
                .set_connection_timeout(Some(timeout))
                .set_response_timeout(Some(timeout))
                .set_min_delay(Duration::from_millis(20))
                .set_max_delay(Duration::from_millis(500))
                .set_number_of_retries(3);
            ConnectionManager::new_with_config(client, config)
        };
        match &self.client {
            Client::Single(client) => Ok(Conn::Single(managed(client.clone()).await?)),
            Client::Cluster(_) => Ok(Conn::Cluster(
                cluster(&self.client, &self.spec, timeout)?
                    .get_async_connection()
                    .await?,
            )),
            Client::Sentinel(sentinel) => {
                // The Sentinels name the master and the client checks it
                // says it is one (`ROLE`) before it is used.
                let master = sentinel.lock().await.async_get_client().await?;
                Ok(Conn::Single(managed(master).await?))
            }
        }
    }

    /// For a Sentinel target whose master could not be had: whether the
    /// Sentinels know its name, asked with `SENTINEL
    /// GET-MASTER-ADDR-BY-NAME`, which names a known master's address even
    /// while it is down. `Some(false)` only if a Sentinel answered and none
    /// knows the name; `None` if none answered (or the target has none).
    pub(crate) async fn sentinels_know_master(&self, within: Duration) -> Option<bool> {
        let Nodes::Sentinel { sentinels, master } = &self.spec.nodes else {
            return None;
        };
        let mut answered = false;
        for url in sentinels {
            let ask = async {
                let client = server(url, &self.spec)?;
                let mut conn = client.get_multiplexed_async_connection().await?;
                redis::cmd("SENTINEL")
                    .arg("GET-MASTER-ADDR-BY-NAME")
                    .arg(master)
                    .query_async::<Option<Vec<String>>>(&mut conn)
                    .await
            };
            match tokio::time::timeout(within, ask).await {
                Ok(Ok(Some(_))) => return Some(true),
                Ok(Ok(None)) => answered = true,
                _ => {}
            }
        }
        answered.then_some(false)
    }

    /// The first plain (`redis://`) address of the target whose server
    /// answers only TLS, as `host:port`, asked within `within` each; for a
    /// connection at start-up that the server hung up on.
    pub(crate) async fn plain_address_speaking_tls(&self, within: Duration) -> Option<String> {
        for url in self.spec.urls().filter(|u| u.starts_with("redis://")) {
            let Ok(info) = url.into_connection_info() else {
                continue;
            };
            if let redis::ConnectionAddr::Tcp(host, port) = info.addr()
                && crate::handshake::speaks_tls(host, *port, within).await
            {
                return Some(format!("{host}:{port}"));
            }
        }
        None
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
        if current.as_ref().is_some_and(|c| c.generation == generation) {
            *current = None;
        }
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A single server's client, with the target's TLS certificates.
fn server(url: &str, spec: &Spec) -> RedisResult<redis::Client> {
    let info = url.into_connection_info()?;
    #[cfg(feature = "tls")]
    if let (Some(tls), redis::ConnectionAddr::TcpTls { .. }) = (&spec.tls, info.addr()) {
        return redis::Client::build_with_tls(info, tls.certificates());
    }
    let _ = spec;
    redis::Client::open(info)
}

/// The cluster client of `client`, with wire timeouts of `timeout`.
fn cluster(
    client: &Client,
    spec: &Spec,
    timeout: Duration,
) -> RedisResult<redis::cluster::ClusterClient> {
    let Client::Cluster(nodes) = client else {
        unreachable!("only a cluster target has cluster nodes")
    };
    // No retries by the client: a redirection is followed by the store
    // (see `call::Redirect`), a slot being migrated is answered key by
    // key, and anything else is the failure policy's until the back-off's
    // probe: a retry after a sleep would only spend the caller's deadline.
    // The client still refreshes its slot map on `MOVED` and reconnects
    // to a node after a broken connection, retried or not.
    let builder = ClusterClientBuilder::new(nodes.clone())
        .connection_timeout(timeout)
        .response_timeout(timeout)
        .retries(0);
    #[cfg(feature = "tls")]
    let builder = match &spec.tls {
        Some(tls) => builder.certs(tls.certificates()),
        None => builder,
    };
    let _ = spec;
    builder.build()
}

/// The Sentinel client of a Sentinel target: the Sentinels with their own
/// URLs' credentials and schemes, the master with the target's
/// credentials and, when it has TLS settings, over TLS.
fn sentinel(spec: &Spec) -> RedisResult<SentinelClient> {
    let Nodes::Sentinel { sentinels, master } = &spec.nodes else {
        unreachable!("only a sentinel target has sentinels")
    };
    let infos = sentinels
        .iter()
        .map(|s| s.as_str().into_connection_info())
        .collect::<RedisResult<Vec<_>>>()?;
    let Some(first) = infos.first() else {
        return Err((redis::ErrorKind::InvalidClientConfig, "no Sentinel given").into());
    };
    let login = first.redis_settings();
    let (user, password) = (
        login.username().map(str::to_owned),
        login.password().map(str::to_owned),
    );
    let mut builder = SentinelClientBuilder::new(
        infos.iter().map(|i| i.addr().clone()),
        master,
        SentinelServerType::Master,
    )?;
    if let Some(user) = user {
        builder = builder.set_client_to_sentinel_username(user);
    }
    if let Some(password) = password {
        builder = builder.set_client_to_sentinel_password(password);
    }
    if let Some((user, password)) = &spec.master_auth {
        builder = builder
            .set_client_to_redis_username(user)
            .set_client_to_redis_password(password);
    }
    #[cfg(feature = "tls")]
    if let Some(tls) = &spec.tls {
        builder = builder
            .set_client_to_redis_tls_mode(redis::TlsMode::Secure)
            .set_client_to_redis_certificates(tls.certificates());
        if infos
            .iter()
            .any(|i| matches!(i.addr(), redis::ConnectionAddr::TcpTls { .. }))
        {
            builder = builder.set_client_to_sentinel_certificates(tls.certificates());
        }
    }
    builder.build()
}

/// rustls needs a process-wide crypto provider when more than one is
/// compiled in; *ring* is this crate's, installed unless the application
/// installed another first.
#[cfg(feature = "tls")]
fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing a race to another installer is fine: one is installed.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// What a failure to connect at start-up says about the settings, if it
/// says anything: the store refused this client, which stays so however
/// often a probe connects again, so it is a configuration error rather
/// than an outage. (A master the Sentinels do not name is asked about
/// separately: [`Link::sentinels_know_master`].)
pub(crate) fn misconfigured(error: redis::RedisError) -> Result<ConfigError, redis::RedisError> {
    if refused(&error) {
        Ok(ConfigError::Rejected(Arc::new(error)))
    } else {
        Err(error)
    }
}

/// Whether a call failed because the store refused this client — wrong
/// credentials, missing permissions (a command, a key, or a command a
/// script calls), a certificate either side does not trust, a failed TLS
/// handshake — which reconnecting never fixes.
pub(crate) fn refused(error: &redis::RedisError) -> bool {
    use redis::{ErrorKind, ServerErrorKind};
    if matches!(
        error.kind(),
        ErrorKind::AuthenticationFailed | ErrorKind::Server(ServerErrorKind::NoPerm)
    ) || matches!(error.code(), Some("WRONGPASS" | "NOAUTH" | "NOPERM"))
    {
        return true;
    }
    // A script calling a command the ACL denies fails with a plain `ERR`
    // (Redis 7: "The user executing the script can't run this command or
    // subcommand"; a key it may not touch: "... can't access at least one
    // of the keys ...").
    if error
        .detail()
        .is_some_and(|d| d.contains("user executing the script can't"))
    {
        return true;
    }
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = source {
        if tls_failure(e) {
            return true;
        }
        source = e.source();
    }
    false
}

/// A TLS handshake's own error. rustls reports it inside an I/O error,
/// which the Redis client keeps behind an `Arc`; `io::Error::source`
/// skips it, so both wrappers are opened here.
fn tls_failure(error: &(dyn std::error::Error + 'static)) -> bool {
    #[cfg(feature = "tls")]
    {
        type Shared = Arc<dyn std::error::Error + Send + Sync>;
        if error.is::<rustls::Error>() {
            return true;
        }
        if let Some(io) = error.downcast_ref::<std::io::Error>() {
            return io.get_ref().is_some_and(|inner| tls_failure(inner));
        }
        if let Some(shared) = error.downcast_ref::<Shared>() {
            return tls_failure(&**shared);
        }
    }
    let _ = error;
    false
}

/// Errors after which the same single-server connection cannot be
/// trusted to decide again: the server no longer takes writes (demoted,
/// replica of a lost master, loading a dataset after a restart) or the
/// connection itself is broken. A fresh connection by name (or by asking
/// the Sentinels) reaches whatever leads the name now; a connection
/// manager alone would keep the old one.
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
