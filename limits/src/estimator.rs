//! The lock-free count-min [`Estimator`].
//!
//! # Design
//!
//! A count-min sketch keeps `hashes × slots` counters; each key maps to one
//! counter per hash (see [`sketch`](crate::sketch) for where they live) and
//! its estimate is the smallest of them. With non-negative updates no counter
//! of a key ever drops below the key's true total, so the estimate never
//! underestimates; it overestimates by whatever other keys share all of the
//! key's counters.
//!
//! Updates are plain atomic read-modify-writes, so the structure is lock-free
//! and always current: an `incr` returns an estimate that includes its own
//! update and every update that completed before it began. Two increments
//! of one key racing row by row may each return a minimum from the row the
//! other had not reached yet; once both return, `get` sees both. Such a
//! returned estimate is therefore no basis for admitting against a limit;
//! [`Inflight`](crate::Inflight) re-reads behind a fence for that, keeping
//! the cost off this path.
//!
//! ## Update rules
//!
//! * [`Update::Plain`] adds to every counter of the key (`fetch_add`), so it
//!   supports decrements (in-flight counting) and is exactly pingora's rule.
//! * [`Update::Conservative`] raises only the counters below the new
//!   estimate ("conservative update"), which lowers the overestimate of
//!   light keys a lot on skewed traffic and usually writes a single counter.
//!   Concurrent conservative updates run a compare-and-swap loop: every
//!   counter below the target is swapped from the value that was read, and
//!   any failed swap restarts from fresh reads. Because counters only grow,
//!   two racing updates of one key can never both succeed with the same
//!   target (the loom model checks this), so no increment is lost.
//!   It **requires non-negative increments**: a negative `incr` or a `decr`
//!   subtracts from all of the key's counters like the plain rule, and since
//!   conservative counters do not hold every key's full count, that can
//!   push other keys' estimates below their truth. Use the plain rule where
//!   counts go down.
//!
//! ## Overflow
//!
//! Counters are 64-bit. Plain updates wrap on overflow (as atomics do, in
//! debug and release builds alike; at a billion increments a second that
//! takes 292 years); conservative updates saturate at `isize::MAX`. Nothing
//! panics.

use crate::counters::Counters;
use crate::shape::Shape;
use crate::sketch::{self, Location, Locator};
use crate::sync::Ordering;
use std::hash::Hash;

/// How an increment changes a key's counters.
///
/// ```
/// use weir_limits::{Estimator, Shape, Update};
///
/// // Conservative: lower overestimates for skewed traffic, no decrements.
/// let hits = Estimator::with_update(Shape::rows::<4, 1024>(), Update::Conservative);
/// hits.incr("/index.html", 3);
/// assert!(hits.get("/index.html") >= 3);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Update {
    /// Add to every counter (supports decrements).
    #[default]
    Plain,
    /// Raise only the counters below the new estimate (non-negative
    /// increments only; lower overestimates).
    Conservative,
}

/// A lock-free count-min sketch: approximate per-key counts in fixed memory.
///
/// The surface matches pingora-limits' `Estimator` (`incr`, `decr`, `get`,
/// `reset`); its constructor takes a [`Shape`], so it cannot fail.
///
/// ```
/// use weir_limits::{Estimator, Shape};
///
/// let estimator = Estimator::new(Shape::rows::<4, 1024>());
/// assert_eq!(estimator.incr("red", 1), 1);
/// assert_eq!(estimator.incr("red", 2), 3);
/// estimator.decr("red", 1);
/// assert_eq!(estimator.get("red"), 2);
/// assert_eq!(estimator.get("blue"), 0);
/// ```
pub struct Estimator {
    locator: Locator,
    counters: Counters,
    update: Update,
}

impl Estimator {
    /// A sketch of `shape` with plain updates.
    pub fn new(shape: Shape) -> Self {
        Self::with_update(shape, Update::Plain)
    }

    /// A sketch of `shape` with the given update rule.
    ///
    /// ```
    /// use weir_limits::{Estimator, Shape, Update};
    ///
    /// let estimator = Estimator::with_update(Shape::rows::<4, 4096>().with_seed(42), Update::Conservative);
    /// assert_eq!(estimator.incr(&7u32, 5), 5);
    /// ```
    pub fn with_update(shape: Shape, update: Update) -> Self {
        Self::from_parts(Locator::new(shape), update)
    }

    pub(crate) fn from_parts(locator: Locator, update: Update) -> Self {
        let counters = Counters::new(locator.cells());
        Self {
            locator,
            counters,
            update,
        }
    }

    /// Add `value` to `key` and return its new estimate.
    #[inline]
    pub fn incr<K: Hash + ?Sized>(&self, key: &K, value: isize) -> isize {
        self.incr_hashed(self.locator.hash(key), value)
    }

    /// Subtract `value` from `key`. Under the conservative rule this can
    /// make other keys underestimate: a key's cells may hold less than was
    /// added to it, so subtracting all of it takes from the keys sharing
    /// them.
    #[inline]
    pub fn decr<K: Hash + ?Sized>(&self, key: &K, value: isize) {
        self.add_all(&self.locator.locate(key), value.wrapping_neg());
    }

    /// The estimate for `key`: never below its true count when all updates
    /// were non-negative.
    #[inline]
    pub fn get<K: Hash + ?Sized>(&self, key: &K) -> isize {
        self.get_at(&self.locator.locate(key))
    }

    /// Zero every counter. Updates racing with a reset may survive it in
    /// some of their counters (the reset is not atomic across counters).
    pub fn reset(&self) {
        self.counters.clear();
    }

    /// Heap and inline bytes this estimator occupies.
    pub fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Self>() + self.counters.bytes()
    }

    /// The locator, for structures that keep their own state per key position.
    pub(crate) fn locator(&self) -> &Locator {
        &self.locator
    }

    /// [`incr`](Self::incr) of the key with this [`Locator::hash`].
    /// Always inlined: it is small once the update rule is known, and a
    /// call per event costs more than the plain update itself.
    #[inline(always)]
    pub(crate) fn incr_hashed(&self, hash: u64, value: isize) -> isize {
        match self.update {
            Update::Plain => self.add_all(&self.locator.locate_hash(hash), value),
            Update::Conservative => self.incr_conservative(hash, value),
        }
    }

    // Out of line, and given the hash (one register) rather than the
    // location: otherwise the plain path spills the location to the stack
    // for this call on every event, and the atomics wait for those stores.
    #[inline(never)]
    fn incr_conservative(&self, hash: u64, value: isize) -> isize {
        let location = self.locator.locate_hash(hash);
        if value >= 0 {
            self.raise_to_minimum(&location, value)
        } else {
            self.add_all(&location, value);
            self.get_at(&location)
        }
    }

    #[inline]
    pub(crate) fn add_all(&self, location: &Location, value: isize) -> isize {
        location.min_over(|cell| {
            let previous = self.counters.cell(cell).fetch_add(value, Ordering::Relaxed);
            previous.wrapping_add(value)
        })
    }

    fn raise_to_minimum(&self, location: &Location, value: isize) -> isize {
        let mut seen = [0isize; sketch::MAX_HASHES];
        'retry: loop {
            let mut min = isize::MAX;
            for (slot, cell) in seen.iter_mut().zip(location.iter()) {
                // SeqCst: the argument that racing updates cannot both win
                // relies on one total order of these reads and the swaps.
                *slot = self.counters.cell(cell).load(Ordering::SeqCst);
                min = min.min(*slot);
            }
            let target = min.saturating_add(value);
            if target == min {
                return min;
            }
            for (&old, cell) in seen.iter().zip(location.iter()) {
                if old < target
                    && self
                        .counters
                        .cell(cell)
                        .compare_exchange(old, target, Ordering::SeqCst, Ordering::SeqCst)
                        .is_err()
                {
                    continue 'retry;
                }
            }
            return target;
        }
    }

    #[inline]
    pub(crate) fn get_at(&self, location: &Location) -> isize {
        location
            .iter()
            .map(|cell| self.counters.cell(cell).load(Ordering::Relaxed))
            .min()
            .unwrap_or(0)
    }

    #[inline]
    pub(crate) fn cell_value(&self, cell: usize, order: Ordering) -> isize {
        self.counters.cell(cell).load(order)
    }

    /// Add `value` to one cell; returns the cell's new value.
    #[inline]
    pub(crate) fn add_to_cell(&self, cell: usize, value: isize) -> isize {
        self.counters
            .cell(cell)
            .fetch_add(value, Ordering::Relaxed)
            .wrapping_add(value)
    }
}

impl std::fmt::Debug for Estimator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Estimator")
            .field("hashes", &self.locator.hashes())
            .field("slots", &self.locator.slots())
            .field("layout", &self.locator.layout())
            .field("update", &self.update)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shape::Layout;
    use proptest::prelude::*;
    use std::collections::HashMap;

    fn build(layout: Layout, update: Update, hashes: usize, slots: usize) -> Estimator {
        build_seeded(layout, update, hashes, slots, 11)
    }

    fn build_seeded(
        layout: Layout,
        update: Update,
        hashes: usize,
        slots: usize,
        seed: u64,
    ) -> Estimator {
        let shape = Shape::try_new(hashes, slots, layout).unwrap();
        Estimator::with_update(shape.with_seed(seed), update)
    }

    #[test]
    fn counters_wrap_instead_of_panicking_in_plain_mode() {
        let e = build(Layout::Blocked, Update::Plain, 2, 8);
        e.incr(&1u8, isize::MAX);
        assert_eq!(e.incr(&1u8, 1), isize::MIN);
    }

    #[test]
    fn conservative_updates_saturate() {
        let e = build(Layout::Blocked, Update::Conservative, 2, 8);
        e.incr(&1u8, isize::MAX);
        assert_eq!(e.incr(&1u8, 5), isize::MAX);
    }

    #[test]
    fn distinct_keys_are_exact_when_the_sketch_is_roomy() {
        for layout in [Layout::Blocked, Layout::Rows] {
            let e = build(layout, Update::Plain, 4, 1 << 14);
            for k in 0u32..50 {
                e.incr(&k, k as isize + 1);
            }
            for k in 0u32..50 {
                assert_eq!(e.get(&k), k as isize + 1, "{layout:?} key {k}");
            }
        }
    }

    #[test]
    fn reset_forgets_everything() {
        let e = build(Layout::Rows, Update::Plain, 3, 64);
        e.incr("a", 10);
        e.reset();
        assert_eq!(e.get("a"), 0);
    }

    #[test]
    fn memory_is_what_the_counters_take() {
        let e = build(Layout::Rows, Update::Plain, 3, 1024);
        assert!(e.memory_bytes() >= 3 * 1024 * 8);
        assert!(e.memory_bytes() < 3 * 1024 * 8 + 256);
    }

    fn stream() -> impl Strategy<Value = Vec<(u16, isize)>> {
        proptest::collection::vec((0u16..400, 0isize..20), 0..600)
    }

    proptest! {
        #[test]
        fn never_underestimates_non_negative_streams(
            events in stream(), hashes in 1usize..=8, slots in 1usize..64, seed: u64,
        ) {
            for layout in [Layout::Blocked, Layout::Rows] {
                for update in [Update::Plain, Update::Conservative] {
                    let e = build_seeded(layout, update, hashes, slots, seed);
                    let mut truth: HashMap<u16, isize> = HashMap::new();
                    for &(k, v) in &events {
                        let total = truth.entry(k).or_default();
                        *total += v;
                        let estimate = e.incr(&k, v);
                        prop_assert!(estimate >= *total);
                    }
                    for (k, total) in &truth {
                        prop_assert!(e.get(k) >= *total);
                    }
                }
            }
        }

        #[test]
        fn conservative_never_exceeds_plain(
            events in stream(), hashes in 1usize..=8, slots in 1usize..64, seed: u64,
        ) {
            for layout in [Layout::Blocked, Layout::Rows] {
                let plain = build_seeded(layout, Update::Plain, hashes, slots, seed);
                let conservative = build_seeded(layout, Update::Conservative, hashes, slots, seed);
                for &(k, v) in &events {
                    let p = plain.incr(&k, v);
                    let c = conservative.incr(&k, v);
                    prop_assert!(c <= p);
                }
                for &(k, _) in &events {
                    prop_assert!(conservative.get(&k) <= plain.get(&k));
                }
            }
        }

        #[test]
        fn plain_decrements_undo_increments(
            events in stream(), seed: u64,
        ) {
            let e = build_seeded(Layout::Rows, Update::Plain, 3, 32, seed);
            for &(k, v) in &events { e.incr(&k, v); }
            for &(k, v) in &events { e.decr(&k, v); }
            for &(k, _) in &events { prop_assert_eq!(e.get(&k), 0); }
        }
    }
}
