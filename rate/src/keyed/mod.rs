//! [`KeyedLimiter`]: one limit per key, exactly up to a bound on keys,
//! in a sharded map from key to state.

mod check;
mod refusals;
mod shard;
#[cfg(test)]
mod tests;

#[cfg(doc)]
use crate::algorithm::Algorithm;
use crate::algorithm::Forgettable;
use crate::clock::{Clock, MonotonicClock};
use crate::decision::{Receipt, Spending};
use crate::sync::{AtomicU64, SpinLock};
use hashbrown::HashTable;
use refusals::Refusals;
use shard::{
    KEYS_PER_SPILL_SLOT, LockedShard, MAX_SPILL_SLOTS, MIN_SWEEP, SPILL_HASHES, Shard, at_reading,
    find, stamped,
};
use std::borrow::Borrow;
use std::hash::Hash;
use std::marker::PhantomData;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicBool, Ordering};
use weir_limits::sketch::Locator;
use weir_limits::{Layout, Shape};
use weir_primitives::shards::Shards;

const DEFAULT_SHARDS: usize = 64;

const DEFAULT_MAX_KEYS: NonZeroUsize = NonZeroUsize::new(917_504).unwrap();

/// A per-key limiter over any [`Algorithm`]: exact for the keys it
/// remembers, at most `max_keys` of them, and never looser for the keys
/// it had to forget (see [Memory](Self#memory)).
///
/// Keys are looked up borrowed, as `HashMap::get` does: a
/// `KeyedLimiter<String, _>` checks a `&str` and allocates only when the
/// key first spends something.
///
/// ```
/// use std::num::NonZeroU32;
/// use std::time::Duration;
/// use weir_rate::clock::ManualClock;
/// use weir_rate::{Gcra, KeyedLimiter, Quota};
///
/// let clock = ManualClock::new();
/// let per_client = KeyedLimiter::with_clock(
///     Gcra::new(Quota::per_second(NonZeroU32::new(1).unwrap())),
///     clock.clone(),
/// );
/// assert!(per_client.check(&"alice").is_allowed());
/// assert!(!per_client.check(&"alice").is_allowed());
/// assert!(per_client.check(&"bob").is_allowed());
/// clock.advance(Duration::from_secs(5));
/// per_client.evict_idle();
/// assert_eq!(per_client.len(), 0);
/// ```
///
/// Each key's state lives in one of `shards` hash maps, each behind its own
/// short lock and on its own cache lines, so threads working on different
/// keys rarely meet. Keys are remembered only while they matter: a key is
/// inserted when it first spends something, and a shard sweeps out idle keys
/// (whose state equals a fresh one, so forgetting them changes no decision)
/// whenever it has doubled in size since its last sweep, which costs
/// amortised O(1) per insert. Compare [`SketchLimiter`](crate::SketchLimiter),
/// which keeps GCRA times only, all in a sketch.
///
/// When many threads refuse one key (a flood), they would pass its
/// shard's lock between cores on every check. So once a shard's lock has
/// been found held, each thread remembers the keys of that shard it has
/// just seen refused one unit ([`allows`](Self::allows),
/// [`check`](Self::check), or [`check_n`](Self::check_n) of 1, as the tower
/// layers ask), and until when, and answers them from that memory. A
/// refund, a new limit, a caller's time ahead of the clock, a charge of a
/// refused key or a key forgotten to make room forgets all of it first, so
/// the answers are the lock's, to the last header, on a clock that does
/// not go back (one set back, as [`ManualClock::set`](crate::clock::ManualClock::set)
/// can, may find them stricter). For GCRA; other algorithms always ask the
/// shard.
///
/// # Memory
///
/// A limiter remembers at most `max_keys` keys
/// ([`DEFAULT_MAX_KEYS`](Self::DEFAULT_MAX_KEYS) unless its
/// [builder](Self::builder) says otherwise), `max_keys / shards` (rounded
/// up) per shard. A key spray cannot grow it past that: a full shard first
/// forgets its idle keys, and if they are fewer than an eighth of it, the
/// keys that turn idle soonest ([`Forgettable::idle_at`]; for GCRA the smallest
/// arrival times), found from a sample of 64 and always including the
/// soonest. Each of those leaves behind only when it turns idle, stored
/// under its hash in the shard's spill sketch: two rows of cells, each the
/// latest time stored in it (the cell logic of the sketch limiter). A key
/// not remembered is restored from the earliest of its cells, as having
/// spent all it could until then ([`Forgettable::spent_until`]); no cell is
/// earlier than the key's own time, so a key that comes back is judged **no
/// looser than if it had stayed**: for unit costs it is never allowed more,
/// in any prefix of its requests, than the exact limiter would allow it
/// (`rate/tests/limiters/keyed.rs` checks it for every algorithm against an unbounded
/// one, and that decisions are identical until `max_keys` is first
/// reached). It may be judged stricter: as spent until its own idle time
/// (for GCRA and the buckets that is exact; a window restores as full), or
/// until a later one stored in all of its cells by other keys. The sketch
/// is small (2 bytes per key of `max_keys`), allocated when a shard first
/// spills and freed once every time in it has passed; while it can say
/// anything, a key's first check reads two of its cells.
///
/// **Sizing**: give the limiter room for the keys that spend within the
/// time a state takes to turn idle (`burst × window / limit` for GCRA and
/// the buckets, one window for the fixed window and the log, up to two for
/// the sliding window) at peak, so that only a spray is forgotten early.
/// Beyond it, a key spray can make an honest key that is not remembered
/// start as spent as the most spent of the forgotten keys in each of its
/// cells (for one-shot keys, one request; for a key forgotten in debt
/// from forced charges, that debt), and an honest key that is
/// remembered is forgotten only if it turns idle sooner than they do. Memory is then
/// bounded by: in each shard, a hash table of the next power of two of
/// `8/7 × max_keys / shards` slots, each the size of the key, its state and
/// one byte (a key's and a state's own heap, such as a `String`'s bytes or
/// a sliding log's entries, comes on top); the spill sketches; a second
/// table per shard during its rebuild; and, only for keys judged at a
/// caller's time ahead of the clock, up to `max_keys` keys again with 8
/// bytes each (see [Time](Self#time)); and, for each thread that has
/// checked a busy shard, 256 remembered refusals (a key and six words
/// each), kept until overwritten and freed with the limiter. Tables rebuild in place of growing
/// past their share of `max_keys`, and shrink when sweeps leave them a quarter
/// full, so after a spray the memory goes back once the keys turn idle
/// ([`evict_idle`](Self::evict_idle) or the next sweeps).
///
/// # Time
///
/// A key is never judged earlier than it has been judged before: a thread
/// that read the clock before waiting for the lock, or a caller-supplied
/// time earlier than the key's last, counts as no time passing for that key.
/// That is what lets one receipt refund every limit of a pair (each charged
/// the check to the same instant).
///
/// A shard keeps a time, the latest **clock reading** it has judged at,
/// below which nothing in it is judged: a key forgotten as idle is idle
/// only from then on, so no check stamped earlier may find it fresh. Only
/// readings of the clock raise it: a time given to
/// [`check_n_at`](Self::check_n_at) is judged at for its own key, and
/// raises the shard's time no further than the clock's reading, which is
/// read only then (when the time is later than the shard's). So a caller's
/// time, however far ahead, changes no other key's decisions, while batches
/// and replays keep their meaning for their own keys. A key judged at a
/// caller's time ahead of the shard's keeps that time in a side table until
/// the shard's time reaches it; live checks never need it, so it costs
/// nothing unless callers' times run ahead of the clock (a replay on a
/// clock left standing). Dropping those times, when the table is full,
/// only judges their keys earlier, which no algorithm finds looser. A time
/// more than [`MAX_AHEAD`](crate::clock::MAX_AHEAD) past the clock is
/// refused ([`CheckAtError::AheadOfClock`](crate::CheckAtError::AheadOfClock)): judged at, it would leave its
/// key judged there until the clock caught up.
pub struct KeyedLimiter<K: Send, L: Forgettable, C = MonotonicClock> {
    shards: Shards<LockedShard<K, L>>,
    /// Each thread's memory of keys refused while their shard was busy.
    refusals: Refusals<K>,
    /// Where a key's cells are in its shard's spill sketch, from the hash
    /// that found its shard.
    spill: Locator,
    clock: C,
    shadow: AtomicBool,
    /// Keys per shard.
    shard_capacity: usize,
}

impl<K: Send, L: Forgettable, C> KeyedLimiter<K, L, C> {
    /// The most keys a [`KeyedLimiter`] remembers unless its builder says
    /// otherwise: 917 504, which is 64 shards of 14 336 keys, the most a hash
    /// table of 16 384 slots holds (tables grow at 7/8 full), so full tables
    /// waste no slots. For a `u64` key and a GCRA state that is 17 bytes a
    /// slot, 18 MB in all at most, plus 1.8 MB of spill sketches.
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use weir_rate::{Gcra, KeyedLimiter, Quota};
    ///
    /// let limiter = KeyedLimiter::<u64, _>::new(Gcra::new(Quota::per_second(NonZeroU32::MIN)));
    /// assert_eq!(limiter.max_keys(), KeyedLimiter::<u64, Gcra>::DEFAULT_MAX_KEYS.get());
    /// ```
    pub const DEFAULT_MAX_KEYS: NonZeroUsize = DEFAULT_MAX_KEYS;

    /// The most keys remembered at once: the number asked of the builder,
    /// rounded up to a multiple of the shards.
    ///
    /// ```
    /// use std::num::{NonZeroU32, NonZeroUsize};
    /// use weir_rate::{Gcra, KeyedLimiter, Quota};
    ///
    /// let quota = Quota::per_second(NonZeroU32::MIN);
    /// let limiter = KeyedLimiter::<u32, _>::builder(Gcra::new(quota))
    ///     .max_keys(NonZeroUsize::new(1000).unwrap())
    ///     .build();
    /// assert_eq!(limiter.max_keys(), 64 * 16);
    /// ```
    pub fn max_keys(&self) -> usize {
        self.shard_capacity.saturating_mul(self.shards.len())
    }
}

impl<K: Hash + Eq + Clone + Send, L: Forgettable + Clone> KeyedLimiter<K, L, MonotonicClock> {
    /// A keyed limiter on the monotonic clock, with 64 shards and room for
    /// [`DEFAULT_MAX_KEYS`](Self::DEFAULT_MAX_KEYS) keys.
    pub fn new(limiter: L) -> Self {
        Self::builder(limiter).build()
    }

    /// Start configuring a keyed limiter over `limiter`: its clock, how
    /// many keys it remembers, how many shards it splits them over.
    ///
    /// ```
    /// use std::num::{NonZeroU32, NonZeroUsize};
    /// use weir_rate::clock::ManualClock;
    /// use weir_rate::{Gcra, KeyedLimiter, Quota};
    ///
    /// let quota = Quota::per_hour(NonZeroU32::new(100).unwrap());
    /// let limiter = KeyedLimiter::builder(Gcra::new(quota))
    ///     .clock(ManualClock::new())
    ///     .max_keys(NonZeroUsize::new(64 * 1024).unwrap())
    ///     .build();
    /// // A spray of one-shot keys: each spends for 36 s, and memory stays put.
    /// for key in 0..200_000u32 {
    ///     assert!(limiter.allows(&key));
    /// }
    /// assert!(limiter.len() <= limiter.max_keys());
    /// ```
    pub fn builder(limiter: L) -> KeyedLimiterBuilder<K, L, MonotonicClock> {
        KeyedLimiterBuilder {
            limiter,
            clock: MonotonicClock::new(),
            shards: DEFAULT_SHARDS,
            max_keys: DEFAULT_MAX_KEYS,
            keys: PhantomData,
        }
    }
}

impl<K: Hash + Eq + Clone + Send, L: Forgettable + Clone, C: Clock> KeyedLimiter<K, L, C> {
    /// A keyed limiter reading time from `clock`, with 64 shards and room
    /// for [`DEFAULT_MAX_KEYS`](Self::DEFAULT_MAX_KEYS) keys.
    pub fn with_clock(limiter: L, clock: C) -> Self {
        KeyedLimiter::builder(limiter).clock(clock).build()
    }

    /// `key`'s hash and its shard.
    #[inline]
    fn shard<Q: Hash + ?Sized>(&self, key: &Q) -> (u64, &LockedShard<K, L>) {
        let hash = self.shards.hash_of(key);
        (hash, self.shards.shard(hash))
    }

    /// Give back what `decision` (a check of `key` on this limiter, or
    /// the [`Receipt`] of a [`charge`](Self::charge)) spent, as far as it
    /// still counts: see [`Algorithm::refund`]. Nothing for a decision that
    /// spent nothing, a key forgotten as idle (whose spendings no longer
    /// count), or a key forgotten to make room (whose spending stays
    /// spent, which is never looser). Refund each spending at most once.
    pub fn refund<Q>(&self, key: &Q, decision: &(impl Spending + ?Sized))
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let Some(receipt) = decision.receipt() else {
            return;
        };
        self.refund_by(key, receipt, None);
    }

    /// [`refund`](Self::refund) by `by` (a key's tier of the same
    /// layout), or by the limiter's own limit.
    pub(crate) fn refund_by<Q>(&self, key: &Q, receipt: Receipt, by: Option<&L>)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let now = self.clock.now_nanos();
        let (hash, shard) = self.shard(key);
        let mut shard = shard.lock.lock();
        let shard = &mut *shard;
        shard.latest = now.max(shard.latest);
        let at = stamped(&shard.ahead, hash, key, shard.latest);
        if let Some(entry) = find(&mut shard.map, hash, key) {
            self.refusals.invalidate();
            by.unwrap_or(&shard.limiter)
                .refund(&mut entry.state, at, receipt);
        }
    }

    /// Spend `cost` units for `key` now, unconditionally: work already done
    /// (response bytes, tokens) is counted even past the limit, as a debt
    /// that the key's later checks wait out (see [`Algorithm::charge`]).
    /// Also in shadow mode. The key is remembered as a check's would be
    /// (so it takes the same bounds as [`check_n`](Self::check_n): a
    /// borrowed key is owned on its first spending). The receipt refunds
    /// the charge ([`refund`](Self::refund)).
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use weir_rate::clock::ManualClock;
    /// use weir_rate::{KeyedLimiter, Quota, TokenBucket};
    ///
    /// let tokens = KeyedLimiter::<String, _, _>::with_clock(
    ///     TokenBucket::new(Quota::per_minute(NonZeroU32::new(10_000).unwrap())),
    ///     ManualClock::new(),
    /// );
    /// assert!(tokens.check("alice").is_allowed());
    /// let answer = tokens.charge("alice", 25_000); // the reply's LLM tokens
    /// assert!(!tokens.check("alice").is_allowed());
    /// assert!(tokens.check("bob").is_allowed());
    /// tokens.refund("alice", &answer); // e.g. the reply was never delivered
    /// assert!(tokens.check("alice").is_allowed());
    /// ```
    pub fn charge<Q>(&self, key: &Q, cost: u32) -> Receipt
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.charge_by(key, cost, None)
    }

    /// [`charge`](Self::charge) by `by` (a key's tier of the same
    /// layout), or by the limiter's own limit.
    pub(crate) fn charge_by<Q>(&self, key: &Q, cost: u32, by: Option<&L>) -> Receipt
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let now = self.clock.now_nanos();
        let Ok(receipt) = self.decide_at(
            self.shard(key),
            key,
            true,
            false,
            at_reading(now),
            |own, state, now| {
                let limiter = by.unwrap_or(own);
                // A charge moves a refused key's reset and retry times, which
                // a remembered refusal would still report: forget them all.
                // Only a key refused now can be remembered as refused.
                if limiter.refused_until(state, now).is_some() {
                    self.refusals.invalidate();
                }
                limiter.charge(state, now, cost)
            },
        );
        receipt
    }

    /// Replace the algorithm for every key (e.g. a new quota), keeping what
    /// each key has spent: no burst on a change. For an [`AllOf`](crate::AllOf)
    /// (or a pair) the states follow the limits by position: keep their
    /// order, or a limit inherits another's spending.
    pub fn set_limit(&self, limiter: L) {
        for shard in self.shards.iter() {
            let mut shard = shard.lock.lock();
            // Under each shard's lock: a refusal recorded there before it
            // is forgotten, one recorded after is judged by the new limit.
            self.refusals.invalidate();
            shard.limiter = limiter.clone();
        }
    }

    /// Forget every idle key now, giving back the memory of tables left a
    /// quarter full or less; returns how many keys remain.
    pub fn evict_idle(&self) -> usize {
        let now = self.clock.now_nanos();
        let mut left = 0;
        for shard in self.shards.iter() {
            let mut shard = shard.lock.lock();
            shard.latest = now.max(shard.latest);
            shard.sweep(self.shards.hasher(), false);
            left += shard.map.len();
        }
        left
    }

    /// Every shard as if its lock had been found held, so the loom models
    /// reach the memory of refused keys without racing for it first.
    // Hidden: a hook for the loom models, compiled only under `--cfg loom`.
    #[cfg(loom)]
    #[doc(hidden)]
    pub fn loom_mark_busy(&self) {
        for shard in self.shards.iter() {
            shard.busy_until.store(u64::MAX, Ordering::Relaxed);
        }
    }

    /// Keys currently remembered.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock.lock().map.len()).sum()
    }

    /// Whether no key is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Shadow (dry-run) mode, as for [`RateLimiter::set_shadow`](crate::RateLimiter::set_shadow).
    pub fn set_shadow(&self, shadow: bool) {
        self.shadow.store(shadow, Ordering::Relaxed);
    }
}

/// The settings of a [`KeyedLimiter`], from [`KeyedLimiter::builder`].
///
/// ```
/// use std::num::{NonZeroU32, NonZeroUsize};
/// use weir_rate::clock::ManualClock;
/// use weir_rate::{Gcra, KeyedLimiter, Quota};
///
/// let quota = Quota::per_second(NonZeroU32::MIN);
/// let limiter = KeyedLimiter::builder(Gcra::new(quota))
///     .clock(ManualClock::new())
///     .shards(1)
///     .max_keys(NonZeroUsize::MIN)
///     .build();
/// assert!(limiter.allows(&"alice"));
/// assert!(limiter.allows(&"bob")); // alice is forgotten ...
/// assert_eq!(limiter.len(), 1);
/// assert!(!limiter.allows(&"alice")); // ... but not her spending
/// ```
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct KeyedLimiterBuilder<K, L, C> {
    limiter: L,
    clock: C,
    shards: usize,
    max_keys: NonZeroUsize,
    keys: PhantomData<fn() -> K>,
}

impl<K: Hash + Eq + Clone + Send, L: Forgettable + Clone, C: Clock> KeyedLimiterBuilder<K, L, C> {
    /// Read time from `clock` (default: the monotonic clock).
    pub fn clock<C2: Clock>(self, clock: C2) -> KeyedLimiterBuilder<K, L, C2> {
        KeyedLimiterBuilder {
            limiter: self.limiter,
            clock,
            shards: self.shards,
            max_keys: self.max_keys,
            keys: PhantomData,
        }
    }

    /// Remember at most `max_keys` keys (default
    /// [`DEFAULT_MAX_KEYS`](KeyedLimiter::DEFAULT_MAX_KEYS)), rounded up to a
    /// multiple of the shards; see [sizing](KeyedLimiter#memory).
    pub fn max_keys(mut self, max_keys: NonZeroUsize) -> Self {
        self.max_keys = max_keys;
        self
    }

    /// Split the keys over `shards` shards, each behind its own lock
    /// (default 64; rounded up to a power of two, at least one, at most
    /// 65 536).
    pub fn shards(mut self, shards: usize) -> Self {
        self.shards = shards;
        self
    }

    /// The limiter.
    pub fn build(self) -> KeyedLimiter<K, L, C> {
        let limiter = self.limiter;
        let count = Shards::<()>::count_for(self.shards);
        let shard_capacity = self.max_keys.get().div_ceil(count);
        let slots = (shard_capacity / KEYS_PER_SPILL_SLOT).clamp(1, MAX_SPILL_SLOTS);
        let spill = Shape::try_new(SPILL_HASHES, slots, Layout::Rows)
            .unwrap_or(Shape::rows::<SPILL_HASHES, 1>());
        let shards = Shards::new(count, |_| LockedShard {
            lock: SpinLock::new(Shard {
                limiter: limiter.clone(),
                map: HashTable::new(),
                sweep_at: MIN_SWEEP,
                latest: 0,
                capacity: shard_capacity,
                spilled: None,
                spilled_until: 0,
                ahead: HashTable::new(),
            }),
            busy_until: AtomicU64::new(0),
        });
        KeyedLimiter {
            shards,
            refusals: Refusals::new(),
            spill: Locator::new(spill),
            clock: self.clock,
            shadow: AtomicBool::new(false),
            shard_capacity,
        }
    }
}

impl<K: Send, L: Forgettable, C> std::fmt::Debug for KeyedLimiter<K, L, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyedLimiter")
            .field("shards", &self.shards.len())
            .field("max_keys", &self.max_keys())
            .finish_non_exhaustive()
    }
}
