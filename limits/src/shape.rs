//! A sketch's dimensions as one value: [`Shape`] (hashes, slots, layout and
//! an optional seed), valid by construction, and its [`Layout`].

use crate::error::ConfigError;

/// Counters per 64-byte cache line (eight 64-bit counters).
pub const LANES: usize = 8;

/// The most hashes any layout supports.
pub const MAX_HASHES: usize = 16;

/// How a sketch arranges each key's counters in memory.
///
/// * `Rows` (the default): the classic count-min matrix, `hashes` rows of
///   `slots` counters with one independent position per row, in one
///   allocation. The textbook `(ε, δ)` bound holds. At most sixteen hashes.
/// * `Blocked`: the key picks one 64-byte cache line of eight counters and
///   takes `hashes` distinct lanes inside it, so an update touches one line,
///   which matters when cores increment the same sketch concurrently. Every
///   lane's expected error is that of a row of width `cells / hashes`, but a
///   key's lanes are correlated through their line: on skewed traffic a
///   light key sharing a heavy key's line and lane pattern inherits its
///   whole count, so the `(ε, δ)` bound is not claimed. At most eight
///   hashes.
///
/// ```
/// use weir_limits::{Layout, Shape};
///
/// assert_eq!(Layout::default(), Layout::Rows);
/// assert_eq!(Shape::blocked::<4, 1024>().layout(), Layout::Blocked);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Layout {
    /// One independent position per row (the textbook count-min bound).
    #[default]
    Rows,
    /// All of a key's counters in one cache line (fewer lines dirtied per
    /// update; weaker accuracy on skewed traffic).
    Blocked,
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
/// use weir_limits::{Layout, Shape};
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
    /// use weir_limits::Shape;
    ///
    /// const PER_CLIENT: Shape = Shape::rows::<3, 4096>();
    /// assert_eq!(PER_CLIENT.cells(), 3 * 4096);
    /// ```
    ///
    /// A shape the layout cannot have does not compile:
    ///
    /// ```compile_fail
    /// let _ = weir_limits::Shape::rows::<0, 4096>();
    /// ```
    pub const fn rows<const HASHES: usize, const SLOTS: usize>() -> Self {
        const { checked(Self::try_new(HASHES, SLOTS, Layout::Rows)) }
    }

    /// A blocked-layout shape (each key's counters in one cache line),
    /// checked when the program is compiled: 1 ≤ `HASHES` ≤ 8, `SLOTS` ≥ 1,
    /// at most 2³² counters.
    ///
    /// ```
    /// use weir_limits::{Layout, Shape};
    ///
    /// assert_eq!(Shape::blocked::<4, 1024>().layout(), Layout::Blocked);
    /// ```
    pub const fn blocked<const HASHES: usize, const SLOTS: usize>() -> Self {
        const { checked(Self::try_new(HASHES, SLOTS, Layout::Blocked)) }
    }

    /// A shape from dimensions known only at run time.
    ///
    /// # Errors
    ///
    /// [`ConfigError::ZeroHashes`] or [`ConfigError::ZeroSlots`] for a zero
    /// dimension, [`ConfigError::TooManyHashes`] past 16 hashes (8 when
    /// blocked), [`ConfigError::TooManyCells`] past 2³² counters (or past
    /// what the target can allocate).
    ///
    /// ```
    /// use weir_limits::{ConfigError, Layout, Shape};
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
    /// # Errors
    ///
    /// [`ConfigError::InvalidFraction`] with the first of the two that
    /// does not lie in (0, 1) (NaN included); [`ConfigError::TooManyHashes`] or
    /// [`ConfigError::TooManyCells`] when the bound needs a sketch larger
    /// than one can be (see [`try_new`](Self::try_new)).
    ///
    /// ```
    /// use weir_limits::Shape;
    ///
    /// // rakelimit's target: 1% error with 1% failure probability.
    /// let shape = Shape::try_for_error(0.01, 0.01)?;
    /// assert_eq!((shape.hashes(), shape.slots()), (5, 272));
    /// # Ok::<(), weir_limits::ConfigError>(())
    /// ```
    pub fn try_for_error(epsilon: f64, delta: f64) -> Result<Self, ConfigError> {
        for x in [epsilon, delta] {
            if !(x > 0.0 && x < 1.0) {
                return Err(ConfigError::InvalidFraction(x));
            }
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
