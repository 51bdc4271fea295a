//! [`HeavyHitters`]: a count-min sketch as a first-stage filter in front of
//! an exact table, so the few heavy keys are counted exactly in little memory.
//!
//! # Design
//!
//! Every key is first counted in a sketch. Once a key's estimate reaches the
//! threshold it is *admitted* to an exact table, and from then on its events
//! are counted there, exactly. Because a count-min estimate never
//! underestimates (non-negative counts), a key whose true total reaches the
//! threshold has an estimate at or above it no later than that moment: **no
//! heavy key is ever missed**. Light keys may be admitted early when they
//! share counters with heavy ones (false positives); the table therefore
//! holds the truly heavy keys plus a few collisions, instead of every key.
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

use crate::estimator::{Estimator, Update};
use crate::sketch::{Location, Shape};
use crate::sync::{AtomicIsize, AtomicUsize, Ordering, RwLock, fence};
use std::collections::HashMap;
use std::collections::hash_map::Entry as MapEntry;
use std::hash::Hash;
use std::num::NonZeroU64;

/// What [`HeavyHitters::record`] knows about a key after counting it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Observation {
    /// The key is below the threshold; this is its sketch estimate.
    Light(isize),
    /// The key is in the exact table.
    Heavy(HeavyCount),
}

/// An admitted key's count.
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

struct Entry {
    at_admission: isize,
    since_admission: AtomicIsize,
}

/// Keys counted approximately until they cross a threshold, exactly after.
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
    exact: RwLock<HashMap<K, Entry, ahash::RandomState>>,
    /// Keys admitted so far; bumped under the write lock. A light event
    /// that sees it change while it counted looks the key up again.
    admissions: AtomicUsize,
}

impl<K: Hash + Eq + Clone> HeavyHitters<K> {
    /// The sketch [`new`](Self::new) uses: 4 × 4096, rows layout, with
    /// conservative updates.
    pub const DEFAULT_SHAPE: Shape = Shape::rows::<4, 4096>();

    /// Admit keys at `threshold` events, with a conservative sketch of
    /// [`DEFAULT_SHAPE`](Self::DEFAULT_SHAPE).
    pub fn new(threshold: NonZeroU64) -> Self {
        Self::with_sketch(threshold, Self::DEFAULT_SHAPE, Update::Conservative)
    }

    /// Admit keys at `threshold` events, counting them before admission in
    /// a sketch of `shape` updated by `update`. Conservative update is
    /// recommended (fewer false admissions); counts must be non-negative
    /// either way. A threshold above `isize::MAX` counts as `isize::MAX`.
    ///
    /// ```
    /// use std::num::NonZeroU64;
    /// use weir_limits::{HeavyHitters, Shape, Update};
    ///
    /// let threshold = NonZeroU64::new(10).unwrap();
    /// let heavy = HeavyHitters::with_sketch(threshold, Shape::rows::<2, 512>(), Update::Plain);
    /// for _ in 0..10 {
    ///     heavy.record(&"key", 1);
    /// }
    /// assert!(heavy.get(&"key").is_some());
    /// ```
    pub fn with_sketch(threshold: NonZeroU64, shape: Shape, update: Update) -> Self {
        Self {
            sketch: Estimator::with_update(shape, update),
            threshold: isize::try_from(threshold.get()).unwrap_or(isize::MAX),
            exact: RwLock::new(HashMap::default()),
            admissions: AtomicUsize::new(0),
        }
    }

    /// Count `count` events of `key` (negative counts are treated as zero:
    /// the no-miss guarantee needs non-negative counts).
    pub fn record(&self, key: &K, count: isize) -> Observation {
        let count = count.max(0);
        let admissions = match self.count_exact(key, count) {
            Ok(found) => return Observation::Heavy(found),
            Err(admissions) => admissions,
        };
        let hash = self.sketch.locator().hash(key);
        let location = self.sketch.locator().locate_hash(hash);
        let estimate = self.sketch.incr_hashed(hash, count);
        if estimate >= self.threshold {
            return Observation::Heavy(self.admit(key, &location, count));
        }
        // An admission of this key may be racing: it either reads this
        // event in the sketch (its fence comes after ours) or has bumped
        // `admissions` where we now read it (ours comes after its), and
        // then the key is in the table and the event is counted there.
        fence(Ordering::SeqCst);
        if self.admissions.load(Ordering::Relaxed) != admissions {
            if let Ok(found) = self.count_exact(key, count) {
                return Observation::Heavy(found);
            }
        }
        Observation::Light(estimate)
    }

    /// Put `key` in the exact table, or count `count` exactly if another
    /// thread did first.
    fn admit(&self, key: &K, location: &Location, count: isize) -> HeavyCount {
        let mut exact = self.exact.write();
        // Who admits is decided by the table, not by comparing estimates:
        // two racing plain-rule increments can return the same estimate,
        // and the second would then take the first's admission for its own
        // and count nothing.
        let entry = match exact.entry(key.clone()) {
            MapEntry::Vacant(vacant) => {
                self.admissions.fetch_add(1, Ordering::Relaxed);
                fence(Ordering::SeqCst);
                // Read after the fence, not our own `incr`'s estimate: it
                // must include every racing event that took the light path
                // without seeing this admission (see `record`).
                let at_admission = self.sketch.get_at(location);
                vacant.insert(Entry {
                    at_admission,
                    since_admission: AtomicIsize::new(0),
                })
            }
            MapEntry::Occupied(occupied) => {
                // Another thread admitted it first; count this event exactly.
                let entry = occupied.into_mut();
                entry.since_admission.fetch_add(count, Ordering::Relaxed);
                entry
            }
        };
        HeavyCount {
            at_admission: entry.at_admission,
            since_admission: entry.since_admission.load(Ordering::Relaxed),
        }
    }

    /// Count exactly if `key` is admitted; otherwise return the number of
    /// admissions so far, read under the lock that orders it with them.
    fn count_exact(&self, key: &K, count: isize) -> Result<HeavyCount, usize> {
        let exact = self.exact.read();
        let Some(entry) = exact.get(key) else {
            return Err(self.admissions.load(Ordering::Relaxed));
        };
        let since = entry.since_admission.fetch_add(count, Ordering::Relaxed) + count;
        Ok(HeavyCount {
            at_admission: entry.at_admission,
            since_admission: since,
        })
    }

    /// The key's count if it has been admitted.
    pub fn get(&self, key: &K) -> Option<HeavyCount> {
        let exact = self.exact.read();
        exact.get(key).map(|entry| HeavyCount {
            at_admission: entry.at_admission,
            since_admission: entry.since_admission.load(Ordering::Relaxed),
        })
    }

    /// Every admitted key with its count, heaviest first.
    pub fn heavy_hitters(&self) -> Vec<(K, HeavyCount)> {
        let exact = self.exact.read();
        let mut all: Vec<(K, HeavyCount)> = exact
            .iter()
            .map(|(k, e)| {
                (
                    k.clone(),
                    HeavyCount {
                        at_admission: e.at_admission,
                        since_admission: e.since_admission.load(Ordering::Relaxed),
                    },
                )
            })
            .collect();
        all.sort_by_key(|(_, c)| std::cmp::Reverse(c.total()));
        all
    }

    /// Number of keys in the exact table.
    pub fn admitted(&self) -> usize {
        self.exact.read().len()
    }

    /// The admission threshold.
    pub fn threshold(&self) -> isize {
        self.threshold
    }

    /// Forget everything (sketch and exact table).
    pub fn reset(&self) {
        let mut exact = self.exact.write();
        exact.clear();
        self.sketch.reset();
    }

    /// Bytes of the sketch plus an estimate of the exact table's heap.
    pub fn memory_bytes(&self) -> usize {
        let exact = self.exact.read();
        let per_entry = std::mem::size_of::<(K, Entry)>() + 1;
        self.sketch.memory_bytes() + exact.capacity() * per_entry
    }
}

impl<K> std::fmt::Debug for HeavyHitters<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeavyHitters")
            .field("threshold", &self.threshold)
            .field("sketch", &self.sketch)
            .finish_non_exhaustive()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_threshold_beyond_isize_counts_as_isize_max() {
        let heavy = HeavyHitters::new(NonZeroU64::MAX);
        heavy.record(&1u32, isize::MAX - 1);
        assert_eq!(heavy.get(&1u32), None);
        heavy.record(&1u32, 1);
        assert!(heavy.get(&1u32).is_some());
    }

    proptest! {
        /// A tiny sketch (many collisions) still misses no heavy key, and
        /// counts every event after admission exactly.
        #[test]
        fn no_heavy_key_is_missed_and_admitted_keys_count_exactly(
            events in proptest::collection::vec((0u16..300, 0isize..5), 0..2000),
            threshold in 1u64..40,
            slots in 1usize..32,
            seed: u64,
        ) {
            let shape = Shape::try_new(2, slots, crate::Layout::Rows).unwrap().with_seed(seed);
            let heavy = HeavyHitters::with_sketch(
                NonZeroU64::new(threshold).unwrap(), shape, Update::Conservative,
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
