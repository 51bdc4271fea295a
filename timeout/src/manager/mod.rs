//! The timer manager: per-thread tables of shared timers and one sweeper.
//!
//! # Layout
//!
//! Each worker thread that arms a timer gets its own [`ThreadTable`]
//! (`table.rs`): a sorted map from tick to
//! [`Bucket`](crate::bucket::Bucket) plus a small cache of the bucket it
//! used last. Only the owning thread inserts into its table, so registering
//! never waits for another worker; the map's lock is shared only with the
//! sweeper (once per sweep) and with the rare waiter dropped on a different
//! thread from the one that armed it. Under steady load every waiter of the
//! current tick finds its bucket in the cache and never touches the map.
//!
//!
//! The sweeper thread lives in `sweeper.rs`, the fork handling in `fork.rs`.

mod fork;
mod metrics;
mod sweeper;

pub use metrics::Metrics;

use fork::{TORN_DOWN, thread_serial, watch_forks, watch_tear_down};
use sweeper::SweeperHandle;

use crate::clock::{self, Clock};
use crate::pause::PauseGate;
use crate::planner::Planner;
use crate::table::{Armed, Buckets, ThreadTable};
use parking_lot::Mutex;
use std::fmt;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::Waker;
use std::time::Duration;
use weir_primitives::local::ThreadLocal;
use weir_primitives::time::duration_to_nanos;

/// The default tick: 10 ms, as in pingora (the global manager's; its
/// [`TimerManager::resolution`] answers it at run time).
///
/// ```
/// use weir_timeout::{DEFAULT_RESOLUTION, TimerManager};
///
/// assert_eq!(TimerManager::global().resolution(), DEFAULT_RESOLUTION);
/// ```
pub const DEFAULT_RESOLUTION: Duration = Duration::from_millis(10);

/// Shortest tick a manager accepts (stated in [`TimerManager::try_new`]).
///
/// ```
/// use weir_timeout::{MIN_RESOLUTION, TimerManager};
///
/// assert!(TimerManager::try_new(MIN_RESOLUTION / 2).is_err());
/// ```
pub const MIN_RESOLUTION: Duration = Duration::from_micros(1);

/// Longest tick a manager accepts (stated in [`TimerManager::try_new`]).
///
/// ```
/// use weir_timeout::{MAX_RESOLUTION, TimerManager};
///
/// assert!(TimerManager::try_new(MAX_RESOLUTION * 2).is_err());
/// ```
pub const MAX_RESOLUTION: Duration = Duration::from_secs(3600);
// The global manager's resolution needs no check at run time.
const _: () = assert!(
    DEFAULT_RESOLUTION.as_nanos() >= MIN_RESOLUTION.as_nanos()
        && DEFAULT_RESOLUTION.as_nanos() <= MAX_RESOLUTION.as_nanos()
);

/// What arming a timer produced.
#[derive(Debug)]
pub(crate) enum Arm {
    /// Subscribed to a tick's shared timer.
    Armed(Armed),
    /// The deadline has already passed.
    Elapsed,
    /// The current tokio runtime's clock is paused: use a tokio timer so that
    /// virtual time governs the deadline.
    UseTokio,
}

/// The shared state of one manager.
pub(crate) struct Inner {
    resolution_ns: u64,
    clock: Clock,
    tables: ThreadLocal<ThreadTable>,
    /// The table of timers armed by threads whose thread-local storage is
    /// being torn down (from a thread-local's destructor), where `tables`
    /// can no longer tell them theirs: `thread_local` would panic, and a
    /// panic there aborts the process. Shared, so one arm at a time.
    late: ThreadTable,
    late_turn: Mutex<()>,
    /// Earliest tick the sweeper will wake up for.
    planned: Planner,
    sweeper: Mutex<SweeperHandle>,
    /// The fork-pause handshake with the sweeper.
    pause: PauseGate,
    /// Process id the sweeper was started in (0: none yet).
    sweeper_pid: AtomicU32,
    /// [`fork::forks`] when the sweeper was started.
    sweeper_forks: AtomicU64,
    wakeups: AtomicU64,
    threads_started: AtomicU64,
    buckets: Buckets,
}

impl fmt::Debug for Inner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TimerManager")
            .field("resolution", &Duration::from_nanos(self.resolution_ns))
            .finish_non_exhaustive()
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Let a parked sweeper notice that its manager is gone and exit.
        if let Some(thread) = self.sweeper.get_mut().thread.take() {
            thread.unpark();
        }
        for table in self
            .tables
            .iter_mut()
            .chain(std::iter::once(&mut self.late))
        {
            for b in table.drain() {
                // SAFETY: no timer can outlive the manager (each keeps it
                // alive), so the table and its cache held the last holds,
                // and `drain` returns each bucket once.
                unsafe { self.buckets.free(b) };
            }
        }
    }
}

/// Why a [`TimerManager`] could not be built.
///
/// ```
/// use std::time::Duration;
/// use weir_timeout::{ConfigError, TimerManager};
///
/// let err = TimerManager::try_new(Duration::from_secs(7200)).unwrap_err();
/// assert_eq!(err, ConfigError::ResolutionOutOfRange(Duration::from_secs(7200)));
/// assert_eq!(err.to_string(), "timer resolution 7200s is outside 1µs..=3600s");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// A resolution outside 1 µs to 1 h: the one asked for.
    ResolutionOutOfRange(Duration),
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Self::ResolutionOutOfRange(requested) = self;
        write!(
            f,
            "timer resolution {requested:?} is outside {MIN_RESOLUTION:?}..={MAX_RESOLUTION:?}"
        )
    }
}

impl std::error::Error for ConfigError {}

/// A set of timers sharing one tick length and one sweeper thread.
///
/// The free functions [`timeout`](crate::timeout) and [`sleep`](crate::sleep)
/// use [`TimerManager::global`], whose tick is 10 ms, as pingora's. Create
/// your own for a different precision; each has its own sweeper, started
/// when its first timer is armed. Cloning gives another handle to the same
/// manager.
///
/// ```
/// use std::time::Duration;
/// use weir_timeout::TimerManager;
///
/// let fine = TimerManager::try_new(Duration::from_millis(1)).unwrap();
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let slept = std::time::Instant::now();
/// fine.sleep(Duration::from_millis(3)).await;
/// assert!(slept.elapsed() >= Duration::from_millis(3));
/// let r = fine.timeout(Duration::from_millis(5), async { 7 }).await;
/// assert_eq!(r, Ok(7));
/// # });
/// ```
#[derive(Debug, Clone)]
pub struct TimerManager {
    pub(crate) inner: Arc<Inner>,
}

static GLOBAL: OnceLock<TimerManager> = OnceLock::new();

impl TimerManager {
    /// A manager whose deadlines are rounded up to multiples of `resolution`.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] unless `resolution` is between
    /// 1 µs and 1 h.
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir_timeout::TimerManager;
    ///
    /// assert!(TimerManager::try_new(Duration::from_millis(5)).is_ok());
    /// assert!(TimerManager::try_new(Duration::ZERO).is_err());
    /// ```
    pub fn try_new(resolution: Duration) -> Result<Self, ConfigError> {
        if !(MIN_RESOLUTION..=MAX_RESOLUTION).contains(&resolution) {
            return Err(ConfigError::ResolutionOutOfRange(resolution));
        }
        Ok(Self::with_resolution(resolution))
    }

    /// A manager ticking every `resolution`, which the caller has checked
    /// against the bounds.
    fn with_resolution(resolution: Duration) -> Self {
        watch_forks();
        // Registering for the barrier that revokes a bucket's bias may wait
        // for the kernel's RCU grace period: here, not under a first arm.
        weir_primitives::biased::biasing_available();
        Self {
            inner: Arc::new(Inner {
                resolution_ns: duration_to_nanos(resolution),
                clock: Clock::new(),
                tables: ThreadLocal::new(),
                late: ThreadTable::default(),
                late_turn: Mutex::new(()),
                planned: Planner::new(),
                sweeper: Mutex::new(SweeperHandle::default()),
                pause: PauseGate::new(),
                sweeper_pid: AtomicU32::new(0),
                sweeper_forks: AtomicU64::new(0),
                wakeups: AtomicU64::new(0),
                threads_started: AtomicU64::new(0),
                buckets: Buckets::default(),
            }),
        }
    }

    /// The process-wide manager behind [`timeout`](crate::timeout) and
    /// [`sleep`](crate::sleep), with a 10 ms tick. Created on
    /// first use; its sweeper starts with the first armed timer.
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir_timeout::TimerManager;
    /// assert_eq!(TimerManager::global().resolution(), Duration::from_millis(10));
    /// ```
    pub fn global() -> &'static TimerManager {
        GLOBAL.get_or_init(|| TimerManager::with_resolution(DEFAULT_RESOLUTION))
    }

    /// The tick length.
    pub fn resolution(&self) -> Duration {
        Duration::from_nanos(self.inner.resolution_ns)
    }

    /// Stop the sweeper so that no lock of this manager is held by it across
    /// a `fork()`. Returns `true` once the sweeper has stopped (at once if it
    /// never started), or `false` if it did not stop within 2 s (it is busy
    /// waking a huge tick, or starved of CPU): forking then is not safe,
    /// since the child may inherit a lock the sweeper holds. Call
    /// [`unpause`](Self::unpause) in the parent afterwards, in either case;
    /// in the child it is optional (the child's first timer starts its own
    /// sweeper, which the parent's pause does not stop).
    ///
    /// Timers may still be armed while paused; they fire when due after
    /// `unpause`, never before their deadline. Fork from a point where no
    /// other thread of yours is in the middle of arming or dropping a timer
    /// (as with any lock across `fork()`); the child never touches the tables
    /// of threads that did not survive the fork.
    ///
    /// ```
    /// let manager = weir_timeout::TimerManager::global();
    /// assert!(manager.pause_for_fork());
    /// // ... fork() here ...
    /// manager.unpause();
    /// ```
    pub fn pause_for_fork(&self) -> bool {
        self.inner.pause_for_fork()
    }

    /// Resume after [`pause_for_fork`](Self::pause_for_fork). In a forked
    /// child it adopts the surviving thread's timers and starts a new sweeper
    /// immediately (otherwise the child's first timer does).
    pub fn unpause(&self) {
        self.inner.unpause();
    }
}

/// Whether the current tokio runtime (if any) runs on a paused test clock,
/// so that timers must follow its virtual time. Exact as [`clock::is_frozen`]
/// is; no runtime means no paused clock. Tokio exposes no "is paused" query,
/// hence the comparison of its clock with the real one.
///
/// What a caller can still get wrong with it: the answer "not paused" is
/// remembered per thread for the rest of the tick (the cache of buckets
/// makes the same assumption), so a thread that leaves a running runtime
/// for a paused one within one tick arms that tick's timers in real time.
/// And a paused runtime without a time driver (`start_paused` without
/// `enable_time`) gets tokio's timer, which panics there like any of
/// tokio's own timers.
pub(crate) fn tokio_clock_paused() -> bool {
    if tokio::runtime::Handle::try_current().is_err() {
        return false;
    }
    clock::is_frozen(
        || tokio::time::Instant::now().into_std(),
        std::time::Instant::now,
    )
}

impl Inner {
    /// Arm a timer `duration_ns` from now for the task behind `waker`.
    #[inline]
    pub(crate) fn arm(self: &Arc<Self>, duration_ns: u64, waker: &Waker) -> Arm {
        let me = thread_serial();
        if me == TORN_DOWN {
            return self.arm_late(duration_ns, waker);
        }
        match self.tables.get_or(ThreadTable::default) {
            Some(table) => self.arm_in(table, me, duration_ns, waker),
            // The thread's thread-locals are being torn down.
            None => self.arm_late(duration_ns, waker),
        }
    }

    /// Arm in `table`, whose owner the caller is as thread `me`.
    #[inline(always)]
    fn arm_in(
        self: &Arc<Self>,
        table: &ThreadTable,
        me: u64,
        duration_ns: u64,
        waker: &Waker,
    ) -> Arm {
        if table.owner.load(Ordering::Relaxed) != me {
            self.adopt_table(table, me);
        }
        let counter = self.clock.counter();
        if let Some(bucket) = table.cached(duration_ns, counter) {
            // SAFETY: the cache entry's hold, which only the table's owner
            // releases (this thread; for the late table, the holder of its
            // turn), keeps the bucket alive; the table lives as long as the
            // manager, which the caller's timer keeps alive.
            return match unsafe { Armed::register(table, bucket, waker) } {
                Some(armed) => Arm::Armed(armed),
                None => Arm::Elapsed,
            };
        }
        self.arm_slow(table, counter, duration_ns, waker)
    }

    /// A timer armed from a thread-local destructor (see `late`): the
    /// thread holding the turn owns the late table, so the owner-only
    /// cache and memo are never used by two threads at once.
    #[cold]
    fn arm_late(self: &Arc<Self>, duration_ns: u64, waker: &Waker) -> Arm {
        let _turn = self.late_turn.lock();
        self.arm_in(&self.late, TORN_DOWN, duration_ns, waker)
    }

    /// The current thread got `table` (new, left by a thread that exited
    /// and whose id `thread_local` recycled, or inherited through `fork()`:
    /// see [`watch_forks`]): drop the cache entries and the paused-clock
    /// memo, which describe the previous owner, and make sure this process
    /// has a sweeper. Its armed timers stay in the map and fire as usual.
    #[cold]
    fn adopt_table(self: &Arc<Self>, table: &ThreadTable, me: u64) {
        // After `thread_local`'s first use on this thread, so that its state
        // is destroyed after the sentinel (see `watch_tear_down`).
        watch_tear_down();
        let to_free = table.clear_cache();
        table.tokio_check.store(0, Ordering::Relaxed);
        table.owner.store(me, Ordering::Relaxed);
        for b in to_free {
            // SAFETY: that was the last hold.
            unsafe { self.buckets.free(b) };
        }
        // A sweeper was started, maybe in the parent: a forked child's
        // first timer may land in an inherited bucket without arming a new
        // tick, so the sweeper cannot wait for one.
        if self.sweeper_pid.load(Ordering::Acquire) != 0 {
            self.ensure_sweeper();
        }
    }

    #[cold]
    fn arm_slow(
        self: &Arc<Self>,
        table: &ThreadTable,
        counter: u64,
        duration_ns: u64,
        waker: &Waker,
    ) -> Arm {
        // The counter was read before the clock: the cache window below
        // relies on that order.
        let now = self.clock.now_ns();
        let tick = clock::tick_of_deadline(now.saturating_add(duration_ns), self.resolution_ns);
        let due = clock::due_tick(now, self.resolution_ns);
        let checked = due.saturating_add(1);
        let paused = table.tokio_check.load(Ordering::Relaxed) != checked && {
            let paused = tokio_clock_paused();
            if !paused {
                table.tokio_check.store(checked, Ordering::Relaxed);
            }
            paused
        };
        if paused {
            return Arm::UseTokio;
        }
        if tick <= due {
            return Arm::Elapsed;
        }

        // Registrations within `slack` of now still belong to `tick`.
        let slack = clock::tick_start_ns(tick, self.resolution_ns)
            .saturating_sub(duration_ns)
            .saturating_sub(now);
        let span = self.clock.window(slack);
        let (bucket, created, to_free) =
            table.enter(&self.buckets, tick, duration_ns, counter, span);
        if let Some(old) = to_free {
            // SAFETY: that was the last hold.
            unsafe { self.buckets.free(old) };
        }
        if created {
            // Before registering: if the thread cannot be started, the
            // documented panic leaves no waiter (and no waker) behind.
            self.ensure_sweeper();
        }
        // SAFETY: the cache entry's hold, which only the table's owner (the
        // caller) releases, keeps `bucket` alive. If the sweeper fires it first, the deadline
        // has passed and `register` says so, as on the cached path.
        let armed = unsafe { Armed::register(table, bucket, waker) };
        if created && self.planned.lower(tick) {
            self.unpark_sweeper();
        }
        match armed {
            Some(armed) => Arm::Armed(armed),
            None => Arm::Elapsed,
        }
    }

    /// Re-poll an armed registration: `true` once its tick has fired.
    #[inline]
    pub(crate) fn poll_armed(self: &Arc<Self>, armed: &Armed, waker: &Waker) -> bool {
        if armed.poll(waker) {
            return true;
        }
        // A timer armed before a fork, waited for in the child: nothing
        // else may start the child's sweeper (see `fork.rs`).
        if self.sweeper_forks.load(Ordering::Relaxed) != fork::forks() {
            self.ensure_sweeper();
        }
        false
    }

    /// Whether an armed registration's tick has fired, without the lock.
    #[inline]
    pub(crate) fn armed_fired(&self, armed: &Armed) -> bool {
        armed.fired()
    }

    /// Drop a registration (cancelled, or done after its tick fired).
    #[inline]
    pub(crate) fn disarm(&self, armed: Armed) {
        armed.disarm(&self.buckets);
    }

    /// [`disarm`](Self::disarm), handing back the task's waker if the tick
    /// had not fired.
    pub(crate) fn disarm_taking(&self, armed: Armed) -> Option<Waker> {
        armed.disarm_taking(&self.buckets)
    }

    /// Every table the sweeper fires and the metrics count.
    fn all_tables(&self) -> impl Iterator<Item = &ThreadTable> {
        self.tables.iter().chain(std::iter::once(&self.late))
    }
}
