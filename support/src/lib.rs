//! Fixtures for weir's own tests and benchmarks, kept out of the published
//! crates' public API (library crates use this only as a dev-dependency).
//!
//! * [`redis_server`] (feature `redis`): private `redis-server` processes
//!   and clusters on loopback.
//! * [`fork`] (Unix): a forked child running a test's closure, waited for
//!   with a time limit.

#[cfg(unix)]
pub mod fork;
#[cfg(feature = "redis")]
pub mod redis_server;
