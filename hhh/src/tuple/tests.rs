//! Unit tests of parsing and attribution: hand-built packets for every
//! error, and proptests over arbitrary and corrupted bytes.

use super::parse::MAX_EXTENSION_HEADERS;
use super::*;
use crate::test_util::udp_packet;
use proptest::prelude::*;
use std::net::{SocketAddrV4, SocketAddrV6};

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
        (any::<u128>(), any::<u16>(), any::<u128>(), any::<u16>()).prop_map(|(s, sp, d, dp)| {
            FourTuple::v6(
                SocketAddrV6::new(s.into(), sp, 0, 0),
                SocketAddrV6::new(d.into(), dp, 0, 0),
            )
        }),
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
