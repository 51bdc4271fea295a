//! Which client a request belongs to: the key a limiter counts it under.
//!
//! The default is the peer's IP address. Forwarded headers are trusted only
//! when the peer itself is one of the proxies the operator says it trusts:
//! anyone can write `X-Forwarded-For`, so reading it from an untrusted peer
//! would let every client pick its own key and escape its limit.

use http::Request;
use std::hash::Hash;
use std::net::{IpAddr, SocketAddr};

/// Extracts the key a request is limited under.
///
/// ```
/// use http::Request;
/// use weir_rate::http::{KeyExtractor, KeyFn};
///
/// let by_api_key = KeyFn::new(|req: &Request<()>| {
///     req.headers().get("x-api-key").and_then(|v| v.to_str().ok()).map(str::to_owned)
/// });
/// let req = Request::builder().header("x-api-key", "k-1").body(()).unwrap();
/// assert_eq!(by_api_key.extract(&req), Some("k-1".to_string()));
/// ```
pub trait KeyExtractor<B>: Clone + Send + Sync + 'static {
    /// The key type.
    type Key: Hash + Eq + Clone + Send + Sync + 'static;

    /// The request's key, or `None` if it cannot be determined (the layer
    /// then answers 500: a server that cannot tell clients apart is
    /// misconfigured, and letting such requests through unlimited would
    /// hide it).
    fn extract(&self, request: &Request<B>) -> Option<Self::Key>;
}

/// The peer's socket address, as a request extension.
///
/// Servers insert it for each connection (axum's `ConnectInfo` holds the
/// same information; a one-line middleware copies it, see the gateway
/// example). [`PeerIp`] reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PeerAddr(pub SocketAddr);

/// Keys requests by the peer's IP address (from the [`PeerAddr`] extension,
/// or a bare `SocketAddr` extension).
///
/// An IPv6 client is keyed by its network, a /64 unless set otherwise: one
/// subscriber usually holds a whole /64 and can rotate through its
/// addresses at will, so keying on the /128 would let it escape the limit
/// and grow the limiter's map with every address. IPv4 clients are keyed by
/// their address, and an IPv4-mapped IPv6 peer (`::ffff:192.0.2.7`, what a
/// dual-stack listener reports for IPv4 clients) counts as that IPv4
/// address.
///
/// ```
/// use http::Request;
/// use std::net::SocketAddr;
/// use weir_rate::http::{KeyExtractor, PeerAddr, PeerIp};
///
/// let mut req = Request::new(());
/// req.extensions_mut().insert(PeerAddr("192.0.2.7:5555".parse::<SocketAddr>().unwrap()));
/// assert_eq!(PeerIp::new().extract(&req), Some("192.0.2.7".parse().unwrap()));
///
/// let mut req = Request::new(());
/// req.extensions_mut().insert(PeerAddr("[2001:db8:7:1::99]:5555".parse::<SocketAddr>().unwrap()));
/// assert_eq!(PeerIp::new().extract(&req), Some("2001:db8:7:1::".parse().unwrap()));
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct PeerIp {
    prefixes: ClientPrefixes,
}

impl PeerIp {
    /// IPv4 clients by address, IPv6 clients by their /64.
    pub fn new() -> Self {
        Self::default()
    }

    /// Key IPv6 clients by their first `prefix` bits (default 64; 128 keys
    /// every address apart).
    ///
    /// # Panics
    ///
    /// If `prefix` is over 128.
    pub fn ipv6_prefix(mut self, prefix: u8) -> Self {
        self.prefixes = self.prefixes.ipv6(prefix);
        self
    }

    /// The key a client at `ip` is counted under, for extractors of your own
    /// (a server that keeps the peer address elsewhere, as axum's
    /// `ConnectInfo` does).
    ///
    /// ```
    /// use weir_rate::http::PeerIp;
    ///
    /// let key = PeerIp::new().key_for("::ffff:192.0.2.7".parse().unwrap());
    /// assert_eq!(key, "192.0.2.7".parse::<std::net::IpAddr>().unwrap());
    /// ```
    pub fn key_for(&self, ip: IpAddr) -> IpAddr {
        self.prefixes.key(ip)
    }
}

impl<B> KeyExtractor<B> for PeerIp {
    type Key = IpAddr;

    fn extract(&self, request: &Request<B>) -> Option<IpAddr> {
        peer_ip(request).map(|ip| self.prefixes.key(ip))
    }
}

/// Which bits of a client's address make its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ClientPrefixes {
    ipv6: u8,
}

impl Default for ClientPrefixes {
    fn default() -> Self {
        Self { ipv6: 64 }
    }
}

impl ClientPrefixes {
    fn ipv6(self, prefix: u8) -> Self {
        assert!(
            prefix <= 128,
            "an IPv6 prefix is at most 128 bits, got {prefix}"
        );
        Self { ipv6: prefix }
    }

    fn key(&self, ip: IpAddr) -> IpAddr {
        match ip.to_canonical() {
            IpAddr::V4(v4) => IpAddr::V4(v4),
            IpAddr::V6(v6) => IpAddr::V6((u128::from(v6) & prefix_mask(self.ipv6)).into()),
        }
    }
}

/// The peer's address as the socket reported it (not yet canonical).
fn peer_ip<B>(request: &Request<B>) -> Option<IpAddr> {
    let extensions = request.extensions();
    extensions
        .get::<PeerAddr>()
        .map(|p| p.0.ip())
        .or_else(|| extensions.get::<SocketAddr>().map(SocketAddr::ip))
}

/// Keys requests by the client address a trusted proxy reports in
/// `X-Forwarded-For`, falling back to the peer IP.
///
/// The header is read only when the peer is a trusted proxy. It is walked
/// from the right (the entry the nearest proxy appended) past every trusted
/// proxy; the first untrusted address is the client. Entries left of it
/// were written by the client and are ignored. IPv4-mapped addresses
/// (`::ffff:10.0.0.1`, how a dual-stack listener sees an IPv4 proxy) are
/// matched as IPv4, and the client is keyed as [`PeerIp`] keys it (IPv6 by
/// its /64 unless [`ipv6_prefix`](Self::ipv6_prefix) says otherwise).
///
/// ```
/// use http::Request;
/// use weir_rate::http::{ForwardedIp, KeyExtractor, PeerAddr};
///
/// let proxies = ForwardedIp::trusting(["10.0.0.0/8".parse().unwrap()]);
/// let mut req = Request::builder()
///     .header("x-forwarded-for", "6.6.6.6, 198.51.100.4, 10.1.2.3")
///     .body(())
///     .unwrap();
/// req.extensions_mut().insert(PeerAddr("10.0.0.1:443".parse().unwrap()));
/// // 10.1.2.3 is another trusted hop; 198.51.100.4 is the client; 6.6.6.6 is what it claimed.
/// assert_eq!(proxies.extract(&req), Some("198.51.100.4".parse().unwrap()));
/// ```
#[derive(Debug, Clone, Default)]
pub struct ForwardedIp {
    trusted: Vec<IpNet>,
    prefixes: ClientPrefixes,
}

impl ForwardedIp {
    /// Trust `X-Forwarded-For` from peers in these networks.
    pub fn trusting(trusted: impl IntoIterator<Item = IpNet>) -> Self {
        Self {
            trusted: trusted.into_iter().collect(),
            prefixes: ClientPrefixes::default(),
        }
    }

    /// Key IPv6 clients by their first `prefix` bits (default 64).
    ///
    /// # Panics
    ///
    /// If `prefix` is over 128.
    pub fn ipv6_prefix(mut self, prefix: u8) -> Self {
        self.prefixes = self.prefixes.ipv6(prefix);
        self
    }

    fn is_trusted(&self, ip: IpAddr) -> bool {
        self.trusted.iter().any(|net| net.contains(ip))
    }
}

impl<B> KeyExtractor<B> for ForwardedIp {
    type Key = IpAddr;

    fn extract(&self, request: &Request<B>) -> Option<IpAddr> {
        self.client(request).map(|ip| self.prefixes.key(ip))
    }
}

impl ForwardedIp {
    fn client<B>(&self, request: &Request<B>) -> Option<IpAddr> {
        let peer = peer_ip(request)?;
        if !self.is_trusted(peer) {
            return Some(peer);
        }
        let mut client = peer;
        // Several header lines form one list in order; the last is the newest.
        let values: Vec<_> = request
            .headers()
            .get_all("x-forwarded-for")
            .iter()
            .collect();
        for value in values.into_iter().rev() {
            let Ok(text) = value.to_str() else {
                return Some(client);
            };
            for hop in text.rsplit(',') {
                match hop.trim().parse::<IpAddr>() {
                    Ok(ip) if self.is_trusted(ip) => client = ip,
                    Ok(ip) => return Some(ip),
                    // A malformed entry: stop at the last address we trust.
                    Err(_) => return Some(client),
                }
            }
        }
        Some(client)
    }
}

/// An IP network (`addr/prefix`) for [`ForwardedIp`].
///
/// ```
/// use weir_rate::http::IpNet;
///
/// let net: IpNet = "192.0.2.0/24".parse().unwrap();
/// assert!(net.contains("192.0.2.200".parse().unwrap()));
/// assert!(!net.contains("192.0.3.1".parse().unwrap()));
/// assert!("192.0.2.0/33".parse::<IpNet>().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpNet {
    addr: IpAddr,
    prefix: u8,
}

impl IpNet {
    /// Whether `ip` is inside this network. An IPv4-mapped IPv6 address
    /// (`::ffff:a.b.c.d`) is the IPv4 address it maps.
    pub fn contains(&self, ip: IpAddr) -> bool {
        // Compared in IPv6 space, IPv4 as its mapped form, so a mapped peer
        // and its IPv4 network (or a mapped network and an IPv4 peer) meet.
        let (net, prefix) = match self.addr {
            IpAddr::V4(net) => (u128::from(net.to_ipv6_mapped()), self.prefix + 96),
            IpAddr::V6(net) => (u128::from(net), self.prefix),
        };
        let ip = match ip {
            IpAddr::V4(ip) => u128::from(ip.to_ipv6_mapped()),
            IpAddr::V6(ip) => u128::from(ip),
        };
        prefix_eq(net, ip, prefix)
    }
}

fn prefix_eq(a: u128, b: u128, prefix: u8) -> bool {
    let mask = prefix_mask(prefix);
    a & mask == b & mask
}

/// The first `prefix` bits of a 128-bit address (`prefix` ≤ 128).
fn prefix_mask(prefix: u8) -> u128 {
    u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0)
}

/// A network that could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpNetParseError(String);

impl std::fmt::Display for IpNetParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "invalid network `{}`: expected ADDRESS/PREFIX", self.0)
    }
}

impl std::error::Error for IpNetParseError {}

impl std::str::FromStr for IpNet {
    type Err = IpNetParseError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let error = || IpNetParseError(text.to_string());
        let (addr, prefix) = match text.split_once('/') {
            Some((a, p)) => (a.parse::<IpAddr>().map_err(|_| error())?, Some(p)),
            None => (text.parse::<IpAddr>().map_err(|_| error())?, None),
        };
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            Some(p) => p.parse::<u8>().map_err(|_| error())?,
            None => max,
        };
        if prefix > max {
            return Err(error());
        }
        Ok(Self { addr, prefix })
    }
}

/// Keys requests with a closure.
#[derive(Clone)]
pub struct KeyFn<F>(F);

impl<F> KeyFn<F> {
    /// Wrap `f`, which returns the request's key or `None`.
    pub fn new(f: F) -> Self {
        Self(f)
    }
}

impl<F> std::fmt::Debug for KeyFn<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeyFn")
    }
}

impl<B, K, F> KeyExtractor<B> for KeyFn<F>
where
    F: Fn(&Request<B>) -> Option<K> + Clone + Send + Sync + 'static,
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    type Key = K;

    fn extract(&self, request: &Request<B>) -> Option<K> {
        (self.0)(request)
    }
}

/// One key for every request: a global limit.
#[derive(Debug, Clone, Copy, Default)]
pub struct GlobalKey;

impl<B> KeyExtractor<B> for GlobalKey {
    type Key = ();

    fn extract(&self, _: &Request<B>) -> Option<()> {
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(peer: &str, xff: &[&str]) -> Request<()> {
        let mut builder = Request::builder();
        for value in xff {
            builder = builder.header("x-forwarded-for", *value);
        }
        let mut req = builder.body(()).unwrap();
        req.extensions_mut().insert(PeerAddr(peer.parse().unwrap()));
        req
    }

    #[test]
    fn untrusted_peers_cannot_choose_their_key() {
        let x = ForwardedIp::trusting(["10.0.0.0/8".parse().unwrap()]);
        let req = request("203.0.113.9:1000", &["1.2.3.4"]);
        assert_eq!(x.extract(&req), Some("203.0.113.9".parse().unwrap()));
    }

    #[test]
    fn all_trusted_hops_fall_back_to_the_leftmost_trusted() {
        let x = ForwardedIp::trusting(["10.0.0.0/8".parse().unwrap()]);
        let req = request("10.0.0.1:1000", &["10.9.9.9", "10.1.1.1"]);
        assert_eq!(x.extract(&req), Some("10.9.9.9".parse().unwrap()));
    }

    #[test]
    fn garbage_in_the_header_stops_at_the_last_trusted_hop() {
        let x = ForwardedIp::trusting(["10.0.0.0/8".parse().unwrap()]);
        let req = request("10.0.0.1:1000", &["1.1.1.1, not-an-ip"]);
        assert_eq!(x.extract(&req), Some("10.0.0.1".parse().unwrap()));
    }

    #[test]
    fn ipv6_networks_match_by_prefix() {
        let net: IpNet = "2001:db8::/32".parse().unwrap();
        assert!(net.contains("2001:db8:1::5".parse().unwrap()));
        assert!(!net.contains("2001:db9::1".parse().unwrap()));
        assert!(!net.contains("192.0.2.1".parse().unwrap()));
        let any: IpNet = "::/0".parse().unwrap();
        assert!(any.contains("::1".parse().unwrap()));
    }

    #[test]
    fn ipv6_clients_of_one_slash64_share_a_key() {
        let a = request("[2001:db8:1:2::1]:1000", &[]);
        let b = request("[2001:db8:1:2:ffff:ffff:ffff:ffff]:1000", &[]);
        let other = request("[2001:db8:1:3::1]:1000", &[]);
        assert_eq!(
            PeerIp::new().extract(&a),
            Some("2001:db8:1:2::".parse().unwrap())
        );
        assert_eq!(PeerIp::new().extract(&a), PeerIp::new().extract(&b));
        assert_ne!(PeerIp::new().extract(&a), PeerIp::new().extract(&other));
    }

    #[test]
    fn forwarded_ipv6_clients_are_keyed_by_their_prefix() {
        let x = ForwardedIp::trusting(["10.0.0.0/8".parse().unwrap()]);
        let req = request("10.0.0.1:1000", &["2001:db8:1:2:3:4:5:6"]);
        assert_eq!(x.extract(&req), Some("2001:db8:1:2::".parse().unwrap()));
        // An untrusted IPv6 peer is keyed by its prefix too.
        let direct = request("[2001:db8:9:9:1::1]:1000", &["1.2.3.4"]);
        assert_eq!(x.extract(&direct), Some("2001:db8:9:9::".parse().unwrap()));
    }

    #[test]
    fn ipv4_mapped_peers_are_ipv4() {
        let mapped = request("[::ffff:192.0.2.7]:1000", &[]);
        assert_eq!(
            PeerIp::new().extract(&mapped),
            Some("192.0.2.7".parse().unwrap())
        );
    }

    #[test]
    fn an_ipv4_mapped_trusted_proxy_is_trusted() {
        // A dual-stack listener sees an IPv4 proxy as ::ffff:10.0.0.1.
        let x = ForwardedIp::trusting(["10.0.0.0/8".parse().unwrap()]);
        let req = request("[::ffff:10.0.0.1]:443", &["198.51.100.4"]);
        assert_eq!(x.extract(&req), Some("198.51.100.4".parse().unwrap()));
        // ... and so is a mapped hop inside the header.
        let req = request("10.0.0.1:443", &["198.51.100.4, ::ffff:10.2.3.4"]);
        assert_eq!(x.extract(&req), Some("198.51.100.4".parse().unwrap()));
        assert!(
            "10.0.0.0/8"
                .parse::<IpNet>()
                .unwrap()
                .contains("::ffff:10.9.9.9".parse().unwrap())
        );
    }

    #[test]
    fn missing_peer_gives_no_key() {
        assert_eq!(PeerIp::new().extract(&Request::new(())), None);
    }
}
