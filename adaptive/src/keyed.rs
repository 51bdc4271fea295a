//! [`KeyedAdaptiveLimiter`]: one learned limit per key, at most `max_keys`
//! keys, idle ones evicted least recently used first.

use super::Algorithm;
use super::limiter::{AdaptiveGuard, Entry, Overloaded};
use crate::clock::{Clock, MonotonicClock};
use crate::sync::{Arc, AtomicU64, Mutex, Ordering};
use hashbrown::HashTable;
use std::fmt;
use std::hash::Hash;
use std::num::NonZeroUsize;
use weir_primitives::shards::Shards;

/// A stored key: its hash, its state, and when it was last admitted.
struct Slot<A> {
    hash: u64,
    entry: Arc<Entry<A>>,
    used: u64,
}

/// One shard: its keys behind a lock, and its share of `max_keys`.
struct Shard<A> {
    map: Mutex<HashTable<Slot<A>>>,
    max_keys: usize,
    /// The state every key shares that finds the shard full of busy keys.
    overflow: Arc<Entry<A>>,
}

/// The most shards: enough that two cores rarely meet on one lock.
const MAX_SHARDS: usize = 64;

/// One learned limit per key (per origin, as pingora counts per origin),
/// in bounded memory.
///
/// At most `max_keys` keys are stored. A new key beyond it replaces the
/// least recently admitted key with nothing in flight, whose learned limit
/// is forgotten (it starts again from the initial limit). If every stored
/// key of its shard has requests in flight, the new key is decided on the
/// shard's overflow state, which every such key shares: their requests in
/// flight count together against one learned limit. So memory stays within
/// `max_keys` states plus one per shard, and a spray of new keys can
/// neither grow it nor get requests past a limit; what it can do is crowd
/// out other new keys while every stored key is busy. The overflow state
/// keeps what it learns from one such episode to the next, and
/// [`limit`](Self::limit) and [`in_flight`](Self::in_flight) do not report
/// it for the keys it serves (they are not stored). Such decisions are
/// counted ([`overflowed`](Self::overflowed)); choose a `max_keys` above the
/// keys that have requests in flight at once. Finding
/// the key to replace scans its shard (the keys are split over up to 64
/// shards, one lock each), a cost paid only by a new key arriving at a
/// full shard.
///
/// Keys are told apart by a 64-bit hash under a per-limiter random seed,
/// not stored: two keys share a state only if their hashes collide.
///
/// ```
/// use std::num::NonZeroUsize;
/// use weir_adaptive::{Gradient2, KeyedAdaptiveLimiter};
///
/// let origins = KeyedAdaptiveLimiter::new(Gradient2::default(), NonZeroUsize::new(1024).unwrap());
/// // A proxy, before connecting upstream (pingora's upstream_peer):
/// match origins.try_acquire("origin-a.example:443") {
///     Ok(guard) => {
///         // ... proxy the request; if the origin answered 503 or timed out:
///         guard.dropped();
///     }
///     Err(_) => { /* answer 503 at once */ }
/// }
/// assert_eq!(origins.in_flight("origin-a.example:443"), 0);
/// ```
pub struct KeyedAdaptiveLimiter<A, C = MonotonicClock> {
    prototype: A,
    clock: C,
    shards: Shards<Shard<A>>,
    max_keys: usize,
    overflowed: AtomicU64,
}

impl<A: Algorithm + Clone> KeyedAdaptiveLimiter<A> {
    /// At most `max_keys` keys, each learning with a clone of `algorithm`,
    /// on the monotonic clock.
    pub fn new(algorithm: A, max_keys: NonZeroUsize) -> Self {
        Self::with_clock(algorithm, max_keys, MonotonicClock::new())
    }
}

impl<A: Algorithm + Clone, C: Clock + Clone> KeyedAdaptiveLimiter<A, C> {
    /// At most `max_keys` keys, each learning with a clone of `algorithm`,
    /// timing requests on `clock`.
    ///
    /// ```
    /// use std::num::{NonZeroU32, NonZeroUsize};
    /// use weir_adaptive::{Constant, KeyedAdaptiveLimiter};
    /// use weir_adaptive::clock::ManualClock;
    ///
    /// let one = Constant::new(NonZeroU32::new(1).unwrap());
    /// let keys = KeyedAdaptiveLimiter::with_clock(one, NonZeroUsize::new(8).unwrap(), ManualClock::new());
    /// let _a = keys.try_acquire(&1).unwrap();
    /// assert!(keys.try_acquire(&1).is_err());
    /// assert!(keys.try_acquire(&2).is_ok(), "another key, its own limit");
    /// ```
    pub fn with_clock(algorithm: A, max_keys: NonZeroUsize, clock: C) -> Self {
        let max_keys = max_keys.get();
        // About 16 keys a shard or more: each shard has an overflow state.
        let count = Shards::<Shard<A>>::count_for((max_keys / 16).clamp(1, MAX_SHARDS));
        let shards = Shards::new(count, |i| Shard {
            map: Mutex::new(HashTable::new()),
            max_keys: max_keys / count + usize::from(i < max_keys % count),
            overflow: Arc::new(Entry::new(algorithm.clone())),
        });
        Self {
            prototype: algorithm,
            clock,
            shards,
            max_keys,
            overflowed: AtomicU64::new(0),
        }
    }

    /// Admits a request of `key` if fewer than its limit are in flight.
    ///
    /// # Errors
    ///
    /// [`Overloaded`] at the key's limit: answer 503 rather than queue.
    pub fn try_acquire<K: Hash + ?Sized>(
        &self,
        key: &K,
    ) -> Result<AdaptiveGuard<A, C>, Overloaded> {
        let hash = self.shards.hash_of(key);
        let now = self.clock.now_nanos();
        AdaptiveGuard::admit(self.entry(hash, now), self.clock.clone(), now)
    }

    /// The key's state, stored if there is room.
    fn entry(&self, hash: u64, now: u64) -> Arc<Entry<A>> {
        let shard = self.shards.shard(hash);
        let mut map = shard.map.lock();
        if let Some(slot) = map.find_mut(hash, |s| s.hash == hash) {
            slot.used = now;
            return Arc::clone(&slot.entry);
        }
        if map.len() >= shard.max_keys && !evict_idle(&mut map) {
            self.overflowed.fetch_add(1, Ordering::Relaxed);
            return Arc::clone(&shard.overflow);
        }
        let entry = Arc::new(Entry::new(self.prototype.clone()));
        map.insert_unique(
            hash,
            Slot {
                hash,
                entry: Arc::clone(&entry),
                used: now,
            },
            |s| s.hash,
        );
        entry
    }

    fn find<K: Hash + ?Sized>(&self, key: &K) -> Option<Arc<Entry<A>>> {
        let hash = self.shards.hash_of(key);
        let map = self.shards.shard(hash).map.lock();
        map.find(hash, |s| s.hash == hash)
            .map(|s| Arc::clone(&s.entry))
    }

    /// The key's learned limit, if it is stored.
    ///
    /// ```
    /// use std::num::NonZeroUsize;
    /// use weir_adaptive::{Aimd, KeyedAdaptiveLimiter};
    ///
    /// let keys = KeyedAdaptiveLimiter::new(Aimd::default(), NonZeroUsize::new(8).unwrap());
    /// assert_eq!(keys.limit("a"), None);
    /// keys.try_acquire("a").unwrap().success();
    /// // The first answer starts measuring the no-load latency, the limit
    /// // pinned to half of its initial 20 meanwhile.
    /// assert_eq!(keys.limit("a"), Some(10));
    /// ```
    pub fn limit<K: Hash + ?Sized>(&self, key: &K) -> Option<u32> {
        self.find(key).map(|e| e.limit())
    }

    /// The key's requests in flight (0 if it is not stored).
    pub fn in_flight<K: Hash + ?Sized>(&self, key: &K) -> u32 {
        self.find(key).map_or(0, |e| e.in_flight())
    }

    /// The key's no-load latency estimate, if it is stored and has one
    /// (see [`AdaptiveLimiter::no_load`](super::AdaptiveLimiter::no_load)).
    pub fn no_load<K: Hash + ?Sized>(&self, key: &K) -> Option<std::time::Duration> {
        self.find(key).and_then(|e| e.no_load())
    }
}

impl<A, C> KeyedAdaptiveLimiter<A, C> {
    /// How many keys are stored (at most `max_keys`).
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.map.lock().len()).sum()
    }

    /// Whether no key is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The most keys stored at once.
    ///
    /// ```
    /// use std::num::NonZeroUsize;
    /// use weir_adaptive::{Aimd, KeyedAdaptiveLimiter};
    ///
    /// let keys = KeyedAdaptiveLimiter::new(Aimd::default(), NonZeroUsize::new(100).unwrap());
    /// assert_eq!(keys.max_keys(), 100);
    /// ```
    pub fn max_keys(&self) -> usize {
        self.max_keys
    }

    /// New keys decided on their shard's shared overflow state, because
    /// every stored key of their shard had requests in flight.
    pub fn overflowed(&self) -> u64 {
        self.overflowed.load(Ordering::Relaxed)
    }
}

/// Removes the least recently admitted key with nothing in flight; false
/// if every key has requests in flight. A state only the map holds has no
/// guard, and none can be made while the caller holds the shard's lock.
fn evict_idle<A>(map: &mut HashTable<Slot<A>>) -> bool {
    let Some(victim) = map
        .iter()
        .filter(|s| Arc::strong_count(&s.entry) == 1)
        .min_by_key(|s| s.used)
        .map(|s| s.hash)
    else {
        return false;
    };
    if let Ok(slot) = map.find_entry(victim, |s| s.hash == victim) {
        let _ = slot.remove();
    }
    true
}

impl<A, C> fmt::Debug for KeyedAdaptiveLimiter<A, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedAdaptiveLimiter")
            .field("keys", &self.len())
            .field("max_keys", &self.max_keys)
            .field("overflowed", &self.overflowed())
            .finish_non_exhaustive()
    }
}
