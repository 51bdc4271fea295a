//! Each thread's memory of the keys it has just seen refused, consulted by
//! [`KeyedLimiter::allows`](super::KeyedLimiter::allows) and
//! [`check`](super::KeyedLimiter::check) before the key's shard lock while
//! that shard is contended, so that a flood of one key
//! from many threads is refused without moving the lock's cache line
//! between cores on every check.
//!
//! # Why it decides exactly as the lock does
//!
//! A refusal spends nothing, and spending never loosens a limit, so a key
//! refused at `now` stays refused by every unit check until the time its
//! algorithm names ([`Forgettable::refused_until`](crate::algorithm::Forgettable::refused_until)).
//! Five things change that answer or its decision: a refund, a new limit
//! and a caller's time ahead of the clock (the key is then judged at that
//! time) can let it through sooner; a charge of a refused key moves its
//! reset and retry times; and a key forgotten to make room comes back from
//! spill cells that other keys' times may have raised. Each bumps the
//! limiter's epoch under the key's shard lock (every shard's, for a new
//! limit; for an eviction, before a full shard makes room) before it
//! changes anything, and an entry counts only under the epoch that was
//! current, under the same lock, when its refusal was decided. A check
//! that reads the old epoch is ordered before the bump, so before the
//! change; one that reads the new epoch asks the shard. Nothing else
//! changes a refused key: its own checks are refused and spend nothing,
//! and a refused key is not idle, so no sweep forgets it. A key judged at a
//! caller's time ahead is not remembered at all.
//!
//! An answer from here is judged at the thread's own clock reading, where
//! the lock judges at the latest reading its shard has seen: the same on a
//! clock that does not go back (readings of the time-stamp counter on two
//! cores differ by far less than any refusal lasts); on a clock set back,
//! the memory can be the stricter of the two, never the looser.
//!
//! Answering from here does not raise the shard's time: that only leaves
//! sweeps judging idleness a little earlier, which forgets fewer keys.
//!
//! # Cost and memory
//!
//! Nothing unless the shard's lock was found held within the last
//! [`BUSY_FOR`] nanoseconds: on one thread, or with little contention, a
//! check pays one load of a word on the shard's own line. While it was, a
//! check pays a lookup in the calling thread's table (one slot picked by
//! bits of the key's hash, and a compare), and a refusal found there
//! touches no line another core writes. Each thread that has checked a
//! contended shard holds [`SLOTS`] entries (the key and six words) for
//! each limiter, kept until overwritten and freed with the limiter.

use crate::decision::Decision;
use crate::sync::{AtomicU64, Ordering};
use std::borrow::Borrow;
use std::cell::RefCell;
use weir_primitives::local::ThreadLocal;

/// Entries per thread: a direct-mapped table, one entry per slot.
pub(super) const SLOTS: usize = 256;

/// How long a shard found contended keeps its checks asking the threads'
/// tables first (100 ms): long against a check, short against a flood.
pub(super) const BUSY_FOR: u64 = 100_000_000;

/// Keys refused until a known time, per thread.
pub(super) struct Refusals<K: Send> {
    threads: ThreadLocal<RefCell<Box<[Slot<K>]>>>,
    /// See [Why it decides exactly](self#why-it-decides-exactly-as-the-lock-does).
    /// On its own cache line: read by the checks that consult the tables,
    /// written only by refunds, new limits and callers' times ahead.
    epoch: Padded<AtomicU64>,
}

#[repr(align(128))]
struct Padded<T>(T);

struct Slot<K> {
    hash: u64,
    refused: Refused,
    epoch: u64,
    key: Option<K>,
}

impl<K> Slot<K> {
    const EMPTY: Self = Self {
        hash: 0,
        refused: Refused {
            until: 0,
            reset_at: 0,
            limit: 0,
            window_ns: 0,
        },
        epoch: 0,
        key: None,
    };
}

/// A key's refusal, in absolute times, as its shard decided it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Refused {
    /// Refused before this time (clock nanoseconds).
    pub(super) until: u64,
    /// When the refusing decision said the key resets.
    pub(super) reset_at: u64,
    pub(super) limit: u32,
    pub(super) window_ns: u64,
}

impl Refused {
    /// The refusing decision at `now`, before `until`: nothing remaining,
    /// its times counted down (see `Forgettable::refused_until`).
    #[inline]
    pub(super) fn decision(&self, now: u64) -> Decision {
        let reset_after = self.reset_at.saturating_sub(now);
        Decision::deny_ns(self.limit, self.window_ns, 0, reset_after, self.until - now)
    }
}

#[inline]
fn slot(hash: u64) -> usize {
    // Bits the shard (32 and up) and the map's probe (the lowest and the
    // top seven) do not pick by, so keys of one shard spread out here.
    (hash >> 16) as usize & (SLOTS - 1)
}

impl<K: Send> Refusals<K> {
    pub(super) fn new() -> Self {
        Self {
            threads: ThreadLocal::new(),
            epoch: Padded(AtomicU64::new(0)),
        }
    }

    /// The epoch to record a refusal under: read under the shard's lock.
    #[inline]
    pub(super) fn epoch(&self) -> u64 {
        self.epoch.0.load(Ordering::Acquire)
    }

    /// Forget every recorded refusal: called under a shard's lock before a
    /// change that may let a refused key of that shard through sooner.
    pub(super) fn invalidate(&self) {
        self.epoch.0.fetch_add(1, Ordering::AcqRel);
    }

    /// The refusal of `key` this thread saw, if it still holds at `now`.
    #[inline]
    pub(super) fn refusal<Q>(&self, hash: u64, key: &Q, now: u64) -> Option<Refused>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        let slots = self.threads.get_or(Self::table)?;
        // Read before borrowing: under loom a load lets another model
        // thread run, and none may find the table borrowed.
        let epoch = self.epoch();
        let slots = slots.borrow();
        let entry = &slots[slot(hash)];
        let holds = entry.hash == hash
            && now < entry.refused.until
            && entry.epoch == epoch
            && entry.key.as_ref().is_some_and(|k| k.borrow() == key);
        holds.then_some(entry.refused)
    }

    /// Record `key`'s refusal, as decided under the shard's lock at `epoch`.
    #[cold]
    #[inline(never)]
    pub(super) fn remember<Q>(&self, hash: u64, key: &Q, refused: Refused, epoch: u64)
    where
        K: Borrow<Q>,
        Q: Eq + ToOwned<Owned = K> + ?Sized,
    {
        let Some(slots) = self.threads.get_or(Self::table) else {
            return;
        };
        let mut slots = slots.borrow_mut();
        let entry = &mut slots[slot(hash)];
        if !(entry.hash == hash && entry.key.as_ref().is_some_and(|k| k.borrow() == key)) {
            entry.key = Some(key.to_owned());
            entry.hash = hash;
        }
        entry.refused = refused;
        entry.epoch = epoch;
    }

    fn table() -> RefCell<Box<[Slot<K>]>> {
        RefCell::new((0..SLOTS).map(|_| Slot::EMPTY).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::Slot;

    /// What the limiter's docs promise a remembered refusal costs.
    #[test]
    fn a_remembered_refusal_is_the_key_and_six_words() {
        let key = std::mem::size_of::<Option<u64>>();
        assert_eq!(std::mem::size_of::<Slot<u64>>(), key + 6 * 8);
    }
}
