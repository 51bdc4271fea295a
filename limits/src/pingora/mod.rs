//! pingora-limits 0.9, item for item, on weir's implementations.
//!
//! Existing pingora code switches with one line and compiles unchanged:
//!
//! ```
//! use weir_limits::pingora as pingora_limits;
//!
//! use pingora_limits::estimator::Estimator;
//! use pingora_limits::inflight::Inflight;
//! use pingora_limits::rate::{Rate, PROPORTIONAL_RATE_ESTIMATE_CALC_FN};
//! use std::time::Duration;
//!
//! let estimator = Estimator::new(4, 1024);
//! assert_eq!(estimator.incr("origin", 2), 2);
//!
//! let inflight = Inflight::new();
//! let (_guard, in_flight) = inflight.incr("origin", 1);
//! assert_eq!(in_flight, 1);
//!
//! let rate = Rate::new(Duration::from_secs(1));
//! rate.observe(&"origin", 1);
//! let _per_second: f64 = rate.rate_with(&"origin", PROPORTIONAL_RATE_ESTIMATE_CALC_FN);
//! ```
//!
//! Every public item of pingora-limits 0.9 is here under the same path,
//! with the same name, generics and argument types (keys by value for the
//! estimator, by reference for the rate). Underneath are weir's
//! [`Estimator`](crate::estimator::Estimator), [`Inflight`](crate::inflight::Inflight) and
//! [`Rate`](crate::rate::Rate), so callers get their fixes. Where the behaviour
//! differs from pingora's the item's docs say so under "Differences from
//! pingora"; in short:
//!
//! * bad dimensions (0 hashes, 0 slots, more than 16 hashes, over 2³²
//!   counters) and a zero or over-long `Rate` interval panic in the
//!   constructor with a message naming the problem, where pingora panics
//!   later inside an `incr`/`rate_with` (modulo by zero) or not at all;
//! * `Rate` windows stay on a fixed grid, work below a millisecond, and
//!   racing timestamps cannot underflow;
//! * a [`Guard`](inflight::Guard) releases everything it counted, including
//!   what [`Guard::incr`](inflight::Guard::incr) added.
//!
//! Beyond pingora's surface the types implement `Debug`, and
//! [`Rate::try_with_clock`](rate::Rate::try_with_clock) takes an injectable clock
//! for tests.

pub mod estimator;
pub mod inflight;
pub mod rate;
