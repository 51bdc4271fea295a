//! Real HTTP over loopback for the layer tests: an axum server served as
//! the docs say, and a client that writes raw bytes, so a test can send
//! header values a client library would refuse.

#![allow(dead_code)]

use axum::Router;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::time::Duration;

/// Serve `app` as the docs say, on a free loopback port, until the test's
/// runtime ends.
pub async fn serve(app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let addr = listener.local_addr().expect("local addr");
    let service = app.into_make_service_with_connect_info::<SocketAddr>();
    tokio::spawn(async move { axum::serve(listener, service).await });
    addr
}

/// A response as read off the wire.
pub struct Answer {
    pub status: u16,
    pub head: String,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().find_map(|line| {
            let (n, v) = line.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }
}

/// One HTTP/1.1 GET with `extra` header lines (raw bytes, so they can hold
/// what a client library would refuse to send), over its own connection.
pub async fn fetch_with(addr: SocketAddr, extra: &[u8]) -> Answer {
    let mut request = b"GET / HTTP/1.1\r\nhost: weir.test\r\nconnection: close\r\n".to_vec();
    request.extend_from_slice(extra);
    request.extend_from_slice(b"\r\n");
    // A blocking socket with deadlines on its own thread: no client library
    // between the test and the bytes on the wire.
    let reply = tokio::task::spawn_blocking(move || {
        let mut stream = std::net::TcpStream::connect(addr).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("deadline");
        stream
            .set_write_timeout(Some(Duration::from_secs(10)))
            .expect("deadline");
        stream.write_all(&request).expect("send");
        let mut reply = Vec::new();
        stream
            .read_to_end(&mut reply)
            .expect("the server answers within 10 s");
        reply
    })
    .await
    .expect("the client thread finishes");
    let text = String::from_utf8_lossy(&reply).into_owned();
    let head = text.split("\r\n\r\n").next().unwrap_or_default().to_owned();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("an HTTP status line in {text:?}"));
    Answer { status, head }
}

pub async fn fetch(addr: SocketAddr) -> Answer {
    fetch_with(addr, b"").await
}
