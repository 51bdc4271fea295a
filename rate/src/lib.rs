//! weir-rate: measuring and limiting request rates.
//!
//! * [`ewma`] — rakelimit's exponentially weighted moving-average rate, in
//!   float and integer-only fixed point, stateless ([`ewma::EwmaWindow`]) or
//!   shared between threads ([`ewma::Ewma`]).
//! * [`clock`] — the injectable clock (re-exported from `weir-limits`).

pub mod ewma;
mod sync;

/// The injectable clock, shared with `weir-limits`.
pub mod clock {
    pub use weir_limits::clock::{Clock, ManualClock, MonotonicClock, duration_to_nanos};
}

pub use weir_limits::ConfigError;
