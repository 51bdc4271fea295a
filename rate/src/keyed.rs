//! One limit per key, exactly: a sharded map from key to state.
//!
//! Each key's state lives in one of `shards` hash maps, each behind its own
//! short lock and on its own cache lines, so threads working on different
//! keys rarely meet. Keys are remembered only while they matter: a key is
//! inserted when it first spends something, and a shard sweeps out idle keys
//! (whose state equals a fresh one, so forgetting them changes no decision)
//! whenever it has doubled in size since its last sweep. Memory is therefore
//! proportional to the keys active within about one window, and the cost of
//! sweeping is amortised O(1) per insert. Decisions are exact; compare
//! [`SketchLimiter`](crate::SketchLimiter), which bounds memory instead.
//!
//! # Time
//!
//! A key is never judged earlier than it has been judged before: a thread
//! that read the clock before waiting for the lock, or a caller-supplied
//! time earlier than the key's last, counts as no time passing for that key.
//! That is what lets one receipt refund every limit of a pair (each charged
//! the check to the same instant). Each key keeps the latest time it was
//! judged at for this.
//!
//! A shard also keeps a time, the latest **clock reading** it has judged
//! at, below which nothing in it is judged: a key forgotten as idle is idle
//! only from the sweep on, so no check stamped before the sweep may find it
//! fresh. Only readings of the clock raise it: a time given to
//! [`check_n_at`](KeyedLimiter::check_n_at) is judged at for its own key, and
//! raises the shard's time no further than the clock's reading, which is
//! read only then (when the time is later than the shard's). So a caller's
//! time, however far ahead, changes no other key's decisions, while batches
//! and replays keep their meaning for their own keys. A time more than
//! [`MAX_AHEAD`](crate::clock::MAX_AHEAD) past the clock is refused
//! ([`CheckAtError::AheadOfClock`]): judged at, it would leave its key judged
//! there until the clock caught up. Sweeps judge idleness at the shard's
//! time, and keep a key whose own time is later.

use crate::clock::{Clock, MonotonicClock, Timestamp};
use crate::decision::{CheckAtError, Decision, NeverAllowed};
use crate::limiter::{Limiter, Mode};
use crate::sketch::{Cells, Layout, Shape};
use crate::sync::SpinLock;
use hashbrown::HashTable;
use std::borrow::Borrow;
use std::convert::Infallible;
use std::hash::Hash;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicBool, Ordering};
use weir_limits::sketch::Locator;

const DEFAULT_SHARDS: usize = 64;

/// The most keys a [`KeyedLimiter`] remembers unless a constructor says
/// otherwise: 917 504, which is 64 shards of 14 336 keys, the most a hash
/// table of 16 384 slots holds (tables grow at 7/8 full), so the default
/// limiter's tables end up full rather than half empty.
pub const DEFAULT_CAPACITY: NonZeroUsize = NonZeroUsize::new(917_504).unwrap();
const MIN_SWEEP: usize = 64;

/// The most shards [`KeyedLimiter::with_shards`] makes: far more than
/// threads contend, few enough that each still holds many keys.
const MAX_SHARDS: usize = 1 << 16;

/// A full shard forgets about this share of its keys at once, so the scan
/// that finds them costs O(1) per insert.
const EVICT_SHARE: usize = 8;

/// Idle times sampled to find the share of keys closest to idle.
const SAMPLE: usize = 64;

/// Spill sketch: rows, and keys of capacity per cell of a row (2 bytes per
/// key in all), within bounds.
const SPILL_HASHES: usize = 2;
const KEYS_PER_SPILL_SLOT: usize = 8;
const MAX_SPILL_SLOTS: usize = 1 << 20;
#[repr(align(128))]
struct Padded<T>(T);

type LockedShard<K, L> = Padded<SpinLock<Shard<K, L>>>;

struct Shard<K, L: Limiter> {
    limiter: L,
    /// Keys and states, found by the hash that also picked the shard (so a
    /// check hashes its key once).
    map: HashTable<Entry<K, L::State>>,
    sweep_at: usize,
    /// The latest clock reading this shard has judged at (check, refund or
    /// sweep), never a caller's time beyond it: see [Time](self#time).
    latest: u64,
    /// The most keys the shard remembers.
    capacity: usize,
    /// When the keys forgotten before they were idle turn idle, by their
    /// hash; allocated at the first: see [Memory](self#memory).
    spilled: Option<Cells>,
    /// The latest of those times; from then on they say nothing.
    spilled_until: u64,
}

/// A remembered key.
struct Entry<K, S> {
    key: K,
    state: S,
    /// The latest time the key was judged at (at least its shard's time
    /// when it was): see [Time](self#time).
    at: u64,
}

/// An exact per-key limiter over any [`Limiter`].
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
pub struct KeyedLimiter<K, L: Limiter, C = MonotonicClock> {
    shards: Box<[LockedShard<K, L>]>,
    hasher: ahash::RandomState,
    /// Where a key's cells are in its shard's spill sketch, from the hash
    /// that found its shard.
    spill: Locator,
    clock: C,
    shadow: AtomicBool,
    /// Keys per shard.
    shard_capacity: usize,
}

impl<K: Hash + Eq + Clone + Send, L: Limiter + Clone> KeyedLimiter<K, L, MonotonicClock> {
    /// A keyed limiter on the monotonic clock.
    pub fn new(limiter: L) -> Self {
        Self::with_clock(limiter, MonotonicClock::new())
    }
}

impl<K: Hash + Eq + Clone + Send, L: Limiter + Clone, C: Clock> KeyedLimiter<K, L, C> {
    /// A keyed limiter reading time from `clock`, with 64 shards.
    pub fn with_clock(limiter: L, clock: C) -> Self {
        Self::with_shards(limiter, clock, DEFAULT_SHARDS)
    }

    /// A keyed limiter with `shards` shards (rounded up to a power of two,
    /// at least one, at most 65 536).
    pub fn with_shards(limiter: L, clock: C, shards: usize) -> Self {
        Self::with_shards_and_capacity(limiter, clock, shards, DEFAULT_CAPACITY)
    }

    /// A keyed limiter remembering at most `capacity` keys.
    pub fn with_capacity(limiter: L, clock: C, capacity: NonZeroUsize) -> Self {
        Self::with_shards_and_capacity(limiter, clock, DEFAULT_SHARDS, capacity)
    }

    /// A keyed limiter with `shards` shards remembering at most `capacity` keys.
    pub fn with_shards_and_capacity(
        limiter: L,
        clock: C,
        shards: usize,
        capacity: NonZeroUsize,
    ) -> Self {
        let shards = shards.clamp(1, MAX_SHARDS).next_power_of_two();
        let shard_capacity = capacity.get().div_ceil(shards);
        let hasher = ahash::RandomState::new();
        let slots = (shard_capacity / KEYS_PER_SPILL_SLOT).clamp(1, MAX_SPILL_SLOTS);
        let spill = Shape::try_new(SPILL_HASHES, slots, Layout::Rows)
            .unwrap_or(Shape::rows::<SPILL_HASHES, 1>());
        let shards = (0..shards)
            .map(|_| {
                Padded(SpinLock::new(Shard {
                    limiter: limiter.clone(),
                    map: HashTable::new(),
                    sweep_at: MIN_SWEEP,
                    latest: 0,
                    capacity: shard_capacity,
                    spilled: None,
                    spilled_until: 0,
                }))
            })
            .collect();
        Self {
            shards,
            hasher,
            spill: Locator::new(spill),
            clock,
            shadow: AtomicBool::new(false),
            shard_capacity,
        }
    }

    /// The most keys remembered at once.
    pub fn capacity(&self) -> usize {
        self.shard_capacity.saturating_mul(self.shards.len())
    }

    /// `key`'s hash and its shard.
    #[inline]
    fn shard<Q: Hash + ?Sized>(&self, key: &Q) -> (u64, &SpinLock<Shard<K, L>>) {
        let hash = self.hasher.hash_one(key);
        // The map uses the low bits and the top seven; take the shard from
        // bits in between.
        let index = (hash >> 32) as usize & (self.shards.len() - 1);
        (hash, &self.shards[index].0)
    }

    /// Check one unit for `key`.
    #[inline]
    pub fn check<Q>(&self, key: &Q) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.run(key, 1, Mode::Consume)
            .unwrap_or_else(|_| Decision::deny(0, std::time::Duration::ZERO, 0, 0, u64::MAX))
    }

    /// Check `cost` units for `key`, spending them if allowed.
    pub fn check_n<Q>(&self, key: &Q, cost: u32) -> Result<Decision, NeverAllowed>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.run(key, cost, Mode::Consume)
    }

    /// What [`check_n`](Self::check_n) would answer, without spending.
    pub fn peek_n<Q>(&self, key: &Q, cost: u32) -> Result<Decision, NeverAllowed>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.run(key, cost, Mode::Peek)
    }

    /// The time on this limiter's clock, for [`check_n_at`](Self::check_n_at).
    pub fn now(&self) -> Timestamp<C> {
        self.clock.now()
    }

    /// [`check_n`](Self::check_n) at a time read from this limiter's clock
    /// (e.g. once for a batch of requests, or replayed from a trace). The
    /// time is judged at for `key` alone (see [Time](self#time)); the clock
    /// is read only when it is later than any reading the key's shard has
    /// judged at.
    ///
    /// # Errors
    ///
    /// [`CheckAtError::NeverAllowed`] for a cost above the limiter's
    /// capacity; [`CheckAtError::AheadOfClock`] for a time more than
    /// [`MAX_AHEAD`](crate::clock::MAX_AHEAD) past the clock. Neither
    /// changes anything.
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use weir_rate::{Gcra, KeyedLimiter, Quota};
    ///
    /// let per_user = KeyedLimiter::new(Gcra::new(Quota::per_second(NonZeroU32::MIN)));
    /// let now = per_user.now();
    /// let batch = ["alice", "bob", "alice"].map(|user| per_user.check_n_at(&user, 1, now).unwrap());
    /// assert_eq!(batch.map(|d| d.is_allowed()), [true, true, false]);
    /// ```
    ///
    /// A reading of another type of clock is a type error:
    ///
    /// ```compile_fail,E0308
    /// use std::num::NonZeroU32;
    /// use weir_rate::clock::{Clock, ManualClock, StdClock};
    /// use weir_rate::{Gcra, KeyedLimiter, Quota};
    ///
    /// let per_user = KeyedLimiter::with_clock(Gcra::new(Quota::per_second(NonZeroU32::MIN)), ManualClock::new());
    /// let _ = per_user.check_n_at(&"alice", 1, StdClock::new().now());
    /// ```
    pub fn check_n_at<Q>(
        &self,
        key: &Q,
        cost: u32,
        now: Timestamp<C>,
    ) -> Result<Decision, CheckAtError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let at = now.as_nanos();
        let decision = self.decide_at(
            key,
            true,
            |latest: &mut u64| {
                if at > *latest {
                    let reading = self.clock.now_nanos();
                    CheckAtError::check_ahead(at, reading)?;
                    *latest = reading.min(at).max(*latest);
                }
                Ok::<_, CheckAtError>(at.max(*latest))
            },
            |limiter, state, now| limiter.check(state, now, cost, Mode::Consume),
            spent,
        )??;
        Ok(self.shadowed(decision))
    }

    /// Give back what `decision` (a check of `key` on this limiter)
    /// spent, as far as it still counts: see [`Limiter::refund`]. Nothing
    /// for a decision that spent nothing, or a key forgotten as idle (whose
    /// spendings no longer count). Refund each decision at most once.
    pub fn refund<Q>(&self, key: &Q, decision: &Decision)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let Some(receipt) = decision.receipt() else {
            return;
        };
        let now = self.clock.now_nanos();
        let (hash, shard) = self.shard(key);
        let mut shard = shard.lock();
        let shard = &mut *shard;
        shard.latest = now.max(shard.latest);
        if let Some(entry) = find(&mut shard.map, hash, key) {
            entry.at = entry.at.max(shard.latest);
            shard.limiter.refund(&mut entry.state, entry.at, receipt);
        }
    }

    /// Replace the algorithm for every key (e.g. a new quota), keeping what
    /// each key has spent: no burst on a change.
    pub fn set_limit(&self, limiter: L) {
        for shard in self.shards.iter() {
            shard.0.lock().limiter = limiter.clone();
        }
    }

    /// Forget every idle key now; returns how many keys remain.
    pub fn evict_idle(&self) -> usize {
        let now = self.clock.now_nanos();
        let mut left = 0;
        for shard in self.shards.iter() {
            let mut shard = shard.0.lock();
            shard.latest = now.max(shard.latest);
            shard.sweep(&self.hasher);
            left += shard.map.len();
        }
        left
    }

    /// Keys currently remembered.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.0.lock().map.len()).sum()
    }

    /// Whether no key is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Shadow (dry-run) mode, as for [`RateLimiter::set_shadow`](crate::RateLimiter::set_shadow).
    pub fn set_shadow(&self, shadow: bool) {
        self.shadow.store(shadow, Ordering::Relaxed);
    }

    #[inline]
    fn run<Q>(&self, key: &Q, cost: u32, mode: Mode) -> Result<Decision, NeverAllowed>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let now = self.clock.now_nanos();
        let Ok(decision) = self.decide_at(
            key,
            mode == Mode::Consume,
            at_reading(now),
            |l, s, now| l.check(s, now, cost, mode),
            spent,
        );
        Ok(self.shadowed(decision?))
    }

    #[inline]
    fn shadowed(&self, decision: Decision) -> Decision {
        if self.shadow.load(Ordering::Relaxed) {
            decision.shadowed()
        } else {
            decision
        }
    }

    /// Whether one unit for `key` may be spent now, spending it if so:
    /// [`check`](Self::check) for callers that need only the yes or no
    /// (no headers), without building a [`Decision`]. In shadow mode it
    /// always answers yes, as `check(key).is_allowed()` does.
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use weir_rate::{Gcra, KeyedLimiter, Quota};
    ///
    /// let per_client = KeyedLimiter::new(Gcra::new(Quota::per_second(NonZeroU32::new(1).unwrap())));
    /// assert!(per_client.allows("alice"));
    /// assert!(!per_client.allows("alice"));
    /// assert!(per_client.allows("bob"));
    /// ```
    #[inline]
    pub fn allows<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let now = self.clock.now_nanos();
        let Ok(allowed) = self.decide_at(
            key,
            true,
            at_reading(now),
            |limiter, state, now| limiter.allows(state, now, 1),
            |&allowed| allowed,
        );
        allowed || self.shadow.load(Ordering::Relaxed)
    }

    /// Run `decide` on `key`'s state at the time `when` picks from the
    /// shard's time (which it may raise), or later if the key has been
    /// judged later. A key not remembered gets a fresh state (or the one
    /// its spilled time restores), kept only if `keep`, `decide` `spent`
    /// something and left it not idle.
    #[inline]
    fn decide_at<Q, R, E>(
        &self,
        key: &Q,
        keep: bool,
        when: impl FnOnce(&mut u64) -> Result<u64, E>,
        decide: impl FnOnce(&L, &mut L::State, u64) -> R,
        spent: impl FnOnce(&R) -> bool,
    ) -> Result<R, E>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let (hash, shard) = self.shard(key);
        let mut guard = shard.lock();
        let shard = &mut *guard;
        let now = when(&mut shard.latest)?;
        if let Some(entry) = find(&mut shard.map, hash, key) {
            entry.at = entry.at.max(now);
            return Ok(decide(&shard.limiter, &mut entry.state, entry.at));
        }
        let mut state = shard.restore(&self.spill, hash, now);
        let result = decide(&shard.limiter, &mut state, now);
        // A check that spent nothing leaves a restored state as its spilled
        // time would restore it again, and a fresh one idle.
        if keep && spent(&result) && !shard.limiter.is_idle(&state, now) {
            let hasher = &self.hasher;
            shard.make_room(hasher, &self.spill);
            // The only allocation a borrowed key costs: on first spend.
            let entry = Entry {
                key: key.to_owned(),
                state,
                at: now,
            };
            shard
                .map
                .insert_unique(hash, entry, |e| hasher.hash_one(&e.key));
            if shard.map.len() >= shard.sweep_at {
                shard.sweep(hasher);
            }
        }
        Ok(result)
    }
}

/// Whether a check spent anything (so its key must be remembered).
#[inline]
fn spent(result: &Result<Decision, NeverAllowed>) -> bool {
    result.as_ref().is_ok_and(|d| d.receipt().is_some())
}

/// The `when` of a check at a reading of the limiter's own clock: it
/// raises the shard's time.
#[inline]
fn at_reading(now: u64) -> impl FnOnce(&mut u64) -> Result<u64, Infallible> {
    move |latest| {
        *latest = now.max(*latest);
        Ok(*latest)
    }
}

impl<K: Hash, L: Limiter> Shard<K, L> {
    /// The state of a key not remembered, at `now`: restored from its
    /// spilled time while that may say something, else fresh.
    #[inline]
    fn restore(&self, spill: &Locator, hash: u64, now: u64) -> L::State {
        if self.spilled_until > now
            && let Some(cells) = &self.spilled
        {
            let idle_at = cells.load(&spill.locate_hash(hash));
            return self.limiter.spent_until(idle_at, now);
        }
        self.limiter.new_state(now)
    }

    /// Forget the keys idle at the shard's time, and give memory back
    /// when few keys are left. A key judged later than that (at a caller's
    /// time) stays: forgotten, it could be judged again before its own time.
    fn sweep(&mut self, hasher: &ahash::RandomState) {
        let (limiter, latest) = (&self.limiter, self.latest);
        self.map
            .retain(|e| e.at > latest || !limiter.is_idle(&e.state, latest));
        let len = self.map.len();
        self.sweep_at = (len * 2).max(MIN_SWEEP);
        // A table never shrinks by itself: after a spray it would keep its
        // size for good. A quarter full leaves room to grow without
        // shrinking and growing back and forth.
        if self.map.capacity() / 4 > len {
            self.map.shrink_to(len * 2, |e| hasher.hash_one(&e.key));
        }
        if self.spilled_until <= latest {
            self.spilled = None;
        }
    }

    /// Room for one more key within the capacity, and within the table
    /// size the capacity needs.
    fn make_room(&mut self, hasher: &ahash::RandomState, spill: &Locator) {
        if self.map.len() >= self.capacity {
            self.sweep(hasher);
            if self.map.len() >= self.capacity {
                self.evict(hasher, spill);
            }
        }
        // Removals leave tombstones, which hashbrown frees only by
        // rehashing: in place if the table is at most half full, otherwise
        // by doubling it. A table at its capacity's size whose free slots
        // are all tombstones would double on this insert; rebuilt at that
        // size it has room again.
        if self.map.len() == self.map.capacity() && self.map.len() >= self.capacity / 2 {
            let old = std::mem::replace(&mut self.map, HashTable::with_capacity(self.capacity));
            for e in old {
                self.map
                    .insert_unique(hasher.hash_one(&e.key), e, |e| hasher.hash_one(&e.key));
            }
        }
    }

    /// Forget about an eighth of a full shard's keys, those that turn idle
    /// soonest (by a sample of their idle times, and always the soonest),
    /// keeping in the spill sketch when each turns idle.
    #[cold]
    fn evict(&mut self, hasher: &ahash::RandomState, spill: &Locator) {
        let (limiter, latest) = (&self.limiter, self.latest);
        let len = self.map.len();
        let target = (len / EVICT_SHARE).max(1);
        let stride = (len / SAMPLE).max(1);
        let mut sample = [u64::MAX; SAMPLE];
        let (mut taken, mut soonest) = (0, u64::MAX);
        for (i, e) in self.map.iter().enumerate() {
            let idle_at = limiter.idle_at(&e.state, latest);
            soonest = soonest.min(idle_at);
            if i % stride == 0 && taken < SAMPLE {
                sample[taken] = idle_at;
                taken += 1;
            }
        }
        // The sampled time with about `target / len` of the sample at or
        // below it (every key sampled in a small shard).
        let sample = &mut sample[..taken];
        let threshold = match sample.len() {
            0 => u64::MAX,
            n => {
                let rank = (n * target).div_ceil(len).clamp(1, n) - 1;
                *sample.select_nth_unstable(rank).1
            }
        };
        let cells = self
            .spilled
            .get_or_insert_with(|| Cells::new(spill.cells()));
        let (mut removed, mut until) = (0, self.spilled_until);
        self.map.retain(|e| {
            let idle_at = limiter.idle_at(&e.state, latest);
            let forget = idle_at <= threshold && (removed < target || idle_at <= soonest);
            if forget {
                removed += 1;
                if idle_at > latest {
                    cells.store(&spill.locate_hash(hasher.hash_one(&e.key)), idle_at);
                    until = until.max(idle_at);
                }
            }
            !forget
        });
        self.spilled_until = until;
    }
}

/// The entry of `key` (whose hash is `hash`) in a shard's map.
#[inline]
fn find<'a, K, Q, S>(
    map: &'a mut HashTable<Entry<K, S>>,
    hash: u64,
    key: &Q,
) -> Option<&'a mut Entry<K, S>>
where
    K: Borrow<Q>,
    Q: Eq + ?Sized,
{
    map.find_mut(hash, |e| e.key.borrow() == key)
}

impl<K, L: Limiter, C> std::fmt::Debug for KeyedLimiter<K, L, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyedLimiter")
            .field("shards", &self.shards.len())
            .field("capacity", &self.shard_capacity)
            .finish_non_exhaustive()
    }
}
