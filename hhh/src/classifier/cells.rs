//! The sketches' cells and the hot loop: locating, prefetching and
//! updating a packet's cells in all twelve sketches, level by level.
//!
//! # Racy but bounded, not exact
//!
//! Cells are two `AtomicU64` (rate, last update) read and written with
//! relaxed loads and stores, not a compare-and-swap loop or a lock. Two
//! threads updating the same cell at the same moment may both read the old
//! state and one update is lost (an undercount of one event, `1/window`
//! packets/s); a reader may pair a new rate with an old timestamp (it then
//! decays the rate too much) or an old rate with a new timestamp (it skips
//! one interval's decay). Whatever the interleaving, a racing update never
//! writes more than a rate the cell held before plus one event, and the
//! next uncontended updates correct it within a window. The exact
//! alternative (a CAS on a packed word or a
//! lock per cell) would cost an atomic read-modify-write on 24 cache lines
//! per packet, which is the contention weir-limits measured to collapse
//! pingora's sketch. The per-level counters are exact (one set per thread,
//! summed when read).
//!
//! # Times out of order, and wild ones
//!
//! A timestamp older than a cell's (threads racing, a receive loop's batch
//! time, even one a thread held while it was preempted for longer than a
//! window) counts as no time passing, and the cell keeps its newer
//! timestamp: a stale time must not restart the rates of everything
//! counted since.
//!
//! The one exception is a cell stamped at a wild time: a whole window or
//! more ahead of the classifier's own clock (a caller's timestamp far in
//! the future, up to `u64::MAX` ns). A packet whose time is a window or
//! more behind such a stamp moves it back to its own time (still counting
//! no time passing): otherwise the cells of that one packet, which it
//! shares with every key of its aggregates, would stay stamped in the
//! future, and every honest packet after it would count as no time
//! passing: the rates would only grow, and the whole destination would be
//! limited until the clock caught up. So a wild time does no more to the
//! cells it touches than an idle spell would (their rates restart), and
//! from the next honest packet on they decay normally; keys that share
//! none of its cells are untouched. Whether a stamp is wild is judged
//! against the clock, not against the packet's time (which may be the
//! stale one), and the clock is read only then, when a packet's time is a
//! window or more behind a cell's. The kernel filter keeps the same rule:
//! its packet's time is its clock's reading. Nothing overflows at any time
//! (the arithmetic wraps or saturates where it must).

use super::Classifier;
use super::hashing::{Digest, digest, generalised_hash};
use super::verdict::{Limited, Verdict, bump};
use crate::lattice::{GENERALISATIONS, Generalisation, LEVEL_RANGES};
use crate::random::RandomSource;
use crate::sync::{AtomicU64, Ordering};
use crate::tuple::FourTuple;
use weir_limits::clock::Clock;
use weir_limits::ewma::{FixedRate, OneEventUpdate};

/// Cells per block (one block = the cells a blocked key can use).
pub(super) const BLOCK_CELLS: usize = weir_limits::sketch::LANES;

/// One sketch cell: an EWMA rate ([`FixedRate`] bits) and the time of its
/// last update (nanoseconds on the classifier's clock).
#[derive(Debug, Default)]
#[repr(C, align(16))]
pub(super) struct Cell {
    pub(super) rate: AtomicU64,
    pub(super) stamp: AtomicU64,
}

/// Eight cells: the unit [`Layout::Blocked`] confines a key to. Aligned so a
/// block is exactly one pair of adjacent cache lines.
#[derive(Debug, Default)]
#[repr(C, align(128))]
pub(super) struct Block([Cell; BLOCK_CELLS]);

impl<C: Clock, R: RandomSource> Classifier<C, R> {
    /// [`classify_at`](Self::classify_at) for keys of `n ≤ H` cells.
    ///
    /// Written out per generalisation (a macro over the constant indices)
    /// so that each generalisation's choice of fields folds away at compile
    /// time.
    #[inline(always)]
    pub(super) fn classify_cells<const H: usize>(
        &self,
        tuple: &FourTuple,
        now: u64,
        n: usize,
    ) -> Verdict {
        let n = n.min(H);
        let (digest, keys) = self.digest(tuple);
        // Locals, so the compiler need not reload them after every store.
        let blocks: &[Block] = &self.blocks;
        let per_sketch = self.cells_per_sketch;
        let locator = &self.locator;
        // Find every generalisation's cells and prefetch them first, so
        // that the cache misses of all twelve sketches overlap instead of
        // queueing behind each level's arithmetic.
        let first = &blocks[0].0[0];
        let mut cells: [[&Cell; H]; GENERALISATIONS] = [[first; H]; GENERALISATIONS];
        macro_rules! locate {
            ($($g:literal)*) => {$(
                let hash = generalised_hash::<$g>(&digest, keys[$g]);
                let base = $g * per_sketch;
                for (slot, cell) in cells[$g].iter_mut().zip(locator.locate_hash(hash).iter()) {
                    *slot = cell_at(blocks, base + cell);
                    prefetch(slot);
                }
            )*};
        }
        locate!(0 1 2 3 4 5 6 7 8 9 10 11);
        let limit = self.limit.load(Ordering::Relaxed);
        let windows = &self.windows;
        macro_rules! level {
            ($level:literal: $($g:literal)*) => {{
                let ewma = &windows[$level];
                let mut max = 0;
                let mut culprit = 0;
                $(
                    let mut rate = u64::MAX;
                    for cell in &cells[$g][..n] {
                        rate = rate.min(touch_cell(ewma, cell, now, &self.clock));
                    }
                    if rate > max {
                        max = rate;
                        culprit = $g;
                    }
                )*
                if max > limit {
                    return self.limited($level, culprit, max, limit);
                }
            }};
        }
        // The same ranges as LEVEL_RANGES (checked at compile time below).
        level!(0: 0);
        level!(1: 1 2 3);
        level!(2: 4 5 6 7);
        level!(3: 8 9 10);
        level!(4: 11);
        bump(&self.counters.get_or_default().unlimited);
        Verdict::Pass
    }

    #[cold]
    #[inline(never)]
    pub(super) fn limited(&self, level: usize, g: usize, rate: u64, limit: u64) -> Verdict {
        let coin = self.random.next_u32();
        // coin / 2³² < limit / rate, without a division.
        let pass = u128::from(coin) * u128::from(rate) < u128::from(limit) << 32;
        let why = Limited {
            level: level as u8,
            generalisation: Generalisation::ALL[g],
            rate: FixedRate::from_bits(rate),
            limit: FixedRate::from_bits(limit),
        };
        let counters = self.counters.get_or_default();
        #[cfg(feature = "metrics")]
        bump(&counters.by_generalisation[g][usize::from(!pass)]);
        if pass {
            bump(&counters.passed[level]);
            Verdict::Sampled(why)
        } else {
            bump(&counters.dropped[level]);
            Verdict::Drop(why)
        }
    }

    #[inline(always)]
    pub(super) fn digest(&self, tuple: &FourTuple) -> (Digest, &[(u64, u64); GENERALISATIONS]) {
        digest(&self.keys, &self.v4_masks, &self.v6_masks, tuple)
    }

    #[inline(always)]
    pub(super) fn cell(&self, index: usize) -> &Cell {
        cell_at(&self.blocks, index)
    }
}

/// Ask the CPU to start loading a cell's cache line (a hint: no effect on
/// correctness, and a no-op off x86-64).
#[inline(always)]
fn prefetch(cell: &Cell) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        // SAFETY: SSE is part of the x86-64 baseline, so the instruction
        // exists; a prefetch only hints the cache and never dereferences
        // or faults (the pointer is a valid reference anyway).
        unsafe { _mm_prefetch::<_MM_HINT_T0>((cell as *const Cell).cast::<i8>()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = cell;
}

/// Cell `index` of the sketches.
#[inline(always)]
fn cell_at(blocks: &[Block], index: usize) -> &Cell {
    &blocks[index / BLOCK_CELLS].0[index % BLOCK_CELLS]
}

/// One event now in one cell; returns the cell's new rate (bits). `clock`
/// is read only when `now` is a window or more behind the cell's stamp.
#[inline(always)]
fn touch_cell<C: Clock>(ewma: &OneEventUpdate, cell: &Cell, now: u64, clock: &C) -> u64 {
    let old = cell.rate.load(Ordering::Relaxed);
    let stamp = cell.stamp.load(Ordering::Relaxed);
    // One unsigned comparison catches both rare cases: a cell idle for a
    // window or more, and time behind the cell's (the difference wraps).
    let elapsed = now.wrapping_sub(stamp);
    let window = ewma.window_nanos();
    let (rate, stamp) = if elapsed < window {
        (ewma.within_window(old, elapsed), now)
    } else if now >= stamp {
        (ewma.update(old, elapsed), now)
    } else if stamp - now < window || !is_wild(clock, stamp, window) {
        // Behind (threads racing, a stale batch time): no time passed.
        (ewma.update(old, 0), stamp)
    } else {
        // The cell's stamp is a wild time's, a window or more ahead of the
        // clock (see the module docs): no time passed, and the stamp comes
        // back here.
        (ewma.update(old, 0), now)
    };
    cell.rate.store(rate, Ordering::Relaxed);
    cell.stamp.store(stamp, Ordering::Relaxed);
    rate
}

/// Whether a cell's `stamp`, a window or more ahead of a packet's time, is
/// a wild time's: a window or more ahead of the clock as well. Otherwise
/// the packet's time is merely stale. Reads the clock, so kept off the hot
/// path.
#[cold]
#[inline(never)]
fn is_wild<C: Clock>(clock: &C, stamp: u64, window: u64) -> bool {
    stamp.saturating_sub(clock.now_nanos()) >= window
}

// `classify_cells` spells the levels out; they must match the lattice.
const _: () = assert!(
    LEVEL_RANGES[0].0 == 0
        && LEVEL_RANGES[0].1 == 1
        && LEVEL_RANGES[1].1 == 4
        && LEVEL_RANGES[2].1 == 8
        && LEVEL_RANGES[3].1 == 11
        && LEVEL_RANGES[4].1 == 12
);
