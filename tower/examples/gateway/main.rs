//! An API gateway in front of a toy origin, limited by weir:
//!
//! * per client IP, a GCRA rate limit: 429 with `Retry-After` and the IETF
//!   `RateLimit-Policy` / `RateLimit` fields (on every response);
//! * per route, an in-flight limit (pingora's per-origin connection limit):
//!   503 when the origin is too slow to keep up.
//!
//! The per-IP limit is in-process by default; `--redis URL` shares it
//! through Redis (GCRA, one Lua script per decision; while Redis is
//! unreachable each instance keeps the limit on its own), so several
//! gateways enforce one limit together. `/metrics` serves weir's counters
//! (decisions by outcome, Redis answers by source, call latency) as
//! Prometheus text.
//!
//! ```sh
//! cargo run -p weir-tower --features metrics --example gateway -- 127.0.0.1:3000 --limit 10 --window 60 --inflight 4
//! curl -i http://127.0.0.1:3000/
//! curl http://127.0.0.1:3000/metrics
//! cargo run -p weir-tower --features metrics --example gateway -- 127.0.0.1:3001 --redis redis://127.0.0.1:6379/
//! ```

mod app;

use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::time::Duration;

fn usage() -> ! {
    eprintln!(
        "usage: gateway [ADDR] [--limit N] [--window SECS] [--inflight N] [--slow MS] [--shadow] [--redis URL]"
    );
    std::process::exit(2)
}

fn parse<T: std::str::FromStr>(value: Option<String>) -> T {
    value
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| usage())
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let mut config = app::GatewayConfig::default();
    let mut addr: SocketAddr = "127.0.0.1:3000".parse().expect("valid address");
    let mut redis: Option<String> = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--limit" => config.limit = parse::<NonZeroU32>(args.next()),
            "--window" => config.window = Duration::from_secs(parse::<u64>(args.next()).max(1)),
            "--inflight" => config.max_inflight = parse(args.next()),
            "--slow" => config.slow_origin = Duration::from_millis(parse(args.next())),
            "--shadow" => config.shadow = true,
            "--redis" => redis = Some(args.next().unwrap_or_else(|| usage())),
            other => addr = other.parse().unwrap_or_else(|_| usage()),
        }
    }
    // Before any layer is built, so their counters register with it.
    config.metrics = Some(
        metrics_exporter_prometheus::PrometheusBuilder::new()
            .install_recorder()
            .map_err(std::io::Error::other)?,
    );
    let listener = tokio::net::TcpListener::bind(addr).await?;
    println!(
        "gateway listening on http://{} with {config:?}",
        listener.local_addr()?
    );
    let router = match redis {
        None => app::router(&config),
        Some(url) => {
            let quota = app::quota(&config);
            // While Redis is unreachable, each instance limits on its own
            // instead of letting every request through.
            let local = weir_rate::KeyedLimiter::<String, _>::new(weir_rate::Gcra::new(quota));
            let limiter = weir_redis::RedisLimiter::builder(weir_rate::Gcra::new(quota))
                .prefix("gateway")
                // The layer's policy name, so layer and store count under
                // one `limiter` label.
                .name("per-ip")
                .on_failure(weir_redis::FailurePolicy::Local(std::sync::Arc::new(local)))
                .connect(weir_redis::Target::server(url))
                .await
                .map_err(std::io::Error::other)?;
            println!("per-IP limit shared through Redis");
            app::router_on_redis(&config, limiter)
        }
    };
    let app = router.into_make_service_with_connect_info::<SocketAddr>();
    axum::serve(listener, app).await
}
