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
/// ```
/// use http::Request;
/// use std::net::SocketAddr;
/// use weir_rate::http::{KeyExtractor, PeerAddr, PeerIp};
///
/// let mut req = Request::new(());
/// req.extensions_mut().insert(PeerAddr("192.0.2.7:5555".parse::<SocketAddr>().unwrap()));
/// assert_eq!(PeerIp.extract(&req), Some("192.0.2.7".parse().unwrap()));
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct PeerIp;

impl<B> KeyExtractor<B> for PeerIp {
    type Key = IpAddr;

    fn extract(&self, request: &Request<B>) -> Option<IpAddr> {
        peer_ip(request)
    }
}

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
/// were written by the client and are ignored.
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
}

impl ForwardedIp {
    /// Trust `X-Forwarded-For` from peers in these networks.
    pub fn trusting(trusted: impl IntoIterator<Item = IpNet>) -> Self {
        Self {
            trusted: trusted.into_iter().collect(),
        }
    }

    fn is_trusted(&self, ip: IpAddr) -> bool {
        self.trusted.iter().any(|net| net.contains(ip))
    }
}

impl<B> KeyExtractor<B> for ForwardedIp {
    type Key = IpAddr;

    fn extract(&self, request: &Request<B>) -> Option<IpAddr> {
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
    /// Whether `ip` is inside this network.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => prefix_eq(
                u128::from(u32::from(net)) << 96,
                u128::from(u32::from(ip)) << 96,
                self.prefix,
            ),
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                prefix_eq(u128::from(net), u128::from(ip), self.prefix)
            }
            _ => false,
        }
    }
}

fn prefix_eq(a: u128, b: u128, prefix: u8) -> bool {
    if prefix == 0 {
        return true;
    }
    let mask = u128::MAX << (128 - u32::from(prefix));
    a & mask == b & mask
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
    fn missing_peer_gives_no_key() {
        assert_eq!(PeerIp.extract(&Request::new(())), None);
    }
}
