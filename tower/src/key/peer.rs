//! The peer's address, and the client key an address gives.

use super::KeyExtractor;
use http::{Extensions, Request};
use std::net::{IpAddr, SocketAddr};
use weir_rate::client::ClientPrefixes;

/// The peer's socket address, as a request extension.
///
/// [`PeerIp`] and [`ForwardedIp`](crate::ForwardedIp) read it, and find the peer without it
/// too: in a bare `SocketAddr` extension, and with the `axum` feature in
/// axum's `ConnectInfo<SocketAddr>` (what
/// `into_make_service_with_connect_info::<SocketAddr>()` inserts). Servers
/// that keep it elsewhere (tonic's `TcpConnectInfo`) can insert this, or
/// point the extractor at theirs with [`PeerIp::peer_from`].
///
/// ```
/// use http::Request;
/// use std::net::SocketAddr;
/// use weir_tower::{KeyExtractor, PeerAddr, PeerIp};
///
/// let mut request = Request::new(());
/// let peer: SocketAddr = "192.0.2.7:4711".parse().unwrap();
/// request.extensions_mut().insert(PeerAddr(peer));
/// assert_eq!(PeerIp::new().extract(&request), Some(peer.ip()));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PeerAddr(pub SocketAddr);

/// Where the extractors find the peer's address.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct PeerLookup(pub(super) Option<fn(&Extensions) -> Option<SocketAddr>>);

impl PeerLookup {
    /// The peer's address as the socket reported it (not yet canonical):
    /// the custom lookup's, else the first extension that holds one.
    pub(super) fn ip(&self, extensions: &Extensions) -> Option<IpAddr> {
        let custom = self.0.and_then(|lookup| lookup(extensions));
        let addr = custom
            .or_else(|| extensions.get::<PeerAddr>().map(|p| p.0))
            .or_else(|| connect_info(extensions))
            .or_else(|| extensions.get::<SocketAddr>().copied())?;
        Some(addr.ip())
    }
}

#[cfg(feature = "axum")]
fn connect_info(extensions: &Extensions) -> Option<SocketAddr> {
    extensions
        .get::<axum::extract::ConnectInfo<SocketAddr>>()
        .map(|info| info.0)
}

#[cfg(not(feature = "axum"))]
fn connect_info(_: &Extensions) -> Option<SocketAddr> {
    None
}

/// Keys requests by the peer's IP address (see [`PeerAddr`] for where it
/// is found).
///
/// An IPv6 client is keyed by its network, a /64 unless set otherwise: one
/// subscriber usually holds a whole /64 and can rotate through its
/// addresses at will, so keying on the /128 would let it escape the limit
/// and grow the limiter's map with every address. Many providers delegate
/// a /56 or a /48 to each subscriber instead (prefix delegation); where
/// yours do, key by it with one call, [`ipv6_prefix`](Self::ipv6_prefix)
/// (`PeerIp::new().ipv6_prefix(56)`), so that a subscriber cannot rotate
/// through 256 or 65,536 networks of its own. IPv4 clients are keyed by
/// their address, and an IPv4-mapped IPv6 peer (`::ffff:192.0.2.7`, what a
/// dual-stack listener reports for IPv4 clients) counts as that IPv4
/// address.
///
/// IPv4 clients reaching an IPv6 server through a NAT64/SIIT translator
/// share one /64, so they are keyed apart, whatever the IPv6 prefix set:
/// under the well-known prefix `64:ff9b::/96` (RFC 6052) a client counts as
/// the IPv4 address it embeds (`64:ff9b::192.0.2.7` as `192.0.2.7`), and
/// under the local-use prefix `64:ff9b:1::/48` (RFC 8215), where the
/// operator's prefix length (and so the IPv4 address's place) cannot be
/// read from the address, by its whole address: one key per IPv4 client
/// either way. Translators with a network-specific prefix elsewhere are
/// not recognised; their clients are keyed as any IPv6 client.
///
/// ```
/// use http::Request;
/// use std::net::SocketAddr;
/// use weir_tower::{KeyExtractor, PeerAddr, PeerIp};
///
/// let mut req = Request::new(());
/// req.extensions_mut().insert(PeerAddr("192.0.2.7:5555".parse::<SocketAddr>().unwrap()));
/// assert_eq!(PeerIp::new().extract(&req), Some("192.0.2.7".parse().unwrap()));
///
/// let mut req = Request::new(());
/// req.extensions_mut().insert(PeerAddr("[2001:db8:7:1::99]:5555".parse::<SocketAddr>().unwrap()));
/// assert_eq!(PeerIp::new().extract(&req), Some("2001:db8:7:1::".parse().unwrap()));
/// // A subscriber holding a delegated /56:
/// let per_subscriber = PeerIp::new().ipv6_prefix(56);
/// assert_eq!(per_subscriber.extract(&req), Some("2001:db8:7::".parse().unwrap()));
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct PeerIp {
    prefixes: ClientPrefixes,
    peer: PeerLookup,
}

impl PeerIp {
    /// IPv4 clients by address, IPv6 clients by their /64.
    pub fn new() -> Self {
        Self::default()
    }

    /// Key IPv6 clients by their first `prefix` bits (default 64; 128 keys
    /// every address apart). Clients behind a NAT64/SIIT translator's
    /// well-known or local-use prefix are keyed apart regardless (see the
    /// type's docs).
    ///
    /// # Panics
    ///
    /// If `prefix` is over 128.
    pub fn ipv6_prefix(mut self, prefix: u8) -> Self {
        self.prefixes = self.prefixes.ipv6(prefix);
        self
    }

    /// Find the peer's address with `lookup` first, for servers that keep
    /// it in an extension of their own; the extensions [`PeerAddr`] lists
    /// are still read when `lookup` finds none.
    ///
    /// ```
    /// use http::Request;
    /// use std::net::SocketAddr;
    /// use weir_tower::{KeyExtractor, PeerIp};
    ///
    /// /// What some server inserts per connection.
    /// #[derive(Clone)]
    /// struct Remote(Option<SocketAddr>);
    ///
    /// let by_peer = PeerIp::new().peer_from(|ext| ext.get::<Remote>()?.0);
    /// let mut req = Request::new(());
    /// req.extensions_mut().insert(Remote(Some("192.0.2.7:5555".parse().unwrap())));
    /// assert_eq!(by_peer.extract(&req), Some("192.0.2.7".parse().unwrap()));
    /// ```
    pub fn peer_from(mut self, lookup: fn(&Extensions) -> Option<SocketAddr>) -> Self {
        self.peer = PeerLookup(Some(lookup));
        self
    }

    /// The key a client at `ip` is counted under, for extractors of your own.
    ///
    /// ```
    /// use weir_tower::PeerIp;
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
        self.peer
            .ip(request.extensions())
            .map(|ip| self.prefixes.key(ip))
    }
}
