//! `ForwardedIp` reads the client a trusted proxy reports, in every form
//! proxies write it, and never lets the client choose its key: what the
//! client wrote (left of the entry the outermost trusted proxy appended)
//! never changes the key, and a request is never keyed as the proxy when a
//! client entry exists.
#![cfg(not(loom))]

use http::Request;
use proptest::prelude::*;
use std::net::IpAddr;
use weir_tower::{ClientKey, ForwardedHeader, ForwardedIp, IpNet, KeyExtractor, PeerAddr, PeerIp};

const PROXY: &str = "10.0.0.1:443";

fn request(peer: &str, name: &str, values: &[&[u8]]) -> Request<()> {
    let mut builder = Request::builder();
    for value in values {
        builder = builder.header(name, http::HeaderValue::from_bytes(value).unwrap());
    }
    let mut req = builder.body(()).unwrap();
    req.extensions_mut().insert(PeerAddr(peer.parse().unwrap()));
    req
}

fn ip(s: &str) -> ClientKey {
    ClientKey::Ip(s.parse().unwrap())
}

fn opaque(bytes: &[u8]) -> ClientKey {
    ClientKey::Opaque(bytes.into())
}

fn xff() -> ForwardedIp {
    ForwardedIp::trusting(["10.0.0.0/8".parse().unwrap()])
}

fn forwarded() -> ForwardedIp {
    xff().reading(ForwardedHeader::Forwarded)
}

#[test]
fn a_non_visible_byte_left_of_the_client_does_not_key_it_as_the_proxy() {
    // Before: `to_str()` failed on the whole line and the request was keyed
    // as the proxy, 10.0.0.1.
    let req = request(PROXY, "x-forwarded-for", &[b"\xff, 198.51.100.4"]);
    assert_eq!(xff().extract(&req), Some(ip("198.51.100.4")));
}

#[test]
fn ports_written_by_proxies_are_not_the_proxy_key() {
    // Before: `ip:port` did not parse as an address and the request was
    // keyed as the proxy.
    let req = request(PROXY, "x-forwarded-for", &[b"198.51.100.4:5555"]);
    assert_eq!(xff().extract(&req), Some(ip("198.51.100.4")));
    let req = request(PROXY, "x-forwarded-for", &[b"[2001:db8:1:2::9]:5555"]);
    assert_eq!(xff().extract(&req), Some(ip("2001:db8:1:2::")));
}

/// Every form, one row each: the header lines and the key they must give.
#[test]
fn every_form_proxies_write() {
    let long = [b'x'; ClientKey::MAX_OPAQUE + 1];
    let longest = [b'x'; ClientKey::MAX_OPAQUE];
    let xff_rows: &[(&[&[u8]], ClientKey)] = &[
        (&[b"198.51.100.4"], ip("198.51.100.4")),
        (&[b"  198.51.100.4\t"], ip("198.51.100.4")),
        (&[b"198.51.100.4:5555"], ip("198.51.100.4")),
        (&[b"198.51.100.4:_obf"], ip("198.51.100.4")),
        (&[b"[2001:db8:1:2::9]"], ip("2001:db8:1:2::")),
        (&[b"[2001:db8:1:2::9]:5555"], ip("2001:db8:1:2::")),
        (&[b"2001:db8:1:2::9"], ip("2001:db8:1:2::")),
        (&[b"\"[2001:db8:1:2::9]:5555\""], ip("2001:db8:1:2::")),
        (&[b"::ffff:198.51.100.4"], ip("198.51.100.4")),
        (&[b"\xff, 198.51.100.4"], ip("198.51.100.4")),
        (&[b"\xff\xfe\x80", b"198.51.100.4"], ip("198.51.100.4")),
        (&[b"6.6.6.6, 198.51.100.4, 10.1.2.3"], ip("198.51.100.4")),
        (
            &[b"6.6.6.6", b"198.51.100.4", b"10.1.2.3:80"],
            ip("198.51.100.4"),
        ),
        (&[b"198.51.100.4, [::ffff:10.2.3.4]:80"], ip("198.51.100.4")),
        (&[b", ,198.51.100.4,,  ,"], ip("198.51.100.4")),
        (&[b"198.51.100.4", b""], ip("198.51.100.4")),
        (&[b"10.9.9.9, 10.1.1.1"], ip("10.9.9.9")),
        (&[], ip("10.0.0.1")),
        (&[b"unknown"], opaque(b"unknown")),
        (&[b"6.6.6.6, _hidden, 10.1.2.3"], opaque(b"_hidden")),
        (&[b"1.1.1.1, not-an-ip"], opaque(b"not-an-ip")),
        (
            &[b"198.51.100.4:99999999"],
            opaque(b"198.51.100.4:99999999"),
        ),
        (&[b"198.51.100.4:"], opaque(b"198.51.100.4:")),
        (&[b"[2001:db8::1"], opaque(b"[2001:db8::1")),
        (&[b"[198.51.100.4]"], opaque(b"[198.51.100.4]")),
        (&[b"fe80::1%eth0"], opaque(b"fe80::1%eth0")),
        (&[b"198.51.100.4 6.6.6.6"], opaque(b"198.51.100.4 6.6.6.6")),
        (&[b"\xff"], opaque(b"\xff")),
        (&[&longest], opaque(&longest)),
        (&[&long], ClientKey::Overlong),
    ];
    for (lines, key) in xff_rows {
        let req = request(PROXY, "x-forwarded-for", lines);
        assert_eq!(
            xff().extract(&req).as_ref(),
            Some(key),
            "X-Forwarded-For {lines:?}"
        );
    }
    let forwarded_rows: &[(&[&[u8]], ClientKey)] = &[
        (&[b"for=198.51.100.4"], ip("198.51.100.4")),
        (&[b"for=\"198.51.100.4:5555\""], ip("198.51.100.4")),
        (&[b"For=\"[2001:db8:1:2::9]:4711\""], ip("2001:db8:1:2::")),
        (&[b"FOR=\"[2001:db8:1:2::9]\""], ip("2001:db8:1:2::")),
        (&[b"for=\"[2001:db8:1:2::9]:_port\""], ip("2001:db8:1:2::")),
        (&[b"for = 198.51.100.4 "], ip("198.51.100.4")),
        (
            &[b"proto=https;for=198.51.100.4;host=\"a,b;c\""],
            ip("198.51.100.4"),
        ),
        (
            &[b"for=6.6.6.6, for=198.51.100.4;proto=https;by=10.0.0.1"],
            ip("198.51.100.4"),
        ),
        (&[b"for=198.51.100.4, for=10.1.2.3"], ip("198.51.100.4")),
        (
            &[
                b"for=6.6.6.6",
                b"for=198.51.100.4",
                b"for=\"[::ffff:10.1.2.3]\"",
            ],
            ip("198.51.100.4"),
        ),
        (&[b"for=\"\xff\", for=198.51.100.4"], ip("198.51.100.4")),
        // The client opened a quote the proxy's entry must not fall into.
        (&[b"for=\"a, for=198.51.100.4"], ip("198.51.100.4")),
        (
            &[b"for=a\\, for=\"[2001:db8:1:2::9]\""],
            ip("2001:db8:1:2::"),
        ),
        (&[b"for=198.51.100.4,"], ip("198.51.100.4")),
        (&[b"for=10.9.9.9, for=10.1.1.1"], ip("10.9.9.9")),
        (&[b"for=_hidden"], opaque(b"_hidden")),
        (&[b"for=\"_hidden\""], opaque(b"_hidden")),
        (&[b"for=unknown"], opaque(b"unknown")),
        (&[b"for=\"a\\\"b\""], opaque(b"a\"b")),
        (&[b"proto=https"], opaque(b"proto=https")),
        (
            &[b"for=198.51.100.4;for=6.6.6.6"],
            opaque(b"for=198.51.100.4;for=6.6.6.6"),
        ),
        (&[b"for=\"[2001:db8::1]:80"], opaque(b"\"[2001:db8::1]:80")),
    ];
    for (lines, key) in forwarded_rows {
        let req = request(PROXY, "forwarded", lines);
        assert_eq!(
            forwarded().extract(&req).as_ref(),
            Some(key),
            "Forwarded {lines:?}"
        );
    }
}

#[test]
fn only_the_configured_header_is_read() {
    // The client wrote the header the proxies do not: it is never read.
    let req = request(PROXY, "forwarded", &[b"for=6.6.6.6"]);
    assert_eq!(xff().extract(&req), Some(ip("10.0.0.1")));
    let req = request(PROXY, "x-forwarded-for", &[b"6.6.6.6"]);
    assert_eq!(forwarded().extract(&req), Some(ip("10.0.0.1")));
}

#[test]
fn untrusted_peers_are_keyed_by_their_address_whatever_they_write() {
    for (name, value) in [
        ("x-forwarded-for", &b"198.51.100.4"[..]),
        ("forwarded", b"for=198.51.100.4"),
        ("x-forwarded-for", b"\xff"),
    ] {
        let req = request("203.0.113.9:1000", name, &[value]);
        assert_eq!(xff().extract(&req), Some(ip("203.0.113.9")));
        assert_eq!(forwarded().extract(&req), Some(ip("203.0.113.9")));
        assert_eq!(
            PeerIp::new().extract(&req),
            Some("203.0.113.9".parse().unwrap())
        );
    }
}

/// Bytes a client may put in a header value (HTTP forbids controls but tab),
/// weighted towards the ones the parsers care about.
fn hostile_bytes() -> impl Strategy<Value = Vec<u8>> {
    let piece = prop_oneof![
        Just(b",".to_vec()),
        Just(b";".to_vec()),
        Just(b"=".to_vec()),
        Just(b"\"".to_vec()),
        Just(b"\\".to_vec()),
        Just(b"[".to_vec()),
        Just(b"]".to_vec()),
        Just(b":".to_vec()),
        Just(b" ".to_vec()),
        Just(b"\t".to_vec()),
        Just(b"for=".to_vec()),
        Just(b"For=\"".to_vec()),
        Just(b"unknown".to_vec()),
        Just(b"_hidden".to_vec()),
        Just(b"10.0.0.1".to_vec()),
        Just(b"10.1.2.3:80".to_vec()),
        Just(b"[::ffff:10.0.0.1]".to_vec()),
        Just(b"6.6.6.6".to_vec()),
        Just(b"2001:db8::1".to_vec()),
        (0x80u8..=0xff).prop_map(|b| vec![b]),
        (0x20u8..0x7f).prop_map(|b| vec![b]),
    ];
    prop::collection::vec(piece, 0..24).prop_map(|pieces| pieces.concat())
}

/// A client address and the ways a proxy may write it.
fn client_entry() -> impl Strategy<Value = (IpAddr, String, String)> {
    let v4 = any::<[u8; 4]>().prop_map(IpAddr::from);
    let v6 = any::<[u8; 16]>().prop_map(IpAddr::from);
    (prop_oneof![v4, v6], 0..4usize, any::<u16>(), 0..3usize).prop_map(
        |(addr, form, port, space)| {
            let pad = [" ", "", "\t"][space];
            let (xff, node) = match (addr, form) {
                (IpAddr::V4(a), 0 | 2) => (a.to_string(), a.to_string()),
                (IpAddr::V4(a), _) => (format!("{a}:{port}"), format!("\"{a}:{port}\"")),
                (IpAddr::V6(a), 0) => (a.to_string(), format!("\"[{a}]\"")),
                (IpAddr::V6(a), 1) => (format!("[{a}]"), format!("\"[{a}]\"")),
                (IpAddr::V6(a), _) => (format!("[{a}]:{port}"), format!("\"[{a}]:{port}\"")),
            };
            let fwd = [
                format!("for={node}"),
                format!("proto=https;For={node}"),
                format!("FOR={node};by=_proxy;host=\"x,y\""),
            ][usize::from(port % 3)]
            .clone();
            (addr, format!("{pad}{xff}{pad}"), format!("{pad}{fwd}{pad}"))
        },
    )
}

fn trusted_hops() -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec(
        prop_oneof![
            Just("10.1.2.3".to_string()),
            Just("10.200.0.9:8080".to_string()),
            Just("[::ffff:10.0.0.7]".to_string()),
        ],
        0..3,
    )
}

fn expected(addr: IpAddr) -> ClientKey {
    ClientKey::Ip(PeerIp::new().key_for(addr))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Whatever the client wrote, and however the proxies split their
    /// entries into lines, the key is the address the outermost trusted
    /// proxy appended: never the proxy's, never one the client chose.
    #[test]
    fn what_the_client_wrote_never_changes_its_key(
        garbage in hostile_bytes(),
        (addr, xff_entry, fwd_entry) in client_entry(),
        hops in trusted_hops(),
        split in any::<bool>(),
    ) {
        prop_assume!(!"10.0.0.0/8".parse::<IpNet>().unwrap().contains(addr));
        for (name, entry, x, hop_of) in [
            ("x-forwarded-for", &xff_entry, xff(), (|h: &String| h.clone()) as fn(&String) -> String),
            ("forwarded", &fwd_entry, forwarded(), |h: &String| {
                if h.starts_with('[') || h.contains(':') { format!("for=\"{h}\"") } else { format!("for={h}") }
            }),
        ] {
            let mut appended = vec![entry.clone()];
            appended.extend(hops.iter().map(hop_of));
            let lines: Vec<Vec<u8>> = if split {
                let mut lines = vec![garbage.clone()];
                lines.extend(appended.iter().map(|e| e.clone().into_bytes()));
                lines
            } else {
                let mut line = garbage.clone();
                line.extend_from_slice(b", ");
                line.extend_from_slice(appended.join(", ").as_bytes());
                vec![line]
            };
            let lines: Vec<&[u8]> = lines.iter().map(Vec::as_slice).collect();
            let req = request(PROXY, name, &lines);
            prop_assert_eq!(x.extract(&req), Some(expected(addr)), "{} {:?}", name, lines);
        }
    }

    /// Any bytes at all: a key, never a panic; an entry the outermost
    /// proxy appends in place of an address is the key; and the proxy's
    /// key only when every entry could be a trusted address.
    #[test]
    fn any_bytes_give_a_key_without_panicking(
        lines in prop::collection::vec(hostile_bytes(), 0..4),
        proxy_appends_unknown in any::<bool>(),
    ) {
        for (name, x, unknown) in [
            ("x-forwarded-for", xff(), &b"unknown"[..]),
            ("forwarded", forwarded(), b"for=unknown"),
        ] {
            let mut lines = lines.clone();
            if proxy_appends_unknown {
                lines.push(unknown.to_vec());
            }
            let lines: Vec<&[u8]> = lines.iter().map(Vec::as_slice).collect();
            let key = x.extract(&request(PROXY, name, &lines));
            if proxy_appends_unknown {
                prop_assert_eq!(key, Some(opaque(b"unknown")));
            } else if name == "x-forwarded-for" {
                let trusted: IpNet = "10.0.0.0/8".parse().unwrap();
                if matches!(key, Some(ClientKey::Ip(ip)) if trusted.contains(ip)) {
                    let text = lines.concat();
                    // Addresses, ports, and RFC 7239's obfuscated port names
                    // (`_hidden`) after a trusted address.
                    let could_be_trusted = text
                        .iter()
                        .all(|b| b.is_ascii_alphanumeric() || b".:[]\", \t_-".contains(b));
                    let names_another = [&b"6.6.6.6"[..], b"2001:db8::1"]
                        .iter()
                        .any(|other| text.windows(other.len()).any(|w| w == *other));
                    prop_assert!(could_be_trusted && !names_another, "{:?} gave {:?}", lines, key);
                }
            } else {
                prop_assert!(key.is_some());
            }
        }
    }
}
