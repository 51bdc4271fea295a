//! An adaptive concurrency limit in front of a slow origin: the proxy
//! learns from the origin's latency how many requests it can take at once
//! (Gradient2), and answers the rest with a 503 at once instead of piling
//! them up on an origin that is already queueing.
//!
//! Without an `ORIGIN` argument the example starts its own on loopback,
//! which answers in 10 ms up to four requests at once and 10 ms later for
//! every four more (as a queue before four workers would). Load it and watch the learned limit come down
//! as the probes (every 10 s) measure the origin unloaded:
//!
//! ```sh
//! cargo run -p weir-pingora --example adaptive_origin &
//! wrk -c 64 -d 30s http://127.0.0.1:6190/
//! ```
//!
//! Arguments: `[LISTEN] [ORIGIN]` (default `127.0.0.1:6190`, the built-in
//! origin).

use async_trait::async_trait;
use pingora::prelude::*;
use pingora::proxy::{ProxyHttp, Session, http_proxy_service};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use weir_adaptive::{Gradient2, KeyedAdaptiveLimiter};
use weir_pingora::{AdaptivePermit, UpstreamAdaptive};

struct Adaptive {
    origin: String,
    per_upstream: UpstreamAdaptive<Gradient2>,
}

#[async_trait]
impl ProxyHttp for Adaptive {
    type CTX = Option<AdaptivePermit<Gradient2>>;

    fn new_ctx(&self) -> Self::CTX {
        None
    }

    async fn upstream_peer(
        &self,
        _: &mut Session,
        permit: &mut Self::CTX,
    ) -> Result<Box<HttpPeer>> {
        let peer = HttpPeer::new(self.origin.as_str(), false, String::new());
        // Beyond the learned limit: a 503 now, not a place in a queue.
        *permit = Some(self.per_upstream.acquire(&peer)?);
        Ok(Box::new(peer))
    }

    async fn logging(&self, session: &mut Session, error: Option<&Error>, permit: &mut Self::CTX) {
        if let Some(permit) = permit.take() {
            permit.finish(session, error);
        }
    }
}

/// An origin answering in 10 ms for every four requests in flight (a
/// request that finds 5 to 8 in flight takes 20 ms, and so on).
fn slow_origin() -> std::io::Result<String> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?.to_string();
    let in_flight = Arc::new(AtomicUsize::new(0));
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let in_flight = Arc::clone(&in_flight);
            std::thread::spawn(move || {
                let mut reader = BufReader::new(&stream);
                let mut writer = &stream;
                let mut line = String::new();
                while reader.read_line(&mut line).is_ok_and(|n| n > 0) {
                    if line != "\r\n" {
                        line.clear();
                        continue;
                    }
                    line.clear();
                    let queued = in_flight.fetch_add(1, Ordering::Relaxed) + 1;
                    std::thread::sleep(Duration::from_millis(10 * queued.div_ceil(4) as u64));
                    in_flight.fetch_sub(1, Ordering::Relaxed);
                    if writer
                        .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n")
                        .is_err()
                    {
                        return;
                    }
                }
            });
        }
    });
    Ok(addr)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let listen = args.next().unwrap_or_else(|| "127.0.0.1:6190".to_owned());
    let origin = match args.next() {
        Some(origin) => origin,
        None => slow_origin()?,
    };
    // One learned limit per upstream address, at most 1024 upstreams kept.
    let per_upstream = UpstreamAdaptive::new(KeyedAdaptiveLimiter::new(
        Gradient2::default(),
        NonZeroUsize::new(1024).expect("nonzero"),
    ));

    let watched = per_upstream.clone();
    let peer = HttpPeer::new(origin.as_str(), false, String::new());
    std::thread::spawn(move || {
        loop {
            std::thread::sleep(Duration::from_secs(1));
            if let Some(limit) = watched.limit(&peer) {
                println!(
                    "learned limit {limit}, {} in flight",
                    watched.in_flight(&peer)
                );
            }
        }
    });
    println!("proxying {listen} -> {origin}");

    let mut server = Server::new(None)?;
    server.bootstrap();
    let mut service = http_proxy_service(
        &server.configuration,
        Adaptive {
            origin,
            per_upstream,
        },
    );
    service.add_tcp(&listen);
    server.add_service(service);
    server.run_forever();
}
