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
//! use weir_limits::ewma::{EwmaWindow, FixedRate};
//!
//! let ewma = EwmaWindow::try_new(Duration::from_secs(1)).unwrap();
//! // 10 events, 100 ms after the last update, starting from 50 events/s:
//! let rate = ewma.update(50.0, 100_000_000, 10.0);
//! assert!((rate - (50.0 * 0.9 + 10.0)).abs() < 1e-9);
//! let fixed = ewma.update_fixed(FixedRate::from_per_second(50), 100_000_000, 10);
//! assert!((fixed.as_f64() - rate).abs() < 1e-4);
//! ```

mod fixed;
mod one_event;
mod window;

pub use fixed::FixedRate;
pub use one_event::OneEventUpdate;
pub use window::EwmaWindow;

use crate::clock::{Clock, MonotonicClock, Timestamp};
use crate::error::ConfigError;
use crate::sync::Mutex;
use std::time::Duration;

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
/// use weir_limits::clock::ManualClock;
/// use weir_limits::ewma::Ewma;
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
    ///
    /// # Errors
    ///
    /// As [`EwmaWindow::try_new`]: a zero window or one of 2⁶⁴ ns or more.
    pub fn try_new(window: Duration) -> Result<Self, ConfigError> {
        Self::try_with_clock(window, MonotonicClock::new())
    }
}

impl<C: Clock> Ewma<C> {
    /// An EWMA over `window` reading time from `clock`, starting at rate
    /// zero at the clock's current time.
    ///
    /// # Errors
    ///
    /// As [`EwmaWindow::try_new`]: a zero window or one of 2⁶⁴ ns or more.
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

#[cfg(all(test, not(loom)))]
mod tests;
