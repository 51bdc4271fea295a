//! The exact stage of [`HeavyHitters`](super::HeavyHitters): at most
//! `capacity` admitted keys in reusable slots, found by hash, with a
//! min-heap of (possibly stale, never too high) totals for SpaceSaving
//! eviction.

use super::HeavyCount;
use crate::sync::{AtomicIsize, Ordering};
use hashbrown::HashTable;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

pub(super) struct Entry {
    at_admission: isize,
    since_admission: AtomicIsize,
}

impl Entry {
    pub(super) fn count(&self) -> HeavyCount {
        HeavyCount {
            at_admission: self.at_admission,
            since_admission: self.since_admission.load(Ordering::Relaxed),
        }
    }

    /// Count `count` more (non-negative); saturates rather than wrapping
    /// to a negative total.
    pub(super) fn add(&self, count: isize) -> HeavyCount {
        let previous = self
            .since_admission
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |since| {
                Some(since.saturating_add(count))
            })
            .unwrap_or_else(|since| since);
        HeavyCount {
            at_admission: self.at_admission,
            since_admission: previous.saturating_add(count),
        }
    }
}

/// An admitted key in its slot.
pub(super) struct Slot<K> {
    pub(super) key: K,
    /// The key's hash in `Table::index`.
    hash: u64,
    pub(super) entry: Entry,
}

impl<K> Slot<K> {
    /// A key just admitted with its estimate at admission.
    fn new(key: K, hash: u64, at_admission: isize) -> Self {
        Self {
            key,
            hash,
            entry: Entry {
                at_admission,
                since_admission: AtomicIsize::new(0),
            },
        }
    }
}

/// The exact table: at most `capacity` slots, reused on eviction.
pub(super) struct Table<K> {
    pub(super) slots: Vec<Slot<K>>,
    /// Slot numbers, found by their key's hash.
    index: HashTable<usize>,
    /// Each slot once, under a total it had when pushed: never above its
    /// current one (totals only grow), so a top whose total is current is
    /// the smallest.
    by_total: BinaryHeap<Reverse<(isize, usize)>>,
}

impl<K: Eq> Table<K> {
    pub(super) fn new() -> Self {
        Self {
            slots: Vec::new(),
            index: HashTable::new(),
            by_total: BinaryHeap::new(),
        }
    }

    pub(super) fn find(&self, hash: u64, key: &K) -> Option<&Entry> {
        let slots = &self.slots;
        let &slot = self.index.find(hash, |&i| slots[i].key == *key)?;
        Some(&slots[slot].entry)
    }

    /// Put a key in a new slot (the table has fewer than `capacity`).
    pub(super) fn insert(
        &mut self,
        capacity: usize,
        key: K,
        hash: u64,
        at_admission: isize,
    ) -> &Entry {
        let slot = self.slots.len();
        if slot == self.slots.capacity() {
            // Doubling, but never past `capacity` slots.
            let more = slot.max(8).min(capacity - slot);
            self.slots.reserve_exact(more);
            self.by_total.reserve_exact(more);
        }
        self.slots.push(Slot::new(key, hash, at_admission));
        let slots = &self.slots;
        self.index.insert_unique(hash, slot, |&i| slots[i].hash);
        self.by_total.push(Reverse((at_admission, slot)));
        &self.slots[slot].entry
    }

    /// The slot with the smallest total, and that total.
    pub(super) fn smallest(&mut self) -> Option<(usize, isize)> {
        loop {
            let Reverse((pushed, slot)) = *self.by_total.peek()?;
            let total = self.slots[slot].entry.count().total();
            if total == pushed {
                return Some((slot, total));
            }
            // Counted since it was pushed: move it to where it now belongs.
            self.by_total.pop();
            self.by_total.push(Reverse((total, slot)));
        }
    }

    /// Give the top slot of `by_total` (`slot`, from [`smallest`]) to a
    /// new key; returns the evicted key and its exact count.
    pub(super) fn replace(
        &mut self,
        slot: usize,
        key: K,
        hash: u64,
        at_admission: isize,
    ) -> (K, isize, &Entry) {
        let old_hash = self.slots[slot].hash;
        if let Ok(found) = self.index.find_entry(old_hash, |&i| i == slot) {
            found.remove();
        }
        let old = std::mem::replace(&mut self.slots[slot], Slot::new(key, hash, at_admission));
        let slots = &self.slots;
        self.index.insert_unique(hash, slot, |&i| slots[i].hash);
        self.by_total.pop();
        self.by_total.push(Reverse((at_admission, slot)));
        let since = old.entry.since_admission.load(Ordering::Relaxed);
        (old.key, since, &self.slots[slot].entry)
    }

    pub(super) fn clear(&mut self) {
        self.slots.clear();
        self.index.clear();
        self.by_total.clear();
    }

    pub(super) fn bytes(&self) -> usize {
        // hashbrown keeps one control byte per bucket beside each value.
        self.slots.capacity() * std::mem::size_of::<Slot<K>>()
            + self.index.capacity() * (std::mem::size_of::<usize>() + 1)
            + self.by_total.capacity() * std::mem::size_of::<Reverse<(isize, usize)>>()
    }
}
