//! Where a key's counters live: the hashing and layout every sketch in weir
//! shares (the count-min [`Estimator`](crate::Estimator), the in-flight
//! counter, and the sketches of timestamps and rates in `weir-rate` and
//! `weir-hhh`).
//!
//! Most users size sketches with a [`Shape`](crate::Shape) and never need
//! a locator. It is for a sketch of cells of your own (timestamps, rates,
//! flags) that should find a key's cells as every weir sketch does:
//! weir-rate's sketch limiter and weir-hhh's classifier (and its BPF
//! filter, which must find the same cells) are built on it.
//!
//! ```
//! use std::sync::atomic::{AtomicU64, Ordering};
//! use weir_limits::Shape;
//! use weir_limits::sketch::Locator;
//!
//! // A sketch of "last seen" times: a key's time is the largest of its cells.
//! let locator = Locator::new(Shape::rows::<2, 1024>());
//! let cells: Vec<AtomicU64> = (0..locator.cells()).map(|_| AtomicU64::new(0)).collect();
//! for cell in locator.locate("alice").iter() {
//!     cells[cell].fetch_max(42, Ordering::Relaxed);
//! }
//! let seen = locator.locate("alice").iter().map(|c| cells[c].load(Ordering::Relaxed)).min();
//! assert_eq!(seen, Some(42));
//! ```
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

// What a shape may ask for, kept with the shapes that check it.
pub use crate::shape::{LANES, MAX_HASHES};

/// Map a 64-bit hash uniformly onto `0..n` with a multiply-shift (Lemire's
/// fast range), which uses the hash's high bits and costs no division.
#[inline]
pub(crate) fn reduce(hash: u64, n: u64) -> u64 {
    ((u128::from(hash) * u128::from(n)) >> 64) as u64
}
