//! Fixtures for weir-hhh's own tests and the bench suite (feature
//! `test-util`; hidden from the documentation and outside the supported
//! API, as tokio's `test-util` is): raw packets and frames built from a
//! tuple, the rakelimit paper's scenarios with the report's CSV, and (with
//! `bpf`) the kernel filter's test runs.

pub mod paper;

use crate::tuple::{FourTuple, UDP};

/// A well-formed raw IP packet (IPv4 without options, or IPv6 without
/// extension headers) carrying one UDP datagram with `payload`, checksums
/// left zero.
///
/// ```
/// use weir_hhh::FourTuple;
/// use weir_hhh::test_util::udp_packet;
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

/// `packet` (an IPv4 or IPv6 packet) behind an Ethernet header with the
/// matching EtherType, as `BPF_PROG_TEST_RUN` wants a socket filter's input.
///
/// ```
/// use weir_hhh::FourTuple;
/// use weir_hhh::test_util::{ethernet_frame, udp_packet};
///
/// let t = FourTuple::from_socket_addrs("10.0.0.1:1".parse().unwrap(), "10.0.0.2:2".parse().unwrap());
/// let frame = ethernet_frame(&udp_packet(&t, b"abcd"));
/// assert_eq!(frame.len(), 46);
/// assert_eq!(frame[12..14], [0x08, 0x00]);
/// ```
pub fn ethernet_frame(packet: &[u8]) -> Vec<u8> {
    let ethertype: [u8; 2] = match packet.first().map(|b| b >> 4) {
        Some(6) => [0x86, 0xdd],
        _ => [0x08, 0x00],
    };
    let mut frame = Vec::with_capacity(14 + packet.len());
    // Destination and source MAC: locally administered, unicast.
    frame.extend_from_slice(&[0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2]);
    frame.extend_from_slice(&ethertype);
    frame.extend_from_slice(packet);
    frame
}
