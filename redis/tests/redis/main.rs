//! The Redis backend against real, private `redis-server` processes:
//! semantics equal to the in-process limiters, limits held by concurrent
//! tasks and processes, and faults (server killed and restarted,
//! `SCRIPT FLUSH`) under load with each failure policy.
#![cfg(not(loom))]

#[path = "../support/mod.rs"]
mod support;

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::*;
use weir_rate::{FixedWindow, Gcra, KeyedLimiter, Quota, RateLimiter, SlidingWindow, TokenBucket};
use weir_redis::{
    Batching, ConfigError, FailurePolicy, PreAggregation, RedisLimiter, Source, StoreError, Target,
};
use weir_test_support::redis_server::{RedisServer, limiter_acl, wait_until};

/// Entry point of the worker processes spawned by the tests (does nothing
/// when run normally).
#[test]
fn worker_process_entry() -> TestResult {
    worker_main()
}

/// The in-process limiter equivalent to `alg` over `quota`, time frozen.
fn local_pattern<L: weir_rate::Algorithm>(l: L, n: usize) -> Vec<(bool, u32)> {
    let clock = weir_rate::clock::ManualClock::new();
    let limiter = RateLimiter::with_clock(l, clock);
    (0..n)
        .map(|_| {
            let d = limiter.check();
            (d.is_allowed(), d.remaining())
        })
        .collect()
}

/// `(allowed, remaining, reset µs, retry µs)` of a decision, durations
/// rounded up to whole microseconds as the Redis backend reports them.
type Summary = (bool, u32, u128, u128);

mod access;
mod all_of;
mod attacks;
mod decisions;
mod held;
mod outages;
mod restarts;
mod sentinel;
mod set_limits;
mod sharing;
mod stalls;
mod tiers;
mod waits;
