//! The classifier's configuration: its defaults, the builder that
//! validates it, and `Params`, everything derived from a valid
//! configuration that the classifier and the kernel filter must share.

use super::hashing::Keys;
use super::{BLOCK_CELLS, Block, Classifier};
use crate::error::ConfigError;
use crate::lattice::{AddrScope, GENERALISATIONS, LEVELS, Prefixes};
use crate::random::{RandomSource, ThreadRandom, random_seed};
use crate::sync::AtomicU64;
use std::time::Duration;
use thread_local::ThreadLocal;
use weir_limits::Shape;
use weir_limits::clock::{Clock, MonotonicClock};
use weir_limits::ewma::{EwmaWindow, FixedRate, OneEventUpdate};
use weir_limits::sketch::Locator;

/// Default EWMA window: 100 ms, rakelimit's final choice (the paper started
/// with one second and noted that a shorter window shortens the initial
/// spike of a flood).
const DEFAULT_WINDOW: Duration = Duration::from_millis(100);

/// Default growth of the EWMA window from one level to the next: level `l`
/// averages over `DEFAULT_WINDOW · 2^l` (100 ms at level 0, 1.6 s at level 4).
const DEFAULT_WINDOW_GROWTH: u32 = 2;

/// Configures and builds a [`Classifier`] ([`Classifier::builder`]).
///
/// Every setting has a default: a 100 ms EWMA window at level 0, doubling
/// per level; twelve sketches of 2 × 1024 cells in rows; /32 and /24 IPv4,
/// /128 and /48 IPv6 source prefixes; a random hash seed; the monotonic
/// clock; a per-thread random source. [`build`](Self::build) checks them.
///
/// ```
/// use std::time::Duration;
/// use weir_hhh::{Classifier, Prefixes};
/// use weir_hhh::random::SeededRandom;
/// use weir_hhh::clock::ManualClock;
/// use weir_hhh::sketch::Shape;
///
/// let clock = ManualClock::new();
/// let rake = Classifier::builder(1_000)
///     .window(Duration::from_millis(200))
///     .shape(Shape::rows::<4, 4096>())
///     .prefixes(Prefixes { v6_exact: 64, ..Prefixes::default() })
///     .seed(42)
///     .clock(clock.clone())
///     .random(SeededRandom::new(42))
///     .build()
///     .unwrap();
/// assert_eq!(rake.limit().as_f64(), 1_000.0);
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct ClassifierBuilder<C = MonotonicClock, R = ThreadRandom> {
    settings: Settings,
    clock: C,
    random: R,
}

/// Everything a builder holds besides its clock and random source, which
/// change its type.
#[derive(Debug, Clone)]
struct Settings {
    limit: u64,
    window: Duration,
    window_growth: u32,
    shape: Shape,
    prefixes: Prefixes,
}

impl ClassifierBuilder {
    /// The default configuration with a limit of `limit_pps` packets per
    /// second ([`Classifier::builder`]).
    pub(super) fn with_defaults(limit_pps: u64) -> Self {
        ClassifierBuilder {
            settings: Settings {
                limit: limit_pps,
                window: DEFAULT_WINDOW,
                window_growth: DEFAULT_WINDOW_GROWTH,
                shape: Classifier::DEFAULT_SHAPE,
                prefixes: Prefixes::default(),
            },
            clock: MonotonicClock::new(),
            random: ThreadRandom,
        }
    }
}

impl<C: Clock, R: RandomSource> ClassifierBuilder<C, R> {
    /// The EWMA window of level 0 (default 100 ms). A shorter window reacts
    /// to a starting flood sooner and forgets a past one sooner.
    pub fn window(mut self, window: Duration) -> Self {
        self.settings.window = window;
        self
    }

    /// Each level's window is this many times the previous level's
    /// (default 2: 100 ms at level 0, 1.6 s at level 4; 1 gives every level
    /// the same window, as rakelimit does). An aggregate carries at least
    /// the rate of every stream inside it, so with equal windows a starting
    /// flood can push an aggregate over the limit before its own 4-tuple,
    /// and its neighbours in that aggregate lose packets for a moment;
    /// longer windows for aggregates single out the culprit first.
    pub fn window_growth(mut self, factor: u32) -> Self {
        self.settings.window_growth = factor;
        self
    }

    /// The shape of every generalisation's sketch (default 2 × 1024 cells,
    /// rows layout): twelve sketches of 16 bytes a cell,
    /// at most 2³² cells in all ([`build`](Self::build) says
    /// `TooManyCells` otherwise). Its seed, if it has one, seeds the
    /// classifier as [`seed`](Self::seed) does; without one, a seed set
    /// before is kept.
    pub fn shape(mut self, shape: Shape) -> Self {
        self.settings.shape = match (shape.seed(), self.settings.shape.seed()) {
            (None, Some(seed)) => shape.with_seed(seed),
            _ => shape,
        };
        self
    }

    /// Source prefix lengths (default /32, /24, /128, /48).
    pub fn prefixes(mut self, prefixes: Prefixes) -> Self {
        self.settings.prefixes = prefixes;
        self
    }

    /// Fix the hash seed (reproducible runs). By default it is random, so
    /// nobody can aim collisions at a known hash function.
    pub fn seed(mut self, seed: u64) -> Self {
        self.settings.shape = self.settings.shape.with_seed(seed);
        self
    }

    /// Read time from `clock` (default [`MonotonicClock`]).
    pub fn clock<C2: Clock>(self, clock: C2) -> ClassifierBuilder<C2, R> {
        ClassifierBuilder {
            settings: self.settings,
            clock,
            random: self.random,
        }
    }

    /// Draw the lottery for limited packets from `random` (default
    /// [`ThreadRandom`]).
    pub fn random<R2: RandomSource>(self, random: R2) -> ClassifierBuilder<C, R2> {
        ClassifierBuilder {
            settings: self.settings,
            clock: self.clock,
            random,
        }
    }

    /// Build the classifier, allocating its sketches.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming what is wrong: a zero limit or
    /// window growth, source prefixes out of order, or a window or sketch
    /// shape weir-limits rejects (zero, too long, too many cells).
    pub fn build(self) -> Result<Classifier<C, R>, ConfigError> {
        let p = self.params()?;
        let cells_per_sketch = p.cells_per_sketch();
        let blocks = (0..GENERALISATIONS * cells_per_sketch / BLOCK_CELLS)
            .map(|_| Block::default())
            .collect();
        Ok(Classifier {
            limit: AtomicU64::new(p.limit.to_bits()),
            windows: p.windows,
            locator: p.locator,
            cells_per_sketch,
            blocks,
            keys: p.keys,
            v4_masks: p.v4_masks,
            v6_masks: p.v6_masks,
            prefixes: p.prefixes,
            counters: ThreadLocal::new(),
            clock: self.clock,
            random: self.random,
        })
    }

    /// The validated configuration with everything derived from it (EWMA
    /// constants per level, cell locator, hash keys, masks): what the
    /// user-space classifier and the kernel filter are both built from.
    pub(crate) fn params(&self) -> Result<Params, ConfigError> {
        if self.settings.limit == 0 {
            return Err(ConfigError::ZeroLimit);
        }
        self.settings.prefixes.validate()?;
        if self.settings.window_growth == 0 {
            return Err(ConfigError::ZeroWindowGrowth);
        }
        let mut windows = [EwmaWindow::try_new(self.settings.window)?.one_event(); LEVELS];
        let mut window = self.settings.window;
        for w in windows.iter_mut().skip(1) {
            window = window
                .checked_mul(self.settings.window_growth)
                .ok_or(weir_limits::ConfigError::WindowTooLong)?;
            *w = EwmaWindow::try_new(window)?.one_event();
        }
        // One seed for the generalisations' hash keys and the cells'
        // positions, so a fixed seed reproduces both.
        let seed = self.settings.shape.seed().unwrap_or_else(random_seed);
        let locator = Locator::new(self.settings.shape.with_seed(seed));
        // The twelve sketches share one table of cells, which must be
        // addressable as a whole (by a u32 index in the kernel's array):
        // a shape weir-limits accepts for one sketch may be too big for
        // twelve.
        let cells = GENERALISATIONS as u128 * padded_cells(&locator) as u128;
        if cells > u128::from(u32::MAX) {
            return Err(weir_limits::ConfigError::TooManyCells { requested: cells }.into());
        }
        let p = self.settings.prefixes;
        Ok(Params {
            limit: FixedRate::from_per_second(self.settings.limit),
            windows,
            locator,
            keys: Keys::new(seed),
            v4_masks: [p.v4_mask(AddrScope::Exact), p.v4_mask(AddrScope::Subnet), 0],
            v6_masks: [p.v6_mask(AddrScope::Exact), p.v6_mask(AddrScope::Subnet), 0],
            prefixes: p,
        })
    }
}

/// A validated configuration and everything derived from it.
#[derive(Debug, Clone)]
pub(crate) struct Params {
    pub(crate) limit: FixedRate,
    pub(crate) windows: [OneEventUpdate; LEVELS],
    pub(crate) locator: Locator,
    pub(crate) keys: Keys,
    /// Source masks per address scope (exact, subnet, any).
    pub(crate) v4_masks: [u32; 3],
    pub(crate) v6_masks: [u128; 3],
    pub(crate) prefixes: Prefixes,
}

impl Params {
    /// The key hash of generalisation `g` of `tuple` (what the classifier's
    /// cells are located by).
    #[cfg(all(feature = "bpf", any(test, feature = "test-util")))]
    pub(crate) fn hash(&self, tuple: &crate::tuple::FourTuple, g: usize) -> u64 {
        use super::hashing::{digest, generalised_hash_dyn};
        let (digest, keys) = digest(&self.keys, &self.v4_masks, &self.v6_masks, tuple);
        generalised_hash_dyn(g, &digest, keys[g % GENERALISATIONS])
    }

    /// Cells per generalisation's sketch, rounded up to whole blocks.
    pub(crate) fn cells_per_sketch(&self) -> usize {
        padded_cells(&self.locator)
    }
}

/// A sketch's cells rounded up to whole blocks: what the classifier
/// allocates per generalisation.
fn padded_cells(locator: &Locator) -> usize {
    locator.cells().div_ceil(BLOCK_CELLS) * BLOCK_CELLS
}
