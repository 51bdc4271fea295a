//! Adversarial inputs at every public entry point of weir-timeout, kept in
//! CI. Each attack asserts the same three things: nothing panics (beyond
//! the documented panics), no timer fires before its deadline or
//! unboundedly after it, and nothing stays registered once the futures are
//! gone (waiters, ticks, wakers, memory).
//!
//! The attacks, counted (33):
//!
//! 1-4. extreme durations (zero, 1 ns, one tick ± 1 ns, 100 years,
//!    `u64::MAX` ns, `Duration::MAX`) through `timeout`, `sleep`,
//!    `timeout_at`, `sleep_until` on managers of the shortest, a 1 ms and
//!    the longest tick, and on the global manager;
//! 5. durations around one tick actually waited for, never early;
//! 6. resolutions at, inside and beyond the bounds (and a proptest);
//! 7-8. instants in the past and as far in the future as `Instant` goes,
//!    `Sleep::reset` between them a thousand times while armed;
//! 9. arbitrary durations armed and cancelled (proptest);
//! 10. arbitrary short durations waited for (proptest);
//! 11-12. a spray of 100 000 distinct far-apart ticks, dropped in arming
//!    order and in a scrambled order: counts and this thread's heap return;
//! 13. a spray armed on four threads and dropped on another;
//! 14-16. `Timeout`, `Sleep` (with resets) and pingora's `Timeout` dropped
//!    after every number of polls: no waker kept, nothing registered;
//! 17. eight threads arming and waiting at once, on a custom and the global
//!    manager;
//! 18-20. a runtime dropped, shut down in the background, and shut down with
//!    a zero timeout while timers are armed;
//! 21. a timer that outlives its runtime and fires into a dead waker;
//! 22. timers that outlive the thread that armed them, with its table reused;
//! 23. a waker that arms and drops timers inside `wake` (on the sweeper);
//! 24. a waker that drops the last handle of its manager inside `wake`;
//! 25. managers created and dropped in a loop leave no sweeper threads;
//! 26. pause/unpause hammered while timers fire;
//! 27. pingora's threshold at zero, at `Duration::MAX` and off, with
//!    extreme durations through `fast_timeout`, `fast_sleep`,
//!    `tokio_timeout` and `TimerManager::register_timer`;
//! 28-32. tokio's paused clock: durations past tokio's 30-year clamp,
//!    `Duration::MAX` and the latest `Instant`, advances of zero and of 600
//!    years, and instants read from tokio's clock while it runs ahead of
//!    and behind the real one;
//! 33. timers armed, awaited and cancelled in a thread-local destructor,
//!    after the timer tables' own thread-local state is gone.

use proptest::prelude::*;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::future::{Future, pending, poll_fn};
use std::pin::{Pin, pin};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, LazyLock, Mutex, mpsc};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};
use weir_timeout::pingora as pingora_timeout;
use weir_timeout::{
    ConfigError, DEFAULT_RESOLUTION, Elapsed, MAX_RESOLUTION, MIN_RESOLUTION, Sleep, TimerManager,
    sleep, sleep_until, timeout, timeout_at,
};

// ---------------------------------------------------------------------------
// Fixtures

/// Counts the heap bytes each thread holds net (allocated minus freed by
/// that thread), so a spray armed and dropped on one thread can show that
/// its memory came back while other tests allocate on their own threads.
struct PerThreadNet;

thread_local! {
    static NET_BYTES: Cell<i64> = const { Cell::new(0) };
}

fn account(delta: i64) {
    let _ = NET_BYTES.try_with(|n| n.set(n.get() + delta));
}

fn size(layout: Layout) -> i64 {
    i64::try_from(layout.size()).unwrap_or(i64::MAX)
}

// SAFETY: every call is forwarded to `System` unchanged; the bookkeeping
// touches only a const-initialised thread-local `Cell`, which allocates
// nothing and has no destructor.
unsafe impl GlobalAlloc for PerThreadNet {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract is `System`'s.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            account(size(layout));
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract is `System`'s.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            account(size(layout));
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        account(-size(layout));
        // SAFETY: the caller's contract is `System`'s.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's contract is `System`'s.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            account(i64::try_from(new_size).unwrap_or(i64::MAX) - size(layout));
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: PerThreadNet = PerThreadNet;

fn net_bytes() -> i64 {
    NET_BYTES.with(Cell::get)
}

/// How late a timer may fire on this shared, noisy machine before we call
/// it lost: far beyond the one tick of rounding plus wake-up latency that
/// weir promises, far below "never".
const LATE: Duration = Duration::from_secs(3);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn years(n: u64) -> Duration {
    Duration::from_secs(n * 365 * 86_400)
}

fn block_on<F: Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
        .block_on(f)
}

fn manager(resolution: Duration) -> TimerManager {
    TimerManager::try_new(resolution).unwrap()
}

fn poll<F: Future + ?Sized>(f: Pin<&mut F>, waker: &Waker) -> Poll<F::Output> {
    f.poll(&mut Context::from_waker(waker))
}

/// A waker that counts its wake-ups; its `Arc`'s strong count tells how
/// many copies anyone still holds.
#[derive(Default)]
struct Counting(AtomicUsize);

impl Wake for Counting {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// Wait (bounded) until `cond` holds.
fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < Duration::from_secs(10), "never: {what}");
        std::thread::sleep(ms(1));
    }
}

/// Everything is released: no armed waiter, and at most the few empty
/// buckets each of `threads` threads keeps cached (one per recent
/// duration, four durations).
fn assert_drained(m: &TimerManager, threads: u64) {
    let metrics = m.metrics();
    assert_eq!(metrics.waiters, 0, "{metrics:?}");
    assert!(metrics.live_ticks <= 4 * threads, "{metrics:?}");
}

/// Durations an attacker (or a bug) hands to a timer of tick `res`.
fn extremes(res: Duration) -> Vec<Duration> {
    let ns = Duration::from_nanos(1);
    vec![
        Duration::ZERO,
        ns,
        res - ns,
        res,
        res + ns,
        2 * res - ns,
        Duration::from_secs(3600),
        years(100),
        Duration::from_nanos(u64::MAX) - ns,
        Duration::from_nanos(u64::MAX),
        Duration::from_nanos(u64::MAX) + ns,
        Duration::from_secs(u64::MAX),
        Duration::MAX,
    ]
}

/// A future that is pending (without waking anyone) `left` times, then
/// ready.
struct Pends(usize);

impl Future for Pends {
    type Output = usize;
    fn poll(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<usize> {
        if self.0 == 0 {
            Poll::Ready(7)
        } else {
            self.0 -= 1;
            Poll::Pending
        }
    }
}

/// The latest instant this platform's `Instant` can hold from now (to
/// within a second), and the earliest.
fn far_instants() -> (Instant, Instant) {
    let now = Instant::now();
    let extreme = |step: &dyn Fn(Duration) -> Option<Instant>| {
        let (mut lo, mut hi) = (0u64, u64::MAX);
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            if step(Duration::from_secs(mid)).is_some() {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        step(Duration::from_secs(lo)).unwrap()
    };
    (
        extreme(&|d| now.checked_add(d)),
        extreme(&|d| now.checked_sub(d)),
    )
}

mod clocks;
mod extremes;
mod lifecycles;
mod sprays;
