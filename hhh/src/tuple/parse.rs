//! Reading the 4-tuple of a raw IPv4 or IPv6 UDP packet, and why that can
//! fail.
//!
//! The parser reads only headers, never allocates, and rejects anything it
//! cannot trust with a typed [`ParseError`]: truncated headers, header
//! lengths that contradict each other, non-first fragments (they carry no
//! ports), and protocols other than UDP. IPv4 options are skipped by the
//! header length; IPv6 extension headers (hop-by-hop, routing, fragment,
//! destination options, authentication) are walked, at most
//! [`MAX_EXTENSION_HEADERS`] of them.

use super::{FourTuple, TupleV4, TupleV6};
use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

/// IP protocol number of UDP.
pub(crate) const UDP: u8 = 17;

/// The most IPv6 extension headers [`FourTuple::parse`] and
/// [`FourTuple::attribute`] walk before giving up on the ports (the kernel
/// filter's bound too, `MAX_EXTENSION_HEADERS` in `bpf/filter.c`).
pub(crate) const MAX_EXTENSION_HEADERS: usize = 8;

/// The header a [`ParseError::Truncated`] ran out of bytes in.
///
/// ```
/// use weir_hhh::{FourTuple, Layer, ParseError};
///
/// // An IPv4 header cut short after 10 of its 20 bytes.
/// let err = FourTuple::parse(&[0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17]).unwrap_err();
/// assert!(matches!(err, ParseError::Truncated { layer: Layer::Ipv4, needed: 20, available: 10 }));
/// ```
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

/// Why a raw packet's 4-tuple could not be read ([`FourTuple::parse`]), or
/// why a packet's ports could not be ([`Attribution::ports_unknown`]).
///
/// [`Attribution::ports_unknown`]: crate::Attribution::ports_unknown
///
/// ```
/// use weir_hhh::{FourTuple, ParseError};
///
/// assert_eq!(FourTuple::parse(&[]), Err(ParseError::Empty));
/// assert_eq!(FourTuple::parse(&[0x50; 40]), Err(ParseError::UnknownVersion(5)));
/// let e = FourTuple::parse(&[0x44; 40]).unwrap_err();
/// assert_eq!(e.to_string(), "IPv4 header length 4 words is below 5");
/// ```
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
    /// More than eight IPv6 extension headers.
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

impl FourTuple {
    /// Read the 4-tuple of a raw IPv4 or IPv6 packet carrying UDP (starting
    /// at the IP header, no link-layer header), checking every length
    /// against the bytes present. IPv4 options are skipped; up to eight
    /// IPv6 extension headers (hop-by-hop, routing, fragment, destination
    /// options, authentication) are walked. Nothing is allocated.
    ///
    /// A limiter must not pass what this refuses (a packet with many
    /// extension headers, a fragment, another protocol): judge raw packets
    /// by [`attribute`](Self::attribute) instead, which attributes them to
    /// their addresses.
    ///
    /// ```
    /// use weir_hhh::{FourTuple, ParseError};
    ///
    /// let packet = [
    ///     0x45, 0, 0, 33, 0, 0, 0x40, 0, 64, 17, 0, 0, // IPv4, 33 bytes, UDP
    ///     10, 0, 0, 1, 10, 0, 0, 2, // 10.0.0.1 -> 10.0.0.2
    ///     0x0f, 0xa0, 0, 53, 0, 13, 0, 0, // UDP 4000 -> 53, 13 bytes
    ///     b'h', b'e', b'l', b'l', b'o',
    /// ];
    /// let tuple = FourTuple::parse(&packet).unwrap();
    /// assert_eq!(tuple.to_string(), "10.0.0.1:4000 -> 10.0.0.2:53");
    /// assert!(matches!(FourTuple::parse(&packet[..10]), Err(ParseError::Truncated { .. })));
    /// ```
    ///
    /// # Errors
    ///
    /// A [`ParseError`] for anything that does not yield a whole UDP
    /// 4-tuple: truncated or contradictory headers, non-first fragments,
    /// other protocols, more than eight extension headers.
    pub fn parse(packet: &[u8]) -> Result<Self, ParseError> {
        let first = *packet.first().ok_or(ParseError::Empty)?;
        match first >> 4 {
            4 => parse_v4(packet),
            6 => parse_v6(packet),
            v => Err(ParseError::UnknownVersion(v)),
        }
    }
}

/// `Truncated` in `layer` unless `bytes` holds at least `needed` bytes.
#[inline]
pub(super) fn need(layer: Layer, bytes: &[u8], needed: usize) -> Result<(), ParseError> {
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

/// The big-endian 16-bit word at `at`.
#[inline]
pub(super) fn be16(bytes: &[u8], at: usize) -> u16 {
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
