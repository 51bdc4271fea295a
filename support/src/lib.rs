//! Fixtures for weir's own tests and benchmarks, kept out of the published
//! crates' public API (library crates use this only as a dev-dependency).
//!
//! * [`redis_server`]: private `redis-server` processes and clusters on loopback.

pub mod redis_server;
