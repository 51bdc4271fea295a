//! The responses the layers answer with when they refuse a request.

use http::{HeaderValue, Response, StatusCode};

/// Why a layer refused a request without calling the service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rejection {
    /// The key extractor found no key (a misconfigured server).
    NoKey,
    /// Too many requests of the key in flight.
    Overloaded,
}

/// An empty-bodied refusal.
pub(crate) fn reject<B: Default>(why: Rejection) -> Response<B> {
    let mut response = Response::new(B::default());
    match why {
        Rejection::NoKey => {
            *response.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
        }
        Rejection::Overloaded => {
            *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
            // In-flight counts drain as fast as the origin answers: a second
            // is a polite first guess.
            response
                .headers_mut()
                .insert(http::header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
    }
    response
}
