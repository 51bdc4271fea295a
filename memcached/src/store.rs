//! [`Memcached`]: the Memcached store behind a
//! [`MemcachedLimiter`](crate::MemcachedLimiter): how a key is named and
//! placed, and the pipelines that decide, charge and refund.
//!
//! Every decision is made by weir-rate's own algorithm on a state rebuilt
//! from what the store holds, so the store decides exactly as the
//! in-process limiter of the same name would on the same counts (the
//! windows) or the same stored time (GCRA and the token bucket); what
//! differs is only how the state is kept and updated (see `windows` and
//! `cas`).

use crate::cas::{self, CasLimit};
use crate::connection::Connection;
use crate::keys::{MAX_PREFIX, encode, valid_prefix};
use crate::servers::{Rendezvous, Servers, server_of};
use crate::windows::{self, Window, Windows};
use memcache::exp::AsyncMetaClient;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use weir_primitives::sync::RwLock;
use weir_rate::{Decision, Gcra, Receipt, SlidingWindow, TokenBucket};
use weir_store::{Backend, ConfigError, Kind, Limit, Placement, Plan, StoreError};

/// The most counters a sliding window may have here: a check reads all of
/// them.
pub(crate) const MAX_COUNTERS: u32 = 64;

/// The Memcached store of a [`MemcachedLimiter`](crate::MemcachedLimiter):
/// the servers, the client, and the limits it keeps (one, or windows
/// all-or-nothing).
///
/// ```no_run
/// use std::num::NonZeroU32;
/// use weir_memcached::{MemcachedLimiter, Servers};
/// use weir_rate::{FixedWindow, Quota};
///
/// # async fn demo() -> Result<(), weir_memcached::ConfigError> {
/// let limiter = MemcachedLimiter::builder(FixedWindow::new(Quota::per_second(NonZeroU32::MIN)))
///     .prefix("api")
///     .connect(Servers::one("127.0.0.1:11211"))
///     .await?;
/// assert_eq!(limiter.store().servers(), ["127.0.0.1:11211"]);
/// # Ok(())
/// # }
/// ```
pub struct Memcached {
    connection: Connection,
    servers: Vec<String>,
    /// How the limit is kept now: a call works by one snapshot of it.
    scheme: RwLock<Arc<Scheme>>,
    /// Every key of the limiter starts `<prefix>:<first limit>:`.
    head: String,
    /// What sets each limit's counters apart within a key, after its `|`
    /// (see [`marks`]); fixed, since a change of limits keeps their layout.
    marks: Vec<String>,
}

/// How the limit is kept.
enum Scheme {
    /// Fixed or sliding windows, all-or-nothing: counters, one per
    /// (sub-)window of each.
    Windows(Windows),
    /// GCRA or a token bucket: one time per key, written by
    /// compare-and-swap.
    Cas(CasLimit),
}

impl fmt::Debug for Memcached {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Memcached")
            .field("servers", &self.servers)
            .field("head", &self.head)
            .finish_non_exhaustive()
    }
}

impl Memcached {
    /// The servers, as configured.
    pub fn servers(&self) -> &[String] {
        &self.servers
    }

    /// The server `key`'s counters live on.
    ///
    /// ```no_run
    /// # async fn demo(limiter: weir_memcached::MemcachedLimiter) {
    /// println!("alice's counters are on {}", limiter.store().server_of("alice"));
    /// # }
    /// ```
    pub fn server_of(&self, key: &str) -> &str {
        &self.servers[server_of(self.store_key(key).as_bytes(), &self.servers)]
    }

    /// Compare-and-swap writes tried since the limiter was built, and how
    /// many of them lost to another writer of the key (GCRA and the token
    /// bucket; the windows write no CAS).
    pub fn cas_writes(&self) -> (u64, u64) {
        (
            self.connection.stats.writes.load(Ordering::Relaxed),
            self.connection.stats.lost.load(Ordering::Relaxed),
        )
    }
}

impl Memcached {
    /// How the limit is kept now.
    fn scheme(&self) -> Arc<Scheme> {
        Arc::clone(&self.scheme.read())
    }

    /// `key` as Memcached names it: the head, then the key encoded.
    fn store_key(&self, key: &str) -> String {
        let encoded = encode(key);
        let mut s = String::with_capacity(self.head.len() + encoded.len());
        s.push_str(&self.head);
        s.push_str(&encoded);
        s
    }
}

impl Backend for Memcached {
    const NAME: &'static str = "memcached";
    type Target = Servers;
    type Key = String;

    async fn connect(servers: Servers, plan: &Plan) -> Result<(Self, bool), ConfigError> {
        let prefix = plan.prefix();
        if !valid_prefix(prefix) {
            return Err(ConfigError::Invalid(
                "a Memcached key prefix is 1 to 48 of A-Z a-z 0-9 _ . -",
            ));
        }
        debug_assert!(prefix.len() <= MAX_PREFIX);
        let limits = plan.limits();
        if servers.addresses().is_empty() {
            return Err(ConfigError::Invalid("no Memcached server"));
        }
        if servers.attempts() == 0 {
            return Err(ConfigError::Invalid("zero compare-and-swap attempts"));
        }
        let marks = marks(limits);
        let scheme = scheme(limits, &marks)?;
        let head = format!("{prefix}:{}:", tag(&limits[0]));
        let timeout = plan.timeout();
        let client = AsyncMetaClient::builder()
            .router(Rendezvous)
            .connect_timeout(Some(timeout))
            .io_timeout(Some(timeout))
            .max_connections(servers.connection_cap())
            .connect_multiple_async(servers.addresses().iter().map(String::as_str))
            .await
            .map_err(|e| ConfigError::Target(Arc::new(e)))?;
        // Memcached down is no error: the limiter starts with its failure
        // policy. Only whether it answers now is asked.
        let wait = timeout.max(Duration::from_secs(1));
        let connected = matches!(tokio::time::timeout(wait, client.noop()).await, Ok(Ok(())));
        let store = Memcached {
            connection: Connection::new(client, servers.attempts()),
            servers: servers.addresses().to_vec(),
            scheme: RwLock::new(Arc::new(scheme)),
            head,
            marks,
        };
        Ok((store, connected))
    }

    /// One back-off cell per server, and one group per server (a pipeline
    /// goes to one server).
    fn place(&self, key: &str) -> Placement<String> {
        let key = self.store_key(key);
        let server = server_of(key.as_bytes(), &self.servers);
        Placement {
            key,
            cell: server,
            group: server as u64,
        }
    }

    fn cells(&self) -> usize {
        self.servers.len()
    }

    fn describe(&self, cell: usize) -> String {
        self.servers.get(cell).cloned().unwrap_or_default()
    }

    /// The keys stay (the limiter has checked that the algorithms and the
    /// windows' lengths are the same): a GCRA's or token bucket's stored
    /// time, or the windows' counts, are read by the new limits from the
    /// next call on.
    fn retune(&self, limits: &[Limit]) -> Result<(), ConfigError> {
        *self.scheme.write() = Arc::new(scheme(limits, &self.marks)?);
        Ok(())
    }

    async fn decide(
        &self,
        keys: &[String],
        costs: &[u32],
    ) -> Result<Vec<Result<Decision, StoreError>>, StoreError> {
        let scheme = self.scheme();
        match &*scheme {
            Scheme::Windows(set) => windows::decide(&self.connection, set, keys, costs).await,
            Scheme::Cas(limit) => cas::decide(&self.connection, limit, keys, costs).await,
        }
    }

    async fn charge(&self, key: &String, cost: u32) -> Result<Receipt, StoreError> {
        let scheme = self.scheme();
        match &*scheme {
            Scheme::Windows(set) => windows::charge(&self.connection, set, key, cost).await,
            Scheme::Cas(limit) => cas::charge(&self.connection, limit, key, cost).await,
        }
    }

    async fn refund(&self, key: &String, receipt: Receipt) -> Result<(), StoreError> {
        let scheme = self.scheme();
        match &*scheme {
            Scheme::Windows(set) => windows::refund(&self.connection, set, key, receipt).await,
            Scheme::Cas(limit) => cas::refund(&self.connection, limit, key, receipt).await,
        }
    }
}

/// How `limits` are kept here, each limit's counters set apart by its
/// mark: one limit of any algorithm, or several windows all-or-nothing.
fn scheme(limits: &[Limit], marks: &[String]) -> Result<Scheme, ConfigError> {
    if let [limit] = limits
        && let Some(cas) = cas_limit(limit)
    {
        return Ok(Scheme::Cas(cas));
    }
    let mut set = Vec::with_capacity(limits.len());
    for (limit, mark) in limits.iter().zip(marks) {
        let Some(window) = window(limit)? else {
            return Err(ConfigError::Unsupported(
                "several limits all-or-nothing on Memcached must all be fixed or sliding \
                 windows (counters); a GCRA or token bucket among them needs a transaction \
                 across keys, which Memcached does not have: keep such a set on Redis",
            ));
        };
        set.push((mark.clone(), window));
    }
    if set.is_empty() {
        return Err(ConfigError::Invalid("no limit"));
    }
    Ok(Scheme::Windows(Windows::new(set)))
}

/// `limit` as a time per key written by compare-and-swap, if it is one.
fn cas_limit(limit: &Limit) -> Option<CasLimit> {
    match limit.kind() {
        Kind::Gcra { .. } => Some(CasLimit::Gcra(Gcra::new(limit.quota()))),
        Kind::TokenBucket => Some(CasLimit::Bucket(TokenBucket::new(limit.quota()))),
        Kind::FixedWindow | Kind::SlidingWindow { .. } => None,
    }
}

/// `limit` as counters, if it is a window.
fn window(limit: &Limit) -> Result<Option<Window>, ConfigError> {
    let quota = limit.quota();
    Ok(match limit.kind() {
        Kind::FixedWindow => Some(Window::fixed(quota)),
        Kind::SlidingWindow { counters, .. } => {
            if counters > MAX_COUNTERS {
                return Err(ConfigError::Unsupported(
                    "a sliding window of more than 64 counters on Memcached (each check reads them all)",
                ));
            }
            let sliding = SlidingWindow::try_new(quota, counters).map_err(|_| {
                ConfigError::Invalid("a sliding window whose counters do not fit its quota")
            })?;
            Some(Window::sliding(sliding))
        }
        Kind::Gcra { .. } | Kind::TokenBucket => None,
    })
}

/// What sets each limit's counters apart after a key's `|`: nothing for
/// the first (a single limit's counters are `<key>|<window>`), and for
/// the limit at place `i` of a set `<i>:<its limit's name>:`, so that a
/// key's counters of two limits never meet, even of two limits alike.
fn marks(limits: &[Limit]) -> Vec<String> {
    limits
        .iter()
        .enumerate()
        .map(|(i, limit)| {
            if i == 0 {
                String::new()
            } else {
                format!("{i}:{}:", tag(limit))
            }
        })
        .collect()
}

/// A limit's name in its keys: the algorithm and every parameter that lays
/// out its state, so limiters whose states differ never share keys.
fn tag(limit: &Limit) -> String {
    let window = weir_primitives::time::duration_to_nanos(limit.quota().window());
    match limit.kind() {
        Kind::FixedWindow => format!("fw{window}"),
        Kind::SlidingWindow { counters, .. } => format!("sw{counters}x{window}"),
        // One time per key, whatever the quota: a new quota takes the state
        // over, as it does in process.
        Kind::Gcra { .. } => "gcra".to_owned(),
        Kind::TokenBucket => "tb".to_owned(),
    }
}
