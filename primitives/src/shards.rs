//! [`Shards`]: a value split by key hash into shards, each on cache lines
//! of its own, so that threads working on different keys rarely meet on
//! one lock.
//!
//! Every keyed table in weir (the keyed rate limiter, the keyed adaptive
//! limiter, the HTTP in-flight counts) is a set of shards, each a lock
//! around a hash table. What they share is written here once: one hash of
//! the key under a per-instance random seed, which picks the shard *and*
//! then finds the key in the shard's table (so a lookup hashes once), and
//! the padding that keeps neighbouring shards' locks off each other's
//! cache lines. What each shard holds (its table, its lock, its own
//! counters) is the user's type `S`.
//!
//! The shard comes from bits 32 and up of the hash: hashbrown's tables take
//! their slot from the low bits and their tag from the top seven, so the
//! keys of one shard still spread over its table.
//!
//! ```
//! use std::collections::HashMap;
//! use std::sync::Mutex;
//! use weir_primitives::shards::Shards;
//!
//! let counts: Shards<Mutex<HashMap<String, u32>>> = Shards::new(8, |_| Mutex::default());
//! let shard = counts.shard(counts.hash_of("alice"));
//! *shard.lock().unwrap().entry("alice".to_owned()).or_default() += 1;
//! let total: u32 = counts.iter().map(|s| s.lock().unwrap().values().sum::<u32>()).sum();
//! assert_eq!(total, 1);
//! ```

use std::fmt;
use std::hash::Hash;

/// The most shards a [`Shards`] makes: far more than threads contend.
pub const MAX_SHARDS: usize = 1 << 16;

/// One shard on cache lines of its own (128 bytes: adjacent-line
/// prefetchers pull cache lines in pairs).
#[repr(align(128))]
struct Padded<S>(S);

/// A value split into a power-of-two number of shards by key hash.
pub struct Shards<S> {
    hasher: ahash::RandomState,
    shards: Box<[Padded<S>]>,
}

impl<S> Shards<S> {
    /// `count` shards (rounded up to a power of two within
    /// `1..=`[`MAX_SHARDS`]), shard `i` made by `make(i)`; keys hashed
    /// under a fresh random seed.
    pub fn new(count: usize, make: impl FnMut(usize) -> S) -> Self {
        let count = Self::count_for(count);
        Self {
            hasher: ahash::RandomState::new(),
            shards: (0..count).map(make).map(Padded).collect(),
        }
    }

    /// The hasher behind [`hash_of`](Self::hash_of), for a shard's table to
    /// rehash its keys as it grows (each key lands where `hash_of` put it).
    #[inline]
    pub fn hasher(&self) -> &ahash::RandomState {
        &self.hasher
    }

    /// Hash keys with `hasher` from now on, so that two values place keys
    /// alike (tests that compare them key for key). Call it while every
    /// shard is empty: keys already placed would no longer be found.
    pub fn set_hasher(&mut self, hasher: ahash::RandomState) {
        self.hasher = hasher;
    }

    /// How many shards [`new`](Self::new) makes for `count`.
    pub const fn count_for(count: usize) -> usize {
        let count = if count == 0 { 1 } else { count };
        let count = if count > MAX_SHARDS {
            MAX_SHARDS
        } else {
            count
        };
        count.next_power_of_two()
    }

    /// The hash of `key`: it picks the shard ([`shard`](Self::shard)) and
    /// finds the key inside it.
    #[inline]
    pub fn hash_of<K: Hash + ?Sized>(&self, key: &K) -> u64 {
        self.hasher.hash_one(key)
    }

    /// The shard of a key whose [`hash_of`](Self::hash_of) is `hash`.
    #[inline]
    pub fn shard(&self, hash: u64) -> &S {
        let index = (hash >> 32) as usize & (self.shards.len() - 1);
        &self.shards[index].0
    }

    /// Every shard, in order.
    pub fn iter(&self) -> impl Iterator<Item = &S> {
        self.shards.iter().map(|padded| &padded.0)
    }

    /// How many shards there are (a power of two).
    pub fn len(&self) -> usize {
        self.shards.len()
    }

    /// Always false: there is at least one shard.
    pub fn is_empty(&self) -> bool {
        false
    }
}

impl<S> fmt::Debug for Shards<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shards")
            .field("shards", &self.shards.len())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_powers_of_two_within_bounds() {
        assert_eq!(Shards::<()>::count_for(0), 1);
        assert_eq!(Shards::<()>::count_for(1), 1);
        assert_eq!(Shards::<()>::count_for(3), 4);
        assert_eq!(Shards::<()>::count_for(64), 64);
        assert_eq!(Shards::<()>::count_for(usize::MAX), MAX_SHARDS);
        let made = Shards::new(5, |i| i);
        assert_eq!(
            made.iter().copied().collect::<Vec<_>>(),
            [0, 1, 2, 3, 4, 5, 6, 7]
        );
    }

    #[test]
    fn each_shard_has_cache_lines_of_its_own() {
        let shards = Shards::new(4, |_| 0u8);
        let addresses: Vec<usize> = shards.iter().map(|s| s as *const u8 as usize).collect();
        for pair in addresses.windows(2) {
            assert!(pair[1] - pair[0] >= 128, "{addresses:?}");
        }
        assert!(addresses.iter().all(|a| a % 128 == 0));
    }

    #[test]
    fn keys_spread_over_the_shards() {
        let shards = Shards::new(16, |i| i);
        let mut seen = [0u32; 16];
        for key in 0..16_000u32 {
            seen[*shards.shard(shards.hash_of(&key))] += 1;
        }
        assert!(seen.iter().all(|&n| (700..1300).contains(&n)), "{seen:?}");
    }
}
