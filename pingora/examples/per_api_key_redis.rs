//! Per-API-key limits shared by every proxy instance through Redis: 10
//! requests a second with bursts of 20, and 1000 a day, all or nothing,
//! keyed by the `x-api-key` header and, for requests without one, by the
//! client's address. Start two instances on one Redis and a key's quota
//! is one quota, whichever instance its requests reach.
//!
//! ```sh
//! redis-server --port 6379 --save '' &
//! cargo run -p weir-pingora --example per_api_key_redis -- 127.0.0.1:6188 127.0.0.1:8000 &
//! cargo run -p weir-pingora --example per_api_key_redis -- 127.0.0.1:6189 127.0.0.1:8000 &
//! curl -i -H 'x-api-key: k-1' localhost:6188/; curl -i -H 'x-api-key: k-1' localhost:6189/
//! ```
//!
//! Arguments: `[LISTEN] [ORIGIN] [REDIS_URL]` (defaults `127.0.0.1:6188`,
//! `127.0.0.1:8000`, `redis://127.0.0.1:6379/`).

use async_trait::async_trait;
use pingora::http::ResponseHeader;
use pingora::prelude::*;
use pingora::proxy::{ProxyHttp, Session, http_proxy_service};
use weir_pingora::{ClientIp, HeaderKey, Passage, RateLimit};
use weir_rate::{FixedWindow, Gcra, Quota, nonzero};
use weir_redis::{RedisLimiter, Target};

struct PerApiKey {
    origin: String,
    limit: RateLimit<RedisLimiter, HeaderKey<ClientIp>>,
}

#[async_trait]
impl ProxyHttp for PerApiKey {
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

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let listen = args.next().unwrap_or_else(|| "127.0.0.1:6188".to_owned());
    let origin = args.next().unwrap_or_else(|| "127.0.0.1:8000".to_owned());
    let url = args
        .next()
        .unwrap_or_else(|| "redis://127.0.0.1:6379/".to_owned());

    // pingora runs each service on runtimes of its own; the store's
    // connection and batching tasks live on this one, kept for the life of
    // the process.
    let store_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    // A wrong address or password is an error here, at start.
    let limiter = store_runtime.block_on(
        RedisLimiter::builder(Gcra::new(
            Quota::per_second(nonzero!(10)).allow_burst(nonzero!(20)),
        ))
        .and(FixedWindow::new(Quota::per_day(nonzero!(1000))))
        .prefix("example-api")
        .connect(Target::server(url)),
    )?;
    // An API key and an address are namespaced apart: they never collide.
    let key = HeaderKey::new("x-api-key").or(ClientIp::new());
    let proxy = PerApiKey {
        origin,
        limit: RateLimit::new(key, limiter, "api"),
    };

    let mut server = Server::new(None)?;
    server.bootstrap();
    let mut service = http_proxy_service(&server.configuration, proxy);
    service.add_tcp(&listen);
    server.add_service(service);
    server.run_forever();
}
