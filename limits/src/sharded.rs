//! [`ShardedEstimator`]: a count-min sketch whose writers stop sharing cache
//! lines.
//!
//! # Design
//!
//! When two cores increment one shared sketch, every counter line they both
//! write ping-pongs between their caches, and the cost of an increment goes
//! from a few nanoseconds to a cross-core transfer per line. Here each thread
//! owns a private table, its *view*: the shared table as of the thread's last
//! sync plus every update the thread made since. `incr` touches the view
//! alone (plain loads and stores, since only the owner writes it), so an
//! update costs what a count-min update costs on one core with no atomics,
//! and one table's worth of lines stays hot in the core's cache. After
//! `flush_every` of its own updates a thread adds what it has not flushed
//! (`view − base`, where *base* is the cold copy of the shared table the view
//! was synced from) to the shared table in one pass, then re-syncs its view.
//!
//! Each flush and each reset bumps a shared change count. A thread compares
//! it with the count its view reflects on every `incr` (one load of a line
//! that changes once per flush), and catches up when another thread has
//! flushed since (re-syncing its view: view and base move by the same
//! amount, so what is unflushed stays) or the sketch was reset (restarting
//! its tables empty first).
//!
//! ## What an estimate includes
//!
//! * [`incr`](ShardedEstimator::incr) returns the caller's view: every update
//!   by the calling thread and every update by another thread **except those
//!   it has not flushed yet** — at most `flush_every` events per other thread
//!   (the staleness bound, tested). With non-negative updates it may
//!   therefore underestimate by at most `(threads − 1) × flush_every × max
//!   value`.
//! * [`get`](ShardedEstimator::get) sums the shared table and *every*
//!   thread's unflushed updates, so it is as current as [`Estimator::get`]:
//!   it never underestimates the updates that happened before it. It reads
//!   other threads' tables, so it is the slower call.
//!
//! A thread rewrites its view and base together only inside a flush, a
//! sync or a restart after a reset, under a per-thread sequence count;
//! `get` reads a thread's pair when no rewrite is under way, then the
//! shared table, so a delta being flushed is counted twice at most, never
//! zero times.
//!
//! Memory is two tables per thread that ever touched the sketch (thread
//! slots are reused after a thread exits, and its unflushed updates stay
//! visible to `get` and are flushed by the next thread to take the slot).
//!
//! The per-thread tables come from `crate::sync::ThreadLocal`: the
//! `thread_local` crate normally, and under `--cfg loom` a stand-in keyed by
//! loom's thread id, because loom runs all model threads on one OS thread
//! and they would otherwise share one table.
//!
//! A thread's slot passes to the next new thread as soon as the old
//! thread's thread-locals are dropped, while other thread-local destructors
//! of the old thread may still run and count. From the moment its
//! thread-locals start being dropped, a thread therefore counts straight
//! into the shared table (an atomic add per cell, announced like a flush),
//! never into its old slot, so two threads never write one view.

use crate::counters::Counters;
use crate::estimator::Estimator;
use crate::shape::Shape;
use crate::sketch::{self, Location, Locator};
use crate::sync::{AtomicU64, AtomicUsize, Backoff, Ordering, ThreadLocal, fence};
use std::hash::Hash;
use std::num::NonZeroUsize;

/// One thread's tables. Only the owning thread writes any field; atomics
/// (relaxed, plain moves on x86) only because `get` reads them elsewhere.
struct Shard {
    /// The shared table as of the last sync, plus this thread's updates since.
    view: Counters,
    /// The shared table as of the last sync: `view − base` is unflushed.
    base: Counters,
    /// Odd while a flush or sync rewrites `view` and `base` together.
    rewriting: AtomicUsize,
    /// Updates left before the next flush.
    until_flush: AtomicUsize,
    /// The change count (flushes and resets) the view reflects.
    synced: AtomicU64,
    /// The reset the tables belong to; older ones are stale.
    generation: AtomicU64,
}

/// The shared counts only flushes and resets write, on their own cache
/// line. `incr` reads `changes` alone: a reset bumps it too (after
/// `resets`), so one compare tells a thread that its view may be behind
/// for either reason.
#[repr(align(128))]
struct Counts {
    /// Flushes plus resets.
    changes: AtomicU64,
    resets: AtomicU64,
}

/// A count-min sketch with per-thread tables; same surface as
/// [`Estimator`], estimates from `incr` lag other threads by a bounded
/// number of events.
///
/// ```
/// use weir_limits::{Shape, ShardedEstimator};
///
/// let sketch = ShardedEstimator::new(Shape::rows::<3, 1024>());
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
    counts: Counts,
    shards: ThreadLocal<Shard>,
    flush_every: usize,
}

impl ShardedEstimator {
    /// A sketch of `shape` with the default flush interval: sixteen updates
    /// per counter, so a flush (one pass over the table) costs a small
    /// fraction of the updates it batches, and never below 1024.
    pub fn new(shape: Shape) -> Self {
        let locator = Locator::new(shape);
        let flush_every = Self::default_flush_every(locator.cells());
        Self::from_locator(locator, flush_every)
    }

    /// A sketch of `shape` whose threads each buffer `flush_every` of their
    /// own updates before flushing them to the shared table.
    ///
    /// ```
    /// use std::num::NonZeroUsize;
    /// use weir_limits::{Shape, ShardedEstimator};
    ///
    /// let every = NonZeroUsize::new(64).unwrap();
    /// let sketch = ShardedEstimator::with_flush_every(Shape::blocked::<3, 512>(), every);
    /// assert_eq!(sketch.flush_every(), 64);
    /// ```
    pub fn with_flush_every(shape: Shape, flush_every: NonZeroUsize) -> Self {
        Self::from_locator(Locator::new(shape), flush_every.get())
    }

    fn from_locator(locator: Locator, flush_every: usize) -> Self {
        Self {
            shared: Estimator::from_parts(locator, crate::estimator::Update::Plain),
            counts: Counts {
                changes: AtomicU64::new(0),
                resets: AtomicU64::new(0),
            },
            shards: ThreadLocal::new(),
            flush_every,
        }
    }

    /// The default flush interval for a sketch of `cells` counters (see
    /// [`new`](Self::new)).
    pub(crate) fn default_flush_every(cells: usize) -> usize {
        cells.saturating_mul(16).max(1024)
    }

    /// Add `value` to `key`; returns the estimate including this thread's
    /// updates and other threads' flushed updates.
    #[inline(always)]
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

    // Always inlined, as `Estimator::incr_hashed` is: the fast path is a
    // few dozen instructions, and a call would cost a fifth of them again.
    #[inline(always)]
    fn incr_at(&self, location: &Location, value: isize) -> isize {
        let Some(shard) = self.shard() else {
            return self.incr_exiting(location, value);
        };
        if self.counts.changes.load(Ordering::Acquire) != shard.synced.load(Ordering::Relaxed) {
            self.catch_up(shard);
        }
        let estimate = location.min_over(|cell| {
            // SAFETY: every cell a location yields is below its
            // locator's `cells()` (the sketch proptests check it), the size
            // `shard` made the view with.
            let counter = unsafe { shard.view.cell_unchecked(cell) };
            // Only the owning thread writes its view: load + store, no lock prefix.
            let updated = counter.load(Ordering::Relaxed).wrapping_add(value);
            counter.store(updated, Ordering::Relaxed);
            updated
        });
        let until_flush = shard.until_flush.load(Ordering::Relaxed).wrapping_sub(1);
        if until_flush == 0 {
            self.flush_shard(shard);
        } else {
            shard.until_flush.store(until_flush, Ordering::Relaxed);
        }
        estimate
    }

    /// The current estimate for `key`, including every thread's unflushed
    /// updates.
    pub fn get<K: Hash + ?Sized>(&self, key: &K) -> isize {
        self.get_at(&self.shared.locator().locate(key))
    }

    fn get_at(&self, location: &Location) -> isize {
        let mut totals = [0isize; sketch::MAX_HASHES];
        let generation = self.counts.resets.load(Ordering::Acquire);
        for shard in self.shards.iter() {
            let mut backoff = Backoff::new();
            loop {
                let before = shard.rewriting.load(Ordering::Acquire);
                if before & 1 == 0 {
                    let mut unflushed = [0isize; sketch::MAX_HASHES];
                    for (slot, cell) in unflushed.iter_mut().zip(location.iter()) {
                        let base = shard.base.cell(cell).load(Ordering::Relaxed);
                        let view = shard.view.cell(cell).load(Ordering::Relaxed);
                        *slot = view.wrapping_sub(base);
                    }
                    let current = shard.generation.load(Ordering::Relaxed) == generation;
                    // The pair was read whole if no rewrite began meanwhile.
                    fence(Ordering::Acquire);
                    if shard.rewriting.load(Ordering::Relaxed) == before {
                        // Tables from before the last reset count nothing.
                        let unflushed = unflushed.map(|delta| if current { delta } else { 0 });
                        for (total, delta) in totals.iter_mut().zip(unflushed) {
                            *total = total.wrapping_add(delta);
                        }
                        break;
                    }
                }
                backoff.wait();
            }
        }
        // After every thread's pair: a delta flushed since was added to the
        // shared table before the flush ended, so it is seen here.
        totals
            .iter()
            .zip(location.iter())
            .map(|(total, cell)| {
                total.wrapping_add(self.shared.cell_value(cell, Ordering::Relaxed))
            })
            .min()
            .unwrap_or(0)
    }

    /// Fold the calling thread's unflushed updates into the shared table now.
    pub fn flush(&self) {
        // A thread with no table has nothing to flush, and an exiting one
        // has none any more: its updates wait for the slot's next owner.
        if let Some(shard) = self.shards.get() {
            self.restart_if_reset(shard);
            self.flush_shard(shard);
        }
    }

    /// An update from a thread whose thread-locals are being dropped: its
    /// slot may already be another thread's, so the update goes straight
    /// to the shared table, announced as a flush so that other threads'
    /// views stay within their staleness bound.
    #[cold]
    #[inline(never)]
    fn incr_exiting(&self, location: &Location, value: isize) -> isize {
        self.shared.add_all(location, value);
        // Release: whoever sees the new count sees the addition.
        self.counts.changes.fetch_add(1, Ordering::AcqRel);
        // The thread's earlier, unflushed updates sit in a table it can no
        // longer call its own; `get` still counts them.
        self.get_at(location)
    }

    #[cold]
    #[inline(never)]
    fn flush_shard(&self, shard: &Shard) {
        let before = self.counts.changes.load(Ordering::Acquire);
        // A reset this shard has not restarted for (it came after this
        // `incr` checked): its updates are flushed all the same (they raced
        // the reset, and may survive it), but the shard must not count as
        // synced, or its later updates would sit in a table `get` ignores
        // until a restart dropped them. `resets` moves before `changes`, so
        // a reset counted in `before` is seen here.
        let stale =
            shard.generation.load(Ordering::Relaxed) != self.counts.resets.load(Ordering::Acquire);
        self.rewrite(shard, Rewrite::Flush);
        shard.until_flush.store(self.flush_every, Ordering::Relaxed);
        // Release: whoever sees the new count sees the additions above.
        let previous = self.counts.changes.fetch_add(1, Ordering::AcqRel);
        // With no other flush or reset in between, the view reflects every
        // change up to this one; otherwise the next `incr` catches up (and
        // after a reset, restarts: no change count is u64::MAX).
        let synced = if stale {
            u64::MAX
        } else if previous == before {
            before + 1
        } else {
            before
        };
        shard.synced.store(synced, Ordering::Relaxed);
    }

    /// Bring the view up to the shared table, keeping what is unflushed,
    /// after restarting it if a reset came since it was last used.
    #[cold]
    #[inline(never)]
    fn catch_up(&self, shard: &Shard) {
        // The change count first: a reset after it is counted in it only
        // if `restart_if_reset` below sees that reset too (`resets` moves
        // first). Read the other way round, a reset in between left the
        // shard synced past the reset with its tables of before it.
        let changes = self.counts.changes.load(Ordering::Acquire);
        self.restart_if_reset(shard);
        self.rewrite(shard, Rewrite::Sync);
        shard.synced.store(changes, Ordering::Relaxed);
    }

    /// Restart the calling thread's shard empty if a reset came since it
    /// was last used.
    fn restart_if_reset(&self, shard: &Shard) {
        let resets = self.counts.resets.load(Ordering::Acquire);
        if shard.generation.load(Ordering::Relaxed) != resets {
            self.restart(shard, resets);
        }
    }

    /// Empty the calling thread's tables for reset `resets`; its next use
    /// syncs with the shared table.
    #[cold]
    #[inline(never)]
    fn restart(&self, shard: &Shard, resets: u64) {
        self.rewrite(shard, Rewrite::Restart(resets));
        shard.until_flush.store(self.flush_every, Ordering::Relaxed);
        // No change count is u64::MAX: the next `incr` syncs.
        shard.synced.store(u64::MAX, Ordering::Relaxed);
    }

    /// Rewrite the calling thread's view and base together, under its
    /// sequence count (only the owner ever writes them, so `get` sees one
    /// writer).
    fn rewrite(&self, shard: &Shard, how: Rewrite) {
        let count = shard.rewriting.load(Ordering::Relaxed);
        shard
            .rewriting
            .store(count.wrapping_add(1), Ordering::Relaxed);
        // Readers that see the cells below also see the odd count.
        fence(Ordering::Release);
        if let Rewrite::Restart(resets) = how {
            shard.view.clear();
            shard.base.clear();
            shard.generation.store(resets, Ordering::Relaxed);
        } else {
            let flush = matches!(how, Rewrite::Flush);
            for (cell, (view, base)) in shard.view.iter().zip(shard.base.iter()).enumerate() {
                let unflushed = view
                    .load(Ordering::Relaxed)
                    .wrapping_sub(base.load(Ordering::Relaxed));
                let (shared, kept) = if flush && unflushed != 0 {
                    (self.shared.add_to_cell(cell, unflushed), 0)
                } else {
                    (self.shared.cell_value(cell, Ordering::Relaxed), unflushed)
                };
                view.store(shared.wrapping_add(kept), Ordering::Relaxed);
                base.store(shared, Ordering::Relaxed);
            }
        }
        shard
            .rewriting
            .store(count.wrapping_add(2), Ordering::Release);
    }

    /// Forget every count: the shared table is zeroed now, and each
    /// thread's tables when that thread next uses the sketch (until then
    /// `get` ignores them). Only a table's owner ever writes it, so a reset
    /// cannot tear a flush: an update or flush racing a reset may survive
    /// it (an overestimate, as with [`Estimator::reset`]), and no update
    /// after the reset returns is lost.
    pub fn reset(&self) {
        // Clear, then announce: a thread that sees the new reset count
        // re-syncs from a table already cleared (the release pairs with its
        // acquire), and its later flushes land after the clearing stores.
        // The other order let a thread copy pre-reset counts into its view.
        self.shared.reset();
        self.counts.resets.fetch_add(1, Ordering::AcqRel);
        // After `resets`: a thread that sees this change sees the reset.
        self.counts.changes.fetch_add(1, Ordering::AcqRel);
    }

    /// The calling thread's tables; `None` once its thread-locals are
    /// being dropped (see `crate::sync::ThreadLocal`).
    #[inline]
    fn shard(&self) -> Option<&Shard> {
        self.shards.get_or(|| {
            let cells = self.shared.locator().cells();
            // A new thread starts from nothing synced: its first `incr`
            // syncs (unless no thread has flushed yet, when the shared
            // table is still zero).
            Shard {
                view: Counters::new(cells),
                base: Counters::new(cells),
                rewriting: AtomicUsize::new(0),
                until_flush: AtomicUsize::new(self.flush_every),
                synced: AtomicU64::new(0),
                generation: AtomicU64::new(self.counts.resets.load(Ordering::Acquire)),
            }
        })
    }

    /// Updates a thread buffers before flushing: the staleness bound, in
    /// events per other thread.
    pub fn flush_every(&self) -> usize {
        self.flush_every
    }

    /// Bytes used: the shared table plus every thread's two tables.
    pub fn memory_bytes(&self) -> usize {
        let shards: usize = self
            .shards
            .iter()
            .map(|s| s.view.bytes() + s.base.bytes() + ThreadLocal::<Shard>::BYTES_PER_THREAD)
            .sum();
        std::mem::size_of::<Self>() + self.shared.memory_bytes() + shards
    }
}

/// What a [`ShardedEstimator::rewrite`] does to every cell.
#[derive(Clone, Copy)]
enum Rewrite {
    /// Add the unflushed part to the shared table; view = base = shared.
    Flush,
    /// Re-base on the shared table, keeping the unflushed part.
    Sync,
    /// Empty both tables for this reset count.
    Restart(u64),
}

impl std::fmt::Debug for ShardedEstimator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardedEstimator")
            .field("hashes", &self.shared.locator().hashes())
            .field("slots", &self.shared.locator().slots())
            .field("flush_every", &self.flush_every)
            .finish_non_exhaustive()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Barrier;

    #[test]
    fn the_default_flush_interval_saturates() {
        assert_eq!(
            ShardedEstimator::default_flush_every(usize::MAX),
            usize::MAX
        );
        assert_eq!(ShardedEstimator::default_flush_every(1), 1024);
        assert_eq!(ShardedEstimator::default_flush_every(4096), 65_536);
    }

    fn sketch(flush_every: usize) -> ShardedEstimator {
        let every = NonZeroUsize::new(flush_every).unwrap();
        ShardedEstimator::with_flush_every(Shape::blocked::<3, 256>().with_seed(5), every)
    }

    #[test]
    fn one_thread_keeps_each_sketchs_tables_apart() {
        let (a, b) = (sketch(1000), sketch(1000));
        for _ in 0..10 {
            a.incr(&1u8, 1);
            b.incr(&1u8, 2);
        }
        assert_eq!((a.get(&1u8), b.get(&1u8)), (10, 20));
        // Each round's sketch likely reuses the last one's memory: the
        // thread's cached table must not outlive the sketch it came from.
        for _ in 0..3 {
            let c = sketch(1000);
            assert_eq!(c.incr(&1u8, 1), 1);
            assert_eq!(c.get(&1u8), 1);
        }
        assert_eq!((a.incr(&1u8, 1), b.incr(&1u8, 1)), (11, 21));
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
        // The resetting thread's own view forgets too, buffered or not.
        assert_eq!(s.incr(&"k", 1), 1);
        let other = std::thread::scope(|scope| scope.spawn(|| s.incr(&"k", 1)).join().unwrap());
        assert_eq!(other, 1, "another thread's view after the reset");
        s.reset();
        assert_eq!(s.incr(&"k", 1), 1);
    }
}
