//! [`Target`]: where a limiter's state lives — one server, a Cluster, or
//! the master a set of Sentinels names — how to reach it (TLS, the
//! master's credentials), and which limiters share its connection.

use crate::link::Link;
#[cfg(feature = "tls")]
use crate::spec::Tls;
use crate::spec::{Nodes, Spec};
use parking_lot::Mutex;
use std::fmt;
use std::sync::{Arc, Weak};
use std::time::Duration;
use weir_store::ConfigError;

/// Where the limits live, and the connection limiters share.
///
/// Credentials go in the URLs (`redis://user:password@host:6379/`); a
/// `rediss://` URL is TLS (feature `tls`, see [`Target::tls`]).
///
/// **Clones share one connection.** Every limiter connected with a clone
/// of one `Target` sends its calls over one multiplexed connection (one
/// per node of a Cluster), made when the first of them connects and made
/// again, for all of them, after a fault. Targets built separately, even
/// from the same URL, connect separately. The connection waits on the wire
/// as long as the longest [timeout](weir_store::StoreLimiterBuilder::timeout) of the
/// limiters sharing it; each limiter still gives up at its own.
///
/// ```
/// use weir_redis::Target;
///
/// let single = Target::server("redis://127.0.0.1:6379/");
/// let cluster = Target::cluster(["redis://127.0.0.1:7000/", "redis://127.0.0.1:7001/"]);
/// let sentinel = Target::sentinel(["redis://127.0.0.1:26379/"], "mymaster")
///     .master_auth("weir", "s3cret");
/// assert_ne!(single, cluster);
/// // Per-second and per-day limiters of one service, one connection:
/// let (per_second, per_day) = (single.clone(), single);
/// assert_eq!(per_second, per_day);
/// # let _ = sentinel;
/// ```
#[derive(Clone)]
pub struct Target {
    spec: Arc<Spec>,
    /// The connection of this target and its clones, while a limiter
    /// holds it.
    shared: Arc<Mutex<Weak<Link>>>,
}

impl Target {
    fn of(nodes: Nodes) -> Self {
        Self::try_from_spec(Spec {
            nodes,
            #[cfg(feature = "tls")]
            tls: None,
            master_auth: None,
        })
    }

    fn try_from_spec(spec: Spec) -> Self {
        Self {
            spec: Arc::new(spec),
            shared: Arc::default(),
        }
    }

    /// The target with `change` made: its own connection, apart from the
    /// clones made before.
    fn with(self, change: impl FnOnce(&mut Spec)) -> Self {
        let mut spec = Arc::unwrap_or_clone(self.spec);
        change(&mut spec);
        Self::try_from_spec(spec)
    }

    /// The target one address names, in the one syntax a configuration
    /// file can hold for every kind of target:
    ///
    /// | address | target |
    /// |---|---|
    /// | `redis://[user:password@]host:port[/db]` (`rediss://` for TLS) | [one server](Self::server) |
    /// | `redis+cluster://[user:password@]host:port,host:port,…` (`rediss+cluster://`) | a [Cluster](Self::cluster) through those nodes, each with the credentials |
    /// | `redis+sentinel://[user:password@]host:port,host:port,…/master` (`rediss+sentinel://`) | the master the [Sentinels](Self::sentinel) name, the credentials [the master's](Self::master_auth) |
    ///
    /// ```
    /// use weir_redis::Target;
    ///
    /// let single = Target::parse("redis://127.0.0.1:6379/")?;
    /// let cluster = Target::parse("redis+cluster://10.0.0.1:7000,10.0.0.2:7000")?;
    /// let sentinel = Target::parse("redis+sentinel://weir:s3cret@10.0.0.1:26379,10.0.0.2:26379/mymaster")?;
    /// assert_eq!(
    ///     sentinel,
    ///     Target::sentinel(["redis://10.0.0.1:26379", "redis://10.0.0.2:26379"], "mymaster")
    ///         .master_auth("weir", "s3cret"),
    /// );
    /// # let _ = (single, cluster);
    /// # Ok::<(), weir_store::ConfigError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`ConfigError::Invalid`] for an address of no such form: another
    /// scheme, no host, several hosts for one server, a Sentinel address
    /// without its master's name, or credentials without a password.
    pub fn parse(address: &str) -> Result<Self, ConfigError> {
        let invalid = ConfigError::Invalid;
        let (scheme, rest) = address.split_once("://").ok_or(invalid(
            "a Redis address starts with `redis://` or a variant of it",
        ))?;
        let (base, kind) = match scheme {
            "redis" | "rediss" => return Self::one_server(address, rest),
            "redis+cluster" => ("redis", "cluster"),
            "rediss+cluster" => ("rediss", "cluster"),
            "redis+sentinel" => ("redis", "sentinel"),
            "rediss+sentinel" => ("rediss", "sentinel"),
            _ => {
                return Err(invalid(
                    "a Redis address's scheme is redis, rediss, redis+cluster, rediss+cluster,                      redis+sentinel or rediss+sentinel",
                ));
            }
        };
        let (login, rest) = match rest.rsplit_once('@') {
            Some((login, hosts)) => (Some(login), hosts),
            None => (None, rest),
        };
        let (hosts, path) = rest.split_once('/').unwrap_or((rest, ""));
        let hosts: Vec<&str> = hosts.split(',').map(str::trim).collect();
        if hosts.iter().any(|h| h.is_empty()) {
            return Err(invalid("a Redis address names an empty host"));
        }
        if kind == "cluster" {
            let at = login.map_or(String::new(), |l| format!("{l}@"));
            let nodes = hosts.iter().map(|h| format!("{base}://{at}{h}"));
            return Ok(Self::cluster(nodes));
        }
        let master = path.trim_end_matches('/');
        if master.is_empty() || master.contains('/') {
            return Err(invalid(
                "a Sentinel address ends with the master's name: `redis+sentinel://host:port/mymaster`",
            ));
        }
        let target = Self::sentinel(hosts.iter().map(|h| format!("{base}://{h}")), master);
        match login {
            None => Ok(target),
            Some(login) => {
                let (user, password) = login.split_once(':').ok_or(invalid(
                    "a Sentinel address's credentials are `user:password`",
                ))?;
                Ok(target.master_auth(user, password))
            }
        }
    }

    /// A single server's address: one host.
    fn one_server(address: &str, rest: &str) -> Result<Self, ConfigError> {
        let hosts = rest.rsplit_once('@').map_or(rest, |(_, hosts)| hosts);
        let hosts = hosts.split_once('/').map_or(hosts, |(hosts, _)| hosts);
        if hosts.is_empty() || hosts.contains(',') {
            return Err(ConfigError::Invalid(
                "a `redis://` address names one host; a Cluster's is `redis+cluster://`",
            ));
        }
        Ok(Self::server(address))
    }

    /// One Redis server (a `redis://` or `rediss://` URL), through a
    /// connection manager that reconnects in the background after a
    /// failure.
    pub fn server(url: impl Into<String>) -> Self {
        Self::of(Nodes::Server(url.into()))
    }

    /// A Redis Cluster, given by one or more of its nodes; the client
    /// learns the slot map, follows `MOVED` and `ASK` (a script for a key
    /// of a slot being migrated goes to the node importing it) and
    /// refreshes the map after a failover.
    pub fn cluster<I, S>(nodes: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self::of(Nodes::Cluster(nodes.into_iter().map(Into::into).collect()))
    }

    /// The master that Redis Sentinels monitor under the name `master`,
    /// given by one or more Sentinels' URLs (`redis://host:26379/`, with the
    /// Sentinels' own credentials if they require any; `rediss://` for TLS).
    ///
    /// The master is found by asking the Sentinels in turn, and found
    /// again whenever its connection fails or it stops taking writes (it
    /// was demoted in a failover): decisions move to the new master as
    /// soon as the Sentinels name it, and the failure policy decides in
    /// between. The master's own credentials are [`master_auth`](Self::master_auth).
    pub fn sentinel<I, S>(sentinels: I, master: impl Into<String>) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self::of(Nodes::Sentinel {
            sentinels: sentinels.into_iter().map(Into::into).collect(),
            master: master.into(),
        })
    }

    /// The user and password of a Sentinel-named master (`default` is the
    /// user of a server protected by `requirepass` alone). Other targets
    /// carry their credentials in their URLs; for them this is a
    /// [`ConfigError::Invalid`](weir_store::ConfigError::Invalid) at connect.
    pub fn master_auth(self, user: impl Into<String>, password: impl Into<String>) -> Self {
        let auth = (user.into(), password.into());
        self.with(|spec| spec.master_auth = Some(auth))
    }

    /// TLS settings for this target's `rediss://` connections: the
    /// certificate authority to trust (instead of the system's), and a
    /// client certificate for servers that ask for one. A Sentinel-named
    /// master is reached over TLS when these are set; Sentinels by their
    /// URLs' schemes.
    ///
    /// A certificate the client does not trust, or a server that refuses
    /// the client's, is a [`ConfigError::Rejected`](weir_store::ConfigError::Rejected)
    /// at connect, never a quiet fallback; so is a plain `redis://`
    /// address whose server hangs up on plain text and answers a TLS
    /// handshake (it needs `rediss://`).
    ///
    /// ```no_run
    /// use weir_redis::{Target, Tls};
    ///
    /// # fn demo() -> std::io::Result<()> {
    /// let tls = Tls::new().root_certificate(std::fs::read("ca.pem")?);
    /// let target = Target::server("rediss://weir:s3cret@redis.internal:6380/").tls(tls);
    /// # let _ = target;
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    pub fn tls(self, tls: Tls) -> Self {
        self.with(|spec| spec.tls = Some(tls))
    }

    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self.spec.nodes, Nodes::Cluster(_))
    }

    /// The connection this target's limiters share, made for a limiter
    /// whose calls take up to `timeout`.
    pub(crate) fn link(&self, timeout: Duration) -> Result<Arc<Link>, ConfigError> {
        let mut shared = self.shared.lock();
        if let Some(link) = shared.upgrade() {
            link.admit(timeout);
            return Ok(link);
        }
        let link = Arc::new(Link::new(&self.spec, timeout)?);
        *shared = Arc::downgrade(&link);
        Ok(link)
    }

    /// The target for a log line, without credentials: the server, the
    /// cluster's seed nodes and the first slot of a range, or the master's
    /// name and its Sentinels.
    pub(crate) fn describe(&self, slot: Option<usize>) -> String {
        let listed = |urls: &[String]| urls.iter().map(|n| redact(n)).collect::<Vec<_>>();
        match (&self.spec.nodes, slot) {
            (Nodes::Server(url), _) => redact(url),
            (Nodes::Cluster(nodes), Some(slot)) => {
                format!("cluster {} (slots from {slot})", listed(nodes).join(", "))
            }
            (Nodes::Cluster(nodes), None) => format!("cluster {}", listed(nodes).join(", ")),
            (Nodes::Sentinel { sentinels, master }, _) => {
                format!(
                    "master {master} of sentinels {}",
                    listed(sentinels).join(", ")
                )
            }
        }
    }
}

impl PartialEq for Target {
    fn eq(&self, other: &Self) -> bool {
        self.spec == other.spec
    }
}

impl Eq for Target {}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe(None))
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

#[cfg(test)]
mod tests {
    use super::Target;

    /// Each form parses to the target its constructor builds, and every
    /// malformed address is a clear error, never a target that fails later.
    #[test]
    fn addresses_parse_to_their_targets_or_say_why_not() {
        let parsed = |a: &str| Target::parse(a).expect(a);
        assert_eq!(
            parsed("redis://127.0.0.1:6379/2"),
            Target::server("redis://127.0.0.1:6379/2")
        );
        assert_eq!(
            parsed("rediss+cluster://u:p@a:7000, b:7001"),
            Target::cluster(["rediss://u:p@a:7000", "rediss://u:p@b:7001"])
        );
        assert_eq!(
            parsed("redis+sentinel://s1:26379,s2:26379/mymaster/"),
            Target::sentinel(["redis://s1:26379", "redis://s2:26379"], "mymaster")
        );
        for bad in [
            "127.0.0.1:6379",
            "http://x:1",
            "redis://a:1,b:2",
            "redis://",
            "redis+cluster://a:1,,b:2",
            "redis+sentinel://s1:26379",
            "redis+sentinel://s1:26379/a/b",
            "redis+sentinel://user@s1:26379/m",
        ] {
            assert!(
                matches!(Target::parse(bad), Err(weir_store::ConfigError::Invalid(_))),
                "{bad} was taken"
            );
        }
    }
}
