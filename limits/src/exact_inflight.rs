//! [`ExactInflight`]: how many requests per key are in progress, counted
//! exactly, with an RAII guard that uncounts on drop.
//!
//! # Design
//!
//! [`Inflight`](crate::Inflight) bounds memory by its sketch's shape and
//! overestimates: keys sprayed across its cells (the /64s of one /48) make
//! it refuse honest clients that have nothing in flight. This table is
//! exact instead, and needs no such bound: it holds one entry per key
//! with a request in flight and drops a key when its count returns to
//! zero, so its size is bounded by the concurrency of what it guards, and
//! a key is refused only for its own requests.
//!
//! Keys are told apart by a 64-bit hash under a per-process random seed
//! rather than stored, so the table needs no type for them and a guard
//! holds only the hash. Two keys share a count only if their hashes
//! collide: for a fresh key, with probability (keys in flight) / 2⁶⁴, and
//! the seed is unknown to clients, who therefore cannot aim for a busy
//! key's hash. The map is sharded, each shard behind a spin lock held for
//! one lookup and one increment; entering counts and compares under that
//! lock, so racers at a limit of `L` admit at most `L`.

use crate::sync::SpinLock;
use hashbrown::HashTable;
use hashbrown::hash_table::Entry;
use std::fmt;
use std::hash::Hash;
use std::sync::Arc;
use weir_primitives::shards::Shards;

/// Exact per-key in-flight counts with RAII guards, in memory bounded by
/// the requests in flight. Clones share the counts.
///
/// ```
/// use weir_limits::ExactInflight;
///
/// let inflight = ExactInflight::new();
/// let first = inflight.try_enter("origin-a", 2).unwrap();
/// let second = inflight.try_enter("origin-a", 2).unwrap();
/// assert!(inflight.try_enter("origin-a", 2).is_none(), "at the limit");
/// assert_eq!(inflight.get("origin-a"), 2);
/// drop((first, second));
/// assert_eq!((inflight.get("origin-a"), inflight.keys()), (0, 0));
/// ```
#[derive(Clone, Default)]
pub struct ExactInflight {
    table: Arc<Table>,
}

/// A request counted in flight by an [`ExactInflight`] until dropped.
#[must_use = "dropping the guard uncounts the request at once"]
pub struct ExactInflightGuard {
    table: Arc<Table>,
    hash: u64,
}

/// Shards of the map: enough that two cores rarely meet on one lock.
const SHARDS: usize = 64;

/// A shard this much larger than its entries gives memory back: a spray
/// that has drained leaves no table behind.
const SHRINK_BELOW: usize = 4;

/// The counts by key hash, in shards.
struct Table(Shards<SpinLock<HashTable<(u64, usize)>>>);

impl Default for Table {
    fn default() -> Self {
        Self(Shards::new(SHARDS, |_| SpinLock::new(HashTable::new())))
    }
}

impl ExactInflight {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Count a request of `key` if fewer than `limit` are in flight;
    /// `None` (nothing counted) at the limit. A limit of 0 refuses all.
    pub fn try_enter<K: Hash + ?Sized>(&self, key: &K, limit: usize) -> Option<ExactInflightGuard> {
        match self.enter(key, limit, false) {
            (Some(guard), _) => Some(guard),
            (None, _) => None,
        }
    }

    /// Count a request of `key` whatever the limit (a dry run of a limit
    /// not yet enforced), and say whether `limit` or more were already in
    /// flight, which [`try_enter`](Self::try_enter) would have refused.
    ///
    /// ```
    /// use weir_limits::ExactInflight;
    ///
    /// let inflight = ExactInflight::new();
    /// let (_a, over) = inflight.enter_anyway("k", 1);
    /// assert!(!over);
    /// let (_b, over) = inflight.enter_anyway("k", 1);
    /// assert!(over);
    /// assert_eq!(inflight.get("k"), 2);
    /// ```
    pub fn enter_anyway<K: Hash + ?Sized>(
        &self,
        key: &K,
        limit: usize,
    ) -> (ExactInflightGuard, bool) {
        match self.enter(key, limit, true) {
            (Some(guard), over) => (guard, over),
            (None, _) => unreachable!("counting anyway always counts"),
        }
    }

    /// How many requests of `key` are in flight.
    pub fn get<K: Hash + ?Sized>(&self, key: &K) -> usize {
        let hash = self.table.0.hash_of(key);
        self.table
            .0
            .shard(hash)
            .lock()
            .find(hash, |e| e.0 == hash)
            .map_or(0, |e| e.1)
    }

    /// How many keys have requests in flight: the entries the table holds,
    /// never more than the requests in flight.
    pub fn keys(&self) -> usize {
        self.table.0.iter().map(|s| s.lock().len()).sum()
    }

    /// Counts `key` if under `limit`, or `anyway`: the guard if counted,
    /// and whether `limit` or more were in flight before.
    fn enter<K: Hash + ?Sized>(
        &self,
        key: &K,
        limit: usize,
        anyway: bool,
    ) -> (Option<ExactInflightGuard>, bool) {
        let hash = self.table.0.hash_of(key);
        let mut map = self.table.0.shard(hash).lock();
        let entry = map.entry(hash, |e| e.0 == hash, |e| e.0);
        let count = match &entry {
            Entry::Occupied(e) => e.get().1,
            Entry::Vacant(_) => 0,
        };
        let over = count >= limit;
        if over && !anyway {
            return (None, true);
        }
        entry.or_insert((hash, 0)).into_mut().1 += 1;
        drop(map);
        let guard = ExactInflightGuard {
            table: Arc::clone(&self.table),
            hash,
        };
        (Some(guard), over)
    }
}

impl Drop for ExactInflightGuard {
    fn drop(&mut self) {
        let mut map = self.table.0.shard(self.hash).lock();
        let map = &mut *map;
        let hash = self.hash;
        let Ok(mut entry) = map.find_entry(hash, |e| e.0 == hash) else {
            return;
        };
        entry.get_mut().1 -= 1;
        if entry.get().1 > 0 {
            return;
        }
        let _ = entry.remove();
        if map.capacity() > 64 && map.len() * SHRINK_BELOW < map.capacity() {
            map.shrink_to(map.len() * 2, |e| e.0);
        }
    }
}

impl fmt::Debug for ExactInflight {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExactInflight")
            .field("keys_in_flight", &self.keys())
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for ExactInflightGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExactInflightGuard")
            .field("hash", &self.hash)
            .finish_non_exhaustive()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

    #[test]
    fn racing_threads_never_hold_more_than_the_limit() {
        const LIMIT: usize = 3;
        let inflight = ExactInflight::new();
        let held = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let (inflight, held) = (inflight.clone(), Arc::clone(&held));
                std::thread::spawn(move || {
                    // Each thread asks for the whole limit at once, so the
                    // two contend for it.
                    for _ in 0..10_000 {
                        let mut mine = Vec::new();
                        for _ in 0..LIMIT {
                            if let Some(guard) = inflight.try_enter("one key", LIMIT) {
                                let now = held.fetch_add(1, SeqCst) + 1;
                                assert!(now <= LIMIT, "{now} in flight over a limit of {LIMIT}");
                                mine.push(guard);
                            }
                        }
                        for guard in mine {
                            held.fetch_sub(1, SeqCst);
                            drop(guard);
                        }
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        assert_eq!(inflight.keys(), 0);
    }

    #[test]
    fn a_drained_spray_gives_its_memory_back() {
        let inflight = ExactInflight::new();
        let guards: Vec<_> = (0..100_000u32)
            .map(|k| inflight.try_enter(&k, 1).unwrap())
            .collect();
        assert_eq!(inflight.keys(), 100_000);
        drop(guards);
        assert_eq!(inflight.keys(), 0);
        let capacity: usize = inflight.table.0.iter().map(|s| s.lock().capacity()).sum();
        assert!(
            capacity <= SHARDS * 64,
            "{capacity} slots kept after the spray"
        );
    }
}
