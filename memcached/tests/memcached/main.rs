//! The Memcached store against real, private `memcached` processes:
//! decisions equal to the in-process limiters', limits held by concurrent
//! callers and by two limiters sharing servers, keys of any bytes, refunds
//! and charges, and faults (a server killed and restarted, absent at
//! start-up, stalled past the timeout, one of several down, counters
//! evicted under memory pressure).
#![cfg(not(loom))]

use std::error::Error;
use std::num::NonZeroU32;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use weir_memcached::{ConfigError, FailurePolicy, MemcachedLimiter, Servers, Source};
use weir_rate::{Algorithm, FixedWindow, Gcra, Quota, SlidingWindow, TokenBucket};
use weir_test_support::memcached_server::MemcachedServer;

mod all_of;
mod decisions;
mod faults;
mod keys;
mod set_limits;
mod tiers;

type TestResult = Result<(), Box<dyn Error>>;

fn nz(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).expect("non-zero")
}

/// A current-thread runtime with I/O and timers, as each test uses.
fn rt() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
}

/// A prefix no other test (or earlier run) uses.
fn unique_prefix(name: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "t-{name}-{}-{}",
        std::process::id(),
        nanos % 1_000_000_000_000
    )
}

/// A limiter keeping `algorithm` on `servers`, with the closed policy so
/// that a test sees every answer that did not come from Memcached.
async fn limiter<L: weir_store::StoreAlgorithm>(
    algorithm: L,
    name: &str,
    servers: &[&MemcachedServer],
) -> Result<MemcachedLimiter, ConfigError> {
    MemcachedLimiter::builder(algorithm)
        .prefix(unique_prefix(name))
        .timeout(Duration::from_millis(500))
        .on_failure(FailurePolicy::Closed)
        .connect(Servers::new(servers.iter().map(|s| s.addr())))
        .await
}

/// How many of `n` checks of `key` one after another the limiter allows.
async fn allowed(limiter: &MemcachedLimiter, key: &str, n: usize) -> usize {
    let mut allowed = 0;
    for _ in 0..n {
        if limiter.check(key).await.is_allowed() {
            allowed += 1;
        }
    }
    allowed
}

/// The in-process twin's answers to `n` checks made at one instant.
fn in_process<L: Algorithm>(algorithm: L, n: usize) -> Vec<(bool, u32)> {
    let limiter =
        weir_rate::RateLimiter::with_clock(algorithm, weir_rate::clock::ManualClock::new());
    (0..n)
        .map(|_| {
            let d = limiter.check();
            (d.is_allowed(), d.remaining())
        })
        .collect()
}
