//! [`OneEventUpdate`]: the one-event update with its divisions
//! precomputed, for sketches of rates counted packet by packet (weir-hhh's
//! classifier).

use super::{EwmaWindow, FixedRate};

/// [`EwmaWindow::update_fixed`] for exactly one event, with its
/// two `u128` divisions by the window replaced by multiplications with
/// precomputed reciprocals (they cost 24 divisions per packet otherwise,
/// more than everything else together in weir-hhh's classifier, which
/// updates twelve rates a packet). The
/// idle-cell branch (`elapsed ≥ window`) uses the exact update.
///
/// Never above `update_fixed`'s result, and below it by at most
/// `old · (2⁻³² + window / 2⁶⁴) + 2` units of 2⁻¹⁶ events/s (a relative
/// error under 10⁻⁹ for windows up to 10 s); the test
/// `one_event_update_tracks_the_exact_one` checks it.
///
/// ```
/// use std::time::Duration;
/// use weir_limits::ewma::{EwmaWindow, FixedRate};
///
/// let window = EwmaWindow::try_new(Duration::from_secs(1)).unwrap();
/// let fast = window.one_event();
/// let old = FixedRate::from_per_second(40).to_bits();
/// let exact = window.update_fixed(FixedRate::from_bits(old), 25_000_000, 1).to_bits();
/// let approx = fast.update(old, 25_000_000);
/// assert!(approx <= exact && exact - approx < 16);
/// ```
#[derive(Debug, Clone, Copy)]
pub struct OneEventUpdate {
    ewma: EwmaWindow,
    window: u64,
    /// `⌊(2⁶⁴ − 1) / window⌋`.
    recip: u64,
    /// What one event adds: `⌊10⁹ · 2¹⁶ / window⌋`, from the exact update.
    inc: u64,
}

impl OneEventUpdate {
    /// The window this update decays over.
    pub fn window(&self) -> EwmaWindow {
        self.ewma
    }

    /// The window in nanoseconds.
    pub fn window_nanos(&self) -> u64 {
        self.window
    }

    /// `⌊(2⁶⁴ − 1) / window⌋`, the reciprocal [`within_window`](Self::within_window)
    /// multiplies by (for re-implementations that must match bit for bit,
    /// such as weir-hhh's BPF filter).
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir_limits::ewma::EwmaWindow;
    ///
    /// let w = EwmaWindow::try_new(Duration::from_nanos(1000)).unwrap().one_event();
    /// assert_eq!(w.reciprocal(), u64::MAX / 1000);
    /// ```
    pub fn reciprocal(&self) -> u64 {
        self.recip
    }

    /// What one event adds to a rate, in [`FixedRate`] bits (`⌊10⁹·2¹⁶ / window⌋`).
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir_limits::ewma::{EwmaWindow, FixedRate};
    ///
    /// let w = EwmaWindow::try_new(Duration::from_millis(100)).unwrap().one_event();
    /// assert_eq!(w.increment(), FixedRate::from_per_second(10).to_bits());
    /// ```
    pub fn increment(&self) -> u64 {
        self.inc
    }

    pub(super) fn new(ewma: EwmaWindow) -> Self {
        let window = ewma.window_nanos();
        // ⌊(2⁶⁴ − 1) / window⌋, so that keep·recip < 2⁶⁴ even for keep = window.
        let recip = u64::MAX / window;
        Self {
            ewma,
            window,
            recip,
            inc: ewma.update_fixed(FixedRate::ZERO, 0, 1).to_bits(),
        }
    }

    /// The rate (bits) after one event `elapsed` ns after the rate `old`.
    #[inline(always)]
    pub fn update(&self, old: u64, elapsed: u64) -> u64 {
        if elapsed >= self.window {
            return self.idle(old, elapsed);
        }
        self.within_window(old, elapsed)
    }

    /// [`update`](Self::update) for a cell idle a whole window or more:
    /// the exact reset to `1 / elapsed`.
    #[cold]
    fn idle(&self, old: u64, elapsed: u64) -> u64 {
        self.ewma
            .update_fixed(FixedRate::from_bits(old), elapsed, 1)
            .to_bits()
    }

    /// [`update`](Self::update) without the idle-cell check, for callers
    /// that already know `elapsed < window` (a larger `elapsed` is treated
    /// as a whole window: the old rate is forgotten).
    #[inline(always)]
    pub fn within_window(&self, old: u64, elapsed: u64) -> u64 {
        let keep = self.window.saturating_sub(elapsed);
        // keep / window as a 32-bit fraction. keep ≤ window, so
        // keep·⌊(2⁶⁴−1)/window⌋ < 2⁶⁴: a plain 64-bit multiply.
        let frac = keep.wrapping_mul(self.recip) >> 32;
        let kept = ((u128::from(old) * u128::from(frac)) >> 32) as u64;
        kept.saturating_add(self.inc)
    }
}
