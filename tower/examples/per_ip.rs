//! Per-IP limits on axum: 5 requests a second per client address, bursts
//! of 5. Serves on a loopback port, sends eight requests to itself and
//! prints what each got.
//!
//! ```sh
//! cargo run -p weir-tower --example per_ip
//! ```

use axum::{Router, routing::get};
use http_body_util::Empty;
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::net::{IpAddr, SocketAddr};
use weir_rate::{Gcra, KeyedLimiter, Quota, nonzero};
use weir_tower::{PeerIp, RateLimitLayer};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let per_ip = KeyedLimiter::<IpAddr, _>::new(Gcra::new(Quota::per_second(nonzero!(5))));
    let app = Router::new()
        .route("/", get(|| async { "hello\n" }))
        .layer(RateLimitLayer::new(per_ip, PeerIp::new()).policy_name("per-ip"));

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    // PeerIp reads the address axum's ConnectInfo puts on each request.
    let service = app.into_make_service_with_connect_info::<SocketAddr>();
    tokio::spawn(async move { axum::serve(listener, service).await });

    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    for i in 1..=8 {
        let response = client.get(format!("http://{addr}/").parse()?).await?;
        let header = |name| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("-")
                .to_owned()
        };
        println!(
            "request {i}: {} ratelimit: {} retry-after: {}",
            response.status(),
            header("ratelimit"),
            header("retry-after"),
        );
    }
    Ok(())
}
