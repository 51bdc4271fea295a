//! [`RecentClock`]: the monotonic clock's time as one shared word that an
//! upkeep thread refreshes.

use super::{Clock, MonotonicClock};
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::Duration;

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
