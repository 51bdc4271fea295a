//! A pingora reverse proxy limiting each client address to 5 requests a
//! second (burst 5) before an origin, with the RateLimit fields on every
//! answer and a 429 with `Retry-After` beyond the limit.
//!
//! `cargo run -p weir-pingora --example per_ip -- [LISTEN] [ORIGIN]`
//! (default `127.0.0.1:6188` in front of `127.0.0.1:8000`), then
//! `curl -i localhost:6188/` a few times.

use async_trait::async_trait;
use pingora::http::ResponseHeader;
use pingora::prelude::*;
use pingora::proxy::{ProxyHttp, Session, http_proxy_service};
use weir_pingora::{ClientIp, Passage, RateLimit};
use weir_rate::{Gcra, KeyedLimiter, Quota, nonzero};

struct PerIp {
    origin: String,
    limit: RateLimit<KeyedLimiter<String, Gcra>, ClientIp>,
}

#[async_trait]
impl ProxyHttp for PerIp {
    type CTX = Passage;

    fn new_ctx(&self) -> Passage {
        Passage::default()
    }

    async fn request_filter(&self, session: &mut Session, ctx: &mut Passage) -> Result<bool> {
        self.limit.request_filter(session, ctx).await
    }

    async fn upstream_peer(&self, _: &mut Session, _: &mut Passage) -> Result<Box<HttpPeer>> {
        Ok(Box::new(HttpPeer::new(
            self.origin.as_str(),
            false,
            String::new(),
        )))
    }

    async fn response_filter(
        &self,
        _: &mut Session,
        response: &mut ResponseHeader,
        ctx: &mut Passage,
    ) -> Result<()> {
        self.limit.response_filter(response, ctx)
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let listen = args.next().unwrap_or_else(|| "127.0.0.1:6188".to_owned());
    let origin = args.next().unwrap_or_else(|| "127.0.0.1:8000".to_owned());
    let limiter = KeyedLimiter::new(Gcra::new(Quota::per_second(nonzero!(5))));
    let proxy = PerIp {
        origin,
        limit: RateLimit::new(ClientIp::new(), limiter, "per-ip"),
    };
    let mut server = Server::new(None).expect("a pingora server");
    server.bootstrap();
    let mut service = http_proxy_service(&server.configuration, proxy);
    service.add_tcp(&listen);
    server.add_service(service);
    server.run_forever();
}
