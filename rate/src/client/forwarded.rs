//! [`Forwarding`]: the client a trusted proxy reports in `X-Forwarded-For`
//! or `Forwarded`, parsed once for every integration (weir-tower's
//! `ForwardedIp`, weir-pingora's), from the peer's address and the header's
//! lines as bytes.

use super::{ClientPrefixes, IpNet};
use std::borrow::Cow;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Which proxies are trusted and which header they write, and so who a
/// request comes from.
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
/// is keyed as [`ClientPrefixes`](super::ClientPrefixes) keys it (IPv6 by its /64 unless
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
/// use weir_rate::client::{ClientKey, Forwarding};
///
/// let proxies = Forwarding::trusting(["10.0.0.0/8".parse().unwrap()]);
/// let line: &[u8] = b"6.6.6.6, 198.51.100.4:5555, 10.1.2.3";
/// let peer = "10.0.0.1".parse().unwrap();
/// // 10.1.2.3 is another trusted hop; 198.51.100.4 is the client; 6.6.6.6 is what it claimed.
/// assert_eq!(proxies.client(peer, [line]), ClientKey::Ip("198.51.100.4".parse().unwrap()));
/// ```
#[derive(Debug, Clone, Default)]
pub struct Forwarding {
    trusted: Vec<IpNet>,
    prefixes: ClientPrefixes,
    header: ForwardedHeader,
}

/// Which header [`Forwarding`] reads: the one your trusted proxies write.
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
    /// The header's name, lower-case.
    pub fn name(self) -> &'static str {
        match self {
            Self::XForwardedFor => "x-forwarded-for",
            Self::Forwarded => "forwarded",
        }
    }
}

/// The key [`Forwarding`] gives a request: the client's address, or the
/// bytes a trusted proxy wrote in its place (see [`Forwarding`]).
///
/// ```
/// use weir_rate::client::ClientKey;
///
/// assert_ne!(ClientKey::Opaque(b"unknown"[..].into()), ClientKey::Ip("10.0.0.1".parse().unwrap()));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ClientKey {
    /// The client's address, keyed as [`ClientPrefixes`](super::ClientPrefixes) keys it.
    Ip(IpAddr),
    /// A client entry that is not an address (`unknown`, `_hidden`, ...),
    /// as its bytes (unquoted, without surrounding whitespace), at most
    /// [`MAX_OPAQUE`](Self::MAX_OPAQUE) of them.
    Opaque(Box<[u8]>),
    /// A client entry that is not an address and longer than
    /// [`MAX_OPAQUE`](Self::MAX_OPAQUE) bytes: all such requests share it.
    Overlong,
}

/// A client key as a store's key: the address as it prints, an opaque
/// entry as `opaque:` and its bytes (`%XX` for any outside printable
/// ASCII or `%`), an overlong one as `overlong`. No two keys print alike:
/// an address never starts with a letter `o`.
impl fmt::Display for ClientKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Ip(ip) => write!(f, "{ip}"),
            Self::Opaque(bytes) => {
                f.write_str("opaque:")?;
                for &b in bytes.iter() {
                    if b.is_ascii_graphic() && b != b'%' {
                        write!(f, "{}", char::from(b))?;
                    } else {
                        write!(f, "%{b:02X}")?;
                    }
                }
                Ok(())
            }
            Self::Overlong => f.write_str("overlong"),
        }
    }
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

impl Forwarding {
    /// Trust forwarded headers from peers in these networks.
    pub fn trusting(trusted: impl IntoIterator<Item = IpNet>) -> Self {
        Self {
            trusted: trusted.into_iter().collect(),
            ..Self::default()
        }
    }

    /// Read `header` (default `X-Forwarded-For`). Only ever the one header
    /// your proxies write: the other one reaches you as the client wrote it.
    pub fn reading(mut self, header: ForwardedHeader) -> Self {
        self.header = header;
        self
    }

    /// Key IPv6 clients by their first `prefix` bits (default 64), those
    /// behind a NAT64/SIIT translator apart ([`ClientPrefixes`]).
    ///
    /// # Panics
    ///
    /// If `prefix` is over 128.
    pub fn ipv6_prefix(mut self, prefix: u8) -> Self {
        self.prefixes = self.prefixes.ipv6(prefix);
        self
    }

    /// The header read.
    pub fn header(&self) -> ForwardedHeader {
        self.header
    }

    /// The client of a request from `peer` whose header lines, in the
    /// order they came, are `lines`.
    pub fn client<'a, I>(&self, peer: IpAddr, lines: I) -> ClientKey
    where
        I: IntoIterator<Item = &'a [u8]>,
        I::IntoIter: DoubleEndedIterator,
    {
        if !self.is_trusted(peer) {
            return self.key(peer);
        }
        let mut nearest = peer;
        // Several header lines form one list in order; the last is the newest.
        for line in lines.into_iter().rev() {
            let found = match self.header {
                ForwardedHeader::XForwardedFor => {
                    self.walk(RSplit::new(line, false).map(xff_hop), &mut nearest)
                }
                ForwardedHeader::Forwarded => {
                    self.walk(RSplit::new(line, true).map(forwarded_hop), &mut nearest)
                }
            };
            if let Some(found) = found {
                return found;
            }
        }
        self.key(nearest)
    }

    fn is_trusted(&self, ip: IpAddr) -> bool {
        self.trusted.iter().any(|net| net.contains(ip))
    }

    fn key(&self, ip: IpAddr) -> ClientKey {
        ClientKey::Ip(self.prefixes.key(ip))
    }

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
