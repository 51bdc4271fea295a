//! Time as the limiters see it: a [`Clock`] that reads nanoseconds since its
//! own epoch.
//!
//! Every time-dependent structure in weir takes its clock as a value instead
//! of calling `Instant::now()` itself, so tests drive time by hand with a
//! [`ManualClock`] and production code gets the [`MonotonicClock`] by default.
//! Inside, time is a plain `u64` of nanoseconds (good for 584 years) because
//! that is what fits in one atomic word; consumers compute with saturating
//! arithmetic so that a clock stepped backwards (possible with a manual
//! clock) reads as "no time passed" instead of wrapping. Where a caller
//! hands a time to a structure (to judge a batch of requests at one
//! reading, or to replay a trace), it passes a [`Timestamp`] of that
//! structure's own clock type, so a reading of one clock cannot be given
//! to a structure running on another. Every [`MonotonicClock`] in a process
//! counts from one epoch, and so does every [`StdClock`], so a reading of
//! one instance means the same instant to every other instance of its type;
//! [`ManualClock`]s share a time only with their clones. A [`RecentClock`]
//! trades up to a millisecond of staleness for a cheaper read of the
//! monotonic clock's time. The monotonic clocks count from the Unix epoch
//! as the system clock read it when the process started using them, so
//! windows on them fall on calendar boundaries (a daily window from UTC
//! midnight), as the stores' do. A [`WallClock`] reads the system clock
//! itself at every call, following its steps: the one time line different
//! hosts share, for limits kept on a store with no clock of its own.

mod manual;
mod recent;

pub use manual::ManualClock;
pub use recent::RecentClock;

use std::marker::PhantomData;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use weir_primitives::time::duration_to_nanos;
use weir_primitives::tsc::{Scale, Tsc};

/// A source of monotonic time, in nanoseconds since the clock's own epoch.
///
/// Implementations must be cheap (they are read on hot paths) and should
/// never go backwards; consumers tolerate it anyway by saturating.
///
/// ```
/// use weir_limits::clock::{Clock, ManualClock};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// clock.advance(Duration::from_millis(3));
/// assert_eq!(clock.now_nanos(), 3_000_000);
/// ```
pub trait Clock: Send + Sync {
    /// Nanoseconds elapsed since this clock's epoch.
    fn now_nanos(&self) -> u64;

    /// The current time as a [`Timestamp`] of this clock.
    fn now(&self) -> Timestamp<Self>
    where
        Self: Sized,
    {
        Timestamp::from_nanos(self.now_nanos())
    }
}

/// A reading of a clock of type `C`: nanoseconds since that clock's epoch.
/// Structures that take a time from their caller take it as a
/// `Timestamp` of their own clock type, so the compiler rejects a reading
/// of a different type of clock (instances of one type share an epoch: see
/// the [module docs](self)).
///
/// ```
/// use std::time::Duration;
/// use weir_limits::clock::{Clock, ManualClock, Timestamp};
///
/// let clock = ManualClock::new();
/// clock.advance(Duration::from_millis(5));
/// let now = clock.now();
/// assert_eq!(now.as_nanos(), 5_000_000);
/// assert_eq!(now + Duration::from_millis(1), Timestamp::from_nanos(6_000_000));
/// ```
pub struct Timestamp<C> {
    nanos: u64,
    clock: PhantomData<fn() -> C>,
}

impl<C> Timestamp<C> {
    /// The time `nanos` nanoseconds after the clock's epoch (for replaying
    /// recorded times; live code reads [`Clock::now`]).
    pub const fn from_nanos(nanos: u64) -> Self {
        Self {
            nanos,
            clock: PhantomData,
        }
    }

    /// Nanoseconds since the clock's epoch.
    pub const fn as_nanos(self) -> u64 {
        self.nanos
    }

    /// Time from `earlier` to this one; zero if `earlier` is later.
    pub fn saturating_duration_since(self, earlier: Self) -> Duration {
        Duration::from_nanos(self.nanos.saturating_sub(earlier.nanos))
    }
}

/// Saturates at the end of the clock's range (584 years after its epoch).
impl<C> std::ops::Add<Duration> for Timestamp<C> {
    type Output = Self;

    fn add(self, rhs: Duration) -> Self {
        Self::from_nanos(self.nanos.saturating_add(duration_to_nanos(rhs)))
    }
}

// By hand: derives would demand the same traits of the clock type.
impl<C> Clone for Timestamp<C> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<C> Copy for Timestamp<C> {}
impl<C> PartialEq for Timestamp<C> {
    fn eq(&self, other: &Self) -> bool {
        self.nanos == other.nanos
    }
}
impl<C> Eq for Timestamp<C> {}
impl<C> PartialOrd for Timestamp<C> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl<C> Ord for Timestamp<C> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.nanos.cmp(&other.nanos)
    }
}
impl<C> std::hash::Hash for Timestamp<C> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.nanos.hash(state);
    }
}
impl<C> std::fmt::Debug for Timestamp<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Timestamp({} ns)", self.nanos)
    }
}

impl<C: Clock + ?Sized> Clock for &C {
    fn now_nanos(&self) -> u64 {
        (**self).now_nanos()
    }
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    fn now_nanos(&self) -> u64 {
        (**self).now_nanos()
    }
}

/// The default clock: monotonic time from the CPU's time-stamp counter,
/// calibrated against the OS clock, counting from the Unix epoch as the
/// system clock read it when the process created its first
/// `MonotonicClock` (all instances read the same time).
///
/// So its readings are close to Unix time, and windows aligned to
/// multiples of their length on it (weir-rate's fixed and sliding
/// windows) fall on the grid the stores use: a daily window from UTC
/// midnight, an hourly one on the hour, in every process alike. It stays
/// monotonic: a later step of the system clock moves it not at all, and
/// slewing moves the two apart by at most the slew since the process
/// started (milliseconds a day). For windows on another grid, give the
/// limiter a clock of your own (any [`Clock`]), whose epoch is the grid's
/// origin.
///
/// Reading it is a counter read and a multiply, cheaper than
/// `Instant::now()`; on a limiter's hot path the clock read matters. Where
/// the kernel does not keep time with the counter (so it may not be
/// invariant or synchronised across cores), it reads the OS monotonic clock
/// instead. Readings on different cores that disagree by a few cycles
/// saturate to "no time passed" instead of going backwards. The first
/// `MonotonicClock` of a process waits up to 20 ms for the counter's
/// calibration.
///
/// The counter is chosen once per process. Where it can restart while the
/// process lives (a suspend to RAM on hardware that resets it), readings
/// stand still until it passes its old value, and limiters see no time
/// pass meanwhile (stricter, then a long idle): on machines that suspend,
/// use [`StdClock`], which the OS corrects.
///
/// ```
/// use weir_limits::clock::{Clock, MonotonicClock};
///
/// let clock = MonotonicClock::new();
/// let a = clock.now_nanos();
/// assert!(clock.now_nanos() >= a);
/// ```
#[derive(Debug, Clone)]
pub struct MonotonicClock {
    counter: &'static Tsc,
    /// The counter's reading at the epoch.
    origin: u64,
    /// The counter's calibration; `None` when it could not be calibrated
    /// and `origin` is on the OS clock.
    scale: Option<Scale>,
    /// Unix time at `origin` (ns).
    unix_at_origin: u64,
}

/// The system clock's reading now, in nanoseconds since the Unix epoch (0
/// before it).
fn unix_nanos() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, duration_to_nanos)
}

impl MonotonicClock {
    /// The process's monotonic clock (calibrated once, on first use).
    pub fn new() -> Self {
        static SHARED: OnceLock<MonotonicClock> = OnceLock::new();
        SHARED
            .get_or_init(|| {
                let counter = Tsc::global();
                let scale = counter.scale();
                let unix_at_origin = unix_nanos();
                let origin = match scale {
                    Some(_) => counter.read(),
                    None => counter.os_nanos(),
                };
                Self {
                    counter,
                    origin,
                    scale,
                    unix_at_origin,
                }
            })
            .clone()
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for MonotonicClock {
    #[inline]
    fn now_nanos(&self) -> u64 {
        let elapsed = match self.scale {
            Some(scale) => scale.nanos(self.counter.read().saturating_sub(self.origin)),
            None => self.counter.os_nanos().saturating_sub(self.origin),
        };
        self.unix_at_origin.saturating_add(elapsed)
    }
}

/// The OS monotonic clock (`std::time::Instant`), counting from the Unix
/// epoch as the system clock read it when the process created its first
/// `StdClock` (all instances read the same time), as [`MonotonicClock`]
/// does: for platforms or deployments where the time-stamp counter is not
/// wanted.
///
/// ```
/// use weir_limits::clock::{Clock, StdClock};
///
/// let clock = StdClock::new();
/// let a = clock.now_nanos();
/// assert!(clock.now_nanos() >= a);
/// ```
#[derive(Debug, Clone, Copy)]
pub struct StdClock {
    origin: Instant,
    /// Unix time at `origin` (ns).
    unix_at_origin: u64,
}

impl StdClock {
    /// The process's OS monotonic clock.
    pub fn new() -> Self {
        static ORIGIN: OnceLock<(Instant, u64)> = OnceLock::new();
        let (origin, unix_at_origin) = *ORIGIN.get_or_init(|| (Instant::now(), unix_nanos()));
        Self {
            origin,
            unix_at_origin,
        }
    }
}

impl Default for StdClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for StdClock {
    #[inline]
    fn now_nanos(&self) -> u64 {
        // Saturates in 2554 rather than wrapping.
        self.unix_at_origin
            .saturating_add(duration_to_nanos(self.origin.elapsed()))
    }
}

/// Wall-clock time: nanoseconds since the Unix epoch (`SystemTime`), the
/// one time line that processes on different hosts share. For limits kept
/// on a store without a clock of its own, and for windows that must fall
/// on calendar boundaries (a daily window from UTC midnight) in every
/// process alike. It follows the system's clock, so an NTP step can move
/// it backwards; every limiter treats time going backwards as no time
/// passing. A reading before the epoch is 0.
///
/// ```
/// use weir_limits::clock::{Clock, WallClock};
///
/// let since_epoch = WallClock::new().now_nanos();
/// assert!(since_epoch > 1_700_000_000 * 1_000_000_000); // after November 2023
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct WallClock {
    _private: (),
}

impl WallClock {
    /// The system's wall clock.
    pub fn new() -> Self {
        Self::default()
    }
}

impl Clock for WallClock {
    #[inline]
    fn now_nanos(&self) -> u64 {
        unix_nanos()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A reading of one instance is a reading of every instance of its
    /// type: a clock created later does not restart time.
    #[test]
    fn instances_of_one_clock_type_share_an_epoch() {
        fn check<C: Clock>(make: impl Fn() -> C) {
            let first = make();
            std::thread::sleep(Duration::from_millis(20));
            let seen = first.now_nanos();
            let later = make();
            let read = later.now_nanos();
            assert!(read >= seen, "a later instance read {read} after {seen}");
        }
        check(MonotonicClock::new);
        check(StdClock::new);
        check(RecentClock::new);
    }

    proptest! {
        /// A timestamp is its nanoseconds: it orders, adds (saturating) and
        /// subtracts (saturating at zero) as they do.
        #[test]
        fn timestamps_behave_as_their_nanoseconds(a: u64, b: u64, d: u64) {
            let (ta, tb) = (Timestamp::<ManualClock>::from_nanos(a), Timestamp::from_nanos(b));
            prop_assert_eq!(ta.cmp(&tb), a.cmp(&b));
            prop_assert_eq!(ta == tb, a == b);
            prop_assert_eq!((ta + Duration::from_nanos(d)).as_nanos(), a.saturating_add(d));
            prop_assert_eq!(
                ta.saturating_duration_since(tb),
                Duration::from_nanos(a.saturating_sub(b))
            );
        }
    }

    #[test]
    fn the_default_clock_tracks_the_os_clock() {
        let fast = MonotonicClock::new();
        let os = StdClock::new();
        // Compare elapsed times: the two epochs are set by whichever test
        // made each clock type first, not together.
        let (a0, b0) = (fast.now_nanos(), os.now_nanos());
        std::thread::sleep(Duration::from_millis(20));
        let (a, b) = (fast.now_nanos() - a0, os.now_nanos() - b0);
        // Both saw at least the 20 ms slept; they agree to within a few ms.
        assert!(a >= 20_000_000 && b >= 20_000_000, "{a} {b}");
        assert!(a.abs_diff(b) < 5_000_000, "tsc {a} ns vs os {b} ns");
    }
}
