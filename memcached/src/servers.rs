//! [`Servers`]: where a limiter's counters live, and which server holds a
//! key: rendezvous hashing over the servers as configured, with a hash
//! that every process computes alike.

use crate::keys::routed;
use memcache::exp::Router;

/// The Memcached servers a limiter keeps its counters on, as every
/// instance of the service names them, and how it talks to them.
///
/// Keys are spread over the servers by rendezvous (highest random weight)
/// hashing of everything of a key but its window: each server scores the
/// key, the highest takes it. Adding or removing a server moves only the
/// keys that were or become its own, and every instance that lists the same
/// servers places every key alike, whatever order it lists them in and
/// whatever it was compiled with (the hash is FNV-1a, fixed).
///
/// ```
/// use weir_memcached::Servers;
///
/// let servers = Servers::new(["10.0.0.1:11211", "10.0.0.2:11211"]).cas_attempts(16);
/// assert_eq!(servers.addresses(), ["10.0.0.1:11211", "10.0.0.2:11211"]);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Servers {
    addresses: Vec<String>,
    cas_attempts: u32,
    max_connections: Option<usize>,
}

impl Servers {
    /// The servers at `addresses` (`host:port`, as every instance lists
    /// them).
    pub fn new<I, S>(addresses: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            addresses: addresses.into_iter().map(Into::into).collect(),
            cas_attempts: 8,
            max_connections: None,
        }
    }

    /// The servers one address names: `memcached://host:port,host:port,…`
    /// (the scheme may be left out), the one syntax a configuration file
    /// holds for them.
    ///
    /// ```
    /// use weir_memcached::Servers;
    ///
    /// let servers = Servers::parse("memcached://10.0.0.1:11211,10.0.0.2:11211")?;
    /// assert_eq!(servers, Servers::new(["10.0.0.1:11211", "10.0.0.2:11211"]));
    /// # Ok::<(), weir_store::ConfigError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`ConfigError::Invalid`](weir_store::ConfigError::Invalid) for
    /// another scheme, an empty host, or a host without its port.
    pub fn parse(address: &str) -> Result<Self, weir_store::ConfigError> {
        let invalid = weir_store::ConfigError::Invalid;
        let hosts = match address.split_once("://") {
            Some(("memcached", hosts)) => hosts,
            Some(_) => return Err(invalid("a Memcached address's scheme is `memcached://`")),
            None => address,
        };
        let hosts: Vec<&str> = hosts
            .trim_end_matches('/')
            .split(',')
            .map(str::trim)
            .collect();
        let well_formed = |h: &&str| {
            h.rsplit_once(':')
                .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok())
        };
        if !hosts.iter().all(well_formed) {
            return Err(invalid(
                "a Memcached address lists `host:port`, comma-separated",
            ));
        }
        Ok(Self::new(hosts))
    }

    /// One server.
    pub fn one(address: impl Into<String>) -> Self {
        Self::new([address])
    }

    /// How many compare-and-swap writes a GCRA or token-bucket decision
    /// tries before it gives up on a key other writers keep changing
    /// (default 8, at least 1). A decision that gives up is denied (see
    /// [`StoreError::Contended`](weir_store::StoreError::Contended)).
    pub fn cas_attempts(mut self, attempts: u32) -> Self {
        self.cas_attempts = attempts;
        self
    }

    /// The most connections open to each server at once (default: no
    /// bound; each call in flight takes one, pooled between calls). With a
    /// bound, calls beyond it wait for a connection within their timeout.
    pub fn max_connections(mut self, max: usize) -> Self {
        self.max_connections = Some(max);
        self
    }

    /// The servers, as given.
    pub fn addresses(&self) -> &[String] {
        &self.addresses
    }

    pub(crate) fn attempts(&self) -> u32 {
        self.cas_attempts
    }

    pub(crate) fn connection_cap(&self) -> Option<usize> {
        self.max_connections
    }
}

/// FNV-1a, 64-bit: the same in every process and every build.
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

/// SplitMix64's finalizer, so scores of nearby hashes spread.
fn mix(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The server of a key among `servers` (their identities as configured):
/// the highest score of the key's routed part against each.
pub(crate) fn server_of(store_key: &[u8], servers: &[String]) -> usize {
    let key = fnv1a(routed(store_key));
    servers
        .iter()
        .enumerate()
        .max_by_key(|(_, id)| mix(key ^ fnv1a(id.as_bytes())))
        .map_or(0, |(i, _)| i)
}

/// The client's router: [`server_of`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rendezvous;

impl Router for Rendezvous {
    fn route(&self, key: &[u8], servers: &[String]) -> usize {
        server_of(key, servers)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_parse_to_their_servers_or_say_why_not() {
        assert_eq!(
            Servers::parse("memcached://a:11211, b:11212/").unwrap(),
            Servers::new(["a:11211", "b:11212"])
        );
        assert_eq!(Servers::parse("a:1").unwrap(), Servers::one("a:1"));
        for bad in [
            "redis://a:1",
            "memcached://",
            "a",
            "a:1,,b:2",
            ":11211",
            "a:port",
        ] {
            assert!(
                matches!(
                    Servers::parse(bad),
                    Err(weir_store::ConfigError::Invalid(_))
                ),
                "{bad} was taken"
            );
        }
    }

    fn servers(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("10.0.0.{i}:11211")).collect()
    }

    #[test]
    fn keys_spread_and_a_keys_counters_share_a_server() {
        let four = servers(4);
        let mut seen = [0; 4];
        for k in 0..4000 {
            let key = format!("api:fw1000000000:user{k}|1");
            let at = server_of(key.as_bytes(), &four);
            let next = format!("api:fw1000000000:user{k}|2");
            assert_eq!(
                server_of(next.as_bytes(), &four),
                at,
                "one server for every window"
            );
            seen[at] += 1;
        }
        assert!(seen.iter().all(|&n| (800..1200).contains(&n)), "{seen:?}");
    }

    #[test]
    fn a_server_removed_moves_only_its_own_keys() {
        let four = servers(4);
        let three: Vec<String> = four[..3].to_vec();
        for k in 0..2000 {
            let key = format!("api:gcra:user{k}");
            let before = server_of(key.as_bytes(), &four);
            let after = server_of(key.as_bytes(), &three);
            if before < 3 {
                assert_eq!(before, after, "{key} moved without need");
            }
        }
        // The order servers are listed in does not matter.
        let reversed: Vec<String> = four.iter().rev().cloned().collect();
        let key = b"api:gcra:alice";
        assert_eq!(
            four[server_of(key, &four)],
            reversed[server_of(key, &reversed)]
        );
    }
}
