//! [`Locator`]: from a key to its counters' positions, and [`Location`],
//! those positions.

use super::{LANES, ROW_MULTIPLIERS, reduce};
use crate::shape::{Layout, Shape};
use std::hash::Hash;

/// The positions of one key's counters: `hashes` distinct cell indices,
/// computed on demand from the key's hash (nothing is materialised, so
/// building a location costs a multiply and no memory traffic).
///
/// ```
/// use weir_limits::Shape;
/// use weir_limits::sketch::Locator;
///
/// let locator = Locator::new(Shape::blocked::<3, 1024>().with_seed(7));
/// let location = locator.locate(&"client-42");
/// assert_eq!(location.len(), 3);
/// assert!(location.iter().all(|cell| cell < locator.cells()));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Location {
    /// Blocked: index of the line's first cell. Rows: the key's hash.
    base: u64,
    /// Blocked: first lane. Rows: unused.
    offset: u64,
    /// Blocked: lane step (odd). Rows: row width.
    step: u64,
    len: u8,
    blocked: bool,
}

impl Location {
    /// Number of counters (equal to the locator's number of hashes).
    #[inline]
    pub fn len(&self) -> usize {
        usize::from(self.len)
    }

    /// Always false: a location has at least one counter.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The cell indices, one per hash, all distinct.
    #[inline]
    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        let this = *self;
        (0..u64::from(self.len)).map(move |i| this.cell(i))
    }

    /// The first `N` cell indices (`N` ≤ [`len`](Self::len)) as an array:
    /// with `N` known at compile time the per-row work unrolls.
    #[inline(always)]
    pub(crate) fn cells<const N: usize>(&self) -> [usize; N] {
        debug_assert!(N <= self.len());
        std::array::from_fn(|i| self.cell(i as u64))
    }

    /// The smallest `f(cell)` over the cells, with the usual shapes (1–4
    /// cells) as straight-line code: each row's multiplier a constant and
    /// one well-predicted branch per call, for the sketches' hot paths.
    #[inline(always)]
    pub(crate) fn min_over(&self, mut f: impl FnMut(usize) -> isize) -> isize {
        #[inline(always)]
        fn min_of(cells: impl IntoIterator<Item = usize>, f: impl FnMut(usize) -> isize) -> isize {
            cells.into_iter().map(f).fold(isize::MAX, isize::min)
        }
        match self.len() {
            1 => min_of(self.cells::<1>(), &mut f),
            2 => min_of(self.cells::<2>(), &mut f),
            3 => min_of(self.cells::<3>(), &mut f),
            4 => min_of(self.cells::<4>(), &mut f),
            _ => min_of(self.iter(), &mut f),
        }
    }

    #[inline]
    fn cell(&self, i: u64) -> usize {
        if self.blocked {
            (self.base + ((self.offset + i * self.step) & (LANES as u64 - 1))) as usize
        } else {
            // Multiply-shift with a distinct odd multiplier per row: rows of
            // two keys collide (nearly) independently. Kirsch–Mitzenmacher
            // probes `h1 + i·h2` reduced by their high bits do not: keys
            // colliding in two rows then almost surely collide in all.
            let probe = self.base.wrapping_mul(ROW_MULTIPLIERS[i as usize]);
            (i * self.step + reduce(probe, self.step)) as usize
        }
    }
}

/// Maps keys to counter positions for a sketch of a given [`Shape`].
///
/// ```
/// use weir_limits::Shape;
/// use weir_limits::sketch::Locator;
///
/// let a = Locator::new(Shape::rows::<4, 256>().with_seed(1));
/// let b = Locator::new(Shape::rows::<4, 256>().with_seed(1));
/// // The same seed gives the same positions: reproducible tests.
/// assert_eq!(a.locate(&17u32), b.locate(&17u32));
/// assert_eq!(a.cells(), 4 * 256);
/// ```
#[derive(Debug, Clone)]
pub struct Locator {
    state: ahash::RandomState,
    // The hot path's fields (state, layout, hashes, span) stay together;
    // the shape is kept only to be handed back.
    layout: Layout,
    hashes: u8,
    /// Rows: counters per row. Blocked: number of cache lines.
    span: u64,
    cells: usize,
    shape: Shape,
}

impl Locator {
    /// A locator for `shape`: its seed if it has one, a random one otherwise.
    pub fn new(shape: Shape) -> Self {
        let state = match shape.seed() {
            // Spread one seed over ahash's four keys with distinct odd constants.
            Some(seed) => ahash::RandomState::with_seeds(
                seed,
                seed ^ 0x9e37_79b9_7f4a_7c15,
                seed.rotate_left(21) ^ 0xbf58_476d_1ce4_e5b9,
                seed.rotate_left(42) ^ 0x94d0_49bb_1331_11eb,
            ),
            None => ahash::RandomState::new(),
        };
        let cells = shape.cells();
        let span = match shape.layout() {
            Layout::Blocked => cells / LANES,
            Layout::Rows => shape.slots(),
        };
        Self {
            state,
            layout: shape.layout(),
            // At most `MAX_HASHES` (a `Shape` exists only then).
            hashes: shape.hashes() as u8,
            span: span as u64,
            cells,
            shape,
        }
    }

    /// The shape this locator was made for.
    #[inline]
    pub fn shape(&self) -> Shape {
        self.shape
    }

    /// The 64-bit hash of `key` under this locator's seed.
    #[inline]
    pub fn hash<K: Hash + ?Sized>(&self, key: &K) -> u64 {
        self.state.hash_one(key)
    }

    /// Where `key`'s counters are.
    #[inline]
    pub fn locate<K: Hash + ?Sized>(&self, key: &K) -> Location {
        self.locate_hash(self.hash(key))
    }

    /// Where the counters of a key with this [`hash`](Self::hash) are.
    /// Storing the hash instead of the key lets a guard find its counters
    /// again without hashing twice.
    #[inline]
    pub fn locate_hash(&self, hash: u64) -> Location {
        match self.layout {
            // Lanes `start + i·step (mod 8)` with an odd step are distinct
            // for i < 8; 8 starts × 4 steps give 32 lane patterns.
            Layout::Blocked => Location {
                base: reduce(hash, self.span) * LANES as u64,
                offset: hash & 7,
                step: ((hash >> 3) & 3) * 2 + 1,
                len: self.hashes,
                blocked: true,
            },
            Layout::Rows => Location {
                base: hash,
                offset: 0,
                step: self.span,
                len: self.hashes,
                blocked: false,
            },
        }
    }

    /// Number of hashes (counters per key).
    #[inline]
    pub fn hashes(&self) -> usize {
        usize::from(self.hashes)
    }

    /// Total number of counters the sketch needs.
    #[inline]
    pub fn cells(&self) -> usize {
        self.cells
    }

    /// Counters per row (`cells / hashes`, rounded up to whole lines when blocked).
    #[inline]
    pub fn slots(&self) -> usize {
        self.cells / usize::from(self.hashes)
    }

    /// The layout in use.
    #[inline]
    pub fn layout(&self) -> Layout {
        self.layout
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sketch::MAX_HASHES;
    use proptest::prelude::*;

    #[test]
    fn different_seeds_give_different_positions() {
        let a = Locator::new(Shape::rows::<4, { 1 << 16 }>().with_seed(1));
        let b = Locator::new(Shape::rows::<4, { 1 << 16 }>().with_seed(2));
        let same = (0u32..100).filter(|k| a.locate(k) == b.locate(k)).count();
        assert!(same < 5, "{same} of 100 keys landed identically");
    }

    proptest! {
        /// A shape exists exactly when its dimensions are addressable, and
        /// a locator made from it places every key inside its cells.
        #[test]
        fn a_shape_is_valid_exactly_when_its_sketch_can_exist(
            hashes in 0usize..20,
            slots in prop_oneof![0usize..5000, 0usize..(1 << 34)],
            blocked: bool,
            key: u64,
        ) {
            let layout = if blocked { Layout::Blocked } else { Layout::Rows };
            let max = if blocked { LANES } else { MAX_HASHES };
            let lines = (hashes as u128 * slots as u128).div_ceil(LANES as u128);
            let cells = if blocked { lines * LANES as u128 } else { hashes as u128 * slots as u128 };
            let valid = (1..=max).contains(&hashes) && slots >= 1 && cells <= 1 << 32;
            match Shape::try_new(hashes, slots, layout) {
                Ok(shape) => {
                    prop_assert!(valid);
                    prop_assert_eq!(shape.cells() as u128, cells);
                    let locator = Locator::new(shape.with_seed(key));
                    prop_assert_eq!(locator.cells(), shape.cells());
                    prop_assert_eq!(locator.hashes(), hashes);
                    prop_assert!(locator.locate(&key).iter().all(|c| c < locator.cells()));
                }
                Err(_) => prop_assert!(!valid),
            }
        }

        #[test]
        fn blocked_lanes_are_distinct_and_share_one_line(
            hashes in 1usize..=8, slots in 1usize..5000, key: u64, seed: u64,
        ) {
            let locator = Locator::new(Shape::try_new(hashes, slots, Layout::Blocked).unwrap().with_seed(seed));
            let location = locator.locate(&key);
            let cells: Vec<usize> = location.iter().collect();
            prop_assert_eq!(cells.len(), hashes);
            let line = cells[0] / LANES;
            for (i, &c) in cells.iter().enumerate() {
                prop_assert!(c < locator.cells());
                prop_assert_eq!(c / LANES, line);
                prop_assert!(!cells[..i].contains(&c));
            }
        }

        #[test]
        fn rows_put_one_counter_in_each_row(
            hashes in 1usize..=16, slots in 1usize..5000, key: u64, seed: u64,
        ) {
            let locator = Locator::new(Shape::try_new(hashes, slots, Layout::Rows).unwrap().with_seed(seed));
            for (row, cell) in locator.locate(&key).iter().enumerate() {
                prop_assert_eq!(cell / slots, row);
            }
        }
    }
}
