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
//! monotonic clock's time.

use std::marker::PhantomData;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
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
/// calibrated against the OS clock, with its epoch at the first
/// `MonotonicClock` the process created (all instances read the same time).
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
}

impl MonotonicClock {
    /// The process's monotonic clock (calibrated once, on first use).
    pub fn new() -> Self {
        static SHARED: OnceLock<MonotonicClock> = OnceLock::new();
        SHARED
            .get_or_init(|| {
                let counter = Tsc::global();
                let scale = counter.scale();
                let origin = match scale {
                    Some(_) => counter.read(),
                    None => counter.os_nanos(),
                };
                Self {
                    counter,
                    origin,
                    scale,
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
        match self.scale {
            Some(scale) => scale.nanos(self.counter.read().saturating_sub(self.origin)),
            None => self.counter.os_nanos().saturating_sub(self.origin),
        }
    }
}

/// The OS monotonic clock (`std::time::Instant`), with its epoch at the
/// first `StdClock` the process created (all instances read the same
/// time): for platforms or deployments where the time-stamp counter is not
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
}

impl StdClock {
    /// The process's OS monotonic clock.
    pub fn new() -> Self {
        static ORIGIN: OnceLock<Instant> = OnceLock::new();
        Self {
            origin: *ORIGIN.get_or_init(Instant::now),
        }
    }

    /// The `Instant` this clock counts from.
    pub fn origin(&self) -> Instant {
        self.origin
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
        // Saturates after 584 years of uptime rather than wrapping.
        duration_to_nanos(self.origin.elapsed())
    }
}

/// The [`MonotonicClock`]'s time as of at most about
/// [`INTERVAL`](Self::INTERVAL) ago: a check reads one shared word that a
/// background thread refreshes, instead of the time-stamp counter, for hot
/// paths where even a counter read is a noticeable share of the work.
///
/// One upkeep thread per process (`weir-recent-clock`), started by the
/// first `new`, wakes every `INTERVAL` for the life of the process. Its
/// readings are [`MonotonicClock`] readings, so both count from one epoch.
///
/// # Staleness
///
/// A reading is never ahead of the monotonic clock and lags it by at most
/// `INTERVAL` plus however long the OS delays the upkeep thread (an
/// overloaded machine delays it more). A limiter deciding on a lagging time
/// sees less time pass, so it is stricter, never looser, while the lag
/// lasts; when a long lag ends it sees that time at once, as a limiter that
/// was idle would. Over any stretch of real time it allows at most what the
/// exact clock allows over that stretch plus the largest lag.
///
/// After `fork` the child has no upkeep thread: its first reading (of any
/// `RecentClock`, old or new) finds none and starts one, as `new` does. If
/// the thread cannot be started, readings come from the monotonic clock
/// itself: slower, never wrong.
///
/// ```
/// use weir_limits::clock::{Clock, MonotonicClock, RecentClock};
///
/// let recent = RecentClock::new();
/// let a = recent.now_nanos();
/// assert!(a <= MonotonicClock::new().now_nanos());
/// std::thread::sleep(RecentClock::INTERVAL * 20);
/// assert!(recent.now_nanos() > a);
/// ```
#[derive(Debug, Clone)]
pub struct RecentClock {
    monotonic: MonotonicClock,
}

/// The upkeep thread's latest reading of the monotonic clock (at least 1),
/// or 0 while this process has no upkeep thread: none started yet, a
/// forked child (see [`watch_forks`]), or none could be. weir keeps its own
/// rather than quanta's `Upkeep` and `recent()`: quanta runs one upkeep
/// thread per process and stops it when whoever started it drops its
/// handle (governor's `QuantaUpkeepClock` does, with its last clone), which
/// would freeze every other reader's time; and a forked child could never
/// start it again.
static RECENT: AtomicU64 = AtomicU64::new(0);

/// Whether this process has an upkeep thread: [`NO_UPKEEP`], [`UPKEEP`]
/// (running or starting), or [`REFUSED`] (the OS would not start one).
static UPKEEP_STATE: AtomicU8 = AtomicU8::new(NO_UPKEEP);
const NO_UPKEEP: u8 = 0;
const UPKEEP: u8 = 1;
const REFUSED: u8 = 2;

impl RecentClock {
    /// How often the upkeep thread refreshes the shared reading.
    pub const INTERVAL: Duration = Duration::from_millis(1);

    /// A handle on the process's recent time, starting its upkeep thread
    /// if this process has none yet.
    pub fn new() -> Self {
        let clock = Self {
            monotonic: MonotonicClock::new(),
        };
        clock.start_upkeep();
        clock
    }

    /// Start this process's upkeep thread unless it has one, or could not
    /// start one.
    fn start_upkeep(&self) {
        if UPKEEP_STATE
            .compare_exchange(NO_UPKEEP, UPKEEP, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            return;
        }
        watch_forks();
        let monotonic = self.monotonic.clone();
        RECENT.store(monotonic.now_nanos().max(1), Ordering::Relaxed);
        let spawned = std::thread::Builder::new()
            .name("weir-recent-clock".into())
            .spawn(move || {
                loop {
                    std::thread::sleep(Self::INTERVAL);
                    RECENT.store(monotonic.now_nanos().max(1), Ordering::Relaxed);
                }
            });
        if spawned.is_err() {
            RECENT.store(0, Ordering::Relaxed);
            UPKEEP_STATE.store(REFUSED, Ordering::Relaxed);
        }
    }

    /// A reading where the process has no upkeep thread: start one (in a
    /// forked child), and read the monotonic clock this time.
    #[cold]
    #[inline(never)]
    fn without_upkeep(&self) -> u64 {
        self.start_upkeep();
        self.monotonic.now_nanos()
    }
}

/// Make a forked child forget its parent's upkeep thread, which did not
/// survive the fork, so that its first reading starts its own. If the hook
/// cannot be registered (no memory), a forked child's clocks stand still,
/// which only makes its limiters deny more.
fn watch_forks() {
    fn in_child() {
        // Async-signal-safe: two lock-free atomic stores.
        RECENT.store(0, Ordering::Relaxed);
        UPKEEP_STATE.store(NO_UPKEEP, Ordering::Relaxed);
    }
    let _ = weir_primitives::fork::on_fork_in_child(in_child);
}

impl Default for RecentClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for RecentClock {
    #[inline]
    fn now_nanos(&self) -> u64 {
        match RECENT.load(Ordering::Relaxed) {
            0 => self.without_upkeep(),
            recent => recent,
        }
    }
}

/// A clock that moves only when told to; clones share the same time.
///
/// ```
/// use weir_limits::clock::{Clock, ManualClock};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// let handle = clock.clone();
/// handle.set(Duration::from_secs(2));
/// assert_eq!(clock.now_nanos(), 2_000_000_000);
/// ```
#[derive(Debug, Clone, Default)]
pub struct ManualClock {
    nanos: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock reading zero.
    pub fn new() -> Self {
        Self::default()
    }

    /// Move time forward by `by` (saturating at `u64::MAX` nanoseconds).
    pub fn advance(&self, by: Duration) {
        let by = duration_to_nanos(by);
        // A CAS loop rather than fetch_add so a huge advance saturates
        // instead of wrapping around to the past.
        let _ = self
            .nanos
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |now| {
                Some(now.saturating_add(by))
            });
    }

    /// Set the time since the epoch. Setting it backwards is allowed (to
    /// test how consumers cope); they treat it as no time having passed.
    pub fn set(&self, since_epoch: Duration) {
        self.nanos
            .store(duration_to_nanos(since_epoch), Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    #[inline]
    fn now_nanos(&self) -> u64 {
        self.nanos.load(Ordering::SeqCst)
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

    /// The recent clock is the monotonic clock's time, late but never
    /// early, and it keeps moving. How late depends on the scheduler, so
    /// the bounds checked are loose, but a stopped upkeep thread fails
    /// both: over 300 ms its lag would pass 100 ms and it would not move.
    #[test]
    fn the_recent_clock_trails_the_monotonic_clock_and_keeps_up() {
        let (recent, monotonic) = (RecentClock::new(), MonotonicClock::new());
        let (first_recent, first_monotonic) = (recent.now_nanos(), monotonic.now_nanos());
        let mut lags = Vec::new();
        for _ in 0..100 {
            let r = recent.now_nanos();
            let m = monotonic.now_nanos();
            assert!(r <= m, "recent {r} ahead of monotonic {m}");
            lags.push(m - r);
            std::thread::sleep(Duration::from_millis(3));
        }
        let moved = recent.now_nanos() - first_recent;
        let elapsed = monotonic.now_nanos() - first_monotonic;
        assert!(moved >= elapsed / 2, "moved {moved} ns in {elapsed} ns");
        lags.sort_unstable();
        let median = Duration::from_nanos(lags[lags.len() / 2]);
        assert!(median < Duration::from_millis(100), "median lag {median:?}");
        // Never more than one upkeep thread, however many clocks.
        let clocks: Vec<RecentClock> = (0..8).map(|_| RecentClock::new()).collect();
        assert!(clocks.iter().all(|c| c.now_nanos() != 0));
        #[cfg(target_os = "linux")]
        {
            // Thread names are cut to 15 bytes in /proc.
            let upkeep = std::fs::read_dir("/proc/self/task")
                .unwrap()
                .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
                .filter(|name| name.trim_end() == "weir-recent-clo")
                .count();
            assert_eq!(upkeep, 1, "upkeep threads");
        }
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
    fn manual_clock_saturates_instead_of_wrapping() {
        let clock = ManualClock::new();
        clock.set(Duration::from_nanos(u64::MAX - 5));
        clock.advance(Duration::from_secs(1));
        assert_eq!(clock.now_nanos(), u64::MAX);
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

    #[test]
    fn clones_of_a_manual_clock_share_time() {
        let a = ManualClock::new();
        let b = a.clone();
        a.advance(Duration::from_millis(7));
        assert_eq!(b.now_nanos(), 7_000_000);
    }
}
