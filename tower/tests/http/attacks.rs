//! Hostile header values at every key extractor, over real loopback HTTP
//! (an axum server served as the docs say, a client writing raw bytes).
//!
//! What must hold for each: the server answers (never a panic, never a
//! bare 500); a client cannot leave its own key by what it writes (after
//! its one allowed request, every attack is refused); it cannot land on
//! another's (the proxy's own key, and an honest client's, stay untouched);
//! and a request with no key gets the documented refusal.
#![cfg(all(feature = "axum", not(loom)))]

use crate::http_loopback;

use axum::Router;
use axum::routing::get;
use http::StatusCode;
use http_loopback::{Answer, fetch, fetch_with, serve};
use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroU32;
use weir_rate::{Gcra, KeyedLimiter, Quota};
use weir_tower::{
    ClientKey, ForwardedHeader, ForwardedIp, GlobalKey, InflightLayer, KeyExtractor, KeyFn, PeerIp,
    RateLimitLayer,
};

/// Header values a client can write: bytes HTTP allows in a field value
/// (visible ASCII, space, tab, and obs-text 0x80–0xFF), chosen to break
/// parsers, impersonate a trusted proxy or another client, or make fresh keys.
fn hostile_values() -> Vec<Vec<u8>> {
    let mut values: Vec<Vec<u8>> = [
        &b"\xff"[..],
        b"\x80\x81\xfe",
        b"\xff, \xfe",
        b"\"",
        b"\"\xff, 6.6.6.6",
        b"\\",
        b"for=\"",
        b"for=\"\\",
        b"for=unknown",
        b"For=_hidden;for=6.6.6.6",
        b"unknown",
        b"_hidden",
        b"[::1",
        b"[::1]:99999999",
        b"1.2.3.4:99999999",
        b"1.2.3.4:",
        b"fe80::1%eth0",
        b"127.0.0.1",
        b"::ffff:127.0.0.1",
        b"[::ffff:127.0.0.1]:80",
        b"for=\"[::ffff:127.0.0.1]:80\"",
        b"\t 198.51.100.9 \t",
        b"198.51.100.9",
        b"for=198.51.100.9",
        b"2001:db8::1",
        b"",
        b" , ,, ",
        b";;;===",
        b"for=\"a,b;c\\\"d\"",
    ]
    .iter()
    .map(|v| v.to_vec())
    .collect();
    values.push(vec![b','; 4096]);
    values.push(vec![b'a'; 100]);
    values.push(b"127.0.0.2, ".repeat(200));
    values.push(b"for=127.0.0.2, ".repeat(200));
    values.push((0x80..=0xffu8).collect());
    values
}

/// The header names a hostile client writes its values into.
const NAMES: [&str; 4] = ["x-forwarded-for", "forwarded", "x-real-ip", "x-api-key"];

/// The extra header lines of one attack: `value` in `name`, then what a
/// proxy appends (if anything), possibly as a line of its own.
fn lines(name: &str, value: &[u8], appended: Option<&[u8]>, own_line: bool) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    match appended {
        Some(entry) if own_line => {
            out.extend_from_slice(b"\r\n");
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(entry);
        }
        Some(entry) => {
            out.extend_from_slice(b", ");
            out.extend_from_slice(entry);
        }
        None => {}
    }
    out.extend_from_slice(b"\r\n");
    out
}

fn hello() -> Router {
    Router::new().route("/", get(|| async { "hello" }))
}

/// One request a minute per key, and at most 4 in flight per key.
fn guarded<X>(extractor: X) -> Router
where
    X: KeyExtractor<axum::body::Body>,
{
    let limiter =
        KeyedLimiter::<X::Key, _>::new(Gcra::new(Quota::per_minute(NonZeroU32::new(1).unwrap())));
    hello().layer(
        tower::ServiceBuilder::new()
            .layer(RateLimitLayer::new(limiter, extractor.clone()))
            .layer(InflightLayer::new(extractor, 4)),
    )
}

/// What every answer must be: allowed, refused by the limit, or the
/// documented no-key refusal, never anything else.
fn assert_documented(answer: &Answer, attack: &[u8]) {
    match answer.status {
        200 | 429 => {}
        500 => assert!(
            answer
                .header("x-ratelimit-error")
                .is_some_and(|v| v.starts_with("no-key")),
            "a bare 500 for {attack:?}: {}",
            answer.head
        ),
        other => panic!("status {other} for {attack:?}: {}", answer.head),
    }
}

/// Sends every attack with `appended` after it, counting them; each must
/// be refused (its key already spent) and documented.
async fn attack_all(addr: SocketAddr, names: &[&str], appended: Option<&[u8]>) -> usize {
    let mut tried = 0;
    for name in names {
        for value in hostile_values() {
            for own_line in [false, true] {
                let attack = lines(name, &value, appended, own_line);
                let answer = fetch_with(addr, &attack).await;
                assert_documented(&answer, &attack);
                assert_eq!(
                    answer.status,
                    429,
                    "escaped its key with {:?}: {}",
                    String::from_utf8_lossy(&attack),
                    answer.head
                );
                tried += 1;
            }
        }
    }
    tried
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn peer_ip_ignores_every_header() {
    let addr = serve(guarded(PeerIp::new())).await;
    assert_eq!(fetch(addr).await.status, 200);
    let tried = attack_all(addr, &NAMES, None).await;
    assert!(tried > 250, "{tried}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn forwarded_for_keys_the_appended_client_whatever_it_wrote() {
    // The test client plays a trusted proxy on loopback that appends the
    // client it saw, 198.51.100.4, after whatever that client wrote.
    let proxies = ForwardedIp::trusting(["127.0.0.0/8".parse().unwrap()]);
    let addr = serve(guarded(proxies)).await;
    let client = b"198.51.100.4:5555";
    let first = fetch_with(addr, &lines("x-forwarded-for", client, None, false)).await;
    assert_eq!(first.status, 200, "{}", first.head);
    attack_all(addr, &["x-forwarded-for"], Some(client)).await;
    // Headers the proxy does not write are not read: still the proxy's key.
    assert_eq!(fetch(addr).await.status, 200, "the proxy's own key");
    attack_all(addr, &["forwarded", "x-real-ip", "x-api-key"], None).await;
    // An honest client behind the same proxy was never touched.
    let honest = fetch_with(
        addr,
        &lines("x-forwarded-for", b"198.51.100.7", None, false),
    )
    .await;
    assert_eq!(honest.status, 200, "{}", honest.head);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn rfc_7239_forwarded_keys_the_appended_client_whatever_it_wrote() {
    let proxies =
        ForwardedIp::trusting(["127.0.0.0/8".parse().unwrap()]).reading(ForwardedHeader::Forwarded);
    let addr = serve(guarded(proxies)).await;
    let client = b"for=\"[2001:db8:1:2::9]:4711\";proto=http";
    let first = fetch_with(addr, &lines("forwarded", client, None, false)).await;
    assert_eq!(first.status, 200, "{}", first.head);
    attack_all(addr, &["forwarded"], Some(client)).await;
    assert_eq!(fetch(addr).await.status, 200, "the proxy's own key");
    attack_all(addr, &["x-forwarded-for", "x-real-ip", "x-api-key"], None).await;
    let honest = fetch_with(addr, &lines("forwarded", b"for=198.51.100.7", None, false)).await;
    assert_eq!(honest.status, 200, "{}", honest.head);
}

/// With nothing appended (a trusted proxy that passes the header through,
/// which hands the key to the client and is a misconfiguration), each
/// hostile value still gets one key, not a fresh one per request: a repeat
/// is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn forwarded_values_alone_never_drain_the_proxys_key() {
    for header in [ForwardedHeader::XForwardedFor, ForwardedHeader::Forwarded] {
        let proxies = ForwardedIp::trusting(["127.0.0.0/8".parse().unwrap()]).reading(header);
        let name = match header {
            ForwardedHeader::Forwarded => "forwarded",
            _ => "x-forwarded-for",
        };
        let addr = serve(guarded(proxies)).await;
        for value in hostile_values() {
            let attack = lines(name, &value, None, false);
            let first = fetch_with(addr, &attack).await;
            assert_documented(&first, &attack);
            let again = fetch_with(addr, &attack).await;
            assert_eq!(
                again.status, 429,
                "a repeat of {:?} was let through",
                attack
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn a_header_key_function_refuses_what_it_cannot_read_as_documented() {
    let by_api_key = KeyFn::new(|req: &http::Request<axum::body::Body>| {
        req.headers()
            .get("x-api-key")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    });
    let limiter =
        KeyedLimiter::<String, _>::new(Gcra::new(Quota::per_minute(NonZeroU32::new(1).unwrap())));
    let app = hello().layer(
        RateLimitLayer::new(limiter, by_api_key).missing_key_status(StatusCode::BAD_REQUEST),
    );
    let addr = serve(app).await;
    for value in hostile_values() {
        let attack = lines("x-api-key", &value, None, false);
        let answer = fetch_with(addr, &attack).await;
        let readable = std::str::from_utf8(&value).is_ok();
        match answer.status {
            200 | 429 => assert!(readable, "{attack:?} keyed though unreadable"),
            400 => {
                assert!(!readable, "{attack:?} refused though readable");
                assert!(
                    answer.header("x-ratelimit-error").is_some(),
                    "{}",
                    answer.head
                );
            }
            other => panic!("status {other} for {attack:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn a_global_key_counts_every_attack() {
    let addr = serve(guarded(GlobalKey)).await;
    assert_eq!(fetch(addr).await.status, 200);
    attack_all(addr, &NAMES, None).await;
}

/// The keys the extractors give for the attacks alone, in process: opaque
/// keys never exceed their bound, and only values with no entry but
/// trusted addresses (a request a proxy sent itself) get the peer's key.
#[test]
fn opaque_keys_stay_bounded() {
    let trusted: [&[u8]; 3] = [b"127.0.0.1", b"::ffff:127.0.0.1", b"[::ffff:127.0.0.1]:80"];
    let trusted_only = |value: &[u8]| {
        value.split(|&b| b == b',').all(|entry| {
            let entry = entry.trim_ascii();
            entry.is_empty() || trusted.contains(&entry)
        })
    };
    let proxies = ForwardedIp::trusting(["127.0.0.0/8".parse().unwrap()]);
    for value in hostile_values() {
        let mut req = http::Request::builder()
            .header(
                "x-forwarded-for",
                http::HeaderValue::from_bytes(&value).unwrap(),
            )
            .body(())
            .unwrap();
        req.extensions_mut()
            .insert("127.0.0.1:443".parse::<SocketAddr>().unwrap());
        match proxies.extract(&req) {
            Some(ClientKey::Opaque(bytes)) => assert!(bytes.len() <= ClientKey::MAX_OPAQUE),
            Some(ClientKey::Ip(ip)) if ip == "127.0.0.1".parse::<IpAddr>().unwrap() => {
                let shown = String::from_utf8_lossy(&value[..value.len().min(80)]).into_owned();
                assert!(trusted_only(&value), "{shown:?} keyed as the peer");
            }
            Some(_) => {}
            None => panic!("no key for {value:?}"),
        }
    }
}
