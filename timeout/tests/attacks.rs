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
    DEFAULT_RESOLUTION, Elapsed, MAX_RESOLUTION, MIN_RESOLUTION, Sleep, TimerManager, sleep,
    sleep_until, timeout, timeout_at,
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

// ---------------------------------------------------------------------------
// 1-4. Extreme durations at every entry point

/// Arms `d` through every manager-level entry point and checks the first
/// poll's answer. Returns the futures, still armed.
fn arm_everything(
    m: &TimerManager,
    d: Duration,
    waker: &Waker,
) -> Vec<Pin<Box<dyn Future<Output = ()>>>> {
    let mut armed: Vec<Pin<Box<dyn Future<Output = ()>>>> = Vec::new();
    let mut sleep = Box::pin(m.sleep(d));
    let mut timeout = Box::pin(m.timeout(d, pending::<()>()));
    let before = Instant::now();
    let first_sleep = poll(sleep.as_mut(), waker);
    let first_timeout = poll(timeout.as_mut(), waker);
    if d.is_zero() {
        assert_eq!(first_sleep, Poll::Ready(()));
        assert_eq!(first_timeout, Poll::Ready(Err(Elapsed::default())));
        assert!(sleep.is_elapsed() && timeout.is_elapsed());
    } else if first_sleep.is_ready() || first_timeout.is_ready() {
        // Possible only for a deadline that passed while the poll ran (a
        // microsecond tick fired by the sweeper before the registration).
        assert!(before.elapsed() >= d, "{d:?} ready at its first poll");
    }
    if d >= Duration::from_secs(3600) {
        assert!(
            first_sleep.is_pending() && first_timeout.is_pending(),
            "{d:?}"
        );
        assert!(!sleep.is_elapsed() && !timeout.is_elapsed(), "{d:?}");
    }
    armed.push(sleep);
    armed.push(Box::pin(async move {
        let _ = timeout.await;
    }));
    if let Some(at) = Instant::now().checked_add(d) {
        let mut s = Box::pin(m.sleep_until(at));
        assert_eq!(s.deadline(), Some(at));
        let mut t = Box::pin(m.timeout_at(at, pending::<()>()));
        let (a, b) = (poll(s.as_mut(), waker), poll(t.as_mut(), waker));
        if d >= Duration::from_secs(3600) {
            assert!(a.is_pending() && b.is_pending(), "{d:?}");
        }
        armed.push(s);
        armed.push(Box::pin(async move {
            let _ = t.await;
        }));
    }
    armed
}

fn extreme_durations_on(res: Duration) {
    let m = manager(res);
    assert_eq!(m.resolution(), res);
    let counter = Arc::new(Counting::default());
    let waker = Waker::from(counter.clone());
    let mut all = Vec::new();
    for d in extremes(res) {
        all.extend(arm_everything(&m, d, &waker));
    }
    drop(all);
    drop(waker);
    assert_drained(&m, 1);
    // The sweeper may still be waking a copy of a tick it fired just before
    // the drop; after that nobody holds the waker.
    eventually("every copy of the waker to be released", || {
        Arc::strong_count(&counter) == 1
    });
}

#[test]
fn extreme_durations_on_the_shortest_tick() {
    extreme_durations_on(MIN_RESOLUTION);
}

#[test]
fn extreme_durations_on_a_millisecond_tick() {
    extreme_durations_on(ms(1));
}

#[test]
fn extreme_durations_on_the_longest_tick() {
    extreme_durations_on(MAX_RESOLUTION);
}

#[test]
fn extreme_durations_on_the_global_manager() {
    // The global manager is shared with the other tests of this binary,
    // so only its answers are checked here, not its counts.
    let counter = Arc::new(Counting::default());
    let waker = Waker::from(counter.clone());
    for d in extremes(DEFAULT_RESOLUTION) {
        let mut s = pin!(sleep(d));
        let mut t = pin!(timeout(d, pending::<()>()));
        let ready = d.is_zero();
        assert_eq!(poll(s.as_mut(), &waker).is_ready(), ready, "{d:?}");
        assert_eq!(poll(t.as_mut(), &waker).is_ready(), ready, "{d:?}");
        if let Some(at) = Instant::now().checked_add(d) {
            let mut s = pin!(sleep_until(at));
            let mut t = pin!(timeout_at(at, pending::<()>()));
            let _ = poll(s.as_mut(), &waker);
            let _ = poll(t.as_mut(), &waker);
        }
    }
    drop(waker);
    eventually("every copy of the waker to be released", || {
        Arc::strong_count(&counter) == 1
    });
}

// ---------------------------------------------------------------------------
// 5. Around one tick, waited for

#[test]
fn durations_around_one_tick_never_fire_early() {
    let ns = Duration::from_nanos(1);
    for res in [MIN_RESOLUTION, ms(1), ms(7)] {
        let m = manager(res);
        for d in [ns, res - ns, res, res + ns, 2 * res - ns, 2 * res + ns] {
            block_on(async {
                let start = Instant::now();
                m.sleep(d).await;
                let took = start.elapsed();
                assert!(
                    took >= d && took <= d + res + LATE,
                    "sleep {d:?} at {res:?}: {took:?}"
                );

                let start = Instant::now();
                assert!(m.timeout(d, pending::<()>()).await.is_err());
                let took = start.elapsed();
                assert!(
                    took >= d && took <= d + res + LATE,
                    "timeout {d:?} at {res:?}: {took:?}"
                );

                let at = Instant::now() + d;
                m.sleep_until(at).await;
                let now = Instant::now();
                assert!(
                    now >= at && now <= at + res + LATE,
                    "sleep_until {d:?} at {res:?}"
                );
            });
        }
        assert_drained(&m, 1);
    }
    // The global manager's 10 ms tick, one tick ± 1 ns.
    block_on(async {
        for d in [
            DEFAULT_RESOLUTION - ns,
            DEFAULT_RESOLUTION,
            DEFAULT_RESOLUTION + ns,
        ] {
            let start = Instant::now();
            sleep(d).await;
            let took = start.elapsed();
            assert!(
                took >= d && took <= d + DEFAULT_RESOLUTION + LATE,
                "{d:?}: {took:?}"
            );
        }
    });
}

// ---------------------------------------------------------------------------
// 6. Resolutions

#[test]
fn resolutions_at_and_beyond_the_bounds() {
    let ns = Duration::from_nanos(1);
    for ok in [
        MIN_RESOLUTION,
        MIN_RESOLUTION + ns,
        MAX_RESOLUTION - ns,
        MAX_RESOLUTION,
    ] {
        assert_eq!(manager(ok).resolution(), ok);
    }
    for bad in [
        Duration::ZERO,
        ns,
        MIN_RESOLUTION - ns,
        MAX_RESOLUTION + ns,
        Duration::from_nanos(u64::MAX),
        Duration::MAX,
    ] {
        let e = TimerManager::try_new(bad).unwrap_err();
        assert_eq!(e.requested(), bad);
        assert!(e.to_string().contains("outside"), "{e}");
    }
}

proptest! {
    #[test]
    fn a_resolution_is_accepted_exactly_within_the_bounds(secs in 0u64..=u64::MAX, nanos in 0u32..1_000_000_000) {
        let res = Duration::new(secs, nanos);
        let within = (MIN_RESOLUTION..=MAX_RESOLUTION).contains(&res);
        match TimerManager::try_new(res) {
            Ok(m) => prop_assert!(within && m.resolution() == res),
            Err(e) => prop_assert!(!within && e.requested() == res),
        }
    }
}

// ---------------------------------------------------------------------------
// 7-8. Instants

#[test]
fn instants_from_the_earliest_to_the_latest() {
    let (latest, earliest) = far_instants();
    let m = manager(ms(1));
    let waker = Waker::noop();
    for at in [earliest, Instant::now() - ms(1), Instant::now()] {
        let mut s = pin!(m.sleep_until(at));
        assert!(s.is_elapsed());
        assert_eq!(poll(s.as_mut(), waker), Poll::Ready(()));
        let mut t = pin!(m.timeout_at(at, pending::<()>()));
        assert_eq!(
            poll(t.as_mut(), waker),
            Poll::Ready(Err(Elapsed::default()))
        );
        // A ready result still wins over a passed deadline.
        let mut r = pin!(timeout_at(at, async { 3 }));
        assert_eq!(poll(r.as_mut(), waker), Poll::Ready(Ok(3)));
    }
    let mut s = pin!(m.sleep_until(latest));
    assert_eq!(s.deadline(), Some(latest));
    assert!(poll(s.as_mut(), waker).is_pending());
    let mut t = pin!(m.timeout_at(latest, pending::<()>()));
    assert!(poll(t.as_mut(), waker).is_pending());
    let mut g = pin!(sleep_until(latest));
    assert!(poll(g.as_mut(), waker).is_pending());
    assert!(!s.is_elapsed() && !t.is_elapsed() && !g.is_elapsed());
    assert_eq!(m.metrics().waiters, 2);
}

#[test]
fn a_sleep_reset_between_extremes_while_armed() {
    let (latest, earliest) = far_instants();
    let m = manager(ms(1));
    let counter = Arc::new(Counting::default());
    let waker = Waker::from(counter.clone());
    {
        let mut s = pin!(m.sleep(Duration::MAX));
        assert!(poll(s.as_mut(), &waker).is_pending());
        for i in 0..1_000u32 {
            let (at, due) = match i % 4 {
                0 => (latest, false),
                1 => (earliest, true),
                2 => (Instant::now() + Duration::from_secs(60), false),
                _ => (Instant::now(), true),
            };
            s.as_mut().reset(at);
            assert_eq!(s.deadline(), Some(at));
            assert_eq!(poll(s.as_mut(), &waker).is_ready(), due, "{i}");
            assert_eq!(s.is_elapsed(), due, "{i}");
        }
        // And once more to something short, which must still fire on time.
        let at = Instant::now() + ms(3);
        s.as_mut().reset(at);
        block_on(s.as_mut());
        assert!(Instant::now() >= at);
    }
    drop(waker);
    assert_drained(&m, 1);
    // Only the last deadline can have fired (none if this thread was
    // preempted past it before the poll that would have armed it).
    let metrics = m.metrics();
    assert!(metrics.fired <= 1, "{metrics:?}");
    eventually("the waker to be released", || {
        Arc::strong_count(&counter) == 1
    });
}

// ---------------------------------------------------------------------------
// 9-10. Any duration (proptest)

fn any_duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        Just(Duration::ZERO),
        Just(Duration::from_nanos(1)),
        Just(Duration::from_nanos(u64::MAX)),
        Just(Duration::MAX),
        any::<u64>().prop_map(Duration::from_nanos),
        (any::<u64>(), 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)),
        (0u64..10_000_000_000).prop_map(Duration::from_nanos),
    ]
}

static PROP_MANAGER: LazyLock<TimerManager> = LazyLock::new(|| manager(ms(1)));

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn any_duration_arms_and_cancels_cleanly(d in any_duration(), via_timeout in any::<bool>()) {
        let m = &*PROP_MANAGER;
        let before = m.metrics();
        let polled_at = Instant::now();
        let first = if via_timeout {
            let mut t = pin!(m.timeout(d, pending::<()>()));
            poll(t.as_mut(), Waker::noop()).is_ready()
        } else {
            let mut s = pin!(m.sleep(d));
            poll(s.as_mut(), Waker::noop()).is_ready()
        };
        // Ready at once: zero, or a deadline that passed while the poll ran
        // (the thread preempted for a tick), which then registered nothing.
        prop_assert!(first || !d.is_zero());
        prop_assert!(!first || polled_at.elapsed() >= d);
        let after = m.metrics();
        prop_assert_eq!(after.waiters, 0);
        prop_assert!(after.live_ticks <= 4);
        let settled = (after.fired + after.cancelled) - (before.fired + before.cancelled);
        prop_assert_eq!(settled, u64::from(!first));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn any_short_duration_fires_on_time(nanos in 0u64..20_000_000, res_us in 1u64..10_000) {
        let res = Duration::from_micros(res_us);
        let m = manager(res);
        let d = Duration::from_nanos(nanos);
        let start = Instant::now();
        block_on(m.sleep(d));
        let took = start.elapsed();
        prop_assert!(took >= d, "{:?} at {:?}: {:?}", d, res, took);
        prop_assert!(took <= d + res + LATE, "{:?} at {:?}: {:?}", d, res, took);
    }
}

// ---------------------------------------------------------------------------
// 11-13. Sprays

const SPRAY: u64 = 100_000;

/// `SPRAY` sleeps on distinct ticks spread over about 38 years (one every
/// 3 h 20 min, the first an hour away), armed in `order`.
fn spray(m: &TimerManager, order: impl Iterator<Item = u64>) -> Vec<Pin<Box<Sleep>>> {
    order
        .map(|i| {
            let mut s = Box::pin(m.sleep(Duration::from_secs(3600 + i * 12_007)));
            assert!(poll(s.as_mut(), Waker::noop()).is_pending());
            s
        })
        .collect()
}

/// A permutation of `0..n` (multiplication by a unit modulo a prime
/// above `n`, skipping the values past `n`).
fn scrambled(n: u64) -> impl Iterator<Item = u64> {
    const P: u64 = 100_003;
    assert!(n < P);
    (1..P)
        .map(|k| k * 48_271 % P)
        .filter(move |&v| v <= n)
        .map(|v| v - 1)
}

fn spray_and_drop(scramble: bool) {
    let m = manager(ms(10));
    // Warm up: this thread's table, the sweeper, the cache.
    drop(spray(&m, 0..8));
    let before = net_bytes();
    let mut sleeps = if scramble {
        spray(&m, scrambled(SPRAY))
    } else {
        spray(&m, 0..SPRAY)
    };
    let metrics = m.metrics();
    assert_eq!(metrics.waiters, SPRAY, "{metrics:?}");
    assert!(metrics.live_ticks >= SPRAY, "{metrics:?}");
    let peak = net_bytes() - before;
    assert!(
        peak > 64 * SPRAY as i64,
        "the allocator sees the spray: {peak}"
    );
    if scramble {
        // Drop in yet another order than the arming one.
        sleeps.reverse();
        let mut i = 0;
        sleeps.retain(|_| {
            i += 1;
            i % 2 == 0
        });
    }
    drop(sleeps);
    assert_drained(&m, 1);
    assert_eq!(m.metrics().cancelled, SPRAY + 8);
    let left = net_bytes() - before;
    assert!(
        left < 64 * 1024,
        "{left} bytes kept after dropping the spray (peak {peak})"
    );
}

#[test]
fn a_spray_of_distinct_ticks_is_released_in_order() {
    spray_and_drop(false);
}

#[test]
fn a_spray_of_distinct_ticks_is_released_scrambled() {
    spray_and_drop(true);
}

#[test]
fn a_spray_armed_on_four_threads_is_released_on_another() {
    let m = manager(ms(10));
    let barrier = Arc::new(Barrier::new(4));
    let sprays: Vec<_> = (0..4u64)
        .map(|t| {
            let (m, barrier) = (m.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                spray(&m, (0..SPRAY / 4).map(|i| i * 4 + t))
            })
        })
        .collect();
    let sprays: Vec<_> = sprays.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(m.metrics().waiters, SPRAY);
    drop(sprays);
    assert_drained(&m, 4);
    assert_eq!(m.metrics().cancelled, SPRAY);
}

// ---------------------------------------------------------------------------
// 14-16. Dropped at every poll point

/// Poll `f` up to `k` times, `gap` apart, then drop it; afterwards nobody
/// but us holds the waker, and so nothing can ever wake us for it.
fn poll_k_then_drop<F: Future>(f: F, k: usize, gap: Duration) {
    let counter = Arc::new(Counting::default());
    let waker = Waker::from(counter.clone());
    {
        let mut f = pin!(f);
        for _ in 0..k {
            if poll(f.as_mut(), &waker).is_ready() {
                break;
            }
            std::thread::sleep(gap);
        }
    }
    drop(waker);
    eventually("the dropped future's waker to be released", || {
        Arc::strong_count(&counter) == 1
    });
}

#[test]
fn a_timeout_dropped_at_every_poll_point() {
    let m = manager(ms(1));
    for k in 0..24 {
        // Fires around the 6th poll, completes at the 13th: every k drops
        // it in another state (idle, armed, fired, done).
        poll_k_then_drop(m.timeout(ms(3), Pends(12)), k, Duration::from_micros(500));
        poll_k_then_drop(m.timeout(Duration::MAX, Pends(12)), k, Duration::ZERO);
        poll_k_then_drop(m.timeout(Duration::ZERO, Pends(12)), k, Duration::ZERO);
        poll_k_then_drop(timeout(ms(3), Pends(12)), k, Duration::from_micros(500));
        assert_drained(&m, 1);
    }
}

#[test]
fn a_sleep_reset_and_dropped_at_every_poll_point() {
    let m = manager(ms(1));
    for k in 0..24 {
        let counter = Arc::new(Counting::default());
        let waker = Waker::from(counter.clone());
        {
            let mut s = pin!(m.sleep(ms(2)));
            for i in 0..k {
                if poll(s.as_mut(), &waker).is_ready() {
                    // Each end is followed by a new deadline.
                    s.as_mut().reset(Instant::now() + ms(1 + i as u64 % 3));
                }
                std::thread::sleep(Duration::from_micros(400));
            }
        }
        drop(waker);
        assert_drained(&m, 1);
        eventually("the waker to be released", || {
            Arc::strong_count(&counter) == 1
        });
    }
}

#[test]
fn a_pingora_timeout_dropped_at_every_poll_point() {
    // Sub-second durations take weir's timer whatever the threshold is, so
    // the threshold attack running beside this cannot change what it does.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let _enter = rt.enter();
    for k in 0..24 {
        let gap = Duration::from_micros(800);
        poll_k_then_drop(pingora_timeout::timeout(ms(5), Pends(12)), k, gap);
        poll_k_then_drop(pingora_timeout::tokio_timeout(ms(5), Pends(12)), k, gap);
        poll_k_then_drop(pingora_timeout::sleep(ms(5)), k, gap);
        let stub = pingora_timeout::timer::TimerManager::new().register_timer(ms(5));
        poll_k_then_drop(stub.poll(), k, gap);
    }
}

// ---------------------------------------------------------------------------
// 17. Many threads at once

/// A small deterministic generator, so a failure names its inputs.
fn lcg(seed: &mut u64) -> u64 {
    *seed = seed
        .wrapping_mul(6_364_136_223_846_793_005)
        .wrapping_add(1_442_695_040_888_963_407);
    *seed >> 33
}

#[test]
fn eight_threads_arm_and_wait_at_once() {
    const THREADS: u64 = 8;
    const TASKS: u64 = 100;
    let m = manager(ms(1));
    let barrier = Arc::new(Barrier::new(THREADS as usize));
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let (m, barrier) = (m.clone(), barrier.clone());
            std::thread::spawn(move || {
                // No time driver: weir's timers need none.
                let rt = tokio::runtime::Builder::new_current_thread()
                    .build()
                    .unwrap();
                barrier.wait();
                rt.block_on(async {
                    let mut seed = t;
                    let tasks: Vec<_> = (0..TASKS)
                        .map(|i| {
                            let d = Duration::from_micros(lcg(&mut seed) % 30_000);
                            let m = m.clone();
                            tokio::spawn(async move {
                                let start = Instant::now();
                                match i % 3 {
                                    0 => m.sleep(d).await,
                                    1 => assert!(m.timeout(d, pending::<()>()).await.is_err()),
                                    _ => sleep(d).await,
                                }
                                let took = start.elapsed();
                                assert!(took >= d, "thread {t} task {i}: {d:?} took {took:?}");
                                assert!(
                                    took <= d + LATE,
                                    "thread {t} task {i}: {d:?} took {took:?}"
                                );
                            })
                        })
                        .collect();
                    for task in tasks {
                        task.await.unwrap();
                    }
                });
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_drained(&m, THREADS);
    let metrics = m.metrics();
    // Every waiter on the custom manager either fired or found its tick
    // fired when it armed (a zero duration arms nothing).
    assert!(
        metrics.fired <= THREADS * TASKS * 2 / 3 + THREADS,
        "{metrics:?}"
    );
    assert_eq!(metrics.cancelled, 0, "{metrics:?}");
}

// ---------------------------------------------------------------------------
// 18-21. Runtimes shut down with armed timers

fn spawn_armed(rt: &tokio::runtime::Runtime, m: &TimerManager, n: u64) {
    for i in 0..n {
        let m = m.clone();
        rt.spawn(async move {
            match i % 4 {
                0 => m.sleep(Duration::from_secs(3600 + i)).await,
                1 => {
                    let _ = m.timeout(Duration::MAX, pending::<()>()).await;
                }
                2 => {
                    m.sleep_until(Instant::now() + Duration::from_secs(60))
                        .await
                }
                _ => loop {
                    // Short timers that keep firing while the runtime dies.
                    m.sleep(Duration::from_micros(1 + i % 500)).await;
                },
            }
        });
    }
    eventually("the tasks to arm", || m.metrics().waiters >= n * 3 / 4);
}

fn multi_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap()
}

/// The runtime's tasks are gone, each dropping its timers, whether armed
/// or already fired (a fired registration holds its tick until its task
/// polls or drops it; tasks woken during shutdown are dropped last).
fn settled(m: &TimerManager) {
    // Two workers and the test thread; the bound is on cached buckets only.
    eventually("the dropped tasks to release their timers", || {
        let metrics = m.metrics();
        metrics.waiters == 0 && metrics.live_ticks <= 4 * 3
    });
}

fn still_fires(m: &TimerManager) {
    let start = Instant::now();
    block_on(m.sleep(ms(2)));
    assert!(start.elapsed() >= ms(2));
}

#[test]
fn a_runtime_dropped_with_armed_timers() {
    let m = manager(MIN_RESOLUTION);
    let rt = multi_thread();
    spawn_armed(&rt, &m, 2_000);
    drop(rt);
    settled(&m);
    still_fires(&m);
}

#[test]
fn a_runtime_shut_down_in_the_background_with_armed_timers() {
    let m = manager(MIN_RESOLUTION);
    let rt = multi_thread();
    spawn_armed(&rt, &m, 2_000);
    rt.shutdown_background();
    settled(&m);
    still_fires(&m);
}

#[test]
fn a_runtime_shut_down_with_zero_timeout_with_armed_timers() {
    let m = manager(MIN_RESOLUTION);
    let rt = multi_thread();
    spawn_armed(&rt, &m, 2_000);
    rt.shutdown_timeout(Duration::ZERO);
    settled(&m);
    still_fires(&m);
}

#[test]
fn a_timer_outliving_its_runtime_fires_into_a_dead_waker() {
    let m = manager(ms(1));
    let mut kept = Vec::new();
    for flavour in 0..2 {
        let rt = if flavour == 0 {
            tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap()
        } else {
            multi_thread()
        };
        // Armed with the runtime's own waker, then carried out of it.
        let mut s = Box::pin(m.sleep(ms(100)));
        let mut t = Box::pin(m.timeout(ms(100), pending::<()>()));
        rt.block_on(poll_fn(|cx| {
            assert!(s.as_mut().poll(cx).is_pending());
            assert!(t.as_mut().poll(cx).is_pending());
            Poll::Ready(())
        }));
        drop(rt);
        kept.push((s, t));
    }
    for (s, t) in &mut kept {
        eventually("the ticks to fire", || s.is_elapsed() && t.is_elapsed());
        assert_eq!(poll(s.as_mut(), Waker::noop()), Poll::Ready(()));
        assert!(poll(t.as_mut(), Waker::noop()).is_ready());
    }
    drop(kept);
    still_fires(&m);
    assert_drained(&m, 1);
    assert_eq!(m.metrics().sweeper_threads_started, 1);
}

// ---------------------------------------------------------------------------
// 22. Timers outliving their thread

#[test]
fn timers_outlive_the_thread_that_armed_them() {
    let m = manager(ms(1));
    for round in 0..4u64 {
        let m2 = m.clone();
        // The next thread usually gets this one's table (thread ids are
        // reused): it must not disturb the timers left in it.
        let orphans = std::thread::spawn(move || {
            (0..50u64)
                .map(|i| {
                    let d = if i % 2 == 0 {
                        ms(2 + i % 9)
                    } else {
                        Duration::from_secs(3600 + i)
                    };
                    let mut s = Box::pin(m2.sleep(d));
                    // Ready at once only if this thread was preempted past d.
                    let _ = poll(s.as_mut(), Waker::noop());
                    (Instant::now() + d, s)
                })
                .collect::<Vec<_>>()
        })
        .join()
        .unwrap();
        let m3 = m.clone();
        std::thread::spawn(move || {
            for i in 0..50u64 {
                block_on(m3.sleep(Duration::from_micros(100 * i)));
            }
        })
        .join()
        .unwrap();
        let mut waited = 0;
        for (at, s) in orphans {
            if at < Instant::now() + Duration::from_secs(60) {
                block_on(s);
                let now = Instant::now();
                // Armed before `at` was read: `at` is no earlier than the deadline.
                assert!(now <= at + LATE, "round {round}: fired {:?} late", now - at);
                waited += 1;
            }
        }
        assert_eq!(waited, 25);
    }
    // Each thread that armed keeps at most its few cached buckets (eight
    // tables when no id was reused, plus this thread's).
    assert_drained(&m, 9);
}

// ---------------------------------------------------------------------------
// 23-24. Wakers that re-enter

/// A sleep of `d` armed with `waker`, pending at its first poll (retried
/// if this thread was preempted past `d` during that poll).
fn armed_sleep(m: &TimerManager, d: Duration, waker: &Waker) -> Pin<Box<Sleep>> {
    for _ in 0..100 {
        let mut s = Box::pin(m.sleep(d));
        if poll(s.as_mut(), waker).is_pending() {
            return s;
        }
    }
    panic!("a {d:?} sleep never pending at its first poll");
}

/// Arms a new timer (and drops the one before) every time it is woken; runs
/// on the sweeper thread.
struct ReArming {
    manager: TimerManager,
    armed: Mutex<Vec<Pin<Box<Sleep>>>>,
    woken: Mutex<mpsc::Sender<()>>,
}

impl Wake for ReArming {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        let mut armed = self.armed.lock().unwrap();
        armed.clear();
        for d in [ms(1), Duration::from_secs(3600)] {
            let mut s = Box::pin(self.manager.sleep(d));
            let _ = poll(s.as_mut(), Waker::noop());
            armed.push(s);
        }
        let _ = self.woken.lock().unwrap().send(());
    }
}

#[test]
fn a_waker_that_arms_and_drops_timers_inside_wake() {
    let m = manager(ms(1));
    let (tx, rx) = mpsc::channel();
    let task = Arc::new(ReArming {
        manager: m.clone(),
        armed: Mutex::new(Vec::new()),
        woken: Mutex::new(tx),
    });
    let waker = Waker::from(task.clone());
    let s = armed_sleep(&m, ms(5), &waker);
    rx.recv_timeout(Duration::from_secs(10)).expect("woken");
    // The 1 ms timer armed on the sweeper's own thread fires too.
    eventually("the timer armed inside wake to fire", || {
        task.armed.lock().unwrap()[0].is_elapsed()
    });
    // Rearm from the waker once more, from here this time.
    waker.wake_by_ref();
    rx.recv_timeout(Duration::from_secs(10)).expect("woken");
    task.armed.lock().unwrap().clear();
    drop((s, waker));
    assert_drained(&m, 2);
    still_fires(&m);
}

type Handles = (TimerManager, Vec<Pin<Box<Sleep>>>);

/// Holds the only handles to a manager (itself and its timers, the one
/// that wakes this among them); drops them when woken, on the sweeper
/// thread, which then runs the manager's drop.
struct LastHandle {
    held: Mutex<Option<Handles>>,
    done: Mutex<mpsc::Sender<()>>,
}

impl Wake for LastHandle {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        drop(self.held.lock().unwrap().take());
        let _ = self.done.lock().unwrap().send(());
    }
}

#[test]
fn a_waker_that_drops_the_last_handle_of_its_manager() {
    for _ in 0..20 {
        let (tx, rx) = mpsc::channel();
        let task = Arc::new(LastHandle {
            held: Mutex::new(None),
            done: Mutex::new(tx),
        });
        let m = manager(ms(1));
        let mut other = Box::pin(m.sleep(ms(30)));
        let _ = poll(other.as_mut(), Waker::noop());
        let s = armed_sleep(&m, ms(30), &Waker::from(task.clone()));
        // Usually stored well before the tick fires; if not, the manager
        // is dropped here instead, which is no less an attack.
        *task.held.lock().unwrap() = Some((m, vec![s, other]));
        rx.recv_timeout(Duration::from_secs(10)).expect("woken");
        drop(task.held.lock().unwrap().take());
    }
}

// ---------------------------------------------------------------------------
// 25. Manager churn

fn sweeper_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .map(|tasks| {
            tasks
                .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
                .filter(|name| name.trim() == "weir-timeout")
                .count()
        })
        .unwrap_or(0)
}

#[test]
fn managers_created_and_dropped_leave_no_sweeper_threads() {
    for i in 0..64u64 {
        let m = manager(Duration::from_micros(100 + i));
        block_on(m.sleep(Duration::from_micros(200)));
        let mut far = Box::pin(m.sleep(Duration::MAX));
        assert!(poll(far.as_mut(), Waker::noop()).is_pending());
        drop((m, far));
    }
    // The other tests of this binary run a few managers of their own.
    if cfg!(target_os = "linux") {
        eventually("the dropped managers' sweepers to exit", || {
            sweeper_threads() <= 24
        });
    }
}

// ---------------------------------------------------------------------------
// 33. A timer armed in a thread-local destructor

/// Wakes by sending on a channel: usable while the thread's thread-local
/// storage is torn down, where a runtime is not.
struct ChannelWaker(Mutex<mpsc::Sender<()>>);

impl Wake for ChannelWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        let _ = self.0.lock().unwrap().send(());
    }
}

fn wait_without_a_runtime<F: Future>(f: F) -> F::Output {
    let (tx, rx) = mpsc::channel();
    let waker = Waker::from(Arc::new(ChannelWaker(Mutex::new(tx))));
    let mut f = pin!(f);
    loop {
        if let Poll::Ready(v) = poll(f.as_mut(), &waker) {
            return v;
        }
        rx.recv_timeout(Duration::from_secs(10)).expect("woken");
    }
}

/// A thread-local whose destructor arms, waits for and drops timers, and
/// reports how long each wait took.
struct ArmsOnDrop {
    manager: TimerManager,
    report: mpsc::Sender<Vec<(Duration, Duration)>>,
}

impl Drop for ArmsOnDrop {
    fn drop(&mut self) {
        let mut waits = Vec::new();
        for d in [ms(3), ms(12)] {
            let start = Instant::now();
            wait_without_a_runtime(self.manager.sleep(d));
            waits.push((d, start.elapsed()));
            let start = Instant::now();
            assert!(wait_without_a_runtime(timeout(d, pending::<()>())).is_err());
            waits.push((d, start.elapsed()));
        }
        // Armed and cancelled, on a fresh duration and on a cached one.
        for d in [Duration::from_secs(3600), Duration::MAX, ms(12)] {
            let mut s = pin!(self.manager.sleep(d));
            assert!(poll(s.as_mut(), Waker::noop()).is_pending());
        }
        let _ = self.report.send(waits);
    }
}

thread_local! {
    static ARMS_ON_DROP: std::cell::RefCell<Option<ArmsOnDrop>> =
        const { std::cell::RefCell::new(None) };
}

/// The scenario, run in a child process: a panic in a thread-local
/// destructor aborts the whole process.
fn timers_in_a_thread_local_destructor() {
    let m = manager(ms(1));
    let (tx, rx) = mpsc::channel();
    let m2 = m.clone();
    std::thread::spawn(move || {
        // Registered before the timer tables' own thread-local state, so
        // destroyed after it.
        ARMS_ON_DROP.with(|slot| {
            *slot.borrow_mut() = Some(ArmsOnDrop {
                manager: m2.clone(),
                report: tx,
            });
        });
        block_on(m2.sleep(ms(2)));
        block_on(sleep(ms(2)));
    })
    .join()
    .unwrap();
    let waits = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the destructor reported");
    for (d, took) in waits {
        assert!(took >= d && took <= d + LATE, "{d:?} took {took:?}");
    }
    assert_drained(&m, 2);
}

#[test]
fn timers_armed_in_a_thread_local_destructor() {
    const CHILD: &str = "WEIR_TIMEOUT_ATTACK_CHILD";
    if std::env::var_os(CHILD).is_some() {
        timers_in_a_thread_local_destructor();
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "timers_armed_in_a_thread_local_destructor"])
        .args(["--test-threads", "1", "--nocapture"])
        .env(CHILD, "1")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the child failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

// ---------------------------------------------------------------------------
// 26. Pause and unpause hammered

#[test]
fn pause_and_unpause_hammered_while_timers_fire() {
    let m = manager(Duration::from_micros(200));
    // Before any sweeper, and unbalanced calls.
    assert!(m.pause_for_fork());
    assert!(m.pause_for_fork());
    m.unpause();
    m.unpause();
    let hammer = {
        let m = m.clone();
        std::thread::spawn(move || {
            for _ in 0..500 {
                assert!(m.pause_for_fork(), "the sweeper did not stop within 2 s");
                m.unpause();
            }
        })
    };
    block_on(async {
        for i in 0..200u64 {
            let d = Duration::from_micros(50 + i * 13);
            let start = Instant::now();
            m.sleep(d).await;
            let took = start.elapsed();
            assert!(took >= d && took <= d + LATE, "{d:?}: {took:?}");
        }
    });
    hammer.join().unwrap();
    still_fires(&m);
    assert_drained(&m, 1);
}

// ---------------------------------------------------------------------------
// 27. pingora's drop-in

#[test]
fn pingora_threshold_and_durations_at_their_extremes() {
    use pingora_timeout::fast_timeout::{
        DEFAULT_FAST_TIMEOUT_TO_TOKIO_THRESHOLD, fast_sleep, fast_timeout,
        fast_timeout_to_tokio_threshold, set_fast_timeout_to_tokio_threshold,
    };
    // The only test of this binary that changes the threshold.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(async {
        let waker = Waker::noop();
        let thresholds = [
            Some(Duration::ZERO),
            Some(Duration::from_nanos(1)),
            Some(Duration::from_secs(u64::MAX)),
            Some(Duration::MAX),
            None,
            Some(DEFAULT_FAST_TIMEOUT_TO_TOKIO_THRESHOLD),
        ];
        for threshold in thresholds {
            set_fast_timeout_to_tokio_threshold(threshold);
            // Whole seconds only; the largest of them means "never", as in
            // pingora.
            let expected = threshold
                .map(|t| Duration::from_secs(t.as_secs()))
                .filter(|t| t.as_secs() != u64::MAX);
            assert_eq!(fast_timeout_to_tokio_threshold(), expected);
            for d in extremes(DEFAULT_RESOLUTION) {
                let mut t = pin!(fast_timeout(d, pending::<()>()));
                let mut s = pin!(fast_sleep(d));
                let mut tt = pin!(pingora_timeout::tokio_timeout(d, pending::<()>()));
                let zero = d.is_zero();
                assert_eq!(
                    poll(t.as_mut(), waker).is_ready(),
                    zero,
                    "{threshold:?} {d:?}"
                );
                assert_eq!(
                    poll(s.as_mut(), waker).is_ready(),
                    zero,
                    "{threshold:?} {d:?}"
                );
                // tokio's timer needs a tick even for zero.
                let _ = poll(tt.as_mut(), waker);
                // A stub counts from its registration, so only the long ones
                // are sure to be pending at their first poll.
                let mut stub = pin!(
                    pingora_timeout::timer::TimerManager::new()
                        .register_timer(d)
                        .poll()
                );
                let first = poll(stub.as_mut(), waker);
                assert!(first.is_ready() || !zero, "{d:?}");
                assert!(first.is_pending() || d < Duration::from_secs(3600), "{d:?}");
                // A ready future is never delayed by its timer.
                assert_eq!(fast_timeout(d, async { 1 }).await, Ok(1));
            }
            // And a short one still fires, never early.
            let start = Instant::now();
            assert!(fast_timeout(ms(15), pending::<()>()).await.is_err());
            assert!(start.elapsed() >= ms(15));
        }
        assert_eq!(
            fast_timeout_to_tokio_threshold(),
            Some(DEFAULT_FAST_TIMEOUT_TO_TOKIO_THRESHOLD)
        );
    });
}

// ---------------------------------------------------------------------------
// 28-31. tokio's paused clock

async fn poll_now<F: Future + ?Sized>(f: Pin<&mut F>) -> Poll<F::Output> {
    let mut f = Some(f);
    poll_fn(|cx| Poll::Ready(f.take().unwrap().poll(cx))).await
}

/// Poll until ready, letting tokio's driver run between polls (bounded).
async fn ready_soon<F: Future + ?Sized>(mut f: Pin<&mut F>) -> bool {
    for _ in 0..16 {
        if poll_now(f.as_mut()).await.is_ready() {
            return true;
        }
        tokio::task::yield_now().await;
    }
    false
}

#[tokio::test(start_paused = true)]
async fn paused_durations_beyond_tokios_clamp_are_not_early() {
    // tokio clamps a sleep to 30 years; a longer weir timer must not fire
    // when a 31-year one does.
    let start = tokio::time::Instant::now();
    let mut long = pin!(sleep(years(100)));
    let mut long_timeout = pin!(timeout(years(100), pending::<()>()));
    tokio::select! {
        () = long.as_mut() => panic!("a 100-year sleep fired after {:?}", start.elapsed()),
        _ = long_timeout.as_mut() => panic!("a 100-year timeout fired after {:?}", start.elapsed()),
        () = tokio::time::sleep_until(start + years(31)) => {}
    }
    long.as_mut().await;
    assert!(start.elapsed() >= years(100), "{:?}", start.elapsed());
    assert!(
        start.elapsed() <= years(100) + LATE,
        "{:?}",
        start.elapsed()
    );
    assert!(long_timeout.await.is_err());
}

#[tokio::test(start_paused = true)]
async fn paused_duration_max_never_fires() {
    let start = tokio::time::Instant::now();
    let m = manager(ms(1));
    let mut s = pin!(sleep(Duration::MAX));
    let mut t = pin!(timeout(Duration::MAX, pending::<()>()));
    let mut c = pin!(m.sleep(Duration::from_nanos(u64::MAX)));
    let mut p = pin!(pingora_timeout::sleep(Duration::MAX));
    let (latest, _) = far_instants();
    let mut l = pin!(m.sleep_until(latest));
    tokio::select! {
        () = l.as_mut() => panic!("the latest instant fired after {:?}", start.elapsed()),
        () = s.as_mut() => panic!("Duration::MAX fired after {:?}", start.elapsed()),
        _ = t.as_mut() => panic!("Duration::MAX fired after {:?}", start.elapsed()),
        () = c.as_mut() => panic!("u64::MAX ns fired after {:?}", start.elapsed()),
        () = p.as_mut() => panic!("pingora's Duration::MAX fired after {:?}", start.elapsed()),
        () = tokio::time::sleep_until(start + years(600)) => {}
    }
    assert!(!s.is_elapsed() && !t.is_elapsed() && !c.is_elapsed());
}

#[tokio::test(start_paused = true)]
async fn paused_clock_advanced_by_nothing_and_by_centuries() {
    let m = manager(MIN_RESOLUTION);
    let mut short = pin!(m.sleep(Duration::from_nanos(1)));
    let mut hour = pin!(m.sleep(Duration::from_secs(3600)));
    let mut century = pin!(timeout(years(100), pending::<()>()));
    let mut never = pin!(m.sleep(Duration::MAX));
    assert!(poll_now(short.as_mut()).await.is_pending());
    assert!(poll_now(hour.as_mut()).await.is_pending());
    assert!(poll_now(century.as_mut()).await.is_pending());
    assert!(poll_now(never.as_mut()).await.is_pending());
    tokio::time::advance(Duration::ZERO).await;
    assert!(poll_now(hour.as_mut()).await.is_pending());
    tokio::time::advance(Duration::from_nanos(1)).await;
    assert!(poll_now(hour.as_mut()).await.is_pending());
    tokio::time::advance(Duration::from_secs(3600) - Duration::from_nanos(1)).await;
    assert!(ready_soon(short.as_mut()).await);
    assert!(ready_soon(hour.as_mut()).await);
    assert!(poll_now(century.as_mut()).await.is_pending());
    tokio::time::advance(years(600)).await;
    assert!(ready_soon(century.as_mut()).await);
    for _ in 0..4 {
        assert!(poll_now(never.as_mut()).await.is_pending());
        tokio::task::yield_now().await;
    }
    // A timer armed after the jump counts from the new virtual now.
    let start = tokio::time::Instant::now();
    m.sleep(ms(5)).await;
    assert!(start.elapsed() >= ms(5));
}

// Under a paused clock tokio's instants are std instants on the virtual
// time line, and tokio's own `sleep_until` waits for that line. A weir
// deadline given as such an instant must do the same.

#[tokio::test(start_paused = true)]
async fn paused_instants_ahead_of_real_time_are_not_late() {
    tokio::time::advance(Duration::from_secs(3600)).await;
    let at = tokio::time::Instant::now() + Duration::from_secs(1);
    let m = manager(ms(1));
    let mut s = pin!(sleep_until(at.into_std()));
    tokio::select! {
        () = s.as_mut() => {}
        () = tokio::time::sleep_until(at + Duration::from_secs(2)) => {
            panic!("an instant 1 s ahead on tokio's clock was late by more than 2 s")
        }
    }
    assert!(tokio::time::Instant::now() >= at);
    let at = tokio::time::Instant::now() + Duration::from_secs(1);
    let started = tokio::time::Instant::now();
    assert!(m.timeout_at(at.into_std(), pending::<()>()).await.is_err());
    assert!(tokio::time::Instant::now() >= at);
    assert!(
        started.elapsed() <= Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test(start_paused = true)]
async fn paused_instants_behind_real_time_are_not_early() {
    // Real time passes while tokio's stays put.
    let m = manager(ms(1));
    let at = tokio::time::Instant::now() + ms(50);
    std::thread::sleep(ms(60));
    let s = sleep_until(at.into_std());
    assert!(!s.is_elapsed(), "past on the real clock, not on tokio's");
    s.await;
    let now = tokio::time::Instant::now();
    assert!(
        now >= at,
        "fired {:?} before its deadline on tokio's clock",
        at - now
    );
    let at = tokio::time::Instant::now() + ms(50);
    std::thread::sleep(ms(60));
    assert!(m.timeout_at(at.into_std(), pending::<()>()).await.is_err());
    assert!(
        tokio::time::Instant::now() >= at,
        "a timeout_at fired early"
    );
    let mut r = pin!(m.sleep(Duration::MAX));
    assert!(poll_now(r.as_mut()).await.is_pending());
    let at = tokio::time::Instant::now() + ms(30);
    std::thread::sleep(ms(40));
    r.as_mut().reset(at.into_std());
    r.as_mut().await;
    assert!(
        tokio::time::Instant::now() >= at,
        "a reset sleep fired early"
    );
}
