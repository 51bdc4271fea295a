//! [`ShardedEstimator`]: a count-min sketch whose writers stop sharing cache
//! lines.
//!
//! # Design
//!
//! When two cores increment one shared sketch, every counter line they both
//! write ping-pongs between their caches, and the cost of an increment goes
//! from a few nanoseconds to a cross-core transfer per line. Here each thread
//! owns a private *delta table* with the same shape as the shared sketch:
//! `incr` adds to the calling thread's deltas (plain loads and stores, since
//! only the owner writes them) and reads the shared table, which other
//! threads only write in bulk. After `flush_every` of its own updates a
//! thread folds its deltas into the shared table in one pass and zeroes
//! them.
//!
//! ## What an estimate includes
//!
//! * [`incr`](ShardedEstimator::incr) returns the shared table plus the
//!   caller's own deltas: it includes every update by the calling thread and
//!   every update by another thread **except those still in that thread's
//!   delta table** — at most `flush_every` events per other thread (the
//!   staleness bound, tested). With non-negative updates it may therefore
//!   underestimate by at most `(threads − 1) × flush_every × max value`.
//! * [`get`](ShardedEstimator::get) sums the shared table and *every*
//!   thread's deltas, so it is as current as [`Estimator::get`]: it never
//!   underestimates the updates that happened before it. It reads other
//!   threads' lines, so it is the slower call.
//!
//! Flushing moves a delta into the shared table before zeroing it (release
//! store), and `get` reads a delta (acquire) before the shared counter, so a
//! reader can count an in-flight delta twice but never zero times.
//!
//! Memory is one delta table per thread that ever touched the sketch (thread
//! slots are reused after a thread exits, and its unflushed deltas stay
//! visible to `get` and are flushed by the next thread to take the slot).
//!
//! The per-thread table comes from `crate::sync::ThreadLocal`: the
//! `thread_local` crate normally, and under `--cfg loom` a stand-in keyed by
//! loom's thread id, because loom runs all model threads on one OS thread
//! and they would otherwise share one delta table.

use crate::ConfigError;
use crate::counters::Counters;
use crate::estimator::Estimator;
use crate::sketch::{Layout, Location, Locator};
use crate::sync::{AtomicUsize, Ordering, ThreadLocal};
use std::hash::Hash;

struct Shard {
    deltas: Counters,
    pending: AtomicUsize,
}

/// A count-min sketch with per-thread delta tables; same surface as
/// [`Estimator`], estimates from `incr` lag other threads by a bounded
/// number of events.
///
/// ```
/// use weir_limits::ShardedEstimator;
///
/// let sketch = ShardedEstimator::new(3, 1024);
/// std::thread::scope(|s| {
///     for _ in 0..2 {
///         s.spawn(|| {
///             for _ in 0..1000 {
///                 sketch.incr(&"key", 1);
///             }
///         });
///     }
/// });
/// assert!(sketch.get(&"key") >= 2000);
/// ```
pub struct ShardedEstimator {
    shared: Estimator,
    shards: ThreadLocal<Shard>,
    flush_every: usize,
}

impl ShardedEstimator {
    /// A sketch with `hashes × slots` counters (rows layout, random seed)
    /// and the default flush interval ([`default_flush_every`](Self::default_flush_every)).
    ///
    /// # Panics
    ///
    /// On invalid dimensions, like [`Estimator::new`]; use
    /// [`try_new`](Self::try_new) for an error instead.
    pub fn new(hashes: usize, slots: usize) -> Self {
        match Self::try_new(hashes, slots) {
            Ok(sketch) => sketch,
            Err(e) => panic!("invalid ShardedEstimator dimensions: {e}"),
        }
    }

    /// Like [`new`](Self::new), returning invalid dimensions as an error.
    pub fn try_new(hashes: usize, slots: usize) -> Result<Self, ConfigError> {
        let locator = Locator::new(hashes, slots, Layout::Rows)?;
        Ok(Self::from_locator(locator, None))
    }

    /// Full control: the locator (shape, layout, seed) and how many of its
    /// own updates a thread buffers before flushing (at least 1).
    ///
    /// ```
    /// use weir_limits::ShardedEstimator;
    /// use weir_limits::sketch::{Layout, Locator};
    ///
    /// let locator = Locator::with_seed(3, 512, Layout::Blocked, 9).unwrap();
    /// let sketch = ShardedEstimator::with_locator(locator, 64);
    /// assert_eq!(sketch.flush_every(), 64);
    /// ```
    pub fn with_locator(locator: Locator, flush_every: usize) -> Self {
        Self::from_locator(locator, Some(flush_every.max(1)))
    }

    fn from_locator(locator: Locator, flush_every: Option<usize>) -> Self {
        let flush_every = flush_every.unwrap_or_else(|| Self::default_flush_every(locator.cells()));
        Self {
            shared: Estimator::from_parts(locator, crate::Update::Plain),
            shards: ThreadLocal::new(),
            flush_every,
        }
    }

    /// The default flush interval for a sketch of `cells` counters: sixteen
    /// updates per counter, so a flush (one pass over the table) costs a
    /// small fraction of the updates it batches, and never below 1024.
    pub fn default_flush_every(cells: usize) -> usize {
        cells.saturating_mul(16).max(1024)
    }

    /// Add `value` to `key`; returns the estimate including this thread's
    /// updates and other threads' flushed updates.
    #[inline]
    pub fn incr<K: Hash + ?Sized>(&self, key: &K, value: isize) -> isize {
        let location = self.shared.locator().locate(key);
        self.incr_at(&location, value)
    }

    /// Subtract `value` from `key`.
    #[inline]
    pub fn decr<K: Hash + ?Sized>(&self, key: &K, value: isize) {
        let location = self.shared.locator().locate(key);
        self.incr_at(&location, value.wrapping_neg());
    }

    #[inline]
    fn incr_at(&self, location: &Location, value: isize) -> isize {
        let shard = self.shard();
        let mut min = isize::MAX;
        for cell in location.iter() {
            let delta = shard.deltas.cell(cell);
            // Only the owning thread writes its deltas: load + store needs
            // no lock prefix. Release pairs with `get`'s acquire.
            let updated = delta.load(Ordering::Relaxed).wrapping_add(value);
            delta.store(updated, Ordering::Release);
            let estimate = self
                .shared
                .cell_value(cell, Ordering::Relaxed)
                .wrapping_add(updated);
            min = min.min(estimate);
        }
        let pending = shard.pending.load(Ordering::Relaxed) + 1;
        if pending >= self.flush_every {
            self.flush_shard(shard);
        } else {
            shard.pending.store(pending, Ordering::Relaxed);
        }
        min
    }

    /// The current estimate for `key`, including every thread's unflushed
    /// updates.
    pub fn get<K: Hash + ?Sized>(&self, key: &K) -> isize {
        let location = self.shared.locator().locate(key);
        let mut min = isize::MAX;
        for cell in location.iter() {
            let mut total: isize = 0;
            for shard in self.shards.iter() {
                total = total.wrapping_add(shard.deltas.cell(cell).load(Ordering::Acquire));
            }
            total = total.wrapping_add(self.shared.cell_value(cell, Ordering::Relaxed));
            min = min.min(total);
        }
        min
    }

    /// Fold the calling thread's deltas into the shared table now.
    pub fn flush(&self) {
        if let Some(shard) = self.shards.get() {
            self.flush_shard(shard);
        }
    }

    fn flush_shard(&self, shard: &Shard) {
        for (cell, delta) in shard.deltas.iter().enumerate() {
            let value = delta.load(Ordering::Relaxed);
            if value != 0 {
                self.shared.add_to_cell(cell, value);
                // After the add: a reader that sees zero also sees the add.
                delta.store(0, Ordering::Release);
            }
        }
        shard.pending.store(0, Ordering::Relaxed);
    }

    /// Zero the shared table and every delta table. Not atomic with respect
    /// to concurrent updates (like [`Estimator::reset`]).
    pub fn reset(&self) {
        for shard in self.shards.iter() {
            shard.deltas.clear();
            shard.pending.store(0, Ordering::Relaxed);
        }
        self.shared.reset();
    }

    #[inline]
    fn shard(&self) -> &Shard {
        self.shards.get_or(|| Shard {
            deltas: Counters::new(self.shared.locator().cells()),
            pending: AtomicUsize::new(0),
        })
    }

    /// Updates a thread buffers before flushing: the staleness bound, in
    /// events per other thread.
    pub fn flush_every(&self) -> usize {
        self.flush_every
    }

    /// Counters per key.
    pub fn hashes(&self) -> usize {
        self.shared.hashes()
    }

    /// Counters per hash.
    pub fn slots(&self) -> usize {
        self.shared.slots()
    }

    /// Bytes used: the shared table plus every thread's delta table.
    pub fn memory_bytes(&self) -> usize {
        let shards: usize = self
            .shards
            .iter()
            .map(|s| s.deltas.bytes() + std::mem::size_of::<Shard>())
            .sum();
        std::mem::size_of::<Self>() + self.shared.memory_bytes() + shards
    }
}

impl std::fmt::Debug for ShardedEstimator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardedEstimator")
            .field("hashes", &self.hashes())
            .field("slots", &self.slots())
            .field("flush_every", &self.flush_every)
            .finish_non_exhaustive()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Barrier;

    fn sketch(flush_every: usize) -> ShardedEstimator {
        let locator = Locator::with_seed(3, 256, Layout::Blocked, 5).unwrap();
        ShardedEstimator::with_locator(locator, flush_every)
    }

    #[test]
    fn own_updates_are_always_visible() {
        let s = sketch(1_000_000);
        for i in 1..=100 {
            assert!(s.incr(&"k", 1) >= i);
        }
        assert_eq!(s.get(&"k"), 100);
    }

    #[test]
    fn other_threads_lag_by_at_most_flush_every() {
        const FLUSH: usize = 50;
        let s = sketch(FLUSH);
        let barrier = Barrier::new(2);
        std::thread::scope(|scope| {
            scope.spawn(|| {
                // 120 updates: two flushes happen (at 50 and 100), 20 stay buffered.
                for _ in 0..120 {
                    s.incr(&"hot", 1);
                }
                barrier.wait();
                barrier.wait();
            });
            barrier.wait();
            // This thread sees the flushed 100 but not the buffered 20...
            let seen = s.incr(&"hot", 0);
            assert!(seen >= 120 - FLUSH as isize, "saw {seen}");
            assert!(
                seen < 120,
                "buffered updates should not be visible yet: {seen}"
            );
            // ...while `get` sums every delta table.
            assert!(s.get(&"hot") >= 120);
            barrier.wait();
        });
    }

    #[test]
    fn explicit_flush_publishes_buffered_updates() {
        let s = sketch(1_000_000);
        std::thread::scope(|scope| {
            scope.spawn(|| {
                for _ in 0..10 {
                    s.incr(&"k", 3);
                }
                s.flush();
            });
        });
        assert!(s.incr(&"k", 0) >= 30);
    }

    #[test]
    fn updates_of_exited_threads_are_not_lost() {
        let s = sketch(1_000_000);
        for _ in 0..4 {
            std::thread::scope(|scope| {
                scope.spawn(|| s.incr(&"k", 5));
            });
        }
        assert_eq!(s.get(&"k"), 20);
    }

    #[test]
    fn reset_clears_deltas_and_shared_table() {
        let s = sketch(2);
        for _ in 0..5 {
            s.incr(&"k", 1);
        }
        s.reset();
        assert_eq!(s.get(&"k"), 0);
    }
}
