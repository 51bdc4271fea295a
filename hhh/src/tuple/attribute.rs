//! Attributing a raw packet to a source: what a limiter judges it by.
//!
//! A limiter must not pass a packet unclassified because its ports cannot
//! be read: a flood would carry ten extension headers, or arrive as
//! fragments, and be let through whole. [`FourTuple::attribute`] keeps the
//! rule *what can be attributed to a source is never passed unclassified*;
//! `Classifier::classify_packet` and the kernel filter (`bpf/filter.c`,
//! whose checks `v4_ports` and `v6_ports` mirror in its order) keep the
//! same rule, packet for packet.

use super::parse::{Layer, MAX_EXTENSION_HEADERS, ParseError, UDP, be16, need};
use super::{FourTuple, TupleV4, TupleV6};
use std::net::{Ipv4Addr, Ipv6Addr};

/// The port [`FourTuple::attribute`] gives both ports of a packet whose
/// UDP header cannot be reached.
///
/// Packets without ports then form a stream of their own wherever ports
/// are kept (no legitimate datagram is sent to port 0, and hardly any
/// from it), so a flood of them from one source is held at its own exact
/// key, like a flood from one port, and never limits that source's real
/// traffic; spread over many sources, they meet where the sources
/// aggregate, and wherever ports are wildcarded they count with the rest
/// of their source's traffic. An attacker cannot spread them over keys by
/// choosing ports: all of one source's port-less packets to one
/// destination share one key. The price falls on raw-packet users who see
/// fragments: a source's non-first fragments share that one key, whatever
/// datagrams they belong to, and so are limited together.
///
/// ```
/// use weir_hhh::{FourTuple, UNKNOWN_PORT};
///
/// // An ICMP packet (protocol 1) has no UDP ports.
/// let mut icmp = [0u8; 28];
/// icmp[..12].copy_from_slice(&[0x45, 0, 0, 28, 0, 0, 0, 0, 64, 1, 0, 0]);
/// icmp[12..20].copy_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2]);
/// let seen = FourTuple::attribute(&icmp).unwrap();
/// assert_eq!(seen.tuple.src().port(), UNKNOWN_PORT);
/// ```
pub const UNKNOWN_PORT: u16 = 0;

/// What [`FourTuple::attribute`] found in a raw packet: the tuple to judge
/// it by, and whether its ports are its own.
///
/// ```
/// use weir_hhh::{FourTuple, ParseError};
///
/// let fragment = [
///     0x45, 0, 0, 28, 0, 0, 0, 1, 64, 17, 0, 0, // IPv4, a later fragment (offset 1)
///     10, 0, 0, 1, 10, 0, 0, 2, // 10.0.0.1 -> 10.0.0.2
///     0, 0, 0, 0, 0, 0, 0, 0, // data of the fragment, no UDP header
/// ];
/// let seen = FourTuple::attribute(&fragment).unwrap();
/// assert_eq!(seen.ports_unknown, Some(ParseError::Fragment));
/// assert_eq!(seen.tuple.to_string(), "10.0.0.1:0 -> 10.0.0.2:0");
/// ```
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

impl FourTuple {
    /// The tuple a limiter judges a raw IPv4 or IPv6 packet by (starting at
    /// the IP header): its addresses, with its UDP ports when its UDP
    /// header can be reached, else with both ports [`UNKNOWN_PORT`] and
    /// the reason in [`Attribution::ports_unknown`]. What can be
    /// attributed to a source is never passed unclassified:
    /// [`Classifier::classify_packet`](crate::Classifier::classify_packet)
    /// and the kernel filter (feature `bpf`) judge packets by this, packet
    /// for packet.
    ///
    /// The ports are read from a UDP header found within the datagram the
    /// IP header delimits (IPv4 total length, IPv6 payload length), behind
    /// at most eight IPv6 extension headers, in the first fragment; only
    /// the headers need to be present, and the UDP length field is not
    /// consulted (the ports are the sender's choice either way).
    ///
    /// ```
    /// use weir_hhh::{FourTuple, ParseError, UNKNOWN_PORT};
    ///
    /// let packet = [
    ///     0x45, 0, 0, 33, 0, 0, 0x40, 0, 64, 17, 0, 0, // IPv4, 33 bytes, UDP
    ///     10, 0, 0, 1, 10, 0, 0, 2, // 10.0.0.1 -> 10.0.0.2
    ///     0x0f, 0xa0, 0, 53, 0, 13, 0, 0, // UDP 4000 -> 53, 13 bytes
    ///     b'h', b'e', b'l', b'l', b'o',
    /// ];
    /// let seen = FourTuple::attribute(&packet).unwrap();
    /// assert_eq!((seen.tuple.to_string(), seen.ports_unknown), ("10.0.0.1:4000 -> 10.0.0.2:53".to_string(), None));
    /// // A later fragment has no ports, but still has its addresses.
    /// let mut later = packet;
    /// later[7] = 1; // fragment offset 1
    /// let seen = FourTuple::attribute(&later).unwrap();
    /// assert_eq!(seen.ports_unknown, Some(ParseError::Fragment));
    /// assert_eq!(seen.tuple.src(), "10.0.0.1:0".parse().unwrap());
    /// assert_eq!(seen.tuple.dst().port(), UNKNOWN_PORT);
    /// // Nothing to attribute: the packet ends before its addresses.
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
