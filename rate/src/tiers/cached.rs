//! [`CachedTierOf`]: a lookup of keys' tiers too slow to ask on every
//! check, its answers kept for a while in bounded memory.

use super::TierOf;
use crate::clock::{Clock, MonotonicClock};
use hashbrown::HashTable;
use std::borrow::Borrow;
use std::hash::Hash;
use std::num::NonZeroUsize;
use std::sync::OnceLock;
use std::time::Duration;
use weir_primitives::shards::Shards;
use weir_primitives::sync::Mutex;

/// The most distinct tier names a cache hands out; a lookup that names
/// more is read as naming none (the default tier).
const MAX_NAMES: usize = 64;

/// Caches of at least this many keys are split in shards, so that
/// concurrent checks of different keys rarely wait on one lock.
const SHARDED_FROM: usize = 64;
const SHARDS: usize = 16;

/// No tier named: the default.
const NO_TIER: u16 = u16::MAX;

#[derive(Clone, Copy)]
struct Entry {
    /// The place of the tier's name in `names`, or [`NO_TIER`].
    tier: u16,
    /// When the lookup answered, on the cache's clock.
    at: u64,
}

/// One shard's keys in two generations: when the current one is full it
/// becomes the previous one (dropping the previous), and a key found in
/// the previous one moves back to the current. The keys asked for since
/// the last turn stay; memory stays within two generations.
/// Keys are found by the hash that picked their shard (hashed once).
struct Generations<K> {
    current: HashTable<(K, Entry)>,
    previous: HashTable<(K, Entry)>,
}

/// A [`TierOf`] that asks `lookup` (a directory, a database read on the
/// request path) for a key's tier once, then answers from memory for
/// `ttl`: a bounded cache in front of a resolver too slow for every check.
///
/// The cache holds at most `max_keys` keys (at least 2), the keys asked
/// for most recently kept: a spray of new keys costs one lookup each and
/// pushes older keys out, never more memory. An answer of no tier is kept
/// too, so an unknown key does not reach `lookup` on every request. Tier
/// names are kept once each, up to 64 distinct names; a lookup naming a
/// 65th is read as naming no tier (the default's). Two checks that miss
/// the same key at once may both ask `lookup`.
///
/// `lookup` runs on the checking thread, inside the limiter's check: keep
/// it short. For a directory that takes a round trip, load it into a
/// `HashMap` in the background and hand it to the limiter's
/// `set_resolver` instead.
///
/// ```
/// use std::num::NonZeroUsize;
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// use std::time::Duration;
/// use weir_rate::{CachedTierOf, Gcra, Quota, Tier, TieredLimiter, nonzero};
///
/// static ASKED: AtomicUsize = AtomicUsize::new(0);
/// let directory = |key: &str| {
///     ASKED.fetch_add(1, Ordering::Relaxed);
///     key.starts_with("pk_").then(|| "paid".to_owned())
/// };
/// let cached = CachedTierOf::new(directory, NonZeroUsize::new(10_000).unwrap(), Duration::from_secs(60));
/// let limiter = TieredLimiter::<String, _, _>::try_new(
///     vec![
///         Tier::limited("free", Gcra::new(Quota::per_second(nonzero!(10)))),
///         Tier::limited("paid", Gcra::new(Quota::per_second(nonzero!(100)))),
///     ],
///     "free",
///     cached,
/// )?;
/// for _ in 0..5 {
///     assert_eq!(limiter.check("pk_1").policy(), Some("paid"));
/// }
/// assert_eq!(ASKED.load(Ordering::Relaxed), 1);
/// # Ok::<(), weir_rate::ConfigError>(())
/// ```
pub struct CachedTierOf<K, F, C = MonotonicClock> {
    lookup: F,
    shards: Shards<Mutex<Generations<K>>>,
    /// Keys per generation per shard.
    generation: usize,
    names: [OnceLock<Box<str>>; MAX_NAMES],
    naming: Mutex<()>,
    ttl_nanos: u64,
    clock: C,
}

impl<K, F, C> std::fmt::Debug for CachedTierOf<K, F, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CachedTierOf")
            .field("max_keys", &(self.generation * 2 * self.shards.len()))
            .field("ttl", &Duration::from_nanos(self.ttl_nanos))
            .finish_non_exhaustive()
    }
}

impl<K, F> CachedTierOf<K, F> {
    /// A cache of `lookup`'s answers for up to `max_keys` keys, each kept
    /// for `ttl` after it was looked up, on the monotonic clock.
    pub fn new(lookup: F, max_keys: NonZeroUsize, ttl: Duration) -> Self {
        Self::with_clock(lookup, max_keys, ttl, MonotonicClock::new())
    }
}

impl<K, F, C> CachedTierOf<K, F, C> {
    /// [`new`](CachedTierOf::new) reading time from `clock`.
    pub fn with_clock(lookup: F, max_keys: NonZeroUsize, ttl: Duration, clock: C) -> Self {
        let shards = Shards::new(
            if max_keys.get() >= SHARDED_FROM {
                SHARDS
            } else {
                1
            },
            |_| {
                Mutex::new(Generations {
                    current: HashTable::new(),
                    previous: HashTable::new(),
                })
            },
        );
        let generation = (max_keys.get() / shards.len() / 2).max(1);
        Self {
            lookup,
            shards,
            generation,
            names: std::array::from_fn(|_| OnceLock::new()),
            naming: Mutex::new(()),
            ttl_nanos: u64::try_from(ttl.as_nanos()).unwrap_or(u64::MAX),
            clock,
        }
    }

    /// The keys the cache holds now.
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|shard| {
                let shard = shard.lock();
                shard.current.len() + shard.previous.len()
            })
            .sum()
    }

    /// Whether the cache holds no key.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The place of `name` among the names handed out, added if new;
    /// [`NO_TIER`] once the table is full.
    fn place_of(&self, name: &str) -> u16 {
        let find = || {
            self.names
                .iter()
                .take_while(|slot| slot.get().is_some())
                .position(|slot| slot.get().map(|n| &**n) == Some(name))
        };
        if let Some(place) = find() {
            return place as u16;
        }
        let _naming = self.naming.lock();
        if let Some(place) = find() {
            return place as u16;
        }
        match self.names.iter().position(|slot| slot.get().is_none()) {
            Some(free) => {
                let _ = self.names[free].set(name.into());
                free as u16
            }
            None => NO_TIER,
        }
    }

    fn name(&self, tier: u16) -> Option<&str> {
        self.names.get(usize::from(tier))?.get().map(|n| &**n)
    }
}

impl<K, Q, F, C> TierOf<Q> for CachedTierOf<K, F, C>
where
    K: Borrow<Q> + Hash + Eq + Send,
    Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    F: Fn(&Q) -> Option<String> + Send + Sync,
    C: Clock,
{
    fn tier_of<'a>(&'a self, key: &Q) -> Option<&'a str> {
        let now = self.clock.now_nanos();
        let fresh = |entry: &Entry| now.saturating_sub(entry.at) < self.ttl_nanos;
        let hash = self.shards.hash_of(key);
        let shard = self.shards.shard(hash);
        let is_key = |(k, _): &(K, Entry)| k.borrow() == key;
        {
            let mut generations = shard.lock();
            if let Some((_, entry)) = generations.current.find(hash, is_key)
                && fresh(entry)
            {
                return self.name(entry.tier);
            }
            if let Ok(found) = generations.previous.find_entry(hash, is_key) {
                let ((kept, entry), _) = found.remove();
                if fresh(&entry) {
                    self.keep(&mut generations, hash, kept, entry);
                    return self.name(entry.tier);
                }
            }
        }
        // Asked outside the lock: a slow lookup holds up no other key.
        let tier = (self.lookup)(key).map_or(NO_TIER, |name| self.place_of(&name));
        let entry = Entry { tier, at: now };
        self.keep(&mut shard.lock(), hash, key.to_owned(), entry);
        self.name(tier)
    }
}

impl<K: Hash + Eq, F, C> CachedTierOf<K, F, C> {
    /// Put `key` (of hash `hash`) in the current generation, in place of
    /// its stale entry if it has one, turning the generation over first
    /// if it is full.
    fn keep(&self, generations: &mut Generations<K>, hash: u64, key: K, entry: Entry) {
        if let Some((_, stale)) = generations.current.find_mut(hash, |(k, _)| *k == key) {
            *stale = entry;
            return;
        }
        if generations.current.len() >= self.generation {
            generations.previous = std::mem::take(&mut generations.current);
        }
        let hasher = self.shards.hasher();
        generations
            .current
            .insert_unique(hash, (key, entry), |(k, _)| hasher.hash_one(k));
    }
}
