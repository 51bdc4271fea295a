//! Per-API-key limits shared through Redis: 10 requests a second with
//! bursts of 20 and 1000 a day, all or nothing, keyed by the `x-api-key`
//! header and, for requests without one, by the client's address. Every
//! instance of the service pointed at the same Redis shares the counts.
//!
//! Needs a Redis server (`REDIS_URL`, default `redis://127.0.0.1:6379/`):
//!
//! ```sh
//! redis-server --port 6379 --save '' &
//! cargo run -p weir-tower --example per_api_key_redis
//! ```

use axum::{Router, routing::get};
use http_body_util::Empty;
use hyper::Request;
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::net::SocketAddr;
use weir_rate::{FixedWindow, Gcra, Quota, nonzero};
use weir_redis::{RedisLimiter, Target};
use weir_tower::{HeaderKey, PeerIp, RateLimitLayer};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into());
    // A wrong address, password or certificate is an error here, at start.
    let limiter = RedisLimiter::builder(Gcra::new(
        Quota::per_second(nonzero!(10)).allow_burst(nonzero!(20)),
    ))
    .and(FixedWindow::new(Quota::per_day(nonzero!(1000))))
    .prefix("example-api")
    .connect(Target::server(url))
    .await?;
    // The key is namespaced by where it came from: an API key can never
    // collide with an address.
    let key = HeaderKey::new(http::HeaderName::from_static("x-api-key")).or(PeerIp::new());
    let app = Router::new()
        .route("/", get(|| async { "hello\n" }))
        .layer(RateLimitLayer::new(limiter, key).policy_name("api"));

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let service = app.into_make_service_with_connect_info::<SocketAddr>();
    tokio::spawn(async move { axum::serve(listener, service).await });

    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    for (i, api_key) in [Some("k-1"), Some("k-1"), None].into_iter().enumerate() {
        let mut request = Request::get(format!("http://{addr}/"));
        if let Some(api_key) = api_key {
            request = request.header("x-api-key", api_key);
        }
        let response = client.request(request.body(Empty::new())?).await?;
        let header = |name| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("-")
                .to_owned()
        };
        // Both quotas, each its own item: "api-1s" and "api-1d".
        println!(
            "request {} ({}): {}\n  ratelimit-policy: {}\n  ratelimit: {}",
            i + 1,
            api_key.unwrap_or("no key: by address"),
            response.status(),
            header("ratelimit-policy"),
            header("ratelimit"),
        );
    }
    Ok(())
}
