//! Where a key's counters live: the hashing and layout every sketch in weir
//! shares (the count-min [`Estimator`](crate::Estimator), the in-flight
//! counter, and the sketches of timestamps and rates in `weir-rate` and
//! `weir-hhh`).
//!
//! Hidden from the documentation: it is public so that weir's own crates
//! (and weir-hhh's BPF filter, which must find the same cells) share one
//! implementation, and carries no stability promise. Users size sketches
//! with a [`Shape`](crate::Shape) and never need a locator.
//!
//! A [`Locator`] hashes a key **once** (ahash, random seed unless the shape
//! has one) and derives every row's position from that one 64-bit hash with
//! a multiply-shift per row (a distinct odd multiplier each,
//! [`ROW_MULTIPLIERS`], then the high bits scaled onto the row width), so
//! there is no division and no second hash. The layouts are described on
//! [`Layout`](crate::Layout); docs/algorithms.md has the error bounds and
//! the alternatives measured.

mod locator;
mod multipliers;

pub use locator::{Location, Locator};
pub use multipliers::ROW_MULTIPLIERS;

/// Counters per 64-byte cache line (eight 64-bit counters).
pub const LANES: usize = 8;

/// The most hashes any layout supports.
pub const MAX_HASHES: usize = 16;

/// Map a 64-bit hash uniformly onto `0..n` with a multiply-shift (Lemire's
/// fast range), which uses the hash's high bits and costs no division.
#[inline]
pub(crate) fn reduce(hash: u64, n: u64) -> u64 {
    ((u128::from(hash) * u128::from(n)) >> 64) as u64
}
