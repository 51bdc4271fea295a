use super::*;
use http::Request;
use std::net::IpAddr;

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

#[test]
fn client_keys_print_apart_for_a_store() {
    use super::ClientKey;
    let ip = ClientKey::Ip("2001:db8::1".parse().unwrap());
    let opaque = ClientKey::Opaque(b"_hidden 1%"[..].into());
    assert_eq!(ip.to_string(), "2001:db8::1");
    assert_eq!(opaque.to_string(), "opaque:_hidden%201%25");
    assert_eq!(ClientKey::Overlong.to_string(), "overlong");
}

#[test]
fn a_header_key_and_an_address_never_share_a_key() {
    use super::{HeaderKey, KeyExtractor, OrKey, PeerIp};
    use std::net::SocketAddr;
    let key = HeaderKey::new(http::HeaderName::from_static("x-api-key")).or(PeerIp::new());
    let mut spoof = Request::builder()
        .header("x-api-key", "10.0.0.1")
        .body(())
        .unwrap();
    let mut plain = Request::new(());
    for r in [&mut spoof, &mut plain] {
        r.extensions_mut()
            .insert("10.0.0.1:1234".parse::<SocketAddr>().unwrap());
    }
    let (a, b) = (key.extract(&spoof).unwrap(), key.extract(&plain).unwrap());
    assert_eq!(a, OrKey::First("10.0.0.1".to_owned()));
    assert_eq!(b, OrKey::Then("10.0.0.1".parse().unwrap()));
    assert_ne!(a.to_string(), b.to_string());
    // Missing, empty, overlong and non-ASCII values are no key: the
    // fallback decides.
    let long = "k".repeat(HeaderKey::MAX_LEN + 1);
    for value in ["", "  ", long.as_str()] {
        let mut r = Request::builder()
            .header("x-api-key", value)
            .body(())
            .unwrap();
        r.extensions_mut()
            .insert("10.0.0.2:1".parse::<SocketAddr>().unwrap());
        assert!(matches!(key.extract(&r), Some(OrKey::Then(_))), "{value:?}");
    }
}
