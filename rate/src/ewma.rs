//! Exponentially weighted moving-average rates, as rakelimit estimates them.
//!
//! # The update
//!
//! rakelimit keeps, per counter, the last estimated rate and the time of the
//! last event. When `events` new events arrive `elapsed` after the previous
//! update, with `a = elapsed / window`:
//!
//! * if `elapsed < window`: `rate = a·current + (1 − a)·old` where
//!   `current = events / elapsed`. Multiplying out, `a·current = events /
//!   window`, so weir computes `old·(1 − elapsed/window) + events/window`,
//!   which is defined for `elapsed = 0` (several events in one clock tick);
//! * if `elapsed ≥ window`: the old rate is forgotten and
//!   `rate = events / elapsed`.
//!
//! Reading the rate later without a new event ([`EwmaWindow::decay`]) is the
//! same update with zero events: the rate falls linearly to zero over one
//! window. Rates are in events per **second**; `window` is any duration
//! between 1 ns and 2⁶⁴ ns.
//!
//! # Fixed point
//!
//! [`FixedRate`] is an unsigned rate with 16 fractional bits in a `u64`
//! (resolution 2⁻¹⁶ ≈ 1.5·10⁻⁵ events/s, maximum ≈ 2.8·10¹⁴ events/s), so a
//! rate fits one atomic word. [`EwmaWindow::update_fixed`] uses only integer
//! arithmetic with `u128` intermediates (no overflow is possible in them),
//! rounds each of its two terms down, and saturates at [`FixedRate::MAX`]; it
//! never panics.
//!
//! **Bound.** For the same inputs (`old` as [`FixedRate::as_f64`], `events`
//! below 2⁵³), one fixed-point update is never above the exact real result
//! and at most two units of the last place (2·2⁻¹⁶ events/s) below it, unless
//! it saturated. The float update [`EwmaWindow::update`] is within a few f64
//! rounding steps (relative 2⁻⁵⁰) of the exact result, so
//! `update − 2⁻¹⁵ − |update|·2⁻⁴⁰ ≤ update_fixed ≤ update + |update|·2⁻⁴⁰`
//! (the property test `fixed_matches_float_within_the_bound` checks it).
//! Because `1 − a ≤ 1`, errors never grow through later updates: after `k`
//! updates from the same start the fixed rate is at most `k·2⁻¹⁵` events/s
//! below the float one.
//!
//! ```
//! use std::time::Duration;
//! use weir_rate::ewma::{EwmaWindow, FixedRate};
//!
//! let ewma = EwmaWindow::try_new(Duration::from_secs(1)).unwrap();
//! // 10 events, 100 ms after the last update, starting from 50 events/s:
//! let rate = ewma.update(50.0, 100_000_000, 10.0);
//! assert!((rate - (50.0 * 0.9 + 10.0)).abs() < 1e-9);
//! let fixed = ewma.update_fixed(FixedRate::from_per_second(50), 100_000_000, 10);
//! assert!((fixed.as_f64() - rate).abs() < 1e-4);
//! ```

use crate::sync::Mutex;
use std::fmt;
use std::time::Duration;
use weir_limits::ConfigError;
use weir_limits::clock::{Clock, MonotonicClock, Timestamp};

const NANOS_PER_SEC: u128 = 1_000_000_000;

/// A rate in events per second, unsigned, with 16 fractional bits.
///
/// ```
/// use weir_rate::ewma::FixedRate;
///
/// let r = FixedRate::from_per_second(3);
/// assert_eq!(r.to_bits(), 3 << 16);
/// assert_eq!(r.as_f64(), 3.0);
/// assert_eq!(FixedRate::from_bits(1 << 15).as_f64(), 0.5);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FixedRate(u64);

impl FixedRate {
    /// Number of fractional bits.
    pub const FRAC_BITS: u32 = 16;
    /// Zero events per second.
    pub const ZERO: Self = Self(0);
    /// The smallest positive rate, 2⁻¹⁶ events per second.
    pub const EPSILON: Self = Self(1);
    /// The largest representable rate (≈ 2.8·10¹⁴ events per second).
    pub const MAX: Self = Self(u64::MAX);

    /// The rate whose raw representation is `bits` (value · 2¹⁶).
    #[inline]
    pub const fn from_bits(bits: u64) -> Self {
        Self(bits)
    }

    /// The raw representation (value · 2¹⁶).
    #[inline]
    pub const fn to_bits(self) -> u64 {
        self.0
    }

    /// `per_second` events per second, saturating at [`FixedRate::MAX`].
    #[inline]
    pub const fn from_per_second(per_second: u64) -> Self {
        if per_second > (u64::MAX >> Self::FRAC_BITS) {
            Self::MAX
        } else {
            Self(per_second << Self::FRAC_BITS)
        }
    }

    /// The nearest fixed-point rate below `per_second`; negative and NaN
    /// give zero, huge values saturate.
    #[inline]
    pub fn from_f64(per_second: f64) -> Self {
        // `as` saturates and maps NaN to 0.
        Self((per_second * (1u64 << Self::FRAC_BITS) as f64) as u64)
    }

    /// The rate as a float, in events per second.
    #[inline]
    pub fn as_f64(self) -> f64 {
        self.0 as f64 / (1u64 << Self::FRAC_BITS) as f64
    }

    /// Whole events per second, rounded down.
    #[inline]
    pub const fn whole_per_second(self) -> u64 {
        self.0 >> Self::FRAC_BITS
    }
}

impl fmt::Display for FixedRate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/s", self.as_f64())
    }
}

/// The window of an EWMA and the update rule; stateless, so one value can
/// serve a whole sketch of rates (as in `weir-hhh`).
///
/// ```
/// use std::time::Duration;
/// use weir_rate::ewma::EwmaWindow;
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
    /// The division-free update for exactly one event (see [`OneEventUpdate`]).
    pub fn one_event(self) -> OneEventUpdate {
        OneEventUpdate::new(self)
    }

    /// An EWMA over `window`; zero and windows of 2⁶⁴ ns (584 years) or more
    /// are rejected.
    pub fn try_new(window: Duration) -> Result<Self, ConfigError> {
        if window.is_zero() {
            return Err(ConfigError::ZeroInterval);
        }
        let window_ns =
            u64::try_from(window.as_nanos()).map_err(|_| ConfigError::IntervalTooLong)?;
        Ok(Self { window_ns })
    }

    /// The window.
    #[inline]
    pub fn window(&self) -> Duration {
        Duration::from_nanos(self.window_ns)
    }

    /// The window in nanoseconds (never zero).
    #[inline]
    pub fn window_nanos(&self) -> u64 {
        self.window_ns
    }

    /// The rate after `events` more events arrived `elapsed_ns` after the
    /// update that produced `old` (all rates in events per second):
    /// `old·(1 − elapsed/window) + events/window`, or `events/elapsed` once
    /// `elapsed ≥ window`. Inputs are expected finite and non-negative.
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir_rate::ewma::EwmaWindow;
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
    /// use weir_rate::ewma::{EwmaWindow, FixedRate};
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
    /// use weir_rate::ewma::{EwmaWindow, FixedRate};
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
    /// use weir_rate::ewma::EwmaWindow;
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

#[derive(Debug, Clone, Copy)]
struct EwmaState {
    rate: FixedRate,
    last_ns: u64,
}

/// A stateful EWMA rate shared between threads: record events as they
/// happen, read the (decayed) rate at any time.
///
/// The state is two words (rate and time of the last update) behind a short
/// lock, so concurrent updates are serialised in the order they take it; an
/// update whose timestamp is older than the stored one counts as happening
/// at the stored time (time never runs backwards inside the estimator).
/// The one exception is a stored time that is wild: a whole window or more
/// ahead of the estimator's own clock (a caller's time far in the future).
/// An update a window or more behind such a time moves the stored time back
/// to the update's (still counting no time passing), so that one wild time
/// cannot freeze the rate for every update after it. Wildness is judged
/// against the clock, read only in that rare case, not against the update's
/// time: an update that is merely stale (a thread that read the clock, then
/// was preempted for a window or more) must not restart the rate of
/// everything recorded since. Rates are fixed point, so results are
/// reproducible bit for bit.
///
/// ```
/// use std::time::Duration;
/// use weir_rate::clock::ManualClock;
/// use weir_rate::ewma::Ewma;
///
/// let clock = ManualClock::new();
/// let ewma = Ewma::try_with_clock(Duration::from_secs(1), clock.clone()).unwrap();
/// for _ in 0..1000 {
///     clock.advance(Duration::from_millis(10));
///     ewma.record(1);
/// }
/// let rate = ewma.rate().as_f64();
/// assert!((rate - 100.0).abs() < 1.0, "{rate}");
/// clock.advance(Duration::from_millis(500));
/// assert!((ewma.rate().as_f64() - rate / 2.0).abs() < 1.0);
/// ```
#[derive(Debug)]
pub struct Ewma<C = MonotonicClock> {
    window: EwmaWindow,
    clock: C,
    state: Mutex<EwmaState>,
}

impl Ewma<MonotonicClock> {
    /// An EWMA over `window` on the monotonic clock, starting at rate zero.
    pub fn try_new(window: Duration) -> Result<Self, ConfigError> {
        Self::try_with_clock(window, MonotonicClock::new())
    }
}

impl<C: Clock> Ewma<C> {
    /// An EWMA over `window` reading time from `clock`, starting at rate
    /// zero at the clock's current time.
    pub fn try_with_clock(window: Duration, clock: C) -> Result<Self, ConfigError> {
        let window = EwmaWindow::try_new(window)?;
        let now = clock.now_nanos();
        Ok(Self {
            window,
            clock,
            state: Mutex::new(EwmaState {
                rate: FixedRate::ZERO,
                last_ns: now,
            }),
        })
    }

    /// The update rule in use.
    pub fn window(&self) -> EwmaWindow {
        self.window
    }

    /// Record `events` events now; returns the new rate.
    #[inline]
    pub fn record(&self, events: u64) -> FixedRate {
        self.record_at(self.clock.now(), events)
    }

    /// Record `events` events at `now` on this estimator's clock. Any
    /// `now` is accepted, up to `u64::MAX` ns (see the type's docs for
    /// times out of order).
    pub fn record_at(&self, now: Timestamp<C>, events: u64) -> FixedRate {
        let mut state = self.state.lock();
        let now = now.as_nanos();
        let window = self.window.window_nanos();
        // Rare: a time a window or more behind the stored one. The stored
        // time is wild only if it is that far ahead of the clock too (read
        // only here); otherwise `now` is merely stale and counts as no time
        // passing, like any time behind the stored one.
        if state.last_ns.saturating_sub(now) >= window
            && state.last_ns.saturating_sub(self.clock.now_nanos()) >= window
        {
            state.last_ns = now;
        }
        let now = now.max(state.last_ns);
        let rate = self
            .window
            .update_fixed(state.rate, now - state.last_ns, events);
        *state = EwmaState { rate, last_ns: now };
        rate
    }

    /// The rate now, decayed since the last event (nothing is stored).
    #[inline]
    pub fn rate(&self) -> FixedRate {
        self.rate_at(self.clock.now())
    }

    /// The rate at `now` on this estimator's clock, decayed since the last
    /// event.
    pub fn rate_at(&self, now: Timestamp<C>) -> FixedRate {
        let state = *self.state.lock();
        self.window
            .decay_fixed(state.rate, now.as_nanos().saturating_sub(state.last_ns))
    }
}

/// [`EwmaWindow::update_fixed`] for exactly one event, with its
/// two `u128` divisions by the window replaced by multiplications with
/// precomputed reciprocals (they cost 24 divisions per packet otherwise,
/// more than everything else together in weir-hhh's classifier). The
/// idle-cell branch (`elapsed ≥ window`) uses the exact update.
///
/// Never above `update_fixed`'s result, and below it by at most
/// `old · (2⁻³² + window / 2⁶⁴) + 2` units of 2⁻¹⁶ events/s (a relative
/// error under 10⁻⁹ for windows up to 10 s); the test
/// `one_event_update_tracks_the_exact_one` checks it.
///
/// ```
/// use std::time::Duration;
/// use weir_rate::ewma::{EwmaWindow, FixedRate};
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
    /// use weir_rate::ewma::EwmaWindow;
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
    /// use weir_rate::ewma::{EwmaWindow, FixedRate};
    ///
    /// let w = EwmaWindow::try_new(Duration::from_millis(100)).unwrap().one_event();
    /// assert_eq!(w.increment(), FixedRate::from_per_second(10).to_bits());
    /// ```
    pub fn increment(&self) -> u64 {
        self.inc
    }

    fn new(ewma: EwmaWindow) -> Self {
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

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::sync::Arc;
    use weir_limits::clock::ManualClock;

    const ULP: f64 = 1.0 / 65536.0;

    #[test]
    fn windows_are_validated() {
        assert_eq!(
            EwmaWindow::try_new(Duration::ZERO),
            Err(ConfigError::ZeroInterval)
        );
        assert_eq!(
            EwmaWindow::try_new(Duration::MAX),
            Err(ConfigError::IntervalTooLong)
        );
        let max = EwmaWindow::try_new(Duration::from_nanos(u64::MAX)).unwrap();
        assert_eq!(max.window_nanos(), u64::MAX);
        let one = EwmaWindow::try_new(Duration::from_nanos(1)).unwrap();
        assert_eq!(one.window(), Duration::from_nanos(1));
    }

    #[test]
    fn extremes_never_panic() {
        for w in [1, 7, 1_000_000_000, u64::MAX] {
            let ewma = EwmaWindow::try_new(Duration::from_nanos(w)).unwrap();
            for old in [FixedRate::ZERO, FixedRate::EPSILON, FixedRate::MAX] {
                for elapsed in [0, 1, w / 2, w.saturating_sub(1), w, u64::MAX] {
                    for events in [0, 1, u64::MAX] {
                        let r = ewma.update_fixed(old, elapsed, events);
                        let f = ewma.update(old.as_f64(), elapsed, events as f64);
                        assert!(f.is_finite());
                        if events == 0 && elapsed < w {
                            assert!(r <= old);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn reset_after_a_full_window() {
        let w = EwmaWindow::try_new(Duration::from_secs(1)).unwrap();
        let r = w.update_fixed(FixedRate::from_per_second(1000), 4_000_000_000, 8);
        assert_eq!(r, FixedRate::from_per_second(2));
        assert_eq!(
            w.decay_fixed(FixedRate::MAX, 1_000_000_000),
            FixedRate::ZERO
        );
    }

    #[test]
    fn steady_traffic_converges_to_its_rate() {
        let w = EwmaWindow::try_new(Duration::from_secs(1)).unwrap();
        let (mut f, mut x) = (0.0, FixedRate::ZERO);
        // 250 events/s in bursts of 5 every 20 ms.
        for _ in 0..2000 {
            f = w.update(f, 20_000_000, 5.0);
            x = w.update_fixed(x, 20_000_000, 5);
        }
        assert!((f - 250.0).abs() < 1e-6, "{f}");
        assert!((x.as_f64() - 250.0).abs() < 0.01, "{x}");
    }

    #[test]
    fn stateful_ewma_treats_backwards_time_as_no_time() {
        let clock = ManualClock::new();
        let ewma = Ewma::try_with_clock(Duration::from_secs(1), clock.clone()).unwrap();
        clock.set(Duration::from_millis(500));
        let a = ewma.record(10);
        clock.set(Duration::from_millis(100));
        let b = ewma.record(10);
        assert_eq!(a, FixedRate::from_per_second(10));
        assert_eq!(b, FixedRate::from_per_second(20));
        assert_eq!(ewma.rate(), b);
    }

    /// One record at a wild time far beyond the clock must not freeze the
    /// estimator: the honest records after it decay as usual.
    #[test]
    fn a_far_future_record_does_not_freeze_the_rate() {
        for wild in [Duration::from_secs(86_400), Duration::MAX] {
            let clock = ManualClock::new();
            let ewma = Ewma::try_with_clock(Duration::from_secs(1), clock.clone()).unwrap();
            clock.set(Duration::from_secs(1));
            let _ = ewma.record_at(clock.now() + wild, 1);
            // 100 events a second for 10 s.
            for _ in 0..1000 {
                clock.advance(Duration::from_millis(10));
                ewma.record(1);
            }
            let rate = ewma.rate().as_f64();
            assert!((rate - 100.0).abs() < 1.0, "after {wild:?}: {rate}");
        }
    }

    /// A record at a time a window or more old on a clock that has not
    /// gone back (a thread that read the clock, then was preempted) is a
    /// time in the past, not a sign of a wild stored time: it counts as no
    /// time passing, and the rate carries on from where it was instead of
    /// restarting from one event.
    #[test]
    fn a_stale_record_does_not_wipe_the_rate() {
        for stale_ms in [99, 100, 101, 150, 5_000] {
            let clock = ManualClock::new();
            let ewma = Ewma::try_with_clock(Duration::from_millis(100), clock.clone()).unwrap();
            clock.set(Duration::from_secs(10));
            // 1000 events a second for 1 s.
            for _ in 0..1000 {
                clock.advance(Duration::from_millis(1));
                ewma.record(1);
            }
            let before = ewma.rate().as_f64();
            assert!((before - 1000.0).abs() < 10.0, "{before}");
            let stale = clock.now().as_nanos() - stale_ms * 1_000_000;
            let at_stale = ewma.record_at(Timestamp::from_nanos(stale), 1).as_f64();
            // One event more at no time passing: 1/window = 10 a second.
            assert!(
                (at_stale - (before + 10.0)).abs() < 0.01,
                "{stale_ms} ms stale: {at_stale} after {before}"
            );
            let mut lowest = f64::MAX;
            for _ in 0..300 {
                clock.advance(Duration::from_millis(1));
                lowest = lowest.min(ewma.record(1).as_f64());
            }
            assert!(
                lowest > 990.0,
                "{stale_ms} ms stale: the rate fell to {lowest} (true 1000)"
            );
        }
    }

    #[test]
    fn stateful_ewma_counts_every_event_across_threads() {
        let clock = ManualClock::new();
        let ewma = Arc::new(Ewma::try_with_clock(Duration::from_secs(1), clock).unwrap());
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let ewma = Arc::clone(&ewma);
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        ewma.record(1);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        // No time passed: every event adds exactly 1/window.
        assert_eq!(ewma.rate(), FixedRate::from_per_second(2000));
    }

    /// A step of nearly a whole (very long) window: `1 − elapsed/window`
    /// computed in floating point cancels to a few significant bits, so the
    /// float rate drifted from the exact one by more than the fixed point's
    /// two units (a case the proptest below found).
    #[test]
    fn a_step_of_nearly_a_window_keeps_the_old_rates_share_exact() {
        let w = EwmaWindow::try_new(Duration::from_nanos(17_153_382_579_369_364_644)).unwrap();
        let old = FixedRate::from_bits(95_142_507_002_201_597);
        let (elapsed, events) = (17_152_947_659_954_996_860, 220_852_293_181);
        let fixed = w.update_fixed(old, elapsed, events).as_f64();
        let float = w.update(old.as_f64(), elapsed, events as f64);
        assert!((float - fixed).abs() <= 2.0 * ULP, "{float} vs {fixed}");
    }

    proptest! {
        #[test]
        fn fixed_matches_float_within_the_bound(
            window in 1u64..=u64::MAX,
            old in 0u64..(1u64 << 60),
            elapsed: u64,
            events in 0u64..(1u64 << 40),
        ) {
            let w = EwmaWindow::try_new(Duration::from_nanos(window)).unwrap();
            let old = FixedRate::from_bits(old);
            let fixed = w.update_fixed(old, elapsed, events);
            let float = w.update(old.as_f64(), elapsed, events as f64);
            prop_assume!(fixed != FixedRate::MAX);
            let slack = float.abs() * 2f64.powi(-40);
            prop_assert!(fixed.as_f64() <= float + slack, "{} > {}", fixed.as_f64(), float);
            prop_assert!(fixed.as_f64() >= float - 2.0 * ULP - slack, "{} < {}", fixed.as_f64(), float);
        }

        #[test]
        fn fixed_error_stays_bounded_over_a_sequence(
            steps in proptest::collection::vec((0u64..3_000_000_000, 0u64..1000), 1..50),
        ) {
            let w = EwmaWindow::try_new(Duration::from_secs(1)).unwrap();
            let (mut f, mut x) = (0.0f64, FixedRate::ZERO);
            for (k, &(elapsed, events)) in steps.iter().enumerate() {
                f = w.update(f, elapsed, events as f64);
                x = w.update_fixed(x, elapsed, events);
                let bound = 2.0 * ULP * (k + 1) as f64 + f * 2f64.powi(-40);
                prop_assert!(x.as_f64() <= f + f * 2f64.powi(-40));
                prop_assert!(f - x.as_f64() <= bound, "step {k}: {f} vs {}", x.as_f64());
            }
        }

        #[test]
        fn decay_never_raises_the_rate(old: u64, elapsed: u64, window in 1u64..=u64::MAX) {
            let w = EwmaWindow::try_new(Duration::from_nanos(window)).unwrap();
            let old = FixedRate::from_bits(old);
            prop_assert!(w.decay_fixed(old, elapsed) <= old);
        }
    }

    proptest! {
        #[test]
        fn one_event_update_tracks_the_exact_one(
            window in 1u64..(1u64 << 42),
            old: u64,
            elapsed in 0u64..(1u64 << 43),
        ) {
            let ewma = EwmaWindow::try_new(Duration::from_nanos(window)).unwrap();
            let fast = ewma.one_event().update(old, elapsed);
            let exact = ewma.update_fixed(FixedRate::from_bits(old), elapsed, 1).to_bits();
            prop_assert!(fast <= exact, "{fast} > {exact}");
            // old·(2⁻³² + window/2⁶⁴) + 2, in exact integer arithmetic.
            let slack = ((u128::from(old) * (u128::from(window) + (1u128 << 32))) >> 64) as u64 + 2;
            prop_assert!(exact - fast <= slack, "{exact} - {fast} > {slack}");
        }
    }

    #[test]
    fn one_event_update_handles_power_of_two_windows() {
        for shift in 0..63 {
            let window = 1u64 << shift;
            let ewma = EwmaWindow::try_new(Duration::from_nanos(window)).unwrap();
            let fast = ewma.one_event();
            for old in [0, 1 << 16, 1 << 40, u64::MAX >> 1] {
                // No time passing keeps (almost) all of the old rate.
                let exact = ewma.update_fixed(FixedRate::from_bits(old), 0, 1).to_bits();
                let got = fast.update(old, 0);
                let slack =
                    ((u128::from(old) * (u128::from(window) + (1u128 << 32))) >> 64) as u64 + 2;
                assert!(
                    got <= exact && exact - got <= slack,
                    "{window} {old}: {got} vs {exact}"
                );
            }
        }
    }
}
