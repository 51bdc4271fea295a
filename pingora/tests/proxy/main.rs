//! weir-pingora in a real pingora server, in front of a loopback origin,
//! spoken to over TCP: limits, refusals on a kept-alive connection, keys,
//! and in-flight permits released whatever happens to the request.

use async_trait::async_trait;
use pingora::http::ResponseHeader;
use pingora::prelude::*;
use pingora::proxy::{ProxyHttp, Session, http_proxy_service};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use weir_adaptive::clock::Timestamp;
use weir_adaptive::{Algorithm, KeyedAdaptiveLimiter, Outcome, Sample};
use weir_pingora::{
    AdaptivePermit, ClientIp, ForwardedIp, HeaderKey, Passage, RateLimit, RequestKey,
    UpstreamAdaptive, UpstreamInflight, UpstreamPermit,
};
use weir_rate::{Gcra, KeyedLimiter, Quota, SettleKey, nonzero};

mod settle;
mod shared;

/// A loopback origin, answering on a kept-alive connection: `/busy` a
/// 503; `/bytes/N` a body of N bytes; `/cost/N` a 200 with `x-cost: N`;
/// anything else 200 `ok`, after 300 ms for a path starting `/slow`.
fn origin() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut stream = stream;
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    let path = line.split_whitespace().nth(1).unwrap_or("/").to_owned();
                    let slow = path.starts_with("/slow");
                    loop {
                        let mut header = String::new();
                        if reader.read_line(&mut header).unwrap_or(0) == 0 {
                            return;
                        }
                        if header == "\r\n" {
                            break;
                        }
                    }
                    if slow {
                        std::thread::sleep(Duration::from_millis(300));
                    }
                    if stream.write_all(&answer(&path)).is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

/// The origin's response to `path`.
fn answer(path: &str) -> Vec<u8> {
    if path == "/busy" {
        return b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 2\r\n\r\nno".to_vec();
    }
    if let Some(n) = path.strip_prefix("/bytes/") {
        let n: usize = n.parse().unwrap();
        let mut response = format!("HTTP/1.1 200 OK\r\nContent-Length: {n}\r\n\r\n").into_bytes();
        response.resize(response.len() + n, b'x');
        return response;
    }
    if let Some(cost) = path.strip_prefix("/cost/") {
        return format!("HTTP/1.1 200 OK\r\nx-cost: {cost}\r\nContent-Length: 2\r\n\r\nok")
            .into_bytes();
    }
    b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".to_vec()
}

/// What the test proxy keeps per request.
#[derive(Default)]
struct Ctx {
    passage: Passage,
    permit: Option<UpstreamPermit>,
    learned: Option<AdaptivePermit<Recorder>>,
}

struct Proxy<K, L = KeyedLimiter<String, Gcra>> {
    origin: SocketAddr,
    rate: RateLimit<L, K>,
    upstream: Arc<UpstreamInflight>,
    adaptive: Option<UpstreamAdaptive<Recorder>>,
}

/// An adaptive algorithm of a constant limit of 2 that keeps what it was
/// taught (clones share the record).
#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<Outcome>>>);

impl Algorithm for Recorder {
    fn limit(&self) -> u32 {
        2
    }

    fn update<C>(&mut self, _: Timestamp<C>, sample: Sample) {
        self.0.lock().unwrap().push(sample.outcome);
    }
}

#[async_trait]
impl<K: RequestKey, L: SettleKey<str>> ProxyHttp for Proxy<K, L> {
    type CTX = Ctx;

    fn new_ctx(&self) -> Ctx {
        Ctx::default()
    }

    async fn request_filter(&self, session: &mut Session, ctx: &mut Ctx) -> Result<bool> {
        self.rate.request_filter(session, &mut ctx.passage).await
    }

    async fn upstream_peer(&self, _: &mut Session, ctx: &mut Ctx) -> Result<Box<HttpPeer>> {
        let peer = HttpPeer::new(self.origin, false, String::new());
        ctx.permit = Some(self.upstream.acquire(&peer)?);
        if let Some(adaptive) = &self.adaptive {
            ctx.learned = Some(adaptive.acquire(&peer)?);
        }
        Ok(Box::new(peer))
    }

    async fn logging(&self, session: &mut Session, error: Option<&Error>, ctx: &mut Ctx) {
        self.rate.logging(session, error, &mut ctx.passage);
        if let Some(learned) = ctx.learned.take() {
            learned.finish(session, error);
        }
    }

    async fn response_filter(
        &self,
        _: &mut Session,
        response: &mut ResponseHeader,
        ctx: &mut Ctx,
    ) -> Result<()> {
        self.rate.response_filter(response, &mut ctx.passage)
    }
}

/// A pingora server with `proxy` on a free loopback port, started on a
/// thread of its own (it runs until the test process ends).
fn serve<K: RequestKey, L: SettleKey<str>>(proxy: Proxy<K, L>) -> SocketAddr {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    std::thread::spawn(move || {
        let mut server = Server::new(None).unwrap();
        server.bootstrap();
        let mut service = http_proxy_service(&server.configuration, proxy);
        service.add_tcp(&addr.to_string());
        server.add_service(service);
        server.run_forever();
    });
    let start = Instant::now();
    while TcpStream::connect(addr).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the proxy did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    addr
}

/// One response: its status and headers (names lower-cased).
struct Response {
    status: u16,
    headers: Vec<(String, String)>,
}

impl Response {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Sends `GET path` with `extra` header lines on `conn` and reads the
/// response (headers and a Content-Length body).
fn get(conn: &mut BufReader<TcpStream>, path: &str, extra: &str) -> Response {
    let request = format!("GET {path} HTTP/1.1\r\nHost: test\r\n{extra}\r\n");
    send(conn, request.as_bytes())
}

/// Sends the raw `request` on `conn` and reads the response.
fn send(conn: &mut BufReader<TcpStream>, request: &[u8]) -> Response {
    conn.get_mut().write_all(request).unwrap();
    let mut status_line = String::new();
    conn.read_line(&mut status_line).unwrap();
    let status = status_line
        .split_whitespace()
        .nth(1)
        .expect("a status line")
        .parse()
        .unwrap();
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        conn.read_line(&mut line).unwrap();
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        let (name, value) = line.split_once(':').unwrap();
        headers.push((name.to_ascii_lowercase(), value.trim().to_owned()));
    }
    let length: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .map_or(0, |(_, v)| v.parse().unwrap());
    let mut body = vec![0; length];
    conn.read_exact(&mut body).unwrap();
    Response { status, headers }
}

fn connect(addr: SocketAddr) -> BufReader<TcpStream> {
    let stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    BufReader::new(stream)
}

fn three_a_minute() -> KeyedLimiter<String, Gcra> {
    KeyedLimiter::new(Gcra::new(Quota::per_minute(nonzero!(3))))
}

/// A proxy before a fresh origin limiting each `key` to three a minute,
/// named `policy`, with room for 100 requests in flight to the origin.
fn limited<K: RequestKey>(key: K, policy: &str) -> Proxy<K> {
    Proxy {
        origin: origin(),
        rate: RateLimit::new(key, three_a_minute(), policy),
        upstream: Arc::new(UpstreamInflight::new(100)),
        adaptive: None,
    }
}

/// Two slow requests through `proxy` hold an upstream limit of 2 (as
/// `in_flight` counts them); a third request meanwhile gets a 503, and
/// the two slow ones their 200s.
fn two_slow_then_a_refusal(proxy: SocketAddr, in_flight: impl Fn() -> usize) {
    let slow: Vec<_> = (0..2)
        .map(|_| std::thread::spawn(move || get(&mut connect(proxy), "/slow", "").status))
        .collect();
    let start = Instant::now();
    while in_flight() < 2 {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "the slow requests never reached the origin"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(get(&mut connect(proxy), "/", "").status, 503);
    for request in slow {
        assert_eq!(request.join().unwrap(), 200);
    }
}

#[test]
fn the_first_three_pass_then_429s_with_the_fields_on_one_connection() {
    let proxy = serve(limited(ClientIp::new(), "per-ip"));
    let mut conn = connect(proxy);
    for i in 0..3 {
        let response = get(&mut conn, "/", "");
        assert_eq!(response.status, 200, "request {i}");
        assert_eq!(
            response.header("ratelimit-policy"),
            Some("\"per-ip\";q=3;w=60")
        );
        assert!(
            response
                .header("ratelimit")
                .is_some_and(|v| v.starts_with("\"per-ip\";r="))
        );
    }
    for _ in 0..2 {
        let refused = get(&mut conn, "/", "");
        assert_eq!(refused.status, 429);
        let retry: u64 = refused.header("retry-after").unwrap().parse().unwrap();
        assert!((1..=20).contains(&retry), "retry after {retry} s");
        assert_eq!(
            refused.header("ratelimit-policy"),
            Some("\"per-ip\";q=3;w=60")
        );
        assert!(
            refused
                .header("ratelimit")
                .is_some_and(|v| v.contains(";r=0"))
        );
        assert_ne!(refused.header("connection"), Some("close"));
    }
}

#[test]
fn a_header_key_counts_each_value_apart_and_falls_back_to_the_address() {
    let proxy = serve(limited(
        HeaderKey::new("x-api-key").or(ClientIp::new()),
        "per-key",
    ));
    let mut conn = connect(proxy);
    for key in ["x-api-key: alice\r\n", "x-api-key: bob\r\n", ""] {
        let statuses: Vec<u16> = (0..4).map(|_| get(&mut conn, "/", key).status).collect();
        assert_eq!(statuses, [200, 200, 200, 429], "{key:?}");
    }
}

#[test]
fn an_upstream_at_its_limit_gets_503_and_its_permits_come_back() {
    let upstream = Arc::new(UpstreamInflight::new(2));
    let origin = origin();
    let proxy = serve(Proxy {
        origin,
        rate: RateLimit::new(
            ClientIp::new(),
            KeyedLimiter::new(Gcra::new(Quota::per_second(nonzero!(100_000)))),
            "per-ip",
        ),
        upstream: Arc::clone(&upstream),
        adaptive: None,
    });
    let peer = HttpPeer::new(origin, false, String::new());
    // Two slow requests hold the limit; a third is refused meanwhile.
    two_slow_then_a_refusal(proxy, || upstream.in_flight(&peer));
    wait_until_none_in_flight(|| upstream.in_flight(&peer));
    assert_eq!(get(&mut connect(proxy), "/", "").status, 200);
}

#[test]
fn a_thousand_cancelled_requests_leak_no_permit() {
    // Room for a whole batch, so that each cancelled request holds a permit
    // while its client hangs up (none is refused instead).
    let upstream = Arc::new(UpstreamInflight::new(100));
    let origin = origin();
    let proxy = serve(Proxy {
        origin,
        rate: RateLimit::new(
            ClientIp::new(),
            KeyedLimiter::new(Gcra::new(Quota::per_second(nonzero!(100_000)))),
            "per-ip",
        ),
        upstream: Arc::clone(&upstream),
        adaptive: None,
    });
    let peer = HttpPeer::new(origin, false, String::new());
    // 1,000 clients that hang up while their request is at the origin.
    for _ in 0..20 {
        wait_until_none_in_flight(|| upstream.in_flight(&peer));
        let clients: Vec<_> = (0..50)
            .map(|_| {
                let mut stream = TcpStream::connect(proxy).unwrap();
                stream
                    .write_all(b"GET /slow HTTP/1.1\r\nHost: test\r\n\r\n")
                    .unwrap();
                stream
            })
            .collect();
        let start = Instant::now();
        while upstream.in_flight(&peer) < 50 {
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "only {} of the batch reached the origin",
                upstream.in_flight(&peer)
            );
            std::thread::sleep(Duration::from_millis(2));
        }
        drop(clients);
    }
    // And 50 that hang up mid-response, the head read, the body streaming.
    for _ in 0..50 {
        let mut conn = connect(proxy);
        conn.get_mut()
            .write_all(b"GET /bytes/4000000 HTTP/1.1\r\nHost: test\r\n\r\n")
            .unwrap();
        let mut status = String::new();
        conn.read_line(&mut status).unwrap();
        assert!(status.starts_with("HTTP/1.1 200"), "{status}");
        drop(conn);
    }
    wait_until_none_in_flight(|| upstream.in_flight(&peer));
    assert_eq!(get(&mut connect(proxy), "/", "").status, 200);
}

/// Waits up to 10 s for `in_flight` to count nothing, and fails naming what
/// is left if it does not.
fn wait_until_none_in_flight(in_flight: impl Fn() -> usize) {
    let start = Instant::now();
    while in_flight() > 0 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{} permits leaked",
            in_flight()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn the_adaptive_limit_learns_from_statuses_not_from_clients_gone() {
    let taught = Recorder::default();
    let adaptive = UpstreamAdaptive::new(KeyedAdaptiveLimiter::new(
        taught.clone(),
        NonZeroUsize::new(64).unwrap(),
    ));
    let origin = origin();
    let proxy = serve(Proxy {
        origin,
        rate: RateLimit::new(
            ClientIp::new(),
            KeyedLimiter::new(Gcra::new(Quota::per_second(nonzero!(100_000)))),
            "per-ip",
        ),
        upstream: Arc::new(UpstreamInflight::new(100)),
        adaptive: Some(adaptive.clone()),
    });
    let peer = HttpPeer::new(origin, false, String::new());
    let mut conn = connect(proxy);
    assert_eq!(get(&mut conn, "/", "").status, 200);
    assert_eq!(get(&mut conn, "/busy", "").status, 503);
    // Two slow requests hold the learned limit of 2: a third gets 503.
    two_slow_then_a_refusal(proxy, || adaptive.in_flight(&peer) as usize);
    // A client that hangs up while its request is at the origin.
    let mut gone = TcpStream::connect(proxy).unwrap();
    gone.write_all(b"GET /slow HTTP/1.1\r\nHost: test\r\n\r\n")
        .unwrap();
    std::thread::sleep(Duration::from_millis(50));
    drop(gone);
    let start = Instant::now();
    while adaptive.in_flight(&peer) > 0 || taught.0.lock().unwrap().len() < 5 {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "taught {:?}",
            taught.0.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let outcomes = taught.0.lock().unwrap().clone();
    assert_eq!(
        outcomes,
        [
            Outcome::Success,
            Outcome::Dropped,
            Outcome::Success,
            Outcome::Success,
            Outcome::Ignored
        ],
        "200, 503, the two slow 200s, the client gone"
    );
}

#[test]
fn forwarded_headers_choose_the_key_only_from_a_trusted_peer() {
    let untrusted = serve(limited(
        ForwardedIp::trusting(["192.0.2.0/24".parse().unwrap()]),
        "per-client",
    ));
    // The peer (127.0.0.1) is not trusted: whatever it claims, one budget.
    let mut conn = connect(untrusted);
    let statuses: Vec<u16> = (0..4)
        .map(|i| {
            get(
                &mut conn,
                "/",
                &format!("x-forwarded-for: 198.51.100.{i}\r\n"),
            )
            .status
        })
        .collect();
    assert_eq!(statuses, [200, 200, 200, 429]);

    let trusted = serve(limited(
        ForwardedIp::trusting(["127.0.0.0/8".parse().unwrap()]),
        "per-client",
    ));
    // From a trusted proxy, each client it reports has its own budget, and
    // what a client wrote left of its own entry is not read.
    let mut conn = connect(trusted);
    for client in ["198.51.100.1", "198.51.100.2"] {
        let statuses: Vec<u16> = (0..4)
            .map(|i| {
                get(
                    &mut conn,
                    "/",
                    &format!("x-forwarded-for: 6.6.6.{i}, {client}\r\n"),
                )
                .status
            })
            .collect();
        assert_eq!(statuses, [200, 200, 200, 429], "{client}");
    }
}
