//! [`Connection`]: what a decision on Memcached works with (the client,
//! the shared time line, the compare-and-swap budget and its counts), and
//! how a store error and a key's lifetime are written. It sits below the
//! algorithms' modules (`windows`, `cas`) and the store that picks one.

use memcache::exp::AsyncMetaClient;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use weir_rate::clock::{Clock, WallClock};
use weir_store::StoreError;

/// The client and clock one limiter's calls go through.
pub(crate) struct Connection {
    client: AsyncMetaClient,
    clock: WallClock,
    /// Writes a decision may lose to other writers before it is refused.
    pub(crate) cas_attempts: u32,
    pub(crate) stats: Arc<CasStats>,
}

/// Compare-and-swap writes and the ones that lost to another writer,
/// since the limiter was built.
#[derive(Debug, Default)]
pub(crate) struct CasStats {
    pub(crate) writes: AtomicU64,
    pub(crate) lost: AtomicU64,
}

impl Connection {
    pub(crate) fn new(client: AsyncMetaClient, cas_attempts: u32) -> Self {
        Self {
            client,
            clock: WallClock::new(),
            cas_attempts,
            stats: Arc::default(),
        }
    }

    pub(crate) fn client(&self) -> &AsyncMetaClient {
        &self.client
    }

    /// Nanoseconds since the Unix epoch: the time line every instance
    /// shares (Memcached has no clock to read).
    pub(crate) fn now(&self) -> u64 {
        self.clock.now_nanos()
    }
}

/// A `memcache` error as the store's error.
pub(crate) fn store_error(error: memcache::exp::Error) -> StoreError {
    StoreError::store(error)
}

/// The latest absolute expiry memcached keeps, in seconds since the
/// epoch (2038-01-19T03:14:07Z): it reads an expiry as a signed 32-bit
/// number, and takes a larger one without an error but drops the item at
/// the next read.
const LAST_EXPIRY_SECS: u64 = i32::MAX as u64;

/// The latest time (ns since the epoch) a key's state may run to: its
/// TTL (a second more, rounded up) is then still one memcached keeps. A
/// longer debt is kept up to here, as the in-process limiters keep one
/// past the clock's range until the end of time.
pub(crate) const LAST_KEPT_NS: u64 = (LAST_EXPIRY_SECS - 2) * 1_000_000_000;

/// Seconds a key must live from `now` (ns since the epoch) to outlast
/// `until`, plus a second, in Memcached's TTL form: up to 30 days a count
/// of seconds, beyond it an absolute Unix time (Memcached reads a larger
/// TTL as one), at most [`LAST_EXPIRY_SECS`].
pub(crate) fn ttl(now: u64, until: u64) -> u32 {
    const THIRTY_DAYS: u64 = 30 * 24 * 3600;
    let secs = until.saturating_sub(now).div_ceil(1_000_000_000) + 1;
    if secs <= THIRTY_DAYS {
        secs as u32
    } else {
        let absolute = (now / 1_000_000_000).saturating_add(secs);
        // Fits: LAST_EXPIRY_SECS is below u32::MAX.
        absolute.min(LAST_EXPIRY_SECS) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttls_switch_to_absolute_times_past_thirty_days() {
        let now = 1_800_000_000 * 1_000_000_000u64;
        assert_eq!(ttl(now, now), 1);
        assert_eq!(ttl(now, now + 1), 2);
        assert_eq!(ttl(now, now + 59 * 1_000_000_000), 60);
        let year = 365 * 24 * 3600 * 1_000_000_000u64;
        assert_eq!(
            ttl(now, now + year),
            (1_800_000_000 + 365 * 24 * 3600 + 1) as u32
        );
    }

    #[test]
    fn no_ttl_runs_past_the_last_expiry_memcached_keeps() {
        let now = 1_800_000_000 * 1_000_000_000u64;
        assert_eq!(ttl(now, u64::MAX), i32::MAX as u32);
        assert_eq!(ttl(now, LAST_KEPT_NS), i32::MAX as u32 - 1);
        assert_eq!(ttl(now, LAST_KEPT_NS - 1_000_000_000), i32::MAX as u32 - 2);
    }
}
