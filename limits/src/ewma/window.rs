//! [`EwmaWindow`]: the update rule, without state.

use super::{FixedRate, OneEventUpdate};
use crate::error::ConfigError;
use std::time::Duration;

pub(super) const NANOS_PER_SEC: u128 = 1_000_000_000;

/// The window of an EWMA and the update rule; stateless, so one value can
/// serve a whole sketch of rates (as in `weir-hhh`).
///
/// ```
/// use std::time::Duration;
/// use weir_limits::ewma::EwmaWindow;
///
/// let w = EwmaWindow::try_new(Duration::from_secs(1)).unwrap();
/// // Half a window of silence halves the rate.
/// assert_eq!(w.decay(100.0, 500_000_000), 50.0);
/// // A gap of a window or more resets it to events / elapsed.
/// assert_eq!(w.update(100.0, 2_000_000_000, 4.0), 2.0);
/// assert!(EwmaWindow::try_new(Duration::ZERO).is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EwmaWindow {
    window_ns: u64,
}

impl EwmaWindow {
    /// The division-free update for exactly one event (see
    /// [`OneEventUpdate`]), for a hot loop that counts events one by one.
    pub fn one_event(self) -> OneEventUpdate {
        OneEventUpdate::new(self)
    }

    /// An EWMA over `window`.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] for a zero window or one of 2⁶⁴ ns (584 years) or
    /// more.
    pub fn try_new(window: Duration) -> Result<Self, ConfigError> {
        if window.is_zero() {
            return Err(ConfigError::ZeroWindow);
        }
        let window_ns = u64::try_from(window.as_nanos()).map_err(|_| ConfigError::WindowTooLong)?;
        Ok(Self { window_ns })
    }

    /// The window.
    #[inline]
    pub fn window(&self) -> Duration {
        Duration::from_nanos(self.window_ns)
    }

    /// The window in nanoseconds (never zero).
    #[inline]
    pub(crate) fn window_nanos(&self) -> u64 {
        self.window_ns
    }

    /// The rate after `events` more events arrived `elapsed_ns` after the
    /// update that produced `old` (all rates in events per second):
    /// `old·(1 − elapsed/window) + events/window`, or `events/elapsed` once
    /// `elapsed ≥ window`. Inputs are expected finite and non-negative.
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir_limits::ewma::EwmaWindow;
    ///
    /// let w = EwmaWindow::try_new(Duration::from_millis(100)).unwrap();
    /// // One event every 10 ms, forever, converges to 100 events/s.
    /// let mut rate = 0.0;
    /// for _ in 0..1000 {
    ///     rate = w.update(rate, 10_000_000, 1.0);
    /// }
    /// assert!((rate - 100.0).abs() < 1e-6);
    /// ```
    #[inline]
    pub fn update(&self, old: f64, elapsed_ns: u64, events: f64) -> f64 {
        const NS: f64 = 1e9;
        if elapsed_ns >= self.window_ns {
            events * NS / elapsed_ns as f64
        } else {
            let window = self.window_ns as f64;
            // The old rate's share from the exact integer difference: for
            // an elapsed time near the window, `1 − elapsed/window` would
            // cancel to a few significant bits.
            let keep = (self.window_ns - elapsed_ns) as f64 / window;
            old * keep + events * NS / window
        }
    }

    /// [`update`](Self::update) in fixed point: integer arithmetic only,
    /// never above the exact result and less than 2·2⁻¹⁶ events/s below it,
    /// saturating at [`FixedRate::MAX`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir_limits::ewma::{EwmaWindow, FixedRate};
    ///
    /// let w = EwmaWindow::try_new(Duration::from_secs(1)).unwrap();
    /// let r = w.update_fixed(FixedRate::ZERO, 250_000_000, 5);
    /// assert_eq!(r, FixedRate::from_per_second(5));
    /// assert_eq!(w.update_fixed(FixedRate::MAX, 0, u64::MAX), FixedRate::MAX);
    /// ```
    #[inline]
    pub fn update_fixed(&self, old: FixedRate, elapsed_ns: u64, events: u64) -> FixedRate {
        // events · 10⁹ · 2¹⁶ < 2¹¹⁰ and old · window < 2¹²⁸: no overflow.
        let scaled_events = u128::from(events) * (NANOS_PER_SEC << FixedRate::FRAC_BITS);
        let window = u128::from(self.window_ns);
        let bits = if elapsed_ns >= self.window_ns {
            // elapsed ≥ window ≥ 1, so no division by zero.
            scaled_events / u128::from(elapsed_ns)
        } else {
            let keep = window - u128::from(elapsed_ns);
            u128::from(old.0) * keep / window + scaled_events / window
        };
        FixedRate(u64::try_from(bits).unwrap_or(u64::MAX))
    }

    /// The rate `elapsed_ns` after the update that produced `old`, with no
    /// event since: `old·(1 − elapsed/window)`, zero after a whole window.
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir_limits::ewma::{EwmaWindow, FixedRate};
    ///
    /// let w = EwmaWindow::try_new(Duration::from_secs(2)).unwrap();
    /// let r = FixedRate::from_per_second(8);
    /// assert_eq!(w.decay_fixed(r, 500_000_000), FixedRate::from_per_second(6));
    /// assert_eq!(w.decay_fixed(r, 2_000_000_000), FixedRate::ZERO);
    /// ```
    #[inline]
    pub fn decay_fixed(&self, old: FixedRate, elapsed_ns: u64) -> FixedRate {
        self.update_fixed(old, elapsed_ns, 0)
    }

    /// The float rate `elapsed_ns` after the update that produced `old`, with
    /// no event since.
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir_limits::ewma::EwmaWindow;
    ///
    /// let w = EwmaWindow::try_new(Duration::from_secs(1)).unwrap();
    /// assert_eq!(w.decay(10.0, 250_000_000), 7.5);
    /// assert_eq!(w.decay(10.0, u64::MAX), 0.0);
    /// ```
    #[inline]
    pub fn decay(&self, old: f64, elapsed_ns: u64) -> f64 {
        self.update(old, elapsed_ns, 0.0)
    }
}
