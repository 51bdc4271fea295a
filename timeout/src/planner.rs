//! The handshake that keeps the sweeper's sleep from missing a new tick.
//!
//! `planned` is the earliest tick the sweeper will wake up for (`u64::MAX`:
//! it parks with no timeout). A thread that creates a bucket calls
//! [`Planner::lower`] *after* entering the bucket in its table and unparks the
//! sweeper if that lowered the plan. The sweeper calls [`Planner::reset`]
//! *before* scanning the tables and [`Planner::settle`] with the earliest tick
//! it found *after*, and sleeps until what `settle` returns.
//!
//! Why no wake-up is lost: if the scan missed a new bucket, the bucket was
//! entered after the scan looked at that table, hence after the reset, so its
//! `lower` sees either "never" (and unparks; `park` keeps the token) or a
//! tick that some other `lower` or `settle` put there after the reset, which
//! is no later than the sweeper's next wake-up. The loom model
//! `no_lost_sweeper_wakeup` checks this.

use crate::sync::{AtomicU64, Ordering};

/// See the module documentation.
#[derive(Debug)]
pub(crate) struct Planner {
    planned: AtomicU64,
}

impl Planner {
    pub(crate) fn new() -> Self {
        Self {
            planned: AtomicU64::new(u64::MAX),
        }
    }

    /// A bucket for `tick` was just entered in a table: returns `true` if the
    /// caller must unpark the sweeper.
    #[inline]
    pub(crate) fn lower(&self, tick: u64) -> bool {
        self.planned.fetch_min(tick, Ordering::SeqCst) > tick
    }

    /// The sweeper is about to scan.
    pub(crate) fn reset(&self) {
        self.planned.store(u64::MAX, Ordering::SeqCst);
    }

    /// The sweeper scanned and found `earliest` (`u64::MAX`: nothing);
    /// returns the tick to sleep until.
    pub(crate) fn settle(&self, earliest: u64) -> u64 {
        self.planned
            .fetch_min(earliest, Ordering::SeqCst)
            .min(earliest)
    }
}
