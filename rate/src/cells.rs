//! The cells of a sketch of times, shared by the [`SketchLimiter`](crate::SketchLimiter)
//! and a bounded [`KeyedLimiter`](crate::KeyedLimiter)'s spill.

use crate::sync::{AtomicU64, Ordering};
use weir_limits::sketch::{Location, MAX_HASHES};

/// Times kept in a sketch: a key's time is the smallest of its cells, and
/// storing it raises every cell to at least that, so each cell stays at or
/// above the time of every key stored in it and a key reads back no earlier
/// than its own. [`SketchLimiter`](crate::SketchLimiter) keeps GCRA arrival times here; a bounded
/// [`KeyedLimiter`](crate::KeyedLimiter) keeps the idle times of the keys it
/// had to forget.
pub(crate) struct Cells(Box<[AtomicU64]>);

impl Cells {
    pub(crate) fn new(len: usize) -> Self {
        Self((0..len).map(|_| AtomicU64::new(0)).collect())
    }

    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    /// The smallest of `location`'s cells and which cell holds it, with
    /// each cell's value in `seen`. The first cell wins ties, so a key
    /// whose cells are all saturated still names one of its own.
    #[inline]
    pub(crate) fn min(&self, location: &Location, seen: &mut [u64; MAX_HASHES]) -> (u64, usize) {
        let (mut min, mut at) = (u64::MAX, 0);
        for (i, cell) in location.iter().enumerate() {
            // Acquire: pairs with the raises' release half, so the
            // never-under-a-key's-time argument holds in the memory model,
            // not just on x86 (free there).
            let v = self.0[cell].load(Ordering::Acquire);
            seen[i] = v;
            if i == 0 || v < min {
                (min, at) = (v, cell);
            }
        }
        (min, at)
    }

    /// Raise every cell of `location` except `skip` to at least `time`;
    /// `seen` holds values read earlier (a cell seen at or above `time`
    /// can only have grown since).
    #[inline]
    pub(crate) fn raise(
        &self,
        location: &Location,
        time: u64,
        seen: &[u64; MAX_HASHES],
        skip: Option<usize>,
    ) {
        for (i, cell) in location.iter().enumerate() {
            if Some(cell) != skip && seen[i] < time {
                self.0[cell].fetch_max(time, Ordering::SeqCst);
            }
        }
    }

    /// Store `time` for the key at `location`.
    pub(crate) fn store(&self, location: &Location, time: u64) {
        let mut seen = [0; MAX_HASHES];
        self.min(location, &mut seen);
        self.raise(location, time, &seen, None);
    }

    /// The key at `location`'s time: never earlier than any it was stored with.
    pub(crate) fn load(&self, location: &Location) -> u64 {
        self.min(location, &mut [0; MAX_HASHES]).0
    }

    /// Replace `cell`'s value `current` with `new`; false if it had moved.
    #[inline]
    pub(crate) fn commit(&self, cell: usize, current: u64, new: u64) -> bool {
        self.0[cell]
            .compare_exchange(current, new, Ordering::SeqCst, Ordering::Relaxed)
            .is_ok()
    }
}
