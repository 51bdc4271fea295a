//! Where a key's counters live: hashing and layout, shared by every sketch in
//! weir (the count-min [`Estimator`](crate::Estimator), the in-flight counter,
//! and the sketches of timestamps and rates in `weir-rate` and `weir-hhh`).
//!
//! # Design
//!
//! pingora-limits hashes each key once per row with a separate hasher, reduces
//! with `%`, and keeps each row in its own allocation, so an update touches
//! `hashes` cache lines far apart. A [`Locator`] hashes the key **once** and
//! derives every row's position from that one 64-bit hash with a
//! multiply-shift per row (a distinct odd multiplier each, then the high
//! bits scaled onto the row width), so there is no division. Kirsch–
//! Mitzenmacher probes (`h1 + i·h2`) were tried first and rejected: reduced
//! by their high bits, two keys that collide in two rows tend to collide in all,
//! which doubled the worst-case overestimate on the same Zipf stream and
//! seed (428 k against 206 k at 3 × 1024, 20 M events). Two layouts
//! are offered:
//!
//! * [`Layout::Rows`] (the default): the classic count-min matrix, `hashes`
//!   rows of `slots` counters, one independent position per row (one
//!   allocation, rows back to back). The textbook `(ε, δ)` bound holds, and
//!   accuracy equals pingora-limits' at equal dimensions. At most sixteen
//!   hashes.
//! * [`Layout::Blocked`]: the key picks one 64-byte cache line
//!   of eight counters and takes `hashes` *distinct* lanes inside it. An
//!   update touches one cache line, which is what matters when two cores
//!   increment concurrently: each shared line written costs a cross-core
//!   transfer. The expected error of every lane is the same as a classic row
//!   of width `cells / hashes`, but lanes of one key are correlated through
//!   the shared line, so the classic `(ε, δ)` guarantee is not claimed for
//!   it. Measured (see the bench report): on skewed traffic a light key that
//!   shares a heavy key's line and lane pattern (32 patterns per line)
//!   inherits the heavy key's whole count, so the maximum overestimate is far
//!   worse than with rows; in exchange an update dirties one line instead of
//!   `hashes`, which matters only when cores contend for the same lines.
//!   At most eight hashes.
//!
//! Seeds are random by default (so nobody can aim collisions at a known hash
//! function); a fixed seed gives reproducible tests.

use crate::ConfigError;
use std::hash::Hash;

/// Counters per 64-byte cache line (eight 64-bit counters).
pub const LANES: usize = 8;

/// The most hashes any layout supports.
pub const MAX_HASHES: usize = 16;

/// How a sketch arranges each key's counters in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Layout {
    /// One independent position per row (the textbook count-min bound).
    #[default]
    Rows,
    /// All of a key's counters in one cache line (fewer lines dirtied per
    /// update; weaker accuracy on skewed traffic).
    Blocked,
}

/// The positions of one key's counters: `hashes` distinct cell indices,
/// computed on demand from the key's hash (nothing is materialised, so
/// building a location costs a multiply and no memory traffic).
///
/// ```
/// use weir_limits::sketch::{Locator, Shape};
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

/// The shape of a count-min sketch: how many counters per key (`hashes`),
/// how many per hash (`slots`), their [`Layout`], and optionally a fixed
/// hash seed. Every sketch in weir is sized by one of these, and a `Shape`
/// that exists is valid, so constructors taking one cannot fail.
///
/// Dimensions known at compile time are checked at compile time
/// ([`rows`](Self::rows), [`blocked`](Self::blocked)); dimensions computed
/// at run time go through [`try_new`](Self::try_new) or
/// [`try_for_error`](Self::try_for_error).
///
/// ```
/// use weir_limits::sketch::{Layout, Shape};
///
/// let shape = Shape::rows::<4, 1024>().with_seed(7);
/// assert_eq!((shape.hashes(), shape.slots(), shape.cells()), (4, 1024, 4096));
/// assert_eq!(Shape::try_new(4, 1024, Layout::Rows)?.with_seed(7), shape);
/// assert!(Shape::try_new(9, 1024, Layout::Blocked).is_err());
/// # Ok::<(), weir_limits::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Shape {
    hashes: u8,
    slots: usize,
    layout: Layout,
    seed: Option<u64>,
}

impl Shape {
    /// A rows-layout shape of `HASHES × SLOTS` counters, checked when the
    /// program is compiled: 1 ≤ `HASHES` ≤ 16, `SLOTS` ≥ 1, at most 2³²
    /// counters.
    ///
    /// ```
    /// use weir_limits::sketch::Shape;
    ///
    /// const PER_CLIENT: Shape = Shape::rows::<3, 4096>();
    /// assert_eq!(PER_CLIENT.cells(), 3 * 4096);
    /// ```
    ///
    /// A shape the layout cannot have does not compile:
    ///
    /// ```compile_fail
    /// let _ = weir_limits::sketch::Shape::rows::<0, 4096>();
    /// ```
    pub const fn rows<const HASHES: usize, const SLOTS: usize>() -> Self {
        const { checked(Self::try_new(HASHES, SLOTS, Layout::Rows)) }
    }

    /// A blocked-layout shape (each key's counters in one cache line),
    /// checked when the program is compiled: 1 ≤ `HASHES` ≤ 8, `SLOTS` ≥ 1,
    /// at most 2³² counters.
    ///
    /// ```
    /// use weir_limits::sketch::{Layout, Shape};
    ///
    /// assert_eq!(Shape::blocked::<4, 1024>().layout(), Layout::Blocked);
    /// ```
    pub const fn blocked<const HASHES: usize, const SLOTS: usize>() -> Self {
        const { checked(Self::try_new(HASHES, SLOTS, Layout::Blocked)) }
    }

    /// A shape from dimensions known only at run time, or the reason it
    /// cannot exist.
    ///
    /// ```
    /// use weir_limits::{ConfigError, sketch::{Layout, Shape}};
    ///
    /// assert_eq!(Shape::try_new(3, 0, Layout::Rows), Err(ConfigError::ZeroSlots));
    /// ```
    pub const fn try_new(hashes: usize, slots: usize, layout: Layout) -> Result<Self, ConfigError> {
        if hashes == 0 {
            return Err(ConfigError::ZeroHashes);
        }
        let max = match layout {
            Layout::Blocked => LANES,
            Layout::Rows => MAX_HASHES,
        };
        if hashes > max {
            return Err(ConfigError::TooManyHashes {
                requested: hashes,
                max,
            });
        }
        if slots == 0 {
            return Err(ConfigError::ZeroSlots);
        }
        let shape = Self {
            hashes: hashes as u8,
            slots,
            layout,
            seed: None,
        };
        let cells = shape.cells_wide();
        // Also within what the target can allocate: 8-byte counters, and
        // no allocation over isize::MAX bytes (on a 32-bit target, 2^28).
        if cells > MAX_CELLS || cells > isize::MAX as u128 / 8 {
            return Err(ConfigError::TooManyCells { requested: cells });
        }
        Ok(shape)
    }

    /// The rows-layout shape whose estimate exceeds the truth by more than
    /// `epsilon · N` (N = the sum of all increments) with probability at
    /// most `delta`: `⌈e/ε⌉` slots and `⌈ln(1/δ)⌉` hashes, the classic
    /// count-min bound.
    ///
    /// ```
    /// use weir_limits::sketch::Shape;
    ///
    /// // rakelimit's target: 1% error with 1% failure probability.
    /// let shape = Shape::try_for_error(0.01, 0.01)?;
    /// assert_eq!((shape.hashes(), shape.slots()), (5, 272));
    /// # Ok::<(), weir_limits::ConfigError>(())
    /// ```
    pub fn try_for_error(epsilon: f64, delta: f64) -> Result<Self, ConfigError> {
        let valid = |x: f64| x > 0.0 && x < 1.0;
        if !valid(epsilon) || !valid(delta) {
            return Err(ConfigError::InvalidErrorBound { epsilon, delta });
        }
        // Both are finite and at least 1 here; the casts saturate, and
        // try_new rejects what is too large.
        let slots = (std::f64::consts::E / epsilon).ceil();
        let hashes = (1.0 / delta).ln().ceil().max(1.0);
        Self::try_new(hashes as usize, slots as usize, Layout::Rows)
    }

    /// The same shape with its hash function fixed by `seed`, for
    /// reproducible tests and for sketches that must agree with each other
    /// (the default is a random seed per sketch, so nobody can aim
    /// collisions at a known hash function).
    #[must_use]
    pub const fn with_seed(self, seed: u64) -> Self {
        Self {
            seed: Some(seed),
            ..self
        }
    }

    /// Counters per key.
    pub const fn hashes(&self) -> usize {
        self.hashes as usize
    }

    /// Counters per hash, as requested (a blocked sketch rounds the total
    /// up to whole cache lines: see [`cells`](Self::cells)).
    pub const fn slots(&self) -> usize {
        self.slots
    }

    /// The memory layout.
    pub const fn layout(&self) -> Layout {
        self.layout
    }

    /// The fixed seed, if one was given.
    pub const fn seed(&self) -> Option<u64> {
        self.seed
    }

    /// Total counters a sketch of this shape holds.
    pub const fn cells(&self) -> usize {
        // try_new admitted no shape whose cells exceed usize.
        self.cells_wide() as usize
    }

    const fn cells_wide(&self) -> u128 {
        let requested = self.hashes as u128 * self.slots as u128;
        match self.layout {
            // Whole cache lines, so the memory is at least what the
            // equivalent rows layout would use.
            Layout::Blocked => requested.div_ceil(LANES as u128) * LANES as u128,
            Layout::Rows => requested,
        }
    }
}

/// The most counters a sketch can address: cell indices are 32-bit.
const MAX_CELLS: u128 = 1 << 32;

/// The shape `try_new` built, for [`Shape::rows`] and [`Shape::blocked`]:
/// evaluated in a `const` block, so an invalid shape stops compilation
/// with the reason (a constant's panic message cannot be formatted, hence
/// one fixed message per error).
const fn checked(shape: Result<Shape, ConfigError>) -> Shape {
    match shape {
        Ok(shape) => shape,
        Err(ConfigError::ZeroHashes) => panic!("a sketch needs at least one hash"),
        Err(ConfigError::TooManyHashes { .. }) => {
            panic!("too many hashes: at most 16 in rows, 8 when blocked")
        }
        Err(ConfigError::ZeroSlots) => panic!("a sketch needs at least one slot per hash"),
        Err(_) => panic!("at most 2^32 counters are addressable"),
    }
}

/// Maps keys to counter positions for a sketch of a given [`Shape`].
///
/// ```
/// use weir_limits::sketch::{Locator, Shape};
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
        let state = match shape.seed {
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
        let span = match shape.layout {
            Layout::Blocked => cells / LANES,
            Layout::Rows => shape.slots,
        };
        Self {
            state,
            layout: shape.layout,
            hashes: shape.hashes,
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

/// One odd multiplier per row (the first is 1: row 0 uses the hash as is).
/// Fixed constants are enough: the hash itself is randomly seeded.
///
/// Public so that a re-implementation outside Rust (weir-hhh's BPF filter)
/// locates the same cells: row `i` of a [`Layout::Rows`] key with hash `h`
/// is cell `i·slots + ⌊(h·ROW_MULTIPLIERS[i] mod 2⁶⁴)·slots / 2⁶⁴⌋`.
///
/// ```
/// use weir_limits::sketch::{Locator, ROW_MULTIPLIERS, Shape};
///
/// let locator = Locator::new(Shape::rows::<2, 1024>().with_seed(1));
/// let h = 0x0123_4567_89ab_cdef_u64;
/// let row1 = (u128::from(h.wrapping_mul(ROW_MULTIPLIERS[1])) * 1024 >> 64) as usize;
/// assert_eq!(locator.locate_hash(h).iter().nth(1), Some(1024 + row1));
/// ```
pub const ROW_MULTIPLIERS: [u64; MAX_HASHES] = [
    0x0000_0000_0000_0001,
    0x9e37_79b9_7f4a_7c15,
    0xbf58_476d_1ce4_e5b9,
    0x94d0_49bb_1331_11eb,
    0xd6e8_feb8_6659_fd93,
    0xa076_1d64_78bd_642f,
    0xe703_7ed1_a0b4_28db,
    0x8ebc_6af0_9c88_c6e3,
    0x5899_65cc_7537_4cc3,
    0x1d8e_4e27_c47d_124f,
    0xc2b2_ae3d_27d4_eb4f,
    0x1656_67b1_9e37_79f9,
    0x27d4_eb2f_1656_67c5,
    0xff51_afd7_ed55_8ccd,
    0xc4ce_b9fe_1a85_ec53,
    0x8765_4321_0fed_cba9,
];

/// Map a 64-bit hash uniformly onto `0..n` with a multiply-shift (Lemire's
/// fast range), which uses the hash's high bits and costs no division.
#[inline]
fn reduce(hash: u64, n: u64) -> u64 {
    ((u128::from(hash) * u128::from(n)) >> 64) as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn invalid_shapes_are_typed_errors() {
        assert_eq!(
            Shape::try_new(0, 8, Layout::Rows).unwrap_err(),
            ConfigError::ZeroHashes
        );
        assert_eq!(
            Shape::try_new(2, 0, Layout::Rows).unwrap_err(),
            ConfigError::ZeroSlots
        );
        assert_eq!(
            Shape::try_new(9, 8, Layout::Blocked).unwrap_err(),
            ConfigError::TooManyHashes {
                requested: 9,
                max: 8
            }
        );
        assert_eq!(
            Shape::try_new(17, 8, Layout::Rows).unwrap_err(),
            ConfigError::TooManyHashes {
                requested: 17,
                max: 16
            }
        );
        assert!(matches!(
            Shape::try_new(16, usize::MAX, Layout::Rows).unwrap_err(),
            ConfigError::TooManyCells { .. }
        ));
        // Exactly 2^32 cells is the largest addressable sketch in either
        // layout (2^32 is a whole number of lines, so a blocked sketch's
        // rounding up never crosses it); one cell more is refused.
        assert!(Shape::try_new(1, 1 << 32, Layout::Rows).is_ok());
        assert!(Shape::try_new(8, 1 << 29, Layout::Blocked).is_ok());
        assert!(Shape::try_new(3, (1 << 32) / 3 + 1, Layout::Blocked).is_err());
    }

    #[test]
    fn compile_time_shapes_equal_their_run_time_twins() {
        assert_eq!(
            Shape::rows::<4, 1024>(),
            Shape::try_new(4, 1024, Layout::Rows).unwrap()
        );
        assert_eq!(
            Shape::blocked::<3, 100>(),
            Shape::try_new(3, 100, Layout::Blocked).unwrap()
        );
        assert_eq!(Shape::blocked::<3, 100>().cells(), 304);
    }

    #[test]
    fn error_bound_dimensions_follow_the_formula() {
        let shape = Shape::try_for_error(0.001, 0.001).unwrap();
        assert_eq!((shape.hashes(), shape.slots()), (7, 2719));
        assert!(Shape::try_for_error(0.0, 0.5).is_err());
        assert!(Shape::try_for_error(0.5, 1.0).is_err());
        assert!(Shape::try_for_error(f64::NAN, 0.5).is_err());
        assert!(matches!(
            Shape::try_for_error(1e-12, 0.5),
            Err(ConfigError::TooManyCells { .. })
        ));
        assert!(matches!(
            Shape::try_for_error(0.5, 1e-12),
            Err(ConfigError::TooManyHashes { .. })
        ));
    }

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
