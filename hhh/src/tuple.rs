//! The 4-tuple a packet is judged by, and parsing it out of raw IP packets.
//!
//! A [`FourTuple`] is (source address, source port, destination address,
//! destination port) for IPv4 or IPv6. It comes from socket addresses
//! ([`FourTuple::from_socket_addrs`], what a UDP receive loop sees) or from a
//! raw IP packet ([`FourTuple::parse`], what a packet capture or a tun device
//! sees).
//!
//! The parser reads only headers, never allocates, and rejects anything it
//! cannot trust with a typed [`ParseError`]: truncated headers, header
//! lengths that contradict each other, non-first fragments (they carry no
//! ports), and protocols other than UDP. IPv4 options are skipped by the
//! header length; IPv6 extension headers (hop-by-hop, routing, fragment,
//! destination options, authentication) are walked, at most
//! [`MAX_EXTENSION_HEADERS`] of them.
//!
//! # Attributing a packet: what a limiter must use
//!
//! A limiter must not pass a packet unclassified because its ports cannot
//! be read: a flood would carry ten extension headers, or arrive as
//! fragments, and be let through whole. [`FourTuple::attribute`] keeps the
//! rule *what can be attributed to a source is never passed unclassified*:
//! a packet whose addresses are present is attributed to them, with its
//! real ports when its UDP header can be reached and with both ports
//! [`UNKNOWN_PORT`] (0) otherwise; only a packet that is not IPv4 or IPv6,
//! or ends before its addresses, is an error.
//! [`Classifier::classify_packet`](crate::Classifier::classify_packet) and
//! the kernel filter (feature `bpf`) keep the same rule, packet for packet.
//!
//! Why port 0: packets without ports then form a stream of their own at
//! the generalisations that keep ports (no legitimate datagram is sent to
//! port 0, and hardly any from it), so a flood of them from one source is
//! held at its own exact key, like a flood from one port, and never limits
//! that source's real traffic; spread over many sources, they meet where
//! the sources aggregate, and everywhere ports are wildcarded they count
//! with the rest of their source's traffic. An attacker cannot spread them
//! over keys by choosing ports: all of one source's port-less packets to
//! one destination share one key. The price falls on raw-packet users who
//! see fragments: a source's non-first fragments share that one key,
//! whatever datagrams they belong to, and so are limited together.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

/// IP protocol number of UDP.
pub const UDP: u8 = 17;

/// The most IPv6 extension headers [`FourTuple::parse`] and
/// [`FourTuple::attribute`] walk before giving up on the ports (the kernel
/// filter's bound too).
pub const MAX_EXTENSION_HEADERS: usize = 8;

/// The port [`FourTuple::attribute`] gives both ports of a packet whose
/// UDP header cannot be reached (see [the module docs](self) for why 0).
pub const UNKNOWN_PORT: u16 = 0;

/// What [`FourTuple::attribute`] found in a raw packet: the tuple to judge
/// it by, and whether its ports are its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attribution {
    /// The packet's addresses, with its ports, or [`UNKNOWN_PORT`] for both
    /// when [`ports_unknown`](Self::ports_unknown) says why they could not
    /// be read.
    pub tuple: FourTuple,
    /// `None` when the ports were read from the packet's UDP header, else
    /// why that header could not be reached (a non-first fragment, another
    /// protocol, too many extension headers, lengths that end first, ...).
    pub ports_unknown: Option<ParseError>,
}

/// An IPv4 4-tuple.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TupleV4 {
    /// Source address.
    pub src: Ipv4Addr,
    /// Source port.
    pub src_port: u16,
    /// Destination address.
    pub dst: Ipv4Addr,
    /// Destination port.
    pub dst_port: u16,
}

/// An IPv6 4-tuple.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TupleV6 {
    /// Source address.
    pub src: Ipv6Addr,
    /// Source port.
    pub src_port: u16,
    /// Destination address.
    pub dst: Ipv6Addr,
    /// Destination port.
    pub dst_port: u16,
}

/// (source address, source port, destination address, destination port) of
/// one packet, IPv4 or IPv6.
///
/// ```
/// use std::net::SocketAddr;
/// use weir_hhh::FourTuple;
///
/// let peer: SocketAddr = "192.0.2.7:5353".parse().unwrap();
/// let local: SocketAddr = "198.51.100.1:53".parse().unwrap();
/// let tuple = FourTuple::from_socket_addrs(peer, local);
/// assert_eq!(tuple.src(), peer);
/// assert_eq!(tuple.dst(), local);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FourTuple {
    /// Both addresses IPv4.
    V4(TupleV4),
    /// Both addresses IPv6.
    V6(TupleV6),
}

impl FourTuple {
    /// An IPv4 tuple.
    pub fn v4(src: SocketAddrV4, dst: SocketAddrV4) -> Self {
        Self::V4(TupleV4 {
            src: *src.ip(),
            src_port: src.port(),
            dst: *dst.ip(),
            dst_port: dst.port(),
        })
    }

    /// An IPv6 tuple.
    pub fn v6(src: SocketAddrV6, dst: SocketAddrV6) -> Self {
        Self::V6(TupleV6 {
            src: *src.ip(),
            src_port: src.port(),
            dst: *dst.ip(),
            dst_port: dst.port(),
        })
    }

    /// The tuple of a datagram from `src` to `dst`, as a socket reports them.
    ///
    /// IPv4-mapped IPv6 addresses (`::ffff:a.b.c.d`, what a dual-stack socket
    /// reports for IPv4 peers) become plain IPv4, so that an IPv4 peer's
    /// subnet is its /24 and not a /48 holding all of IPv4. If the families
    /// still differ (an IPv4 peer on a socket bound to `[::]`), an unspecified
    /// destination becomes `0.0.0.0`; otherwise the IPv4 side is mapped into
    /// IPv6.
    ///
    /// ```
    /// use std::net::SocketAddr;
    /// use weir_hhh::FourTuple;
    ///
    /// let peer: SocketAddr = "[::ffff:192.0.2.7]:4000".parse().unwrap();
    /// let local: SocketAddr = "[::]:53".parse().unwrap();
    /// let tuple = FourTuple::from_socket_addrs(peer, local);
    /// assert_eq!(tuple.src(), "192.0.2.7:4000".parse::<SocketAddr>().unwrap());
    /// assert!(matches!(tuple, FourTuple::V4(_)));
    /// ```
    pub fn from_socket_addrs(src: SocketAddr, dst: SocketAddr) -> Self {
        let (s, d) = (src.ip().to_canonical(), dst.ip().to_canonical());
        let (sp, dp) = (src.port(), dst.port());
        match (s, d) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                Self::v4(SocketAddrV4::new(s, sp), SocketAddrV4::new(d, dp))
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => Self::v6(
                SocketAddrV6::new(s, sp, 0, 0),
                SocketAddrV6::new(d, dp, 0, 0),
            ),
            (IpAddr::V4(s), IpAddr::V6(d)) if d.is_unspecified() => Self::v4(
                SocketAddrV4::new(s, sp),
                SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, dp),
            ),
            (IpAddr::V6(s), IpAddr::V4(d)) if s.is_unspecified() => Self::v4(
                SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, sp),
                SocketAddrV4::new(d, dp),
            ),
            (IpAddr::V4(s), IpAddr::V6(d)) => Self::v6(
                SocketAddrV6::new(s.to_ipv6_mapped(), sp, 0, 0),
                SocketAddrV6::new(d, dp, 0, 0),
            ),
            (IpAddr::V6(s), IpAddr::V4(d)) => Self::v6(
                SocketAddrV6::new(s, sp, 0, 0),
                SocketAddrV6::new(d.to_ipv6_mapped(), dp, 0, 0),
            ),
        }
    }

    /// Source address and port.
    pub fn src(&self) -> SocketAddr {
        match self {
            Self::V4(t) => SocketAddr::new(IpAddr::V4(t.src), t.src_port),
            Self::V6(t) => SocketAddr::new(IpAddr::V6(t.src), t.src_port),
        }
    }

    /// Destination address and port.
    pub fn dst(&self) -> SocketAddr {
        match self {
            Self::V4(t) => SocketAddr::new(IpAddr::V4(t.dst), t.dst_port),
            Self::V6(t) => SocketAddr::new(IpAddr::V6(t.dst), t.dst_port),
        }
    }

    /// Read the 4-tuple of a raw IPv4 or IPv6 packet carrying UDP (starting
    /// at the IP header, no link-layer header), checking every length
    /// against the bytes present.
    ///
    /// A limiter must not pass what this refuses (a packet with many
    /// extension headers, a fragment, another protocol): judge raw packets
    /// by [`attribute`](Self::attribute) instead, which attributes them to
    /// their addresses.
    ///
    /// # Errors
    ///
    /// A [`ParseError`] for anything that does not yield a whole UDP
    /// 4-tuple: truncated or contradictory headers, non-first fragments,
    /// other protocols, more than [`MAX_EXTENSION_HEADERS`] extension
    /// headers.
    ///
    /// ```
    /// use weir_hhh::{FourTuple, ParseError, tuple::udp_packet};
    ///
    /// let tuple = FourTuple::from_socket_addrs(
    ///     "10.0.0.1:4000".parse().unwrap(),
    ///     "10.0.0.2:53".parse().unwrap(),
    /// );
    /// let packet = udp_packet(&tuple, b"hello");
    /// assert_eq!(FourTuple::parse(&packet), Ok(tuple));
    /// assert!(matches!(FourTuple::parse(&packet[..10]), Err(ParseError::Truncated { .. })));
    /// ```
    pub fn parse(packet: &[u8]) -> Result<Self, ParseError> {
        let first = *packet.first().ok_or(ParseError::Empty)?;
        match first >> 4 {
            4 => parse_v4(packet),
            6 => parse_v6(packet),
            v => Err(ParseError::UnknownVersion(v)),
        }
    }

    /// The tuple a limiter judges a raw IPv4 or IPv6 packet by (starting at
    /// the IP header): its addresses, with its UDP ports when its UDP
    /// header can be reached, else with both ports [`UNKNOWN_PORT`] and
    /// the reason in [`Attribution::ports_unknown`] (see [the module
    /// docs](self)).
    ///
    /// The ports are read from a UDP header found within the datagram the
    /// IP header delimits (IPv4 total length, IPv6 payload length), behind
    /// at most [`MAX_EXTENSION_HEADERS`] IPv6 extension headers, in the
    /// first fragment; only the headers need to be present, and the UDP
    /// length field is not consulted (the ports are the sender's choice
    /// either way). The kernel filter reads the same ports from the same
    /// packets.
    ///
    /// ```
    /// use weir_hhh::tuple::{UNKNOWN_PORT, udp_packet};
    /// use weir_hhh::{FourTuple, ParseError};
    ///
    /// let tuple = FourTuple::from_socket_addrs(
    ///     "10.0.0.1:4000".parse().unwrap(),
    ///     "10.0.0.2:53".parse().unwrap(),
    /// );
    /// let mut packet = udp_packet(&tuple, b"hello");
    /// assert_eq!(FourTuple::attribute(&packet).unwrap().tuple, tuple);
    /// // A later fragment has no ports, but still has its addresses.
    /// packet[7] = 1; // fragment offset 1
    /// let seen = FourTuple::attribute(&packet).unwrap();
    /// assert_eq!(seen.ports_unknown, Some(ParseError::Fragment));
    /// assert_eq!(seen.tuple.src(), "10.0.0.1:0".parse().unwrap());
    /// assert_eq!(seen.tuple.dst().port(), UNKNOWN_PORT);
    /// assert!(FourTuple::attribute(&packet[..19]).is_err());
    /// ```
    ///
    /// # Errors
    ///
    /// Only for a packet that cannot be attributed: [`ParseError::Empty`],
    /// [`ParseError::UnknownVersion`], or [`ParseError::Truncated`] in
    /// [`Layer::Ipv4`] / [`Layer::Ipv6`] when it ends before its addresses
    /// (20 / 40 bytes).
    pub fn attribute(packet: &[u8]) -> Result<Attribution, ParseError> {
        let first = *packet.first().ok_or(ParseError::Empty)?;
        let (addresses, ports) = match first >> 4 {
            4 => {
                need(Layer::Ipv4, packet, 20)?;
                let addr = |at: usize| {
                    Ipv4Addr::new(packet[at], packet[at + 1], packet[at + 2], packet[at + 3])
                };
                let t = TupleV4 {
                    src: addr(12),
                    src_port: UNKNOWN_PORT,
                    dst: addr(16),
                    dst_port: UNKNOWN_PORT,
                };
                (FourTuple::V4(t), v4_ports(packet))
            }
            6 => {
                need(Layer::Ipv6, packet, 40)?;
                let addr = |at: usize| {
                    let mut octets = [0u8; 16];
                    octets.copy_from_slice(&packet[at..at + 16]);
                    Ipv6Addr::from(octets)
                };
                let t = TupleV6 {
                    src: addr(8),
                    src_port: UNKNOWN_PORT,
                    dst: addr(24),
                    dst_port: UNKNOWN_PORT,
                };
                (FourTuple::V6(t), v6_ports(packet))
            }
            v => return Err(ParseError::UnknownVersion(v)),
        };
        Ok(match ports {
            Ok(ports) => Attribution {
                tuple: addresses.with_ports(ports),
                ports_unknown: None,
            },
            Err(why) => Attribution {
                tuple: addresses,
                ports_unknown: Some(why),
            },
        })
    }

    fn with_ports(self, (src_port, dst_port): (u16, u16)) -> Self {
        match self {
            Self::V4(t) => Self::V4(TupleV4 {
                src_port,
                dst_port,
                ..t
            }),
            Self::V6(t) => Self::V6(TupleV6 {
                src_port,
                dst_port,
                ..t
            }),
        }
    }
}

/// The ports of an IPv4 packet for [`FourTuple::attribute`] (at least 20
/// bytes present). The checks are the kernel filter's, in its order.
fn v4_ports(packet: &[u8]) -> Result<(u16, u16), ParseError> {
    let ihl = packet[0] & 0x0f;
    if ihl < 5 {
        return Err(ParseError::BadHeaderLength(ihl));
    }
    let header = usize::from(ihl) * 4;
    let total = be16(packet, 2);
    if usize::from(total) < header {
        return Err(ParseError::BadTotalLength { total, header });
    }
    if header + 8 > usize::from(total) {
        return Err(ParseError::Truncated {
            layer: Layer::Udp,
            needed: 8,
            available: usize::from(total) - header,
        });
    }
    if be16(packet, 6) & 0x1fff != 0 {
        return Err(ParseError::Fragment);
    }
    if packet[9] != UDP {
        return Err(ParseError::UnsupportedProtocol(packet[9]));
    }
    header_ports(packet, header)
}

/// The ports of an IPv6 packet for [`FourTuple::attribute`] (at least 40
/// bytes present): the kernel filter's walk, step for step.
fn v6_ports(packet: &[u8]) -> Result<(u16, u16), ParseError> {
    let end = 40 + usize::from(be16(packet, 4));
    let mut next = packet[6];
    let mut at = 40;
    let ends_at = |at: usize| ParseError::Truncated {
        layer: Layer::Ipv6Extension,
        needed: 8,
        available: end.saturating_sub(at),
    };
    for walked in 0..=MAX_EXTENSION_HEADERS {
        if next == UDP {
            break;
        }
        if walked == MAX_EXTENSION_HEADERS {
            return Err(ParseError::TooManyExtensionHeaders);
        }
        if at + 8 > end {
            return Err(ends_at(at));
        }
        let ext = packet.get(at..at + 8).ok_or_else(|| ends_at(at))?;
        let len = match next {
            0 | 43 | 60 => (usize::from(ext[1]) + 1) * 8,
            44 => {
                if be16(ext, 2) >> 3 != 0 {
                    return Err(ParseError::Fragment);
                }
                8
            }
            51 => (usize::from(ext[1]) + 2) * 4,
            other => return Err(ParseError::UnsupportedProtocol(other)),
        };
        if at + len > end {
            return Err(ends_at(at));
        }
        next = ext[0];
        at += len;
    }
    if at + 8 > end {
        return Err(ParseError::Truncated {
            layer: Layer::Udp,
            needed: 8,
            available: end.saturating_sub(at),
        });
    }
    header_ports(packet, at)
}

/// The two ports of the UDP header at `at`, if the whole 8-byte header is
/// present (the kernel reads it whole).
fn header_ports(packet: &[u8], at: usize) -> Result<(u16, u16), ParseError> {
    match packet.get(at..at + 8) {
        Some(udp) => Ok((be16(udp, 0), be16(udp, 2))),
        None => Err(ParseError::Truncated {
            layer: Layer::Udp,
            needed: 8,
            available: packet.len().saturating_sub(at),
        }),
    }
}

impl fmt::Display for FourTuple {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} -> {}", self.src(), self.dst())
    }
}

/// The header a [`ParseError::Truncated`] ran out of bytes in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layer {
    /// The IPv4 header (with options) or the datagram its total length claims.
    Ipv4,
    /// The fixed IPv6 header or the payload its payload length claims.
    Ipv6,
    /// An IPv6 extension header.
    Ipv6Extension,
    /// The UDP header or the datagram its length field claims.
    Udp,
}

/// Why a raw packet's 4-tuple could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ParseError {
    /// No bytes at all.
    Empty,
    /// The IP version nibble is neither 4 nor 6.
    UnknownVersion(u8),
    /// The packet ends before a header (or the length a header claims) does.
    Truncated {
        /// Where the bytes ran out.
        layer: Layer,
        /// Bytes needed from the start of that layer.
        needed: usize,
        /// Bytes available from the start of that layer.
        available: usize,
    },
    /// The IPv4 header length (IHL, in 32-bit words) is below the minimum 5.
    BadHeaderLength(u8),
    /// The IPv4 total length is smaller than its own header.
    BadTotalLength {
        /// The total length field.
        total: u16,
        /// The header length in bytes.
        header: usize,
    },
    /// A non-first fragment: it carries no transport header, hence no ports.
    Fragment,
    /// The transport protocol (IPv4 protocol / IPv6 next header) is not UDP.
    UnsupportedProtocol(u8),
    /// The UDP length field is below the 8-byte UDP header.
    BadUdpLength(u16),
    /// More than [`MAX_EXTENSION_HEADERS`] IPv6 extension headers.
    TooManyExtensionHeaders,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Empty => f.write_str("empty packet"),
            Self::UnknownVersion(v) => write!(f, "IP version {v} is neither 4 nor 6"),
            Self::Truncated {
                layer,
                needed,
                available,
            } => write!(
                f,
                "truncated {layer:?} header: {needed} bytes needed, {available} available"
            ),
            Self::BadHeaderLength(ihl) => write!(f, "IPv4 header length {ihl} words is below 5"),
            Self::BadTotalLength { total, header } => {
                write!(
                    f,
                    "IPv4 total length {total} is below the {header}-byte header"
                )
            }
            Self::Fragment => f.write_str("non-first fragment carries no ports"),
            Self::UnsupportedProtocol(p) => write!(f, "transport protocol {p} is not UDP"),
            Self::BadUdpLength(len) => write!(f, "UDP length {len} is below the 8-byte header"),
            Self::TooManyExtensionHeaders => write!(
                f,
                "more than {MAX_EXTENSION_HEADERS} IPv6 extension headers"
            ),
        }
    }
}

impl std::error::Error for ParseError {}

#[inline]
fn need(layer: Layer, bytes: &[u8], needed: usize) -> Result<(), ParseError> {
    if bytes.len() < needed {
        Err(ParseError::Truncated {
            layer,
            needed,
            available: bytes.len(),
        })
    } else {
        Ok(())
    }
}

#[inline]
fn be16(bytes: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([bytes[at], bytes[at + 1]])
}

/// The ports of a UDP header at the start of `l4`. `whole` says whether the
/// datagram is complete here (not a first fragment), so that the UDP length
/// can be checked against the bytes present.
fn udp_ports(l4: &[u8], whole: bool) -> Result<(u16, u16), ParseError> {
    need(Layer::Udp, l4, 8)?;
    let len = be16(l4, 4);
    if len < 8 {
        return Err(ParseError::BadUdpLength(len));
    }
    if whole {
        need(Layer::Udp, l4, usize::from(len))?;
    }
    Ok((be16(l4, 0), be16(l4, 2)))
}

fn parse_v4(packet: &[u8]) -> Result<FourTuple, ParseError> {
    need(Layer::Ipv4, packet, 20)?;
    let ihl = packet[0] & 0x0f;
    if ihl < 5 {
        return Err(ParseError::BadHeaderLength(ihl));
    }
    let header = usize::from(ihl) * 4;
    need(Layer::Ipv4, packet, header)?;
    let total = be16(packet, 2);
    if usize::from(total) < header {
        return Err(ParseError::BadTotalLength { total, header });
    }
    need(Layer::Ipv4, packet, usize::from(total))?;
    // Bytes past the total length are link-layer padding: ignore them.
    let packet = &packet[..usize::from(total)];
    let flags_offset = be16(packet, 6);
    if flags_offset & 0x1fff != 0 {
        return Err(ParseError::Fragment);
    }
    let more_fragments = flags_offset & 0x2000 != 0;
    if packet[9] != UDP {
        return Err(ParseError::UnsupportedProtocol(packet[9]));
    }
    let (src_port, dst_port) = udp_ports(&packet[header..], !more_fragments)?;
    let addr =
        |at: usize| Ipv4Addr::new(packet[at], packet[at + 1], packet[at + 2], packet[at + 3]);
    Ok(FourTuple::V4(TupleV4 {
        src: addr(12),
        src_port,
        dst: addr(16),
        dst_port,
    }))
}

fn parse_v6(packet: &[u8]) -> Result<FourTuple, ParseError> {
    need(Layer::Ipv6, packet, 40)?;
    let end = 40 + usize::from(be16(packet, 4));
    need(Layer::Ipv6, packet, end)?;
    let packet = &packet[..end];
    let mut next = packet[6];
    let mut at = 40;
    let mut whole = true;
    let mut walked = 0;
    loop {
        let rest = &packet[at..];
        let len = match next {
            UDP => break,
            // Hop-by-hop, routing, destination options: length in 8-byte
            // units, not counting the first 8 bytes.
            0 | 43 | 60 => {
                need(Layer::Ipv6Extension, rest, 8)?;
                (usize::from(rest[1]) + 1) * 8
            }
            // Fragment header: fixed 8 bytes.
            44 => {
                need(Layer::Ipv6Extension, rest, 8)?;
                let offset_flags = be16(rest, 2);
                if offset_flags >> 3 != 0 {
                    return Err(ParseError::Fragment);
                }
                whole &= offset_flags & 1 == 0;
                8
            }
            // Authentication header: length in 4-byte units, minus 2.
            51 => {
                need(Layer::Ipv6Extension, rest, 8)?;
                (usize::from(rest[1]) + 2) * 4
            }
            other => return Err(ParseError::UnsupportedProtocol(other)),
        };
        need(Layer::Ipv6Extension, rest, len)?;
        walked += 1;
        if walked > MAX_EXTENSION_HEADERS {
            return Err(ParseError::TooManyExtensionHeaders);
        }
        next = rest[0];
        at += len;
    }
    let (src_port, dst_port) = udp_ports(&packet[at..], whole)?;
    let addr = |at: usize| {
        let mut octets = [0u8; 16];
        octets.copy_from_slice(&packet[at..at + 16]);
        Ipv6Addr::from(octets)
    };
    Ok(FourTuple::V6(TupleV6 {
        src: addr(8),
        src_port,
        dst: addr(24),
        dst_port,
    }))
}

/// A well-formed raw IP packet (IPv4 without options, or IPv6 without
/// extension headers) carrying one UDP datagram with `payload`, checksums
/// left zero. For tests, simulations and benchmarks of the parser.
///
/// ```
/// use weir_hhh::{FourTuple, tuple::udp_packet};
///
/// let tuple = FourTuple::from_socket_addrs(
///     "[2001:db8::1]:1234".parse().unwrap(),
///     "[2001:db8::2]:443".parse().unwrap(),
/// );
/// let packet = udp_packet(&tuple, &[]);
/// assert_eq!(packet.len(), 48);
/// assert_eq!(FourTuple::parse(&packet), Ok(tuple));
/// ```
///
/// # Panics
///
/// If the packet would exceed 65 535 bytes.
pub fn udp_packet(tuple: &FourTuple, payload: &[u8]) -> Vec<u8> {
    let udp_len = u16::try_from(8 + payload.len()).expect("UDP datagram over 65535 bytes");
    let mut out = Vec::with_capacity(48 + payload.len());
    let (sp, dp) = match tuple {
        FourTuple::V4(t) => {
            let total = udp_len
                .checked_add(20)
                .expect("IPv4 packet over 65535 bytes");
            out.extend_from_slice(&[0x45, 0]);
            out.extend_from_slice(&total.to_be_bytes());
            out.extend_from_slice(&[0, 0, 0x40, 0, 64, UDP, 0, 0]);
            out.extend_from_slice(&t.src.octets());
            out.extend_from_slice(&t.dst.octets());
            (t.src_port, t.dst_port)
        }
        FourTuple::V6(t) => {
            out.extend_from_slice(&[0x60, 0, 0, 0]);
            out.extend_from_slice(&udp_len.to_be_bytes());
            out.extend_from_slice(&[UDP, 64]);
            out.extend_from_slice(&t.src.octets());
            out.extend_from_slice(&t.dst.octets());
            (t.src_port, t.dst_port)
        }
    };
    out.extend_from_slice(&sp.to_be_bytes());
    out.extend_from_slice(&dp.to_be_bytes());
    out.extend_from_slice(&udp_len.to_be_bytes());
    out.extend_from_slice(&[0, 0]);
    out.extend_from_slice(payload);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn v4(src: &str, dst: &str) -> FourTuple {
        FourTuple::from_socket_addrs(src.parse().unwrap(), dst.parse().unwrap())
    }

    /// Insert `options` (a multiple of 4 bytes) into an option-less IPv4 packet.
    fn with_v4_options(packet: &[u8], options: &[u8]) -> Vec<u8> {
        assert_eq!(options.len() % 4, 0);
        let mut out = packet[..20].to_vec();
        out[0] = 0x40 | (5 + options.len() / 4) as u8;
        let total = (packet.len() + options.len()) as u16;
        out[2..4].copy_from_slice(&total.to_be_bytes());
        out.extend_from_slice(options);
        out.extend_from_slice(&packet[20..]);
        out
    }

    /// Insert extension headers (each `(type, body)` with body.len() + 2 a
    /// multiple of 8) between the IPv6 header and UDP.
    fn with_v6_extensions(packet: &[u8], headers: &[(u8, Vec<u8>)]) -> Vec<u8> {
        let mut out = packet[..40].to_vec();
        let mut next_types: Vec<u8> = headers.iter().map(|h| h.0).collect();
        next_types.push(UDP);
        out[6] = next_types[0];
        for (i, (_, body)) in headers.iter().enumerate() {
            let len = body.len() + 2;
            assert_eq!(len % 8, 0);
            out.push(next_types[i + 1]);
            out.push((len / 8 - 1) as u8);
            out.extend_from_slice(body);
        }
        out.extend_from_slice(&packet[40..]);
        let payload = (out.len() - 40) as u16;
        out[4..6].copy_from_slice(&payload.to_be_bytes());
        out
    }

    #[test]
    fn ipv4_with_options_parses() {
        let t = v4("10.1.2.3:4000", "10.9.9.9:53");
        let plain = udp_packet(&t, b"abc");
        let packet = with_v4_options(&plain, &[1, 1, 1, 0, 7, 3, 4, 0]);
        assert_eq!(FourTuple::parse(&packet), Ok(t));
        // Link-layer padding after the datagram is ignored.
        let mut padded = packet.clone();
        padded.extend_from_slice(&[0; 6]);
        assert_eq!(FourTuple::parse(&padded), Ok(t));
    }

    #[test]
    fn ipv6_extension_headers_are_walked() {
        let t = v4("[2001:db8::1]:1", "[2001:db8::2]:2");
        let plain = udp_packet(&t, b"xyz");
        let packet = with_v6_extensions(&plain, &[(0, vec![0; 6]), (60, vec![1; 14])]);
        assert_eq!(FourTuple::parse(&packet), Ok(t));
        // A first fragment still has its ports; a later one does not.
        let mut first = with_v6_extensions(&plain, &[(44, vec![0, 0, 0, 0, 0, 1])]);
        first[40 + 1] = 0; // the fragment header's reserved byte
        assert_eq!(FourTuple::parse(&first), Ok(t));
        let mut later = first.clone();
        later[40 + 3] = 0x08; // fragment offset 1
        assert_eq!(FourTuple::parse(&later), Err(ParseError::Fragment));
    }

    #[test]
    fn malformed_headers_are_typed_errors() {
        let t = v4("10.1.2.3:4000", "10.9.9.9:53");
        let good = udp_packet(&t, b"abc");
        assert_eq!(FourTuple::parse(&[]), Err(ParseError::Empty));
        assert_eq!(
            FourTuple::parse(&[0x50]),
            Err(ParseError::UnknownVersion(5))
        );
        let mut bad = good.clone();
        bad[0] = 0x44;
        assert_eq!(FourTuple::parse(&bad), Err(ParseError::BadHeaderLength(4)));
        let mut bad = good.clone();
        bad[2..4].copy_from_slice(&10u16.to_be_bytes());
        assert_eq!(
            FourTuple::parse(&bad),
            Err(ParseError::BadTotalLength {
                total: 10,
                header: 20
            })
        );
        let mut bad = good.clone();
        bad[9] = 6;
        assert_eq!(
            FourTuple::parse(&bad),
            Err(ParseError::UnsupportedProtocol(6))
        );
        let mut bad = good.clone();
        bad[7] = 1; // fragment offset 1
        assert_eq!(FourTuple::parse(&bad), Err(ParseError::Fragment));
        let mut bad = good.clone();
        bad[24..26].copy_from_slice(&3u16.to_be_bytes());
        assert_eq!(FourTuple::parse(&bad), Err(ParseError::BadUdpLength(3)));
        let mut bad = good.clone();
        bad[24..26].copy_from_slice(&100u16.to_be_bytes());
        assert!(matches!(
            FourTuple::parse(&bad),
            Err(ParseError::Truncated {
                layer: Layer::Udp,
                needed: 100,
                ..
            })
        ));
        // A first fragment's UDP length covers the whole datagram.
        bad[6] = 0x20;
        assert_eq!(FourTuple::parse(&bad), Ok(t));
    }

    #[test]
    fn too_many_extension_headers_are_refused() {
        let t = v4("[2001:db8::1]:1", "[2001:db8::2]:2");
        let plain = udp_packet(&t, b"");
        let headers: Vec<(u8, Vec<u8>)> = (0..=MAX_EXTENSION_HEADERS)
            .map(|_| (60, vec![0; 6]))
            .collect();
        let packet = with_v6_extensions(&plain, &headers);
        assert_eq!(
            FourTuple::parse(&packet),
            Err(ParseError::TooManyExtensionHeaders)
        );
        let packet = with_v6_extensions(&plain, &headers[1..]);
        assert_eq!(FourTuple::parse(&packet), Ok(t));
    }

    #[test]
    fn attribution_falls_back_to_the_addresses() {
        let t = v4("[2001:db8::1]:1", "[2001:db8::2]:2");
        let bare = v4("[2001:db8::1]:0", "[2001:db8::2]:0");
        let plain = udp_packet(&t, b"");
        let unknown = |packet: &[u8]| {
            let seen = FourTuple::attribute(packet).unwrap();
            assert_eq!(seen.tuple, bare);
            seen.ports_unknown.unwrap()
        };
        let nine: Vec<(u8, Vec<u8>)> = (0..=MAX_EXTENSION_HEADERS)
            .map(|_| (60, vec![0; 6]))
            .collect();
        assert_eq!(
            unknown(&with_v6_extensions(&plain, &nine)),
            ParseError::TooManyExtensionHeaders
        );
        assert_eq!(
            FourTuple::attribute(&with_v6_extensions(&plain, &nine[1..])),
            Ok(Attribution {
                tuple: t,
                ports_unknown: None
            })
        );
        let mut later = with_v6_extensions(&plain, &[(44, vec![0, 0x08, 0, 0, 0, 1])]);
        later[41] = 0;
        assert_eq!(unknown(&later), ParseError::Fragment);
        let mut icmp = plain.clone();
        icmp[6] = 58;
        assert_eq!(unknown(&icmp), ParseError::UnsupportedProtocol(58));
        assert!(matches!(
            unknown(&plain[..44]),
            ParseError::Truncated { .. }
        ));
        assert_eq!(
            FourTuple::attribute(&plain[..39]),
            Err(ParseError::Truncated {
                layer: Layer::Ipv6,
                needed: 40,
                available: 39
            })
        );
        // IPv4: every way to lose the UDP header keeps the addresses.
        let t = v4("10.1.2.3:4000", "10.9.9.9:53");
        let bare = v4("10.1.2.3:0", "10.9.9.9:0");
        let good = udp_packet(&t, b"abc");
        let mut bad = good.clone();
        bad[0] = 0x44;
        let seen = FourTuple::attribute(&bad).unwrap();
        assert_eq!(
            (seen.tuple, seen.ports_unknown),
            (bare, Some(ParseError::BadHeaderLength(4)))
        );
        let mut bad = good.clone();
        bad[7] = 1;
        assert_eq!(
            FourTuple::attribute(&bad).unwrap().ports_unknown,
            Some(ParseError::Fragment)
        );
        assert_eq!(FourTuple::attribute(&good[..20]).unwrap().tuple, bare);
        assert!(FourTuple::attribute(&good[..19]).is_err());
        // What the UDP length says does not matter: the ports are read.
        let mut bad = good.clone();
        bad[24..26].copy_from_slice(&3u16.to_be_bytes());
        assert_eq!(FourTuple::attribute(&bad).unwrap().tuple, t);
        assert_eq!(FourTuple::attribute(&[]), Err(ParseError::Empty));
        assert_eq!(
            FourTuple::attribute(&[0x50; 60]),
            Err(ParseError::UnknownVersion(5))
        );
    }

    #[test]
    fn mapped_addresses_become_ipv4() {
        let t = v4("[::ffff:10.0.0.1]:9", "[::ffff:10.0.0.2]:10");
        assert_eq!(t, v4("10.0.0.1:9", "10.0.0.2:10"));
        let t = v4("10.0.0.1:9", "[2001:db8::2]:10");
        assert_eq!(t.src(), "[::ffff:10.0.0.1]:9".parse().unwrap());
    }

    fn arb_tuple() -> impl Strategy<Value = FourTuple> {
        prop_oneof![
            (any::<u32>(), any::<u16>(), any::<u32>(), any::<u16>()).prop_map(|(s, sp, d, dp)| {
                FourTuple::v4(
                    SocketAddrV4::new(s.into(), sp),
                    SocketAddrV4::new(d.into(), dp),
                )
            }),
            (any::<u128>(), any::<u16>(), any::<u128>(), any::<u16>()).prop_map(
                |(s, sp, d, dp)| {
                    FourTuple::v6(
                        SocketAddrV6::new(s.into(), sp, 0, 0),
                        SocketAddrV6::new(d.into(), dp, 0, 0),
                    )
                }
            ),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = FourTuple::parse(&bytes);
        }

        #[test]
        fn arbitrary_headers_behind_a_valid_version_never_panic(
            v6 in any::<bool>(),
            mut bytes in proptest::collection::vec(any::<u8>(), 1..200),
        ) {
            bytes[0] = if v6 { 0x60 | (bytes[0] & 0x0f) } else { 0x40 | (bytes[0] & 0x0f) };
            if let Ok(t) = FourTuple::parse(&bytes) {
                prop_assert_eq!(matches!(t, FourTuple::V6(_)), v6);
            }
        }

        #[test]
        fn built_packets_round_trip(t in arb_tuple(), payload in proptest::collection::vec(any::<u8>(), 0..64)) {
            prop_assert_eq!(FourTuple::parse(&udp_packet(&t, &payload)), Ok(t));
        }

        #[test]
        fn every_truncation_is_an_error(t in arb_tuple(), payload in proptest::collection::vec(any::<u8>(), 0..32), cut: prop::sample::Index) {
            let packet = udp_packet(&t, &payload);
            let cut = cut.index(packet.len());
            prop_assert!(FourTuple::parse(&packet[..cut]).is_err());
        }

        #[test]
        fn single_byte_corruption_never_panics(t in arb_tuple(), at: prop::sample::Index, byte: u8) {
            let mut packet = udp_packet(&t, b"payload");
            let at = at.index(packet.len());
            packet[at] = byte;
            let _ = FourTuple::parse(&packet);
        }
    }
}
