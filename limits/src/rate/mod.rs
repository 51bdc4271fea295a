//! [`Rate`]: per-key events per fixed interval, with the previous complete
//! window and the current partial one.
//!
//! # Design
//!
//! Windows sit on a fixed grid: window `n` covers `[n·interval,
//! (n+1)·interval)` of the clock, so a window never drifts with the first
//! event after a quiet spell (pingora-limits starts a new window at whatever
//! call comes first after expiry). Time is integer nanoseconds, so
//! sub-millisecond intervals work, and intervals up to 584 years are accepted.
//! Window numbers saturate at 2⁶² − 1 (they share a word with two flags);
//! only a 1 ns interval gets there, after 146 years on the clock, and
//! from then on every event counts in that last window, as clocks saturate
//! at `u64::MAX` ns.
//!
//! Three sketches rotate: the current window, the previous one, and a spare
//! that is already zeroed when its window begins. A single word holds the
//! current window number and a *rotating* bit. The first thread to see a
//! later window claims the bit and publishes the new window in one
//! compare-and-swap (writers of the new window may proceed at once, their
//! sketch is clean), zeroes the sketch that will be needed next, and clears
//! the bit. (A second flag says the claim skips windows, below.) Writers never clear anything they might be counting into, so no
//! event is lost to a rotation race, and all window arithmetic is on window
//! numbers, so racing timestamps cannot underflow. If windows were skipped
//! (a quiet spell) the rotating thread zeroes every sketch before
//! publishing; writers for that window, and any whose clock still reads the
//! old one, wait the few microseconds this takes.
//! Readers ([`Rate::components`]) wait out any rotation and read again if
//! one began while they read (a sequence lock on the state word), so they
//! never see a window half zeroed, nor "nothing counted" for a window that
//! was.
//!
//! A rotation interrupted by `fork()` is finished by the child. The child
//! has only the forking thread, so a rotation another thread had claimed
//! would otherwise stay claimed, and every reader and writer of a later
//! window would wait for it forever. Each claimer first records the
//! process's fork count ([`weir_primitives::fork::forks`], which moves only
//! in a child, at the fork); a thread that finds a claim recorded under
//! another count knows its claimer is not in this process, takes the claim
//! over (one compare-and-swap on the record decides who), zeroes what the
//! claimer would have (the spare sketch, or, when the word's second flag
//! says the claim skips windows, every sketch, which the claimer may have
//! left half zeroed) and releases the word. A gap's claim is released
//! without publishing its window: the next writer finds the gap again.
//! Forks are seen through `pthread_atfork`; a raw `clone` system call is
//! not, nor a fork from a signal handler that interrupted a claimer between
//! its record and its claim.
//!
//! An event whose clock reading is older than the current window (it raced
//! with a rotation, or the clock went backwards) is counted in the current
//! window, never in a stale one. A writer stalled for more than a whole
//! interval between reading the window and counting can land its event in a
//! later window; it is never dropped.

use crate::clock::{Clock, MonotonicClock};
use crate::error::ConfigError;
use crate::estimator::Estimator;
use crate::shape::Shape;
use crate::sketch::Locator;
use crate::sync::{AtomicU64, Backoff, Ordering, fence};
use std::hash::Hash;
use std::time::Duration;
use weir_primitives::fork;

/// In the state word: a rotation is claimed.
const ROTATING: u64 = 1;
/// In the state word, beside [`ROTATING`]: the claim skips windows, so it
/// zeroes every sketch before publishing.
const SKIPPING: u64 = 2;
/// Where the window number starts in the state word.
const SHIFT: u32 = 2;
/// The largest window number that fits in the state word beside the flags.
const LAST_WINDOW: u64 = u64::MAX >> SHIFT;

/// The window holding `nanos`, saturated so that `window << SHIFT` loses no bit.
#[inline]
fn window_number(nanos: u64, interval_nanos: u64) -> u64 {
    (nanos / interval_nanos).min(LAST_WINDOW)
}

/// A key's counts of the previous (complete) and current (partial) window
/// and how far into the current window the reading was taken: the
/// ingredients of [`Rate::rate`], of the sliding estimate, or of a rate of
/// your own.
///
/// ```
/// use std::time::Duration;
/// use weir_limits::{Rate, RateComponents, clock::ManualClock};
///
/// let clock = ManualClock::new();
/// let rate = Rate::try_with_clock(Duration::from_secs(1), clock.clone())?;
/// rate.observe(&"k", 3);
/// clock.advance(Duration::from_millis(1500));
/// let c: RateComponents = rate.components(&"k");
/// assert_eq!((c.previous, c.current, c.elapsed_fraction), (3, 0, 0.5));
/// # Ok::<(), weir_limits::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct RateComponents {
    /// Events of the key in the previous complete window.
    pub previous: isize,
    /// Events of the key so far in the current window.
    pub current: isize,
    /// The window length.
    pub interval: Duration,
    /// Fraction of the current window elapsed, in `[0, 1)`.
    pub elapsed_fraction: f64,
}

impl RateComponents {
    /// The sliding-window estimate of events per second: the previous
    /// window weighted by the part of it still inside a sliding interval,
    /// plus the current window (Cloudflare's two-window approximation).
    ///
    /// ```
    /// use weir_limits::RateComponents;
    /// # use weir_limits::{Rate, clock::ManualClock};
    /// # use std::time::Duration;
    /// # let clock = ManualClock::new();
    /// # let rate = Rate::try_with_clock(Duration::from_secs(1), clock.clone()).unwrap();
    /// # rate.observe(&"k", 10);
    /// # clock.advance(Duration::from_millis(1250));
    /// # rate.observe(&"k", 4);
    /// let c = rate.components(&"k");
    /// // 10 last second, 4 so far, a quarter in: 10 × 0.75 + 4 = 11.5 per second.
    /// assert_eq!(c.sliding_per_second(), 11.5);
    /// ```
    pub fn sliding_per_second(&self) -> f64 {
        let weighted = self.previous as f64 * (1.0 - self.elapsed_fraction) + self.current as f64;
        weighted / self.interval.as_secs_f64()
    }
}

/// Per-key event rates over fixed, grid-aligned intervals.
///
/// ```
/// use std::time::Duration;
/// use weir_limits::{Rate, clock::ManualClock};
///
/// let clock = ManualClock::new();
/// let rate = Rate::try_with_clock(Duration::from_secs(1), clock.clone()).unwrap();
/// assert_eq!(rate.observe(&"client", 3), 3);
/// assert_eq!(rate.observe(&"client", 2), 5);
/// assert_eq!(rate.rate(&"client"), 0.0); // no complete window yet
///
/// clock.advance(Duration::from_secs(1));
/// assert_eq!(rate.rate(&"client"), 5.0);
/// ```
pub struct Rate<C: Clock = MonotonicClock> {
    windows: [Estimator; 3],
    /// `window_number << SHIFT | SKIPPING | ROTATING`.
    state: AtomicU64,
    /// The fork count of the process whose thread claimed the rotation,
    /// written before each claim (see the module docs).
    claimed_in: AtomicU64,
    interval_nanos: u64,
    interval: Duration,
    clock: C,
}

impl<C: Clock> Rate<C> {
    /// The shape of each window's sketch unless
    /// [`try_with_shape`](Self::try_with_shape) says otherwise: 4 × 1024,
    /// rows layout.
    pub const DEFAULT_SHAPE: Shape = Shape::rows::<4, 1024>();
}

impl Rate<MonotonicClock> {
    /// A rate over `interval` on the monotonic clock, with sketches of
    /// [`DEFAULT_SHAPE`](Self::DEFAULT_SHAPE).
    ///
    /// # Errors
    ///
    /// [`ConfigError::ZeroWindow`] for a zero `interval`,
    /// [`ConfigError::WindowTooLong`] for one over 2⁶⁴ ns (584 years).
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir_limits::{ConfigError, Rate};
    ///
    /// assert_eq!(Rate::try_new(Duration::ZERO).unwrap_err(), ConfigError::ZeroWindow);
    /// assert!(Rate::try_new(Duration::from_micros(100)).is_ok());
    /// ```
    pub fn try_new(interval: Duration) -> Result<Self, ConfigError> {
        Rate::try_with_clock(interval, MonotonicClock::new())
    }
}

impl<C: Clock> Rate<C> {
    /// A rate over `interval` reading time from `clock`.
    ///
    /// # Errors
    ///
    /// [`ConfigError::ZeroWindow`] for a zero `interval`,
    /// [`ConfigError::WindowTooLong`] for one over 2⁶⁴ ns (584 years).
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir_limits::{Rate, clock::ManualClock};
    ///
    /// let clock = ManualClock::new();
    /// let rate = Rate::try_with_clock(Duration::from_secs(1), clock.clone())?;
    /// rate.observe(&"k", 4);
    /// clock.advance(Duration::from_secs(1));
    /// assert_eq!(rate.rate(&"k"), 4.0);
    /// # Ok::<(), weir_limits::ConfigError>(())
    /// ```
    pub fn try_with_clock(interval: Duration, clock: C) -> Result<Self, ConfigError> {
        Self::try_with_shape(interval, Self::DEFAULT_SHAPE, clock)
    }

    /// A rate over `interval` reading time from `clock`, each window's
    /// sketch of `shape`.
    ///
    /// # Errors
    ///
    /// [`ConfigError::ZeroWindow`] for a zero `interval`,
    /// [`ConfigError::WindowTooLong`] for one over 2⁶⁴ ns (584 years).
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir_limits::{Rate, Shape, clock::ManualClock};
    ///
    /// let shape = Shape::rows::<3, 4096>().with_seed(1);
    /// let rate = Rate::try_with_shape(Duration::from_secs(1), shape, ManualClock::new())?;
    /// assert_eq!(rate.observe(&"client", 2), 2);
    /// # Ok::<(), weir_limits::ConfigError>(())
    /// ```
    pub fn try_with_shape(interval: Duration, shape: Shape, clock: C) -> Result<Self, ConfigError> {
        if interval.is_zero() {
            return Err(ConfigError::ZeroWindow);
        }
        let interval_nanos =
            u64::try_from(interval.as_nanos()).map_err(|_| ConfigError::WindowTooLong)?;
        // One locator for all three windows: a key's cells are the same in
        // each, so rotating a window never moves a key.
        let locator = Locator::new(shape);
        let windows = std::array::from_fn(|_| {
            Estimator::from_parts(locator.clone(), crate::estimator::Update::Plain)
        });
        let first = window_number(clock.now_nanos(), interval_nanos);
        // Without the count (no memory for the handler), a child forked
        // mid-rotation waits for that rotation forever.
        fork::watch();
        Ok(Self {
            windows,
            state: AtomicU64::new(first << SHIFT),
            claimed_in: AtomicU64::new(fork::forks()),
            interval_nanos,
            interval,
            clock,
        })
    }

    /// Count `events` for `key`; returns the key's count so far in the
    /// current window. Counts wrap past `isize::MAX`, as the plain rule's
    /// do ([`Estimator`]'s overflow notes); nothing panics.
    pub fn observe<K: Hash + ?Sized>(&self, key: &K, events: isize) -> isize {
        let window = self.enter(self.window_at(self.clock.now_nanos()));
        self.sketch(window).incr(key, events)
    }

    /// Events per second of `key` in the previous complete window.
    pub fn rate<K: Hash + ?Sized>(&self, key: &K) -> f64 {
        let c = self.components(key);
        c.previous as f64 / c.interval.as_secs_f64()
    }

    /// The previous and current counts of `key` and the elapsed fraction,
    /// from which [`RateComponents`] computes the sliding estimate (or a
    /// custom rate of your own; [`rate`](Self::rate) is the previous
    /// window's).
    ///
    /// Never reads a window while a rotation is zeroing it: a reader that
    /// meets a rotation waits for it (a few microseconds, once per
    /// interval), and one that a rotation overtakes reads again.
    pub fn components<K: Hash + ?Sized>(&self, key: &K) -> RateComponents {
        let now = self.clock.now_nanos();
        let location = self.windows[0].locator().locate(key);
        let mut backoff = Backoff::new();
        loop {
            let state = self.state.load(Ordering::Acquire);
            if state & ROTATING != 0 {
                // Simpler than telling which sketches this claim zeroes
                // (after a gap, every one), and it ends within microseconds.
                self.finish_orphaned_rotation(state);
                backoff.wait();
                continue;
            }
            let published = state >> SHIFT;
            // A reader behind the published window (clock raced or went
            // back) reads as of the published window.
            let window = self.window_at(now).max(published);
            let (previous, current) = match window - published {
                0 => (
                    self.previous_sketch(published).get_at(&location),
                    self.sketch(published).get_at(&location),
                ),
                // Nobody has counted in `window` yet: the published one is
                // now the previous window.
                1 => (self.sketch(published).get_at(&location), 0),
                _ => (0, 0),
            };
            // Sketches are zeroed only under a claimed rotation, and a claim
            // changes the word for good (window numbers only grow): if it
            // is unchanged, nothing read above was being zeroed. The fence
            // pairs with the rotator's, after its claim.
            fence(Ordering::Acquire);
            if self.state.load(Ordering::Relaxed) != state {
                continue;
            }
            let elapsed_fraction = if window == self.window_at(now) {
                (now % self.interval_nanos) as f64 / self.interval_nanos as f64
            } else {
                0.0
            };
            return RateComponents {
                previous,
                current,
                interval: self.interval,
                elapsed_fraction,
            };
        }
    }

    /// Bytes used by the three window sketches.
    pub fn memory_bytes(&self) -> usize {
        self.windows.iter().map(Estimator::memory_bytes).sum()
    }

    #[inline]
    fn window_at(&self, nanos: u64) -> u64 {
        window_number(nanos, self.interval_nanos)
    }

    #[inline]
    fn sketch(&self, window: u64) -> &Estimator {
        &self.windows[(window % 3) as usize]
    }

    /// The sketch of `window - 1` (computed without underflow at window 0).
    #[inline]
    fn previous_sketch(&self, window: u64) -> &Estimator {
        &self.windows[((window % 3 + 2) % 3) as usize]
    }

    /// Make sure `window` (or a later one) is the published window and
    /// return the window to count into.
    fn enter(&self, window: u64) -> u64 {
        let mut backoff = Backoff::new();
        loop {
            let state = self.state.load(Ordering::Acquire);
            let published = state >> SHIFT;
            // A skipping claim is zeroing the published window's sketch
            // too: a writer behind it waits and counts in the window it
            // publishes.
            if window <= published && state & SKIPPING == 0 {
                return published;
            }
            if state & ROTATING != 0 {
                self.finish_orphaned_rotation(state);
                backoff.wait();
                continue;
            }
            // The next window is published with the claim itself: its
            // sketch was zeroed by the last rotation, so its writers need
            // not wait. After a gap the claim keeps the old window until
            // every sketch is zeroed.
            let next = window == published + 1;
            // Every claimer of one process records the same count, so a
            // losing claimer's write changes nothing.
            self.claimed_in.store(fork::forks(), Ordering::Relaxed);
            let claimed = if next {
                (window << SHIFT) | ROTATING
            } else {
                state | SKIPPING | ROTATING
            };
            if self
                .state
                .compare_exchange(state, claimed, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
            {
                continue;
            }
            // A reader that sees any of the zeroing below sees the claim
            // when it checks the word again (`components`).
            fence(Ordering::Release);
            if next {
                // Zero the one after it, which held window - 2, no longer
                // anyone's previous window.
                self.sketch(window + 1).reset();
            } else {
                // Windows were skipped: nothing recent is worth keeping.
                for sketch in &self.windows {
                    sketch.reset();
                }
            }
            self.state.store(window << SHIFT, Ordering::Release);
            return window;
        }
    }

    /// Finish the rotation claimed in `state` if its claimer is in an
    /// ancestor process (see the module docs); otherwise leave it to the
    /// claimer.
    #[cold]
    fn finish_orphaned_rotation(&self, state: u64) {
        let here = fork::forks();
        // Acquire: the record a claimer wrote before its claim, which the
        // caller's load of `state` made visible.
        let recorded = self.claimed_in.load(Ordering::Acquire);
        if recorded == here {
            return;
        }
        if self
            .claimed_in
            .compare_exchange(recorded, here, Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
        {
            return;
        }
        // This thread owns the claim now: nobody else writes the word
        // until it is released.
        let published = state >> SHIFT;
        if state & SKIPPING != 0 {
            for sketch in &self.windows {
                sketch.reset();
            }
        } else {
            self.sketch(published + 1).reset();
        }
        self.state.store(published << SHIFT, Ordering::Release);
    }
}

impl<C: Clock> std::fmt::Debug for Rate<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.state.load(Ordering::Relaxed);
        f.debug_struct("Rate")
            .field("interval", &self.interval)
            .field("window", &(state >> SHIFT))
            .field("rotating", &(state & ROTATING != 0))
            .field("skipping", &(state & SKIPPING != 0))
            .finish_non_exhaustive()
    }
}

#[cfg(all(test, not(loom)))]
mod tests;

#[cfg(all(test, loom))]
mod loom_tests;
