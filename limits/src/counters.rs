//! A flat array of atomic counters laid out in cache-line-aligned groups of
//! eight, so that a [`Layout::Blocked`](crate::Layout) key's
//! counters never straddle two lines.

use crate::sketch::LANES;
use crate::sync::{AtomicIsize, Ordering};

#[repr(align(64))]
struct Line([AtomicIsize; LANES]);

pub(crate) struct Counters {
    lines: Box<[Line]>,
}

impl Counters {
    pub(crate) fn new(cells: usize) -> Self {
        let lines = (0..cells.div_ceil(LANES))
            .map(|_| Line(std::array::from_fn(|_| AtomicIsize::new(0))))
            .collect();
        Self { lines }
    }

    #[inline]
    pub(crate) fn cell(&self, index: usize) -> &AtomicIsize {
        &self.lines[index / LANES].0[index % LANES]
    }

    /// [`cell`](Self::cell) without the bounds check, for the hot path.
    ///
    /// # Safety
    ///
    /// `index` must be below the `cells` this table was made with.
    #[inline]
    pub(crate) unsafe fn cell_unchecked(&self, index: usize) -> &AtomicIsize {
        debug_assert!(index / LANES < self.lines.len());
        // SAFETY: `index < cells` and `new` made `cells.div_ceil(LANES)`
        // lines, so `index / LANES` is in bounds; `index % LANES` always is.
        unsafe {
            self.lines
                .get_unchecked(index / LANES)
                .0
                .get_unchecked(index % LANES)
        }
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &AtomicIsize> {
        self.lines.iter().flat_map(|line| line.0.iter())
    }

    pub(crate) fn clear(&self) {
        for cell in self.iter() {
            cell.store(0, Ordering::Relaxed);
        }
    }

    pub(crate) fn bytes(&self) -> usize {
        std::mem::size_of_val(&*self.lines)
    }
}
