//! The responses the layers answer with when they refuse a request.

use http::{HeaderName, HeaderValue, Response, StatusCode};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// In a response's extensions: a weir layer refused the request (a
/// client's limit, not the origin's answer), so an
/// [`AdaptiveInflightLayer`](super::AdaptiveInflightLayer) outside learns
/// nothing from it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Refused;

/// An empty response with `status`, marked [`Refused`].
pub(crate) fn refusal<B: Default>(status: StatusCode) -> Response<B> {
    let mut response = Response::new(B::default());
    *response.status_mut() = status;
    response.extensions_mut().insert(Refused);
    response
}

/// An empty-bodied 503 with a polite `Retry-After`: too many requests of
/// the key in flight.
pub(crate) fn overloaded<B: Default>() -> Response<B> {
    let mut response = refusal(StatusCode::SERVICE_UNAVAILABLE);
    // In-flight counts drain as fast as the origin answers: a second is a
    // polite first guess.
    response
        .headers_mut()
        .insert(http::header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

/// What a layer answers a request its key extractor found no key for, and
/// the once-per-layer log line that tells the operator why.
#[derive(Debug, Clone)]
pub(crate) struct Unkeyed {
    status: StatusCode,
    /// Shared by every clone of the layer and its services, so a flood of
    /// unkeyed requests logs one line, not one per request.
    logged: Arc<AtomicBool>,
    layer: &'static str,
    header: HeaderName,
}

/// Says what went wrong without telling a client how the server is set up;
/// the log line says that.
const UNKEYED_REASON: &str = "no-key; the server could not tell which client sent this request";

impl Unkeyed {
    pub(crate) fn new(layer: &'static str, header: &'static str) -> Self {
        Self {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            logged: Arc::new(AtomicBool::new(false)),
            layer,
            header: HeaderName::from_static(header),
        }
    }

    pub(crate) fn with_status(mut self, status: StatusCode) -> Self {
        self.status = status;
        self
    }

    pub(crate) fn status(&self) -> StatusCode {
        self.status
    }

    pub(crate) fn respond<B: Default>(&self) -> Response<B> {
        // A load first: under a flood the flag is read-only and shared.
        if !self.logged.load(Ordering::Relaxed) && !self.logged.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                layer = self.layer,
                status = self.status.as_u16(),
                "a request had no key, so it was refused: the key extractor found nothing to \
                 key it by. PeerIp and ForwardedIp need the peer's address: a PeerAddr or \
                 SocketAddr request extension, axum's ConnectInfo<SocketAddr> (serve with \
                 into_make_service_with_connect_info::<SocketAddr>(), with weir-tower's \
                 `axum` feature on: it is a default feature, so check default-features = \
                 false), or a lookup given to peer_from. Logged once per layer."
            );
        }
        let mut response = refusal(self.status);
        response.headers_mut().insert(
            self.header.clone(),
            HeaderValue::from_static(UNKEYED_REASON),
        );
        response
    }
}
