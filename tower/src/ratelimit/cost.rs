//! What a request costs a [`RateLimitLayer`](super::RateLimitLayer).

use http::Request;

/// What a request costs: one unit by default, or what the layer's
/// [`cost_fn`](super::RateLimitLayer::cost_fn) says. Implemented for every
/// `Fn(&Request<B>) -> u32`; the layer is generic over it rather than over
/// the request body, so building a layer never names a body type.
pub trait Cost<B>: Send + Sync + 'static {
    /// The units `request` costs.
    fn cost(&self, request: &Request<B>) -> u32;
}

/// The cost of a layer without a cost function: every request costs 1.
#[derive(Debug, Clone, Copy, Default)]
pub struct UnitCost;

impl<B> Cost<B> for UnitCost {
    #[inline]
    fn cost(&self, _: &Request<B>) -> u32 {
        1
    }
}

impl<B, F: Fn(&Request<B>) -> u32 + Send + Sync + 'static> Cost<B> for F {
    #[inline]
    fn cost(&self, request: &Request<B>) -> u32 {
        self(request)
    }
}
