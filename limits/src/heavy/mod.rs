//! [`HeavyHitters`]: a count-min sketch as a first-stage filter in front of
//! a bounded exact table, so the few heavy keys are counted exactly in
//! little memory, however many light keys pass.
//!
//! # Design
//!
//! Every key is first counted in a sketch. Once a key's estimate reaches the
//! threshold it is *admitted* to an exact table, and from then on its events
//! are counted there, exactly. Because a count-min estimate never
//! underestimates (non-negative counts), a key whose true total reaches the
//! threshold has an estimate at or above it no later than that moment.
//!
//! ## A bounded table (SpaceSaving eviction)
//!
//! The sketch never forgets, so under key spraying (millions of keys seen
//! once) its counters climb until every new key's estimate passes the
//! threshold: unbounded, the table took in 1.1 M of 2 M one-shot keys and
//! grew from nothing to 46 MB. The table therefore holds at most
//! `capacity` keys ([`DEFAULT_CAPACITY`](HeavyHitters::DEFAULT_CAPACITY)
//! unless chosen). When it is full, a key that reaches the threshold
//! competes, as in SpaceSaving: it replaces the admitted key with the
//! smallest total if its own estimate is larger, and stays in the sketch
//! otherwise. Its estimate, the newcomer's error bound, is at least the
//! evicted count, the bound SpaceSaving gives a newcomer by inheriting
//! that count. The evicted key's exact count is added back to the sketch,
//! so the sketch stays an upper bound of every key's total and a key that
//! returns is never undercounted. A table min-heap keyed by (possibly
//! stale, never too high) totals finds the smallest in `O(log capacity)`
//! amortised: every stale entry it fixes was made stale by an event.
//!
//! A sketch that decays by window would also stop the growth, but not
//! bound it (a spray within one window still fills the table), and it
//! would trade the lifetime counts this type reports for windowed ones;
//! windowed rates are [`Rate`](crate::Rate)'s job.
//!
//! ## What is guaranteed
//!
//! With `N` the sum of all counts and `C` the capacity:
//!
//! * **Bounded memory**: at most `C` keys are in the table, and its
//!   allocations never grow past what `C` keys need.
//! * **No undercount**: an admitted key's [`total`](HeavyCount::total) is
//!   never below its true total. It exceeds it by at most the sketch's
//!   error when the key was admitted (`ε·N` with probability `1 − δ` for a
//!   sketch of `⌈e/ε⌉` slots and `⌈ln(1/δ)⌉` hashes, less with the
//!   conservative rule).
//! * **Heavy keys are in the table**: a key whose true total reaches the
//!   threshold is admitted, unless the table is full and its total is at
//!   most the smallest total in the table. That smallest total never
//!   shrinks while the table is full, and is at most `N / C` plus the
//!   largest overestimate among the admitted keys (their totals sum to at
//!   most `N` plus those overestimates), so every key whose true total
//!   exceeds both the threshold and about `N / C + ε·N` is in the table.
//!   Until the table first fills, every key that reached the threshold is
//!   in it.
//!
//! An admitted key's total is reported as two parts: the exact count since
//! admission and the sketch's estimate at admission (an upper bound of what
//! came before). Under concurrency no event is lost, some may count twice:
//!
//! * Two threads admitting the same key at once: the table decides which
//!   one inserts; the other counts its event exactly (it may also be in the
//!   estimate at admission).
//! * An event counted in the sketch as light while the key is being
//!   admitted: plain-rule increments racing row by row can return estimates
//!   that miss each other, so the admitter's own estimate may miss it. The
//!   admitter therefore bumps an admissions counter, issues a `SeqCst`
//!   fence and re-reads the sketch; a light event issues a fence after its
//!   increment and re-checks the table if the counter moved. Whichever
//!   fence comes second sees the other's side (the loom model
//!   `heavy_hitters_events_racing_an_admission_are_not_lost` checks it).
//! * Evictions happen under the table's write lock, which excludes every
//!   exact count: an event is counted exactly before the eviction (and
//!   added back to the sketch with the rest) or in the sketch after it.

mod table;

use crate::estimator::{Estimator, Update};
use crate::shape::Shape;
use crate::sketch::Location;
use crate::sync::{AtomicUsize, Ordering, RwLock, fence};
use std::hash::Hash;
use std::num::{NonZeroU64, NonZeroUsize};
use table::{Entry, Table};

/// What [`HeavyHitters::record`] knows about a key after counting it.
///
/// ```
/// use std::num::NonZeroU64;
/// use weir_limits::{HeavyHitters, Observation};
///
/// let heavy = HeavyHitters::new(NonZeroU64::new(2).unwrap());
/// assert_eq!(heavy.record(&"k", 1), Observation::Light(1));
/// assert!(matches!(heavy.record(&"k", 1), Observation::Heavy(_)));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Observation {
    /// The key is not in the exact table: below the threshold, or the
    /// table is full of keys with higher totals. This is its sketch
    /// estimate.
    Light(isize),
    /// The key is in the exact table.
    Heavy(HeavyCount),
}

/// An admitted key's count.
///
/// ```
/// use std::num::NonZeroU64;
/// use weir_limits::{HeavyCount, HeavyHitters, Observation};
///
/// let heavy = HeavyHitters::new(NonZeroU64::new(3).unwrap());
/// for _ in 0..5 {
///     heavy.record(&"k", 1);
/// }
/// let count: HeavyCount = heavy.get(&"k").unwrap();
/// assert_eq!((count.at_admission, count.since_admission, count.total()), (3, 2, 5));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeavyCount {
    /// The sketch's estimate when the key was admitted (an upper bound of the
    /// events before admission, including the admitting event).
    pub at_admission: isize,
    /// Events counted exactly since admission.
    pub since_admission: isize,
}

impl HeavyCount {
    /// Upper bound of the key's total: `at_admission + since_admission`.
    pub fn total(&self) -> isize {
        self.at_admission.saturating_add(self.since_admission)
    }
}

/// Keys counted approximately until they cross a threshold, exactly after,
/// in a table of at most a fixed number of keys.
///
/// ```
/// use std::num::NonZeroU64;
/// use weir_limits::HeavyHitters;
///
/// let heavy = HeavyHitters::new(NonZeroU64::new(100).unwrap());
/// for _ in 0..150 {
///     heavy.record(&"noisy-client", 1);
/// }
/// heavy.record(&"quiet-client", 1);
/// let top = heavy.heavy_hitters();
/// assert_eq!(top.len(), 1);
/// assert_eq!(top[0].0, "noisy-client");
/// assert_eq!(top[0].1.since_admission, 50);
/// ```
pub struct HeavyHitters<K> {
    sketch: Estimator,
    threshold: isize,
    capacity: usize,
    table: RwLock<Table<K>>,
    hasher: ahash::RandomState,
    /// Keys admitted so far; bumped under the write lock. A light event
    /// that sees it change while it counted looks the key up again.
    admissions: AtomicUsize,
}

impl<K: Hash + Eq + Clone> HeavyHitters<K> {
    /// The sketch [`new`](Self::new) uses: 4 × 4096, rows layout, with
    /// conservative updates.
    pub const DEFAULT_SHAPE: Shape = Shape::rows::<4, 4096>();

    /// The most keys the exact table holds unless a constructor says
    /// otherwise: 1024, so that keys above about `N / 1024` of the traffic
    /// (besides the threshold) are always there, in a table of tens of
    /// kilobytes for small keys (each key costs its own size plus about 50
    /// bytes), beside the default sketch's 128 KiB.
    pub const DEFAULT_CAPACITY: NonZeroUsize = NonZeroUsize::new(1024).unwrap();

    /// Admit keys at `threshold` events, with a conservative sketch of
    /// [`DEFAULT_SHAPE`](Self::DEFAULT_SHAPE) and a table of at most
    /// [`DEFAULT_CAPACITY`](Self::DEFAULT_CAPACITY) keys.
    pub fn new(threshold: NonZeroU64) -> Self {
        Self::with_sketch(
            threshold,
            Self::DEFAULT_SHAPE,
            Update::Conservative,
            Self::DEFAULT_CAPACITY,
        )
    }

    /// Admit keys at `threshold` events into a table of at most `capacity`
    /// keys, counting them before admission in a sketch of `shape` updated
    /// by `update` ([`new`](Self::new) takes [`DEFAULT_SHAPE`](Self::DEFAULT_SHAPE),
    /// [`Update::Conservative`] and [`DEFAULT_CAPACITY`](Self::DEFAULT_CAPACITY)).
    /// Conservative update is recommended (fewer false admissions); counts
    /// must be non-negative either way. A threshold above `isize::MAX`
    /// counts as `isize::MAX`. Nothing is allocated for the table until
    /// keys are admitted.
    ///
    /// ```
    /// use std::num::{NonZeroU64, NonZeroUsize};
    /// use weir_limits::{HeavyHitters, Update};
    ///
    /// let threshold = NonZeroU64::new(5).unwrap();
    /// let two = NonZeroUsize::new(2).unwrap();
    /// let heavy = HeavyHitters::with_sketch(threshold, HeavyHitters::<u32>::DEFAULT_SHAPE, Update::Conservative, two);
    /// for key in 0..100u32 {
    ///     for _ in 0..5 + key {
    ///         heavy.record(&key, 1);
    ///     }
    /// }
    /// let top: Vec<u32> = heavy.heavy_hitters().iter().map(|(k, _)| *k).collect();
    /// assert_eq!(top, [99, 98]);
    /// ```
    pub fn with_sketch(
        threshold: NonZeroU64,
        shape: Shape,
        update: Update,
        capacity: NonZeroUsize,
    ) -> Self {
        Self {
            sketch: Estimator::with_update(shape, update),
            threshold: isize::try_from(threshold.get()).unwrap_or(isize::MAX),
            capacity: capacity.get(),
            table: RwLock::new(Table::new()),
            hasher: ahash::RandomState::new(),
            admissions: AtomicUsize::new(0),
        }
    }

    /// Count `count` events of `key` (negative counts are treated as zero:
    /// the no-miss guarantee needs non-negative counts). Exact counts
    /// saturate at `isize::MAX`.
    pub fn record(&self, key: &K, count: isize) -> Observation {
        let count = count.max(0);
        let table_hash = self.hasher.hash_one(key);
        let admissions = match self.count_exact(key, table_hash, count) {
            Ok(found) => return Observation::Heavy(found),
            Err(admissions) => admissions,
        };
        let hash = self.sketch.locator().hash(key);
        let location = self.sketch.locator().locate_hash(hash);
        let estimate = self.sketch.incr_hashed(hash, count);
        if estimate >= self.threshold {
            return match self.admit(key, table_hash, &location, count) {
                Some(found) => Observation::Heavy(found),
                // Outcompeted: the event stays in the sketch, where a later
                // admission of this key reads it (under the same lock).
                None => Observation::Light(estimate),
            };
        }
        // An admission of this key may be racing: it either reads this
        // event in the sketch (its fence comes after ours) or has bumped
        // `admissions` where we now read it (ours comes after its), and
        // then the key is in the table and the event is counted there.
        fence(Ordering::SeqCst);
        if self.admissions.load(Ordering::Relaxed) != admissions
            && let Ok(found) = self.count_exact(key, table_hash, count)
        {
            return Observation::Heavy(found);
        }
        Observation::Light(estimate)
    }

    /// Put `key` in the exact table, or count `count` exactly if another
    /// thread did first; `None` if the table is full of keys whose totals
    /// are at least the key's estimate.
    fn admit(
        &self,
        key: &K,
        table_hash: u64,
        location: &Location,
        count: isize,
    ) -> Option<HeavyCount> {
        let mut table = self.table.write();
        // Who admits is decided by the table, not by comparing estimates:
        // two racing plain-rule increments can return the same estimate,
        // and the second would then take the first's admission for its own
        // and count nothing.
        if let Some(entry) = table.find(table_hash, key) {
            // Another thread admitted it first; count this event exactly.
            return Some(entry.add(count));
        }
        self.admissions.fetch_add(1, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        // Read after the fence, not our own `incr`'s estimate: it must
        // include every racing event that took the light path without
        // seeing this admission (see `record`).
        let at_admission = self.sketch.get_at(location);
        if table.slots.len() < self.capacity {
            let entry = table.insert(self.capacity, key.clone(), table_hash, at_admission);
            return Some(entry.count());
        }
        let (slot, smallest) = table.smallest()?;
        if at_admission <= smallest {
            return None;
        }
        let (evicted, since, entry) = table.replace(slot, key.clone(), table_hash, at_admission);
        let count = entry.count();
        // What the table counted of the evicted key goes back to the
        // sketch, which so stays an upper bound of its total.
        if since > 0 {
            let evicted_hash = self.sketch.locator().hash(&evicted);
            self.sketch.incr_hashed(evicted_hash, since);
        }
        Some(count)
    }

    /// Count exactly if `key` is admitted; otherwise return the number of
    /// admissions so far, read under the lock that orders it with them.
    fn count_exact(&self, key: &K, table_hash: u64, count: isize) -> Result<HeavyCount, usize> {
        let table = self.table.read();
        match table.find(table_hash, key) {
            Some(entry) => Ok(entry.add(count)),
            None => Err(self.admissions.load(Ordering::Relaxed)),
        }
    }

    /// The key's count if it is in the table.
    pub fn get(&self, key: &K) -> Option<HeavyCount> {
        let table_hash = self.hasher.hash_one(key);
        self.table.read().find(table_hash, key).map(Entry::count)
    }

    /// Every key in the table with its count, heaviest first.
    pub fn heavy_hitters(&self) -> Vec<(K, HeavyCount)> {
        let table = self.table.read();
        let mut all: Vec<(K, HeavyCount)> = table
            .slots
            .iter()
            .map(|slot| (slot.key.clone(), slot.entry.count()))
            .collect();
        all.sort_by_key(|(_, c)| std::cmp::Reverse(c.total()));
        all
    }

    /// Number of keys in the exact table (at most
    /// [`capacity`](Self::capacity)).
    pub fn admitted(&self) -> usize {
        self.table.read().slots.len()
    }

    /// The admission threshold.
    pub fn threshold(&self) -> isize {
        self.threshold
    }

    /// The most keys the exact table holds.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Forget everything (sketch and exact table).
    pub fn reset(&self) {
        let mut table = self.table.write();
        table.clear();
        self.sketch.reset();
    }

    /// Bytes of the sketch plus the exact table's allocations (the keys'
    /// own heap, such as a `String`'s, is not included).
    pub fn memory_bytes(&self) -> usize {
        self.sketch.memory_bytes() + self.table.read().bytes()
    }
}

impl<K> std::fmt::Debug for HeavyHitters<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeavyHitters")
            .field("threshold", &self.threshold)
            .field("capacity", &self.capacity)
            .field("sketch", &self.sketch)
            .finish_non_exhaustive()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    #[test]
    fn a_threshold_beyond_isize_counts_as_isize_max() {
        let heavy = HeavyHitters::new(NonZeroU64::MAX);
        heavy.record(&1u32, isize::MAX - 1);
        assert_eq!(heavy.get(&1u32), None);
        heavy.record(&1u32, 1);
        assert!(heavy.get(&1u32).is_some());
    }

    fn update() -> impl Strategy<Value = Update> {
        prop_oneof![Just(Update::Plain), Just(Update::Conservative)]
    }

    proptest! {
        /// Against an exact reference, with a table too small for every key
        /// that passes the threshold: never more than `capacity` keys, no
        /// admitted key undercounted, events since admission counted
        /// exactly, and every key left out either below the threshold or no
        /// heavier than the lightest admitted total.
        #[test]
        fn a_full_table_keeps_the_heaviest_keys_and_never_undercounts(
            (_, events) in (2u16..300).prop_flat_map(|keys| {
                (Just(keys), proptest::collection::vec((0..keys, 0isize..5), 0..2000))
            }),
            threshold in 1u64..40,
            // From all keys colliding to almost none: a key evicted and
            // admitted again must still not be undercounted when the
            // sketch's collisions do not cover for it.
            slots in prop_oneof![1usize..64, 64usize..4096],
            capacity in 1usize..16,
            update in update(),
            seed: u64,
        ) {
            let shape = Shape::try_new(2, slots, crate::shape::Layout::Rows).unwrap().with_seed(seed);
            let heavy = HeavyHitters::with_sketch(
                NonZeroU64::new(threshold).unwrap(),
                shape,
                update,
                NonZeroUsize::new(capacity).unwrap(),
            );
            let threshold = threshold as isize;
            let mut truth: HashMap<u16, isize> = HashMap::new();
            // Events since admission of each key now in the table.
            let mut since: HashMap<u16, isize> = HashMap::new();
            for &(k, n) in &events {
                let present_before = heavy.get(&k).is_some();
                heavy.record(&k, n);
                *truth.entry(k).or_default() += n;
                if present_before {
                    *since.entry(k).or_default() += n;
                } else if heavy.get(&k).is_some() {
                    since.insert(k, 0);
                }
                since.retain(|key, _| heavy.get(key).is_some());
                prop_assert!(heavy.admitted() <= capacity, "{} > {capacity}", heavy.admitted());
            }
            let table = heavy.heavy_hitters();
            prop_assert_eq!(table.len(), since.len());
            let full = table.len() == capacity;
            let smallest = table.iter().map(|(_, c)| c.total()).min().unwrap_or(0);
            for (k, &total) in &truth {
                match heavy.get(k) {
                    Some(count) => {
                        prop_assert!(count.total() >= total, "key {k}: {count:?} < {total}");
                        prop_assert_eq!(count.since_admission, since[k]);
                    }
                    None => prop_assert!(
                        total < threshold || (full && total <= smallest),
                        "key {k} with {total} left out of a table whose smallest total is {smallest} (full: {full})"
                    ),
                }
            }
        }

        /// A tiny sketch (many collisions) still misses no heavy key, and
        /// counts every event after admission exactly.
        #[test]
        fn no_heavy_key_is_missed_and_admitted_keys_count_exactly(
            events in proptest::collection::vec((0u16..300, 0isize..5), 0..2000),
            threshold in 1u64..40,
            slots in 1usize..32,
            seed: u64,
        ) {
            let shape = Shape::try_new(2, slots, crate::shape::Layout::Rows).unwrap().with_seed(seed);
            let heavy = HeavyHitters::with_sketch(
                NonZeroU64::new(threshold).unwrap(), shape, Update::Conservative,
                HeavyHitters::<u16>::DEFAULT_CAPACITY,
            );
            let threshold = threshold as isize;
            let mut truth: HashMap<u16, isize> = HashMap::new();
            let mut after: HashMap<u16, isize> = HashMap::new();
            for &(k, n) in &events {
                let admitted_before = heavy.get(&k).is_some();
                heavy.record(&k, n);
                *truth.entry(k).or_default() += n;
                if admitted_before {
                    *after.entry(k).or_default() += n;
                }
            }
            for (k, total) in &truth {
                match heavy.get(k) {
                    None => prop_assert!(*total < threshold, "key {k} with {total} missed"),
                    Some(count) => {
                        prop_assert_eq!(count.since_admission, after.get(k).copied().unwrap_or(0));
                        prop_assert!(count.total() >= *total);
                    }
                }
            }
        }
    }
}
