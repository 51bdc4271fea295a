//! The gateway's application: routes and the two weir layers. Shared by the
//! example's `main.rs` and by `tower/tests/http/gateway.rs`, which drives it over
//! real loopback HTTP.

use axum::Router;
use axum::extract::ConnectInfo;
use axum::http::Request;
use axum::routing::get;
use metrics_exporter_prometheus::PrometheusHandle;
use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;
use weir_rate::CheckKeyAsync;
use weir_rate::{Gcra, KeyedLimiter, Quota};
use weir_tower::{InflightLayer, KeyFn, PeerIp, RateLimitLayer};

/// What the gateway enforces.
#[derive(Clone)]
pub struct GatewayConfig {
    /// Requests allowed per client IP per `window` (GCRA, burst = limit).
    pub limit: NonZeroU32,
    /// The rate window.
    pub window: Duration,
    /// Requests in progress at once per route before 503.
    pub max_inflight: u32,
    /// Count and report, never deny.
    pub shadow: bool,
    /// How long `/slow` takes to answer (an origin in trouble).
    pub slow_origin: Duration,
    /// Where `/metrics` reads the Prometheus text from (none: no
    /// `/metrics`). The recorder must be installed before the router is
    /// built, so the layers' counters register with it.
    pub metrics: Option<PrometheusHandle>,
}

impl std::fmt::Debug for GatewayConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GatewayConfig")
            .field("limit", &self.limit)
            .field("window", &self.window)
            .field("max_inflight", &self.max_inflight)
            .field("shadow", &self.shadow)
            .field("slow_origin", &self.slow_origin)
            .field("metrics", &self.metrics.is_some())
            .finish()
    }
}

impl Default for GatewayConfig {
    fn default() -> Self {
        Self {
            limit: NonZeroU32::new(100).expect("non-zero"),
            window: Duration::from_secs(60),
            max_inflight: 64,
            shadow: false,
            slow_origin: Duration::from_secs(2),
            metrics: None,
        }
    }
}

/// The client as axum's `ConnectInfo` recorded it, keyed as `PeerIp` keys
/// it: an IPv6 client by its /64, an IPv4-mapped one as IPv4.
fn client_ip<B>(request: &Request<B>) -> Option<IpAddr> {
    request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|info| PeerIp::new().key_for(info.0.ip()))
}

/// The quota the per-IP limit enforces.
pub fn quota(config: &GatewayConfig) -> Quota {
    Quota::try_new(config.limit.get(), config.window)
        .expect("a non-zero limit over a non-zero window")
}

/// The router with an in-process per-IP limit.
pub fn router(config: &GatewayConfig) -> Router {
    let per_ip = Arc::new(KeyedLimiter::new(Gcra::new(quota(config))));
    router_with(config, per_ip)
}

/// The router with the per-IP limit shared through Redis, so several
/// gateway instances enforce one limit together.
pub fn router_on_redis(config: &GatewayConfig, limiter: weir_redis::RedisLimiter) -> Router {
    router_with(config, Arc::new(limiter))
}

/// The router with its limits: per-IP rate limit outside (429), per-route
/// in-flight limit inside (503), so a slow origin sheds load before it
/// piles up, and a refused request is not charged to the in-flight count.
fn router_with<Ch: CheckKeyAsync<IpAddr>>(config: &GatewayConfig, per_ip: Arc<Ch>) -> Router {
    let rate = RateLimitLayer::shared(per_ip, KeyFn::new(client_ip))
        .policy_name("per-ip")
        .cost_fn(|req: &Request<axum::body::Body>| if req.uri().path() == "/heavy" { 5 } else { 1 })
        .shadow(config.shadow);
    let per_route = KeyFn::new(|req: &Request<axum::body::Body>| Some(req.uri().path().to_owned()));
    let inflight = InflightLayer::new(per_route, config.max_inflight).shadow(config.shadow);
    let slow = config.slow_origin;
    let limited = Router::new()
        .route("/", get(|| async { "hello from behind weir\n" }))
        .route("/heavy", get(|| async { "an expensive answer\n" }))
        .route(
            "/slow",
            get(move || async move {
                tokio::time::sleep(slow).await;
                "finally\n"
            }),
        )
        // One `layer` call for both: axum boxes and clones a route's service
        // per `layer` call per request, so composing first is cheaper.
        .layer(tower::ServiceBuilder::new().layer(rate).layer(inflight));
    // Added after the layers, so scrapes are neither limited nor counted.
    let routes = match &config.metrics {
        Some(handle) => {
            let handle = handle.clone();
            limited.route("/metrics", get(move || std::future::ready(handle.render())))
        }
        None => limited,
    };
    // Finalise the routes once; otherwise axum rebuilds each route and
    // re-applies its layers on every request.
    routes.with_state(())
}
