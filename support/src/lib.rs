//! Fixtures for weir's own tests and benchmarks, kept out of the published
//! crates' public API (library crates use this only as a dev-dependency).
//!
//! * [`redis_server`] (feature `redis`): private `redis-server` processes
//!   and clusters on loopback.
//! * [`memcached_server`]: private `memcached` processes on loopback.
//! * [`process`]: what every server fixture shares (free ports, waiting,
//!   skipping when a server is not installed).
//! * [`fork`] (Unix): a forked child running a test's closure, waited for
//!   with a time limit.
//! * `stalls` (Unix, feature `store`): a server stopped for part of every
//!   period, and load on any store-backed limiter meanwhile.

// Not published: its callers are weir's own tests and tools, and a
// failing fixture or harness step names itself in its error.
#![allow(clippy::missing_errors_doc, clippy::missing_panics_doc)]

#[cfg(unix)]
pub mod fork;
pub mod memcached_server;
pub mod process;
#[cfg(feature = "redis")]
pub mod redis_server;
#[cfg(all(unix, feature = "store"))]
pub mod stalls;
