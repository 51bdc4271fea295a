//! The health of a store, cell by cell: when each cell's last call failed,
//! the back-off after a failure (one probe call per back-off, the rest
//! skip the store), and the outage log (once when a cell goes down, once
//! when it is back).
//!
//! A cell is a set of keys that fail together: one server's, or one range
//! of a Redis Cluster's slots, so that one dead master sends only its own
//! keys to the failure policy.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::time::Instant;
use weir_primitives::time::duration_to_nanos;

/// The per-cell state of one limiter's store.
pub(crate) struct Health {
    /// The origin of every nanosecond time below.
    epoch: Instant,
    backoff: Duration,
    /// Per cell: until when (ns since `epoch`) the store is skipped; 0 =
    /// healthy.
    down_until: Box<[AtomicU64]>,
    /// Per cell: when a call there last failed (an error, or no answer
    /// within half a timeout), ns since `epoch`; 0 = never. Tells a caller
    /// late in the batching queue behind a failing store from one late
    /// because this instance had too much to send.
    failed: Box<[AtomicU64]>,
    /// Per cell: whether it is in an outage (failed since its last
    /// success).
    out: Box<[AtomicU64]>,
    /// How many cells are in an outage: the log says when the first goes
    /// and when the last is back, once each, however many cells a store has.
    cells_out: AtomicU64,
    /// When a call to any cell last failed (ns since `epoch`; 0 = never,
    /// or the store absent at start-up, which counts as at 1).
    last_failure: AtomicU64,
    /// Per cell: when a call there last failed (ns since `epoch`, as
    /// `last_failure`): a cell is back only once it has answered for
    /// [`QUIET`] since.
    cell_failure: Box<[AtomicU64]>,
    /// Calls that failed since the outage began, for the line that ends it.
    failures: AtomicU64,
    /// [`QUIET`] in ns.
    quiet: u64,
}

/// How long a failed cell must go without failing before its outage is
/// over for the log: a store that flaps (answering between stalls) is one
/// outage, not a line per stall.
pub(crate) const QUIET: Duration = Duration::from_secs(1);

/// What a call's result did to the store's outage, for the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change {
    /// Nothing to log.
    None,
    /// The first cell failed: the store is (partly) unreachable.
    Down,
    /// The last failed cell answered again.
    Back,
}

impl Health {
    /// `cells` cells, healthy unless `down` (the store was absent at
    /// start-up: skip it for one back-off, as after any failure, and count
    /// every cell out until it answers).
    pub(crate) fn new(cells: usize, backoff: Duration, down: bool) -> Self {
        let cells = cells.max(1);
        let epoch = Instant::now();
        let until = if down {
            duration_to_nanos(backoff).max(1)
        } else {
            0
        };
        Self {
            epoch,
            backoff,
            down_until: (0..cells).map(|_| AtomicU64::new(until)).collect(),
            failed: (0..cells).map(|_| AtomicU64::new(0)).collect(),
            out: (0..cells)
                .map(|_| AtomicU64::new(u64::from(down)))
                .collect(),
            cells_out: AtomicU64::new(if down { cells as u64 } else { 0 }),
            last_failure: AtomicU64::new(u64::from(down)),
            cell_failure: (0..cells)
                .map(|_| AtomicU64::new(u64::from(down)))
                .collect(),
            failures: AtomicU64::new(0),
            quiet: duration_to_nanos(QUIET),
        }
    }

    /// Whether a call to the store failed within `window` of now.
    pub(crate) fn failed_within(&self, window: Duration) -> bool {
        let last = self.last_failure.load(Ordering::Relaxed);
        last != 0 && self.now_nanos().saturating_sub(last) < duration_to_nanos(window)
    }

    /// Nanoseconds from `epoch` to `at` (saturating: ~584 years).
    pub(crate) fn nanos_at(&self, at: Instant) -> u64 {
        duration_to_nanos(at.saturating_duration_since(self.epoch))
    }

    pub(crate) fn now_nanos(&self) -> u64 {
        self.nanos_at(Instant::now())
    }

    pub(crate) fn backoff(&self) -> Duration {
        self.backoff
    }

    /// Whether `cell` skips the store now.
    pub(crate) fn is_backing_off(&self, cell: usize) -> bool {
        let down = self.down_until[cell].load(Ordering::Relaxed);
        down != 0 && self.now_nanos() < down
    }

    /// How long `cell` skips the store from now on (zero if it does not).
    pub(crate) fn skipped_for(&self, cell: usize) -> Duration {
        let down = self.down_until[cell].load(Ordering::Relaxed);
        Duration::from_nanos(down.saturating_sub(self.now_nanos()))
    }

    /// May a call go to `cell` at `now` (ns)? `Ok(None)`: the cell is
    /// healthy; `Ok(Some(probe))`: its back-off is over and this caller
    /// probes; `Err(())`: skip the store (someone else probes, or the
    /// back-off holds).
    pub(crate) fn admit(&self, cell: usize, now: u64) -> Result<Option<Probe<'_>>, ()> {
        let slot = &self.down_until[cell];
        let down = slot.load(Ordering::Relaxed);
        if down == 0 {
            return Ok(None);
        }
        // One caller per back-off period probes; the rest skip the store.
        let claimed = now.saturating_add(duration_to_nanos(self.backoff));
        if now < down
            || slot
                .compare_exchange(down, claimed, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            return Err(());
        }
        Ok(Some(Probe {
            cell: slot,
            claimed,
            expired: down,
        }))
    }

    /// A call to `cell` succeeded: healthy again, and back from its outage
    /// (for the log) once it has gone [`QUIET`] without failing.
    pub(crate) fn succeeded(&self, cell: usize) -> Change {
        if self.down_until[cell].load(Ordering::Relaxed) != 0 {
            self.down_until[cell].store(0, Ordering::Relaxed);
        }
        // A plain load first: the common case, a healthy cell, writes nothing.
        if self.out[cell].load(Ordering::Relaxed) == 0 {
            return Change::None;
        }
        let failed = self.cell_failure[cell].load(Ordering::Relaxed);
        if self.now_nanos().saturating_sub(failed) < self.quiet
            || self.out[cell].swap(0, Ordering::Relaxed) == 0
        {
            return Change::None;
        }
        if self.cells_out.fetch_sub(1, Ordering::Relaxed) == 1 {
            Change::Back
        } else {
            Change::None
        }
    }

    /// A call to `cell` failed: skip the store there for a back-off.
    pub(crate) fn failed(&self, cell: usize) -> Change {
        let now = self.now_nanos();
        self.last_failure.store(now.max(1), Ordering::Relaxed);
        self.cell_failure[cell].store(now.max(1), Ordering::Relaxed);
        let until = now.saturating_add(duration_to_nanos(self.backoff));
        self.down_until[cell].store(until.max(1), Ordering::Relaxed);
        if self.out[cell].swap(1, Ordering::Relaxed) != 0 {
            self.failures.fetch_add(1, Ordering::Relaxed);
            return Change::None;
        }
        if self.cells_out.fetch_add(1, Ordering::Relaxed) == 0 {
            self.failures.store(1, Ordering::Relaxed);
            Change::Down
        } else {
            self.failures.fetch_add(1, Ordering::Relaxed);
            Change::None
        }
    }

    /// Calls that failed in the outage now ending (or going on).
    pub(crate) fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }

    /// Record that a call for `cell` failed (or was slow) at `at`, without
    /// starting a back-off: the batcher's record, for telling callers late
    /// behind a failing store from those late behind this instance's load.
    pub(crate) fn failed_at(&self, cell: usize, at: Instant) {
        self.failed[cell].fetch_max(self.nanos_at(at).max(1), Ordering::Relaxed);
    }

    /// Whether a call for `cell` failed (or was slow) at or after `asked`.
    pub(crate) fn failed_since(&self, cell: usize, asked: u64) -> bool {
        self.failed[cell].load(Ordering::Relaxed) >= asked.max(1)
    }
}

/// The claim of the one caller that probes the store once a back-off is
/// over. A probe that ends without an answer from the store (its caller's
/// future dropped mid-call, or this instance too busy to send it) is handed
/// on: the cell goes back to its expired back-off, so the next caller
/// probes at once instead of the store being skipped, and the failure
/// policy answering, for one more back-off.
pub(crate) struct Probe<'a> {
    cell: &'a AtomicU64,
    /// What the claim stored: skip the store until then.
    claimed: u64,
    /// The back-off the claim replaced (over, and never 0).
    expired: u64,
}

impl Probe<'_> {
    /// The store answered (or failed): the caller has recorded it.
    pub(crate) fn answered(self) {
        std::mem::forget(self);
    }
}

impl Drop for Probe<'_> {
    fn drop(&mut self) {
        // Only if nothing has been recorded since the claim.
        let _ = self.cell.compare_exchange(
            self.claimed,
            self.expired,
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_caller_probes_after_a_back_off_and_a_dropped_probe_is_handed_on() {
        let mut health = Health::new(1, Duration::from_millis(10), false);
        health.quiet = 0;
        assert!(matches!(health.admit(0, 5), Ok(None)));
        assert_eq!(
            health.failed(0),
            Change::Down,
            "the first failure starts an outage"
        );
        assert_eq!(health.failed(0), Change::None, "logged once");
        let later = health.now_nanos() + 20_000_000;
        let probe = health.admit(0, later).expect("the back-off is over");
        assert!(probe.is_some());
        assert!(health.admit(0, later).is_err(), "one probe at a time");
        drop(probe);
        let again = health
            .admit(0, later)
            .expect("a dropped probe is handed on");
        again.expect("a probe").answered();
        assert_eq!(health.succeeded(0), Change::Back, "the end of the outage");
        assert_eq!(health.succeeded(0), Change::None);
        assert!(matches!(health.admit(0, later), Ok(None)));
    }

    #[test]
    fn an_outage_of_several_cells_is_one_outage() {
        let mut health = Health::new(4, Duration::from_millis(10), false);
        health.quiet = 0;
        assert_eq!(health.failed(1), Change::Down);
        assert_eq!(health.failed(2), Change::None);
        assert_eq!(health.succeeded(1), Change::None);
        assert_eq!(health.succeeded(3), Change::None, "never failed");
        assert_eq!(health.succeeded(2), Change::Back);
    }

    #[test]
    fn absent_at_start_up_skips_the_store_for_one_back_off() {
        let mut health = Health::new(2, Duration::from_secs(60), true);
        health.quiet = 0;
        assert!(health.is_backing_off(0) && health.is_backing_off(1));
        assert_eq!(health.succeeded(0), Change::None);
        assert_eq!(
            health.succeeded(1),
            Change::Back,
            "back once every cell answered"
        );
    }

    #[test]
    fn a_flapping_store_is_one_outage_until_it_has_been_quiet() {
        let mut health = Health::new(1, Duration::ZERO, false);
        health.quiet = 50_000_000;
        assert_eq!(health.failed(0), Change::Down);
        for _ in 0..10 {
            assert_eq!(
                health.succeeded(0),
                Change::None,
                "answering between stalls"
            );
            assert_eq!(health.failed(0), Change::None, "the same outage");
        }
        assert_eq!(health.failures(), 11);
        assert_eq!(health.succeeded(0), Change::None, "not quiet yet");
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(health.succeeded(0), Change::Back);
        assert_eq!(health.succeeded(0), Change::None);
    }
}
