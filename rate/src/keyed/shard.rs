//! A shard of a [`KeyedLimiter`](super::KeyedLimiter): a hash table of
//! keys and states behind one lock, its sweeps, its spill sketch of keys
//! forgotten before they were idle, and its side table of keys judged
//! ahead of the clock.

use super::KeyedLimiter;
use super::refusals::{BUSY_FOR, Refused};
use crate::algorithm::Forgettable;
use crate::cells::Cells;
use crate::clock::Clock;
use crate::decision::{Decision, NeverAllowed, Receipt};
use crate::mode::Mode;
use crate::sync::Ordering;
use crate::sync::{AtomicU64, SpinLock};
use hashbrown::HashTable;
use std::borrow::Borrow;
use std::convert::Infallible;
use std::hash::Hash;
use weir_limits::sketch::Locator;

pub(super) const MIN_SWEEP: usize = 64;

/// A full shard forgets about this share of its keys at once, so the scan
/// that finds them costs O(1) per insert.
pub(super) const EVICT_SHARE: usize = 8;

/// Idle times sampled to find the share of keys closest to idle.
pub(super) const SAMPLE: usize = 64;

/// Spill sketch: rows, and keys of capacity per cell of a row (2 bytes per
/// key in all), within bounds.
pub(super) const SPILL_HASHES: usize = 2;
pub(super) const KEYS_PER_SPILL_SLOT: usize = 8;
pub(super) const MAX_SPILL_SLOTS: usize = 1 << 20;

/// A shard behind its lock (on cache lines of its own: see `Shards`).
pub(super) struct LockedShard<K, L: Forgettable> {
    pub(super) lock: SpinLock<Shard<K, L>>,
    /// Until when (clock nanoseconds) checks of this shard ask their
    /// thread's memory of refused keys first: set when the lock is found
    /// held (see `refusals`).
    pub(super) busy_until: AtomicU64,
}

pub(super) struct Shard<K, L: Forgettable> {
    pub(super) limiter: L,
    /// Keys and states, found by the hash that also picked the shard (so a
    /// check hashes its key once).
    pub(super) map: HashTable<Entry<K, L::State>>,
    pub(super) sweep_at: usize,
    /// The latest clock reading this shard has judged at (check, refund or
    /// sweep), never a caller's time beyond it: see [Time](super::KeyedLimiter#time).
    pub(super) latest: u64,
    /// The most keys the shard remembers.
    pub(super) capacity: usize,
    /// When the keys forgotten before they were idle turn idle, by their
    /// hash; allocated at the first: see [Memory](super::KeyedLimiter#memory).
    pub(super) spilled: Option<Cells>,
    /// The latest of those times; from then on they say nothing.
    pub(super) spilled_until: u64,
    /// Keys judged at a caller's time later than `latest`, with the latest
    /// such time: see [Time](super::KeyedLimiter#time). Empty unless callers' times run
    /// ahead of the clock.
    pub(super) ahead: HashTable<(K, u64)>,
}

/// A remembered key.
pub(super) struct Entry<K, S> {
    pub(super) key: K,
    pub(super) state: S,
}

/// What a decision on a key's state came to.
pub(super) trait Outcome {
    /// Whether it spent anything (so its key must be remembered).
    fn spent(&self) -> bool;
    /// Whether it refused one unit (so a busy shard's checker may remember
    /// the refusal).
    fn refused(&self) -> bool;
}

/// `allows`.
impl Outcome for bool {
    fn spent(&self) -> bool {
        *self
    }
    fn refused(&self) -> bool {
        !*self
    }
}

/// A check's decision.
impl Outcome for Result<Decision, NeverAllowed> {
    fn spent(&self) -> bool {
        self.as_ref().is_ok_and(|d| d.receipt().is_some())
    }
    fn refused(&self) -> bool {
        self.as_ref().is_ok_and(|d| !d.is_conforming())
    }
}

/// A forced charge, which never refuses.
impl Outcome for Receipt {
    fn spent(&self) -> bool {
        self.cost() > 0
    }
    fn refused(&self) -> bool {
        false
    }
}

/// The refusal `limiter` makes of one unit on `state` at `now`, if it can
/// name until when it lasts.
#[cold]
#[inline(never)]
fn refusal<L: Forgettable>(limiter: &L, state: &mut L::State, now: u64) -> Option<Refused> {
    let until = limiter.refused_until(state, now)?;
    let decision = limiter.check(state, now, 1, Mode::Peek).ok()?;
    Some(Refused {
        until,
        reset_at: now.saturating_add(decision.reset_after_ns),
        limit: decision.limit,
        window_ns: decision.window_ns,
    })
}

/// The `when` of a check at a reading of the limiter's own clock: it
/// raises the shard's time.
#[inline]
pub(super) fn at_reading(now: u64) -> impl FnOnce(&mut u64) -> Result<u64, Infallible> {
    move |latest| {
        *latest = now.max(*latest);
        Ok(*latest)
    }
}

impl<K: Hash, L: Forgettable> Shard<K, L> {
    /// The state of a key not remembered, at `now`: restored from its
    /// spilled time while that may say something, else fresh.
    #[inline]
    pub(super) fn restore(&self, spill: &Locator, hash: u64, now: u64) -> L::State {
        if self.spilled_until > now
            && let Some(cells) = &self.spilled
        {
            let idle_at = cells.load(&spill.locate_hash(hash));
            return self.limiter.spent_until(idle_at, now);
        }
        self.limiter.new_state(now)
    }

    /// Forget the keys idle at the shard's time (and the times of keys
    /// judged ahead of it that it has reached), and give memory back when
    /// few keys are left. A key idle then is idle at its own later time
    /// too, and its time stays: forgotten, it is judged as if kept.
    ///
    /// With `rebuild`, the live keys move to a fresh table instead of the
    /// idle ones being erased in place. A check's sweep comes once the table
    /// has doubled since the last one, when it would soon have to grow (and
    /// move every key) anyway, and most of its keys are often idle (spent
    /// once, as under a spray): erasing each costs a probe of the
    /// neighbouring control groups and leaves tombstones that later inserts
    /// pay to rehash away, where moving a live key costs one insert.
    /// [`evict_idle`](super::KeyedLimiter::evict_idle) erases in place: it
    /// may come at any time, when most keys are live.
    pub(super) fn sweep(&mut self, hasher: &ahash::RandomState, rebuild: bool) {
        let (limiter, latest) = (&self.limiter, self.latest);
        if rebuild {
            let room = self
                .map
                .len()
                .clamp(MIN_SWEEP, self.capacity.max(MIN_SWEEP));
            let old = std::mem::replace(&mut self.map, HashTable::with_capacity(room));
            for e in old {
                if !limiter.is_idle(&e.state, latest) {
                    let hash = hasher.hash_one(&e.key);
                    self.map.insert_unique(hash, e, |e| hasher.hash_one(&e.key));
                }
            }
        } else {
            self.map.retain(|e| !limiter.is_idle(&e.state, latest));
        }
        self.prune_stamps(hasher);
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

    /// Remember that `key` was judged at `at`, a caller's time later than
    /// the shard's, so that it is never judged earlier. At most `capacity`
    /// keys' times are kept: forgetting them all, when full, judges those
    /// keys at the shard's time, which is never looser (every algorithm
    /// takes a time before its state's own as its own, or judges it more
    /// strictly); a refund may then find less to return.
    #[cold]
    pub(super) fn stamp<Q>(&mut self, hasher: &ahash::RandomState, hash: u64, key: &Q, at: u64)
    where
        K: Borrow<Q>,
        Q: Eq + ToOwned<Owned = K> + ?Sized,
    {
        if let Some((_, t)) = self.ahead.find_mut(hash, |(k, _)| k.borrow() == key) {
            *t = (*t).max(at);
            return;
        }
        if self.ahead.len() >= self.capacity {
            self.prune_stamps(hasher);
            if self.ahead.len() >= self.capacity {
                self.ahead.clear();
            }
        }
        self.ahead
            .insert_unique(hash, (key.to_owned(), at), |(k, _)| hasher.hash_one(k));
    }

    /// Drop the times the shard's own time has reached. Rebuilt rather
    /// than filtered in place, which would leave tombstones that grow it.
    pub(super) fn prune_stamps(&mut self, hasher: &ahash::RandomState) {
        if self.ahead.is_empty() {
            return;
        }
        let latest = self.latest;
        let old = std::mem::take(&mut self.ahead);
        for (key, at) in old {
            if at > latest {
                self.ahead
                    .insert_unique(hasher.hash_one(&key), (key, at), |(k, _)| {
                        hasher.hash_one(k)
                    });
            }
        }
    }

    /// Room for one more key within the capacity, and within the table
    /// size the capacity needs.
    pub(super) fn make_room(&mut self, hasher: &ahash::RandomState, spill: &Locator) {
        if self.map.len() >= self.capacity {
            self.evict(hasher, spill);
        } else if self.map.len() == self.map.capacity() && self.map.len() >= self.capacity / 2 {
            // Removals leave tombstones, which hashbrown frees only by
            // rehashing: in place if the table is at most half full,
            // otherwise by doubling it. A table at its capacity's size
            // whose free slots are all tombstones would double on this
            // insert; rebuilt at that size it has room again.
            let old = std::mem::replace(&mut self.map, HashTable::with_capacity(self.capacity));
            for e in old {
                self.map
                    .insert_unique(hasher.hash_one(&e.key), e, |e| hasher.hash_one(&e.key));
            }
        }
    }

    /// Make a full shard about an eighth empty: forget its idle keys, and
    /// if they are too few, the keys that turn idle soonest (by a sample of
    /// their idle times, and always the soonest), keeping in the spill
    /// sketch when each turns idle. The survivors move to a new table, so
    /// the removals leave no tombstones to grow it.
    #[cold]
    pub(super) fn evict(&mut self, hasher: &ahash::RandomState, spill: &Locator) {
        let (limiter, latest) = (&self.limiter, self.latest);
        let len = self.map.len();
        let stride = (len / SAMPLE).max(1);
        let mut sample = [u64::MAX; SAMPLE];
        let (mut taken, mut soonest, mut idle) = (0, u64::MAX, 0);
        for (i, e) in self.map.iter().enumerate() {
            let idle_at = limiter.idle_at(&e.state, latest);
            if idle_at <= latest {
                idle += 1;
                continue;
            }
            soonest = soonest.min(idle_at);
            if i % stride == 0 && taken < SAMPLE {
                sample[taken] = idle_at;
                taken += 1;
            }
        }
        let busy = len - idle;
        let target = (len / EVICT_SHARE).max(1).saturating_sub(idle).min(busy);
        // The sampled time with about `target / busy` of the sample at or
        // below it (every key sampled in a small shard).
        let sample = &mut sample[..taken];
        let threshold = match sample.len() {
            _ if target == 0 => latest,
            0 => u64::MAX,
            n => {
                let rank = (n * target).div_ceil(busy).clamp(1, n) - 1;
                *sample.select_nth_unstable(rank).1
            }
        };
        if target > 0 && self.spilled.is_none() {
            self.spilled = Some(Cells::new(spill.cells()));
        }
        let old = std::mem::replace(&mut self.map, HashTable::with_capacity(busy));
        let (mut spilled, mut until) = (0, self.spilled_until);
        for e in old {
            let idle_at = limiter.idle_at(&e.state, latest);
            if idle_at <= latest {
                continue;
            }
            let hash = hasher.hash_one(&e.key);
            if idle_at <= threshold
                && (spilled < target || idle_at <= soonest)
                && let Some(cells) = &self.spilled
            {
                cells.store(&spill.locate_hash(hash), idle_at);
                until = until.max(idle_at);
                spilled += 1;
                continue;
            }
            self.map.insert_unique(hash, e, |e| hasher.hash_one(&e.key));
        }
        self.spilled_until = until;
        self.sweep_at = (self.map.len() * 2).max(MIN_SWEEP);
        self.prune_stamps(hasher);
    }
}

/// The time to judge `key` (whose hash is `hash`) at, from `now`: its own
/// time if it was judged at a later caller's time.
#[inline]
pub(super) fn stamped<K, Q>(ahead: &HashTable<(K, u64)>, hash: u64, key: &Q, now: u64) -> u64
where
    K: Borrow<Q>,
    Q: Eq + ?Sized,
{
    if ahead.is_empty() {
        return now;
    }
    ahead
        .find(hash, |(k, _)| k.borrow() == key)
        .map_or(now, |&(_, at)| at.max(now))
}

/// The entry of `key` (whose hash is `hash`) in a shard's map.
#[inline]
pub(super) fn find<'a, K, Q, S>(
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

/// Deciding for a key in its shard.
impl<K: Hash + Eq + Clone + Send, L: Forgettable + Clone, C: Clock> KeyedLimiter<K, L, C> {
    /// Run `decide` on the state of `key` (found by `shard`, its hash and
    /// shard) at the time `when` picks from the shard's time (which it may
    /// raise), or later if the key has been judged later. A key not
    /// remembered gets a fresh state (or the one its spilled time
    /// restores), kept only if `keep` and `decide` spent something and left
    /// it not idle. If `remember`, the shard is busy and `decide` refused a
    /// remembered key at the clock's time, the calling thread remembers the
    /// refusal (see `refusals`).
    #[inline]
    pub(super) fn decide_at<Q, R: Outcome, E>(
        &self,
        (hash, locked): (u64, &LockedShard<K, L>),
        key: &Q,
        keep: bool,
        remember: bool,
        when: impl FnOnce(&mut u64) -> Result<u64, E>,
        decide: impl FnOnce(&L, &mut L::State, u64) -> R,
    ) -> Result<R, E>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let hasher = self.shards.hasher();
        let (mut guard, waited) = locked.lock.lock_noting_wait();
        let shard = &mut *guard;
        let now = when(&mut shard.latest)?;
        if waited {
            let busy_until = shard.latest.saturating_add(BUSY_FOR);
            locked.busy_until.store(busy_until, Ordering::Relaxed);
        }
        // Later than the shard's time only for a caller's time ahead of it.
        let ahead = now > shard.latest;
        let judged = stamped(&shard.ahead, hash, key, now);
        if let Some(entry) = find(&mut shard.map, hash, key) {
            let result = decide(&shard.limiter, &mut entry.state, judged);
            // Only refusals at the clock's time: a key judged at a caller's
            // time ahead is judged there, not where a later check reads.
            let refused = (remember
                && judged == now
                && !ahead
                && result.refused()
                && locked.busy_until.load(Ordering::Relaxed) > now)
                .then(|| refusal(&shard.limiter, &mut entry.state, now))
                .flatten()
                .map(|refused| (refused, self.refusals.epoch()));
            if ahead {
                self.refusals.invalidate();
                shard.stamp(hasher, hash, key, judged);
            }
            drop(guard);
            if let Some((refused, epoch)) = refused {
                self.refusals.remember(hash, key, refused, epoch);
            }
            return Ok(result);
        }
        let now = judged;
        let mut state = shard.restore(&self.spill, hash, now);
        let result = decide(&shard.limiter, &mut state, now);
        // A check that spent nothing leaves a restored state as its spilled
        // time would restore it again, and a fresh one idle.
        if keep && result.spent() && !shard.limiter.is_idle(&state, now) {
            if shard.map.len() >= shard.capacity {
                // Keys forgotten to make room are restored from cells that
                // other keys' times may raise: a remembered refusal's reset
                // and retry times would no longer be the shard's.
                self.refusals.invalidate();
            }
            shard.make_room(hasher, &self.spill);
            // The only allocation a borrowed key costs: on first spend.
            let entry = Entry {
                key: key.to_owned(),
                state,
            };
            shard
                .map
                .insert_unique(hash, entry, |e| hasher.hash_one(&e.key));
            if ahead {
                self.refusals.invalidate();
                shard.stamp(hasher, hash, key, now);
            }
            if shard.map.len() >= shard.sweep_at {
                shard.sweep(hasher, true);
            }
        }
        Ok(result)
    }
}
