//! Hostile raw IP packets, shared by `tests/attacks.rs` (user space) and
//! `tests/kernel/` (the kernel filter against user space): IPv6
//! extension-header chains of any length, fragments, other protocols,
//! truncations at every offset, lengths that contradict each other, and
//! random bytes. Built from the wire format here, not with the parser under
//! test, so that the tests can tell what the parser should have found.
#![allow(dead_code)] // each test file uses a different part of it

use proptest::prelude::*;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4, SocketAddrV6};
use weir_primitives::random::SplitMix64;

pub const UDP: u8 = 17;
/// IPv6 next-header values the parsers walk.
pub const HOP_BY_HOP: u8 = 0;
pub const ROUTING: u8 = 43;
pub const FRAGMENT: u8 = 44;
pub const AUTH: u8 = 51;
pub const DEST_OPTS: u8 = 60;

/// One IPv6 extension header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ext {
    /// Hop-by-hop options: 8·(1 + units) bytes of padding options.
    HopByHop(u8),
    /// A routing header (type 0, no segments left): 8·(1 + units) bytes.
    Routing(u8),
    /// Destination options: 8·(1 + units) bytes of padding options.
    DestOpts(u8),
    /// A fragment header: offset in 8-byte units, more-fragments flag.
    Fragment { offset: u16, more: bool },
    /// An authentication header: 4·(2 + units) bytes.
    Auth(u8),
}

impl Ext {
    pub fn kind(self) -> u8 {
        match self {
            Self::HopByHop(_) => HOP_BY_HOP,
            Self::Routing(_) => ROUTING,
            Self::DestOpts(_) => DEST_OPTS,
            Self::Fragment { .. } => FRAGMENT,
            Self::Auth(_) => AUTH,
        }
    }

    /// The header's bytes, with `next` as its next-header field.
    fn bytes(self, next: u8) -> Vec<u8> {
        match self {
            Self::HopByHop(units) | Self::DestOpts(units) => {
                let len = 8 * (1 + usize::from(units));
                let mut h = vec![next, units];
                // One PadN option filling the rest (Linux accepts padding in
                // any number).
                h.extend_from_slice(&[1, (len - 4) as u8]);
                h.resize(len, 0);
                h
            }
            Self::Routing(units) => {
                let mut h = vec![next, units, 0, 0];
                h.resize(8 * (1 + usize::from(units)), 0);
                h
            }
            Self::Fragment { offset, more } => {
                let field = (offset << 3) | u16::from(more);
                let mut h = vec![next, 0];
                h.extend_from_slice(&field.to_be_bytes());
                h.extend_from_slice(&0x1234_5678u32.to_be_bytes());
                h
            }
            Self::Auth(units) => {
                let mut h = vec![next, units, 0, 0];
                h.resize(4 * (2 + usize::from(units)), 0);
                h
            }
        }
    }

    /// Whether a packet behind this header still carries its transport
    /// header (anything but a non-first fragment).
    pub fn keeps_ports(self) -> bool {
        !matches!(self, Self::Fragment { offset, .. } if offset != 0)
    }
}

pub fn v4(
    src: [u8; 4],
    src_port: u16,
    dst: [u8; 4],
    dst_port: u16,
) -> (SocketAddrV4, SocketAddrV4) {
    (
        SocketAddrV4::new(Ipv4Addr::from(src), src_port),
        SocketAddrV4::new(Ipv4Addr::from(dst), dst_port),
    )
}

pub fn v6(src: &str, src_port: u16, dst: &str, dst_port: u16) -> (SocketAddrV6, SocketAddrV6) {
    (
        SocketAddrV6::new(src.parse().unwrap(), src_port, 0, 0),
        SocketAddrV6::new(dst.parse().unwrap(), dst_port, 0, 0),
    )
}

/// The one's-complement sum UDP checksums are made of.
fn sum16(mut sum: u32, bytes: &[u8]) -> u32 {
    for pair in bytes.chunks(2) {
        sum += u32::from(u16::from_be_bytes([pair[0], *pair.get(1).unwrap_or(&0)]));
    }
    sum
}

fn fold(mut sum: u32) -> u16 {
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    match !(sum as u16) {
        0 => 0xffff,
        c => c,
    }
}

fn udp_header(src_port: u16, dst_port: u16, payload: &[u8]) -> Vec<u8> {
    let mut udp = Vec::with_capacity(8 + payload.len());
    udp.extend_from_slice(&src_port.to_be_bytes());
    udp.extend_from_slice(&dst_port.to_be_bytes());
    udp.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    udp.extend_from_slice(&[0, 0]);
    udp.extend_from_slice(payload);
    udp
}

/// An IPv6 packet from `src` to `dst` with `exts` between the IPv6 header
/// and a UDP datagram carrying `payload`, with a correct UDP checksum (a
/// real IPv6 receiver checks it). With `last` other than UDP, the chain
/// ends in that protocol instead (the UDP bytes are still appended).
pub fn v6_packet(
    (src, dst): (SocketAddrV6, SocketAddrV6),
    exts: &[Ext],
    last: u8,
    payload: &[u8],
) -> Vec<u8> {
    let mut udp = udp_header(src.port(), dst.port(), payload);
    let mut sum = sum16(0, &src.ip().octets());
    sum = sum16(sum, &dst.ip().octets());
    sum = sum16(sum, &(udp.len() as u32).to_be_bytes());
    sum = sum16(sum, &[0, 0, 0, UDP]);
    sum = sum16(sum, &udp);
    udp[6..8].copy_from_slice(&fold(sum).to_be_bytes());
    let mut headers = Vec::new();
    for (i, ext) in exts.iter().enumerate() {
        let next = exts.get(i + 1).map_or(last, |e| e.kind());
        headers.extend_from_slice(&ext.bytes(next));
    }
    let mut p = vec![0x60, 0, 0, 0];
    p.extend_from_slice(&((headers.len() + udp.len()) as u16).to_be_bytes());
    p.push(exts.first().map_or(last, |e| e.kind()));
    p.push(64);
    p.extend_from_slice(&src.ip().octets());
    p.extend_from_slice(&dst.ip().octets());
    p.extend_from_slice(&headers);
    p.extend_from_slice(&udp);
    p
}

/// An IPv4 packet with `option_words` 4-byte words of options (NOPs),
/// the given fragment offset (8-byte units) and more-fragments flag, and
/// protocol `proto` carrying a UDP datagram's bytes.
pub fn v4_packet(
    (src, dst): (SocketAddrV4, SocketAddrV4),
    option_words: u8,
    offset: u16,
    more: bool,
    proto: u8,
    payload: &[u8],
) -> Vec<u8> {
    let udp = udp_header(src.port(), dst.port(), payload);
    let header = 20 + 4 * usize::from(option_words);
    let total = (header + udp.len()) as u16;
    let mut p = vec![0x40 | (5 + option_words), 0];
    p.extend_from_slice(&total.to_be_bytes());
    p.extend_from_slice(&[0, 0]);
    p.extend_from_slice(&((offset & 0x1fff) | if more { 0x2000 } else { 0 }).to_be_bytes());
    p.extend_from_slice(&[64, proto, 0, 0]);
    p.extend_from_slice(&src.ip().octets());
    p.extend_from_slice(&dst.ip().octets());
    p.resize(header, 1);
    p.extend_from_slice(&udp);
    p
}

/// `packet` with the big-endian u16 at `at` set to `value`.
pub fn with_u16(packet: &[u8], at: usize, value: u16) -> Vec<u8> {
    let mut p = packet.to_vec();
    p[at..at + 2].copy_from_slice(&value.to_be_bytes());
    p
}

/// `packet` with the byte at `at` set to `value`.
pub fn with_byte(packet: &[u8], at: usize, value: u8) -> Vec<u8> {
    let mut p = packet.to_vec();
    p[at] = value;
    p
}

/// What the classification rule demands of `packet`, from its bytes alone:
/// `None` if it is not IP or ends before its addresses (it may pass
/// unclassified), else its (source, destination) address bytes.
pub fn readable_addresses(packet: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
    match packet.first()? >> 4 {
        4 if packet.len() >= 20 => Some((packet[12..16].to_vec(), packet[16..20].to_vec())),
        6 if packet.len() >= 40 => Some((packet[8..24].to_vec(), packet[24..40].to_vec())),
        _ => None,
    }
}

/// Sources and destinations the catalogue uses: a few, so that hostile
/// packets meet in the sketches' aggregates.
const V4_PEERS: [[u8; 4]; 3] = [[10, 0, 0, 1], [10, 0, 0, 2], [192, 0, 2, 9]];
const V6_PEERS: [&str; 3] = ["2001:db8:1::1", "2001:db8:1::2", "2001:db8:77::9"];

/// Every kind of hostile packet, deterministically (with `random` more
/// from a seeded generator): what it is, and its bytes.
pub fn catalogue(random: usize) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = Vec::new();
    let a4 = v4(V4_PEERS[0], 4000, [10, 9, 9, 9], 53);
    let a6 = v6(V6_PEERS[0], 4000, "2001:db8:ffff::1", 53);
    let plain4 = v4_packet(a4, 0, 0, false, UDP, b"ping");
    let plain6 = v6_packet(a6, &[], UDP, b"ping");
    out.push(("plain IPv4".into(), plain4.clone()));
    out.push(("plain IPv6".into(), plain6.clone()));
    // Chains of every length up to past the walking bound, of each kind.
    for n in 0..=12 {
        for (name, ext) in [
            ("destination options", Ext::DestOpts(0)),
            ("hop-by-hop", Ext::HopByHop(1)),
            ("routing", Ext::Routing(0)),
            ("authentication", Ext::Auth(1)),
            (
                "first fragment",
                Ext::Fragment {
                    offset: 0,
                    more: true,
                },
            ),
        ] {
            out.push((
                format!("IPv6 with {n} {name} headers"),
                v6_packet(a6, &vec![ext; n], UDP, b"ping"),
            ));
        }
    }
    let mixed = [
        Ext::HopByHop(0),
        Ext::DestOpts(2),
        Ext::Routing(1),
        Ext::Fragment {
            offset: 0,
            more: true,
        },
        Ext::Auth(2),
        Ext::DestOpts(0),
    ];
    out.push((
        "IPv6 with a mixed chain".into(),
        v6_packet(a6, &mixed, UDP, b"ping"),
    ));
    // Fragments.
    for (offset, more) in [(0, false), (0, true), (1, true), (185, false), (8191, true)] {
        out.push((
            format!("IPv6 fragment offset {offset} more {more}"),
            v6_packet(a6, &[Ext::Fragment { offset, more }], UDP, b"ping"),
        ));
        out.push((
            format!("IPv4 fragment offset {offset} more {more}"),
            v4_packet(a4, 0, offset, more, UDP, b"ping"),
        ));
    }
    // Other protocols, directly or behind a chain.
    for proto in [6, 58, 50, 59, 255, 1] {
        out.push((
            format!("IPv4 protocol {proto}"),
            v4_packet(a4, 0, 0, false, proto, b"ping"),
        ));
        out.push((
            format!("IPv6 next header {proto}"),
            v6_packet(a6, &[], proto, b"ping"),
        ));
        out.push((
            format!("IPv6 next header {proto} behind destination options"),
            v6_packet(a6, &[Ext::DestOpts(0)], proto, b"ping"),
        ));
    }
    // IPv4 options, then every bogus IPv4 length.
    for words in [1, 2, 10] {
        out.push((
            format!("IPv4 with {words} option words"),
            v4_packet(a4, words, 0, false, UDP, b"ping"),
        ));
    }
    for ihl in [0, 4, 6, 15] {
        out.push((format!("IPv4 IHL {ihl}"), with_byte(&plain4, 0, 0x40 | ihl)));
    }
    for total in [0, 10, 20, 27, 28, 33, 1000, 65535] {
        out.push((
            format!("IPv4 total length {total}"),
            with_u16(&plain4, 2, total),
        ));
    }
    for udp_len in [0, 7, 8, 12, 13, 1000] {
        out.push((
            format!("IPv4 UDP length {udp_len}"),
            with_u16(&plain4, 24, udp_len),
        ));
        out.push((
            format!("IPv6 UDP length {udp_len}"),
            with_u16(&plain6, 44, udp_len),
        ));
    }
    // Bogus IPv6 lengths: the payload length, and extension-header lengths
    // reaching past the packet.
    for payload in [0, 4, 8, 11, 12, 100, 65535] {
        out.push((
            format!("IPv6 payload length {payload}"),
            with_u16(&plain6, 4, payload),
        ));
    }
    let chain = v6_packet(a6, &[Ext::DestOpts(0), Ext::HopByHop(0)], UDP, b"ping");
    for len in [1, 2, 255] {
        out.push((
            format!("IPv6 extension header length {len} past the end"),
            with_byte(&chain, 41, len),
        ));
    }
    // Truncations at every offset.
    let long6 = v6_packet(
        a6,
        &[
            Ext::DestOpts(0),
            Ext::Fragment {
                offset: 0,
                more: false,
            },
            Ext::Auth(0),
        ],
        UDP,
        b"ping",
    );
    let long4 = v4_packet(a4, 2, 0, false, UDP, b"ping");
    for (name, p) in [
        ("IPv4", &long4),
        ("IPv6 chain", &long6),
        ("IPv4", &plain4),
        ("IPv6", &plain6),
    ] {
        for cut in 0..p.len() {
            out.push((format!("{name} cut to {cut} bytes"), p[..cut].to_vec()));
        }
    }
    // Not IP.
    out.push(("version 5".into(), with_byte(&plain4, 0, 0x55)));
    out.push(("version 0".into(), with_byte(&plain6, 0, 0x00)));
    // Random mutations of the packets above, and random bytes.
    let mut rng = SplitMix64::new(0xbad_5eed);
    let seeds: Vec<Vec<u8>> = out
        .iter()
        .map(|(_, p)| p.clone())
        .filter(|p| p.len() > 1)
        .collect();
    for i in 0..random {
        let r = rng.next_u64();
        let mut p = seeds[(r as usize) % seeds.len()].clone();
        match i % 4 {
            0 => {
                let at = (r >> 20) as usize % p.len();
                p[at] = (r >> 40) as u8;
            }
            1 => {
                let at = (r >> 20) as usize % (p.len() - 1);
                p[at..at + 2].copy_from_slice(&((r >> 40) as u16).to_be_bytes());
            }
            2 => p.truncate((r >> 20) as usize % p.len()),
            _ => {
                let len = (r >> 20) as usize % 80;
                p = (0..len).map(|_| rng.next_u64() as u8).collect();
                if let Some(b) = p.first_mut() {
                    // Mostly versions 4 and 6, so the random bytes reach the parsers.
                    *b = (*b & 0x0f) | [0x40, 0x60, 0x40, 0x60, 0x70][(r >> 60) as usize % 5];
                }
            }
        }
        out.push((format!("random #{i}"), p));
    }
    // Spread the sources a little, so that aggregates and exact keys differ.
    for (i, (_, p)) in out.iter_mut().enumerate() {
        match p.first().map(|b| b >> 4) {
            Some(4) if p.len() >= 16 => p[12..16].copy_from_slice(&V4_PEERS[i % 3]),
            Some(6) if p.len() >= 24 => {
                p[8..24].copy_from_slice(&V6_PEERS[i % 3].parse::<Ipv6Addr>().unwrap().octets())
            }
            _ => {}
        }
    }
    out
}

/// A proptest strategy over hostile packets: random bytes, every kind of
/// extension-header chain (with lengths that may lie), fragments, other
/// protocols, truncations and corrupted lengths.
pub fn arb_hostile() -> impl Strategy<Value = Vec<u8>> {
    let ext = prop_oneof![
        (0u8..4).prop_map(Ext::HopByHop),
        (0u8..4).prop_map(Ext::Routing),
        (0u8..4).prop_map(Ext::DestOpts),
        (0u16..4, any::<bool>()).prop_map(|(offset, more)| Ext::Fragment { offset, more }),
        (0u8..4).prop_map(Ext::Auth),
    ];
    let last = prop_oneof![4 => Just(UDP), 1 => any::<u8>()];
    let chain = (
        any::<[u16; 8]>(),
        any::<u16>(),
        any::<[u16; 8]>(),
        any::<u16>(),
        proptest::collection::vec(ext, 0..14),
        last,
        proptest::collection::vec(any::<u8>(), 0..24),
    )
        .prop_map(|(s, sp, d, dp, exts, last, payload)| {
            let src = SocketAddrV6::new(Ipv6Addr::from(s), sp, 0, 0);
            let dst = SocketAddrV6::new(Ipv6Addr::from(d), dp, 0, 0);
            v6_packet((src, dst), &exts, last, &payload)
        });
    let v4 = (
        any::<[u8; 4]>(),
        any::<u16>(),
        any::<[u8; 4]>(),
        any::<u16>(),
        0u8..11,
        prop_oneof![3 => Just(0u16), 1 => any::<u16>()],
        any::<bool>(),
        prop_oneof![4 => Just(UDP), 1 => any::<u8>()],
        proptest::collection::vec(any::<u8>(), 0..24),
    )
        .prop_map(|(s, sp, d, dp, words, offset, more, proto, payload)| {
            v4_packet(v4(s, sp, d, dp), words, offset, more, proto, &payload)
        });
    let packet = prop_oneof![chain, v4];
    // Then lie about it: cut it, or overwrite a byte or a length.
    let damaged = (
        packet,
        0usize..4,
        any::<prop::sample::Index>(),
        any::<u16>(),
    )
        .prop_map(|(mut p, how, at, value)| {
            let at = at.index(p.len());
            match how {
                0 => {}
                1 => p.truncate(at),
                2 => p[at] = value as u8,
                _ if at + 1 < p.len() => p[at..at + 2].copy_from_slice(&value.to_be_bytes()),
                _ => {}
            }
            p
        });
    prop_oneof![
        4 => damaged,
        1 => proptest::collection::vec(any::<u8>(), 0..120),
    ]
}
