//! [`ManualClock`]: time that moves only when a test says so.

use super::Clock;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use weir_primitives::time::duration_to_nanos;

/// A clock that moves only when told to; clones share the same time.
///
/// ```
/// use weir_limits::clock::{Clock, ManualClock};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// let handle = clock.clone();
/// handle.set(Duration::from_secs(2));
/// assert_eq!(clock.now_nanos(), 2_000_000_000);
/// ```
#[derive(Debug, Clone, Default)]
pub struct ManualClock {
    nanos: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock reading zero.
    pub fn new() -> Self {
        Self::default()
    }

    /// Move time forward by `by` (saturating at `u64::MAX` nanoseconds).
    pub fn advance(&self, by: Duration) {
        let by = duration_to_nanos(by);
        // A CAS loop rather than fetch_add so a huge advance saturates
        // instead of wrapping around to the past.
        let _ = self
            .nanos
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |now| {
                Some(now.saturating_add(by))
            });
    }

    /// Set the time since the epoch. Setting it backwards is allowed (to
    /// test how consumers cope); they treat it as no time having passed.
    pub fn set(&self, since_epoch: Duration) {
        self.nanos
            .store(duration_to_nanos(since_epoch), Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    #[inline]
    fn now_nanos(&self) -> u64 {
        self.nanos.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_saturates_instead_of_wrapping() {
        let clock = ManualClock::new();
        clock.set(Duration::from_nanos(u64::MAX - 5));
        clock.advance(Duration::from_secs(1));
        assert_eq!(clock.now_nanos(), u64::MAX);
    }

    #[test]
    fn clones_of_a_manual_clock_share_time() {
        let a = ManualClock::new();
        let b = a.clone();
        a.advance(Duration::from_millis(7));
        assert_eq!(b.now_nanos(), 7_000_000);
    }
}
