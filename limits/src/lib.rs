//! weir-limits: counting traffic at the edge of a network service.
//!
//! * [`Estimator`] — a lock-free count-min sketch (pingora-limits' surface),
//!   plain or conservative update, classic rows layout or blocked (one cache
//!   line per key).
//! * [`ShardedEstimator`] — the same surface with per-thread delta tables, so
//!   threads stop bouncing cache lines; its estimates lag other threads by a
//!   bounded number of events.
//! * [`Inflight`] and its RAII [`InflightGuard`] — pingora's connection-limit
//!   pattern: count on entry, uncount on drop; [`ExactInflight`] and its
//!   [`ExactInflightGuard`] count exactly, in memory bounded by the
//!   requests in flight, so a key spray cannot make it refuse anyone.
//! * [`Rate`] — per-key events per interval on a fixed time grid, with the
//!   previous and current window and the proportional sliding estimate.
//! * [`HeavyHitters`] — the sketch as a first-stage filter in front of a
//!   bounded exact table, so heavy keys are counted exactly in little
//!   memory, even under key spraying.
//! * [`Shape`] — a sketch's dimensions, [`Layout`] and seed, valid by
//!   construction (checked at compile time with [`Shape::rows`]); every
//!   sketch in weir is built from one.
//! * [`ewma`] — rakelimit's exponentially weighted moving-average rate, in
//!   fixed point so that one fits an atomic word.
//! * [`clock`] — the injectable clock every time-dependent structure reads,
//!   and its typed [`Timestamp`](clock::Timestamp).
//! * [`sketch`] — where a key's cells are, for sketches of cells of your
//!   own (the locator every weir sketch shares).
//! * [`pingora`] — a drop-in for pingora-limits 0.9 on these types.
//!
//! Constructors that can fail are named `try_*` and return [`ConfigError`];
//! `new` never fails.
//!
//! ```
//! use weir_limits::{Estimator, Shape};
//!
//! let per_origin = Estimator::new(Shape::rows::<4, 4096>());
//! per_origin.incr("origin-a", 1);
//! assert!(per_origin.get("origin-a") >= 1);
//! ```

pub mod clock;
mod counters;
mod error;
mod estimator;
pub mod ewma;
mod exact_inflight;
mod heavy;
mod inflight;
pub mod pingora;
mod rate;
mod shape;
mod sharded;
pub mod sketch;
mod sync;

pub use error::ConfigError;
pub use estimator::{Estimator, Update};
pub use exact_inflight::{ExactInflight, ExactInflightGuard};
pub use heavy::{HeavyCount, HeavyHitters, Observation};
pub use inflight::{Inflight, InflightGuard};
pub use rate::{Rate, RateComponents};
pub use shape::{Layout, Shape};
pub use sharded::ShardedEstimator;

// The README's examples run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
