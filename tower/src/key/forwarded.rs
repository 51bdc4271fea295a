//! The client a trusted proxy reports in `X-Forwarded-For` or `Forwarded`.

use super::KeyExtractor;
use super::peer::PeerLookup;
use http::{Extensions, Request};
use std::net::SocketAddr;
use weir_rate::client::{ClientKey, ForwardedHeader, Forwarding, IpNet};

/// Keys requests by the client address a trusted proxy reports, in
/// `X-Forwarded-For` (the default) or RFC 7239 `Forwarded`, falling back to
/// the peer IP.
///
/// The header is read only when the peer is a trusted proxy, and only the
/// one header your proxies write ([`reading`](Self::reading)); it is walked
/// from the right past every trusted proxy, and the first other entry
/// names the client, by the rules of weir-rate's
/// [`Forwarding`](weir_rate::client::Forwarding), which every weir
/// integration shares (how entries are parsed, and how an entry that is
/// not an address is keyed: [`ClientKey`]).
///
/// ```
/// use http::Request;
/// use weir_tower::{ClientKey, ForwardedIp, KeyExtractor, PeerAddr};
///
/// let proxies = ForwardedIp::trusting(["10.0.0.0/8".parse().unwrap()]);
/// let mut req = Request::builder()
///     .header("x-forwarded-for", "6.6.6.6, 198.51.100.4:5555, 10.1.2.3")
///     .body(())
///     .unwrap();
/// req.extensions_mut().insert(PeerAddr("10.0.0.1:443".parse().unwrap()));
/// // 10.1.2.3 is another trusted hop; 198.51.100.4 is the client; 6.6.6.6 is what it claimed.
/// assert_eq!(proxies.extract(&req), Some(ClientKey::Ip("198.51.100.4".parse().unwrap())));
/// ```
#[derive(Debug, Clone, Default)]
pub struct ForwardedIp {
    forwarding: Forwarding,
    peer: PeerLookup,
}

impl ForwardedIp {
    /// Trust forwarded headers from peers in these networks.
    pub fn trusting(trusted: impl IntoIterator<Item = IpNet>) -> Self {
        Self {
            forwarding: Forwarding::trusting(trusted),
            peer: PeerLookup::default(),
        }
    }

    /// Read `header` (default `X-Forwarded-For`). Only ever the one header
    /// your proxies write: the other one reaches you as the client wrote it.
    ///
    /// ```
    /// use http::Request;
    /// use weir_tower::{ClientKey, ForwardedHeader, ForwardedIp, KeyExtractor, PeerAddr};
    ///
    /// let proxies = ForwardedIp::trusting(["10.0.0.0/8".parse().unwrap()])
    ///     .reading(ForwardedHeader::Forwarded);
    /// let mut req = Request::builder()
    ///     .header("forwarded", r#"for=6.6.6.6, For="[2001:db8:1:2::9]:4711";proto=https"#)
    ///     .body(())
    ///     .unwrap();
    /// req.extensions_mut().insert(PeerAddr("10.0.0.1:443".parse().unwrap()));
    /// assert_eq!(proxies.extract(&req), Some(ClientKey::Ip("2001:db8:1:2::".parse().unwrap())));
    /// ```
    pub fn reading(mut self, header: ForwardedHeader) -> Self {
        self.forwarding = self.forwarding.reading(header);
        self
    }

    /// Key IPv6 clients by their first `prefix` bits (default 64), but
    /// those behind a NAT64/SIIT translator as [`PeerIp`](crate::PeerIp) keys them.
    ///
    /// # Panics
    ///
    /// If `prefix` is over 128.
    pub fn ipv6_prefix(mut self, prefix: u8) -> Self {
        self.forwarding = self.forwarding.ipv6_prefix(prefix);
        self
    }

    /// Find the peer's address with `lookup` first, for servers that keep
    /// it in an extension of their own; [`PeerIp::peer_from`](crate::PeerIp::peer_from) has an
    /// example.
    pub fn peer_from(mut self, lookup: fn(&Extensions) -> Option<SocketAddr>) -> Self {
        self.peer = PeerLookup(Some(lookup));
        self
    }
}

impl<B> KeyExtractor<B> for ForwardedIp {
    type Key = ClientKey;

    fn extract(&self, request: &Request<B>) -> Option<ClientKey> {
        let peer = self.peer.ip(request.extensions())?;
        let lines = request
            .headers()
            .get_all(self.forwarding.header().name())
            .iter()
            .map(|line| line.as_bytes());
        Some(self.forwarding.client(peer, lines))
    }
}
