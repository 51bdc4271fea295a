//! Which client a request belongs to: the key a limiter counts it under.
//!
//! The default is the peer's IP address. Forwarded headers are trusted only
//! when the peer itself is one of the proxies the operator says it trusts:
//! anyone can write `X-Forwarded-For`, so reading it from an untrusted peer
//! would let every client pick its own key and escape its limit.

use http::{Extensions, Request};
use std::borrow::Cow;
use std::hash::Hash;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

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

    /// The request's key, or `None` if it cannot be determined. The layers
    /// then refuse the request without calling the service (500 unless set
    /// otherwise, naming the cause in a header, and logged once through
    /// `tracing`): a server that cannot tell clients apart is misconfigured,
    /// and letting such requests through unlimited would hide it.
    fn extract(&self, request: &Request<B>) -> Option<Self::Key>;
}

/// The peer's socket address, as a request extension.
///
/// [`PeerIp`] and [`ForwardedIp`] read it, and find the peer without it
/// too: in a bare `SocketAddr` extension, and with the `axum` feature in
/// axum's `ConnectInfo<SocketAddr>` (what
/// `into_make_service_with_connect_info::<SocketAddr>()` inserts). Servers
/// that keep it elsewhere (tonic's `TcpConnectInfo`) can insert this, or
/// point the extractor at theirs with [`PeerIp::peer_from`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PeerAddr(pub SocketAddr);

/// Where the extractors find the peer's address.
#[derive(Debug, Clone, Copy, Default)]
struct PeerLookup(Option<fn(&Extensions) -> Option<SocketAddr>>);

impl PeerLookup {
    /// The peer's address as the socket reported it (not yet canonical):
    /// the custom lookup's, else the first extension that holds one.
    fn ip(&self, extensions: &Extensions) -> Option<IpAddr> {
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
/// and grow the limiter's map with every address. IPv4 clients are keyed by
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
    /// use weir_rate::http::{KeyExtractor, PeerIp};
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
        self.peer
            .ip(request.extensions())
            .map(|ip| self.prefixes.key(ip))
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
            IpAddr::V6(v6) => {
                let bits = u128::from(v6);
                if prefix_eq(bits, NAT64_WELL_KNOWN, 96) {
                    let [.., a, b, c, d] = v6.octets();
                    IpAddr::V4(Ipv4Addr::new(a, b, c, d))
                } else if prefix_eq(bits, NAT64_LOCAL_USE, 48) {
                    IpAddr::V6(v6)
                } else {
                    IpAddr::V6((bits & prefix_mask(self.ipv6)).into())
                }
            }
        }
    }
}

/// `64:ff9b::/96`, the well-known prefix of IPv4/IPv6 translation (NAT64,
/// SIIT; RFC 6052): an IPv4 client behind a translator appears as this
/// prefix followed by its IPv4 address, and is keyed by that address.
const NAT64_WELL_KNOWN: u128 = 0x0064_ff9b_0000_0000_0000_0000_0000_0000;

/// `64:ff9b:1::/48`, the local-use translation prefix (RFC 8215): operators
/// take a network-specific prefix of their own inside it, and RFC 6052
/// embeds the IPv4 address at a place that depends on that prefix's length
/// (/32 to /96), which an address does not tell. Whatever the length, a
/// translator gives each IPv4 client one address and leaves the suffix
/// zero, so clients here are keyed by the whole address: one key per IPv4
/// client, as the well-known prefix gives. (Keying by the last 32 bits, the
/// /96 place, would put every client of a /32 to /56 prefix under one key.
/// Keying by the whole address gives a client nothing to rotate through:
/// the prefix stays inside the operator's network, where only its
/// translator sources addresses from it, one per IPv4 client.)
const NAT64_LOCAL_USE: u128 = 0x0064_ff9b_0001_0000_0000_0000_0000_0000;

/// Keys requests by the client address a trusted proxy reports, in
/// `X-Forwarded-For` (the default) or RFC 7239 `Forwarded`, falling back to
/// the peer IP.
///
/// The header is read only when the peer is a trusted proxy, and only the
/// one header your proxies write ([`reading`](Self::reading)): a header
/// they pass through untouched is the client's to write. The proxies must
/// append to it (as nginx's `$proxy_add_x_forwarded_for`, Envoy, HAProxy's
/// `option forwardfor` and cloud load balancers do), never copy it.
///
/// # How the client is found
///
/// The header's lines, in order, form one list; its entries are walked from
/// the right (the one the nearest proxy appended) past every trusted proxy.
/// The first entry that is not a trusted address names the client: whatever
/// stands left of it was written by the client and is never read, so no
/// byte there (not even one that is not visible ASCII) changes the key.
/// Entries are parsed as bytes, in every form proxies write them: `ip`,
/// `ip:port`, `[v6]`, `[v6]:port`, surrounded by whitespace or quotes; in
/// `Forwarded`, the `for` parameter (any case) of each element, quoted or
/// not, among other parameters. Empty entries are skipped, as HTTP lists
/// allow. IPv4-mapped addresses (`::ffff:10.0.0.1`, how a dual-stack
/// listener sees an IPv4 proxy) are matched as IPv4, and an address client
/// is keyed as [`PeerIp`] keys it (IPv6 by its /64 unless
/// [`ipv6_prefix`](Self::ipv6_prefix) says otherwise, IPv4 clients behind
/// a NAT64/SIIT translator apart): [`ClientKey::Ip`].
///
/// When every entry is a trusted address (or there is no header), the
/// request came from the leftmost trusted proxy itself and is keyed by it.
///
/// # Entries that are not addresses
///
/// The entry found at the client's place may not be an address: RFC 7239's
/// `for=unknown` and obfuscated identifiers (`for=_hidden`), a proxy that
/// writes something else, or garbage. That entry was written by the
/// outermost trusted proxy, not by the client, so the request is keyed by
/// its exact bytes, in a namespace of its own: [`ClientKey::Opaque`]. It is
/// never the proxy's key (which would put every such client into one
/// bucket with the proxy's own traffic and let one of them drain it), and
/// never an address's. Clients a proxy calls `unknown` share one key;
/// clients it obfuscates stably keep theirs.
///
/// A client can vary those bytes only when a trusted proxy does not append
/// (a misconfiguration): then it could as well write a fresh valid address
/// per request, so opaque keys give it nothing new. Either way the keys it
/// can make are bounded as every key is, by the limiter (a
/// [`KeyedLimiter`](crate::KeyedLimiter) sweeps idle keys, a
/// [`SketchLimiter`](crate::SketchLimiter) has fixed memory), and an opaque
/// key holds at most [`ClientKey::MAX_OPAQUE`] bytes: longer entries, which
/// no proxy writes, all share the one key [`ClientKey::Overlong`], so
/// length buys an attacker neither memory nor fresh keys.
///
/// ```
/// use http::Request;
/// use weir_rate::http::{ClientKey, ForwardedIp, KeyExtractor, PeerAddr};
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
    trusted: Vec<IpNet>,
    prefixes: ClientPrefixes,
    header: ForwardedHeader,
    peer: PeerLookup,
}

/// Which header [`ForwardedIp`] reads: the one your trusted proxies write.
///
/// ```
/// use http::Request;
/// use weir_rate::http::{ClientKey, ForwardedHeader, ForwardedIp, KeyExtractor, PeerAddr};
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
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum ForwardedHeader {
    /// `X-Forwarded-For: client, proxy1, proxy2`.
    #[default]
    XForwardedFor,
    /// RFC 7239 `Forwarded: for=client, for=proxy1;proto=https`.
    Forwarded,
}

impl ForwardedHeader {
    fn name(self) -> http::HeaderName {
        match self {
            Self::XForwardedFor => http::HeaderName::from_static("x-forwarded-for"),
            Self::Forwarded => http::header::FORWARDED,
        }
    }
}

/// The key [`ForwardedIp`] gives a request: the client's address, or the
/// bytes a trusted proxy wrote in its place (see [`ForwardedIp`]).
///
/// ```
/// use weir_rate::http::ClientKey;
///
/// assert_ne!(ClientKey::Opaque(b"unknown"[..].into()), ClientKey::Ip("10.0.0.1".parse().unwrap()));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ClientKey {
    /// The client's address, keyed as [`PeerIp`] keys it.
    Ip(IpAddr),
    /// A client entry that is not an address (`unknown`, `_hidden`, ...),
    /// as its bytes (unquoted, without surrounding whitespace), at most
    /// [`MAX_OPAQUE`](Self::MAX_OPAQUE) of them.
    Opaque(Box<[u8]>),
    /// A client entry that is not an address and longer than
    /// [`MAX_OPAQUE`](Self::MAX_OPAQUE) bytes: all such requests share it.
    Overlong,
}

impl ClientKey {
    /// The longest entry kept as an [`Opaque`](Self::Opaque) key. RFC 7239's
    /// identifiers and every proxy's placeholders are far shorter.
    pub const MAX_OPAQUE: usize = 64;

    fn opaque(bytes: &[u8]) -> Self {
        if bytes.len() > Self::MAX_OPAQUE {
            Self::Overlong
        } else {
            Self::Opaque(bytes.into())
        }
    }
}

impl ForwardedIp {
    /// Trust forwarded headers from peers in these networks.
    pub fn trusting(trusted: impl IntoIterator<Item = IpNet>) -> Self {
        Self {
            trusted: trusted.into_iter().collect(),
            ..Self::default()
        }
    }

    /// Read `header` (default `X-Forwarded-For`). Only ever the one header
    /// your proxies write: the other one reaches you as the client wrote it.
    /// [`ForwardedHeader`] has an example.
    pub fn reading(mut self, header: ForwardedHeader) -> Self {
        self.header = header;
        self
    }

    /// Key IPv6 clients by their first `prefix` bits (default 64), but
    /// those behind a NAT64/SIIT translator as [`PeerIp`] keys them.
    ///
    /// # Panics
    ///
    /// If `prefix` is over 128.
    pub fn ipv6_prefix(mut self, prefix: u8) -> Self {
        self.prefixes = self.prefixes.ipv6(prefix);
        self
    }

    /// Find the peer's address with `lookup` first, for servers that keep
    /// it in an extension of their own; [`PeerIp::peer_from`] has an
    /// example.
    pub fn peer_from(mut self, lookup: fn(&Extensions) -> Option<SocketAddr>) -> Self {
        self.peer = PeerLookup(Some(lookup));
        self
    }

    fn is_trusted(&self, ip: IpAddr) -> bool {
        self.trusted.iter().any(|net| net.contains(ip))
    }

    fn key(&self, ip: IpAddr) -> ClientKey {
        ClientKey::Ip(self.prefixes.key(ip))
    }

    fn client<B>(&self, request: &Request<B>) -> Option<ClientKey> {
        let peer = self.peer.ip(request.extensions())?;
        if !self.is_trusted(peer) {
            return Some(self.key(peer));
        }
        let mut nearest = peer;
        // Several header lines form one list in order; the last is the newest.
        for line in request.headers().get_all(self.header.name()).iter().rev() {
            let line = line.as_bytes();
            let found = match self.header {
                ForwardedHeader::XForwardedFor => {
                    self.walk(RSplit::new(line, false).map(xff_hop), &mut nearest)
                }
                ForwardedHeader::Forwarded => {
                    self.walk(RSplit::new(line, true).map(forwarded_hop), &mut nearest)
                }
            };
            if found.is_some() {
                return found;
            }
        }
        Some(self.key(nearest))
    }

    /// The client among `hops` (newest first), or `None` if they are all
    /// trusted; `nearest` follows the trusted hops walked past.
    fn walk<'a>(
        &self,
        hops: impl Iterator<Item = Hop<'a>>,
        nearest: &mut IpAddr,
    ) -> Option<ClientKey> {
        for hop in hops {
            match hop {
                Hop::Empty => {}
                Hop::Addr(ip) if self.is_trusted(ip) => *nearest = ip,
                Hop::Addr(ip) => return Some(self.key(ip)),
                Hop::Other(bytes) => return Some(ClientKey::opaque(&bytes)),
            }
        }
        None
    }
}

impl<B> KeyExtractor<B> for ForwardedIp {
    type Key = ClientKey;

    fn extract(&self, request: &Request<B>) -> Option<ClientKey> {
        self.client(request)
    }
}

/// One entry of a forwarded list.
#[derive(Debug, PartialEq, Eq)]
enum Hop<'a> {
    /// Nothing but whitespace: HTTP lists allow empty elements.
    Empty,
    Addr(IpAddr),
    /// Not an address: the entry's bytes, trimmed and unquoted.
    Other(Cow<'a, [u8]>),
}

/// The pieces of `bytes` between separators, from the right. With
/// `quoted`, separators inside a quoted-string (RFC 9110) do not split.
///
/// Scanning from the right means the pieces the nearest proxies appended
/// are found before anything the client wrote is looked at: an unclosed
/// quote or a stray backslash on the client's side cannot reach across
/// into them.
struct RSplit<'a> {
    bytes: &'a [u8],
    end: Option<usize>,
    quoted: bool,
    separator: u8,
}

impl<'a> RSplit<'a> {
    fn new(bytes: &'a [u8], quoted: bool) -> Self {
        Self::by(bytes, b',', quoted)
    }

    fn by(bytes: &'a [u8], separator: u8, quoted: bool) -> Self {
        Self {
            bytes,
            end: Some(bytes.len()),
            quoted,
            separator,
        }
    }
}

impl<'a> Iterator for RSplit<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let end = self.end?;
        let mut in_quotes = false;
        let mut i = end;
        while i > 0 {
            i -= 1;
            let byte = self.bytes[i];
            if self.quoted && byte == b'"' && !escaped(self.bytes, i) {
                in_quotes = !in_quotes;
            } else if byte == self.separator && !in_quotes {
                self.end = Some(i);
                return Some(&self.bytes[i + 1..end]);
            }
        }
        self.end = None;
        Some(&self.bytes[..end])
    }
}

/// Whether the byte at `at` follows an odd run of backslashes.
fn escaped(bytes: &[u8], at: usize) -> bool {
    let run = bytes[..at]
        .iter()
        .rev()
        .take_while(|&&b| b == b'\\')
        .count();
    run % 2 == 1
}

fn trim(bytes: &[u8]) -> &[u8] {
    let is_space = |b: &u8| *b == b' ' || *b == b'\t';
    let start = bytes
        .iter()
        .position(|b| !is_space(b))
        .unwrap_or(bytes.len());
    let end = bytes
        .iter()
        .rposition(|b| !is_space(b))
        .map_or(start, |e| e + 1);
    &bytes[start..end]
}

/// The contents of a quoted-string, unescaped; other bytes as they are.
fn unquote(bytes: &[u8]) -> Cow<'_, [u8]> {
    match bytes {
        [b'"', inner @ .., b'"'] if !escaped(bytes, bytes.len() - 1) => {
            if !inner.contains(&b'\\') {
                return Cow::Borrowed(inner);
            }
            let mut out = Vec::with_capacity(inner.len());
            let mut rest = inner.iter();
            while let Some(&b) = rest.next() {
                out.push(if b == b'\\' {
                    *rest.next().unwrap_or(&b)
                } else {
                    b
                });
            }
            Cow::Owned(out)
        }
        _ => Cow::Borrowed(bytes),
    }
}

fn xff_hop(entry: &[u8]) -> Hop<'_> {
    hop(unquote(trim(entry)))
}

/// A `Forwarded` element's `for` node: its one `for` parameter (any case)
/// among `;`-separated pairs. An element with none, or several, is kept
/// whole as a non-address.
fn forwarded_hop(element: &[u8]) -> Hop<'_> {
    let element = trim(element);
    let mut nodes = RSplit::by(element, b';', true).filter_map(|pair| {
        let (name, value) = pair.split_at(pair.iter().position(|&b| b == b'=')?);
        trim(name)
            .eq_ignore_ascii_case(b"for")
            .then(|| trim(&value[1..]))
    });
    match (nodes.next(), nodes.next()) {
        (Some(node), None) => hop(unquote(node)),
        _ if element.is_empty() => Hop::Empty,
        _ => Hop::Other(Cow::Borrowed(element)),
    }
}

fn hop(entry: Cow<'_, [u8]>) -> Hop<'_> {
    if entry.is_empty() {
        return Hop::Empty;
    }
    match parse_node(&entry) {
        Some(ip) => Hop::Addr(ip),
        None => Hop::Other(entry),
    }
}

/// `ip`, `ip:port`, `[v6]` or `[v6]:port` (a port as digits or, as RFC
/// 7239 allows, an obfuscated `_name`).
fn parse_node(node: &[u8]) -> Option<IpAddr> {
    let node = std::str::from_utf8(trim(node)).ok()?;
    if let Some(bracketed) = node.strip_prefix('[') {
        let (v6, rest) = bracketed.split_once(']')?;
        let v6 = v6.parse::<Ipv6Addr>().ok()?;
        return (rest.is_empty() || rest.strip_prefix(':').is_some_and(is_port))
            .then_some(IpAddr::V6(v6));
    }
    if let Ok(ip) = node.parse::<IpAddr>() {
        return Some(ip);
    }
    let (v4, port) = node.split_once(':')?;
    let v4 = v4.parse::<Ipv4Addr>().ok()?;
    is_port(port).then_some(IpAddr::V4(v4))
}

fn is_port(port: &str) -> bool {
    let digits = !port.is_empty() && port.len() <= 5 && port.bytes().all(|b| b.is_ascii_digit());
    let obfuscated = port.strip_prefix('_').is_some_and(|name| {
        !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    });
    digits || obfuscated
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

    fn ip(s: &str) -> ClientKey {
        ClientKey::Ip(s.parse().unwrap())
    }

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
        assert_eq!(x.extract(&req), Some(ip("203.0.113.9")));
    }

    #[test]
    fn all_trusted_hops_fall_back_to_the_leftmost_trusted() {
        let x = ForwardedIp::trusting(["10.0.0.0/8".parse().unwrap()]);
        let req = request("10.0.0.1:1000", &["10.9.9.9", "10.1.1.1"]);
        assert_eq!(x.extract(&req), Some(ip("10.9.9.9")));
    }

    #[test]
    fn garbage_at_the_clients_place_is_keyed_by_its_bytes_not_as_the_proxy() {
        // This once keyed the request as the proxy (10.0.0.1), putting every
        // such client into the proxy's bucket.
        let x = ForwardedIp::trusting(["10.0.0.0/8".parse().unwrap()]);
        let req = request("10.0.0.1:1000", &["1.1.1.1, not-an-ip"]);
        assert_eq!(
            x.extract(&req),
            Some(ClientKey::Opaque(b"not-an-ip"[..].into()))
        );
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
        assert_eq!(x.extract(&req), Some(ip("2001:db8:1:2::")));
        // An untrusted IPv6 peer is keyed by its prefix too.
        let direct = request("[2001:db8:9:9:1::1]:1000", &["1.2.3.4"]);
        assert_eq!(x.extract(&direct), Some(ip("2001:db8:9:9::")));
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
        assert_eq!(x.extract(&req), Some(ip("198.51.100.4")));
        // ... and so is a mapped hop inside the header.
        let req = request("10.0.0.1:443", &["198.51.100.4, ::ffff:10.2.3.4"]);
        assert_eq!(x.extract(&req), Some(ip("198.51.100.4")));
        assert!(
            "10.0.0.0/8"
                .parse::<IpNet>()
                .unwrap()
                .contains("::ffff:10.9.9.9".parse().unwrap())
        );
    }

    /// IPv4 clients behind a NAT64/SIIT translator reach an IPv6 server
    /// from one /64: keyed by it, they shared one key and one of them could
    /// drain it for all. The well-known prefix is keyed by the IPv4 address
    /// it embeds (as a mapped address is), the local-use /48 by the whole
    /// address, whatever prefix length the operator embeds at.
    #[test]
    fn nat64_clients_are_keyed_apart() {
        let key = |s: &str| PeerIp::new().key_for(s.parse().unwrap());
        let v4 = |s: &str| s.parse::<IpAddr>().unwrap();
        // 64:ff9b::/96 (RFC 6052): the embedded IPv4 address, the key the
        // same client has over IPv4.
        assert_eq!(key("64:ff9b::192.0.2.7"), v4("192.0.2.7"));
        assert_eq!(key("64:ff9b::198.51.100.4"), v4("198.51.100.4"));
        assert_eq!(key("64:ff9b::c000:207"), key("192.0.2.7"));
        let req = request("[64:ff9b::192.0.2.7]:1000", &[]);
        assert_eq!(PeerIp::new().extract(&req), Some(v4("192.0.2.7")));
        let x = ForwardedIp::trusting(["10.0.0.0/8".parse().unwrap()]);
        let req = request("10.0.0.1:443", &["64:ff9b::198.51.100.4"]);
        assert_eq!(x.extract(&req), Some(ip("198.51.100.4")));
        let req = request("[64:ff9b::203.0.113.9]:1000", &[]);
        assert_eq!(x.extract(&req), Some(ip("203.0.113.9")));
        // 64:ff9b:1::/48 (RFC 8215), embedded at /96 ...
        assert_ne!(key("64:ff9b:1::192.0.2.7"), key("64:ff9b:1::192.0.2.8"));
        assert_ne!(
            key("64:ff9b:1:1:2:3:c000:207"),
            key("64:ff9b:1:1:2:3:c633:6404")
        );
        // ... or at /48 (192.0.2.7 and 192.0.3.7: bits 48-63 and 72-87) or
        // /64 (192.0.2.7 and 193.0.2.7: bits 72-103).
        assert_ne!(key("64:ff9b:1:c000:2:700::"), key("64:ff9b:1:c000:3:700::"));
        assert_ne!(key("64:ff9b:1::c0:2:700:0"), key("64:ff9b:1::c1:2:700:0"));
        // Beside those prefixes, IPv6 clients are keyed by their /64 still.
        assert_eq!(key("64:ff9b::1:0:c000:207"), key("64:ff9b::2:0:c000:208"));
        assert_eq!(key("64:ff9b:2::1"), key("64:ff9b:2::2"));
    }

    #[test]
    fn missing_peer_gives_no_key() {
        assert_eq!(PeerIp::new().extract(&Request::new(())), None);
    }
}
