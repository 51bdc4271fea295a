//! Behaviour of `timeout` and `sleep`, including one test per known fault of
//! pingora-timeout (each named after the fault it rules out).

use std::future::{Future, pending, ready};
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};
use weir_timeout::{ConfigError, Elapsed, TimerManager, sleep, timeout};

fn block_on<F: Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(f)
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A waker that counts its wake-ups.
#[derive(Default)]
struct CountingWaker(AtomicUsize);

impl Wake for CountingWaker {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn poll_once<F: Future + Unpin>(f: &mut F, waker: &Waker) -> Poll<F::Output> {
    Pin::new(f).poll(&mut Context::from_waker(waker))
}

use std::pin::Pin;

/// A future that is pending on its first poll (waking itself) and ready on
/// the second.
struct PendOnce(bool);

impl Future for PendOnce {
    type Output = u8;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<u8> {
        if self.0 {
            Poll::Ready(9)
        } else {
            self.0 = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }
}

/// Wait (bounded) until `cond` holds.
fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "timed out waiting for {what}"
        );
        std::thread::sleep(ms(1));
    }
}

#[test]
fn ready_future_arms_no_timer_and_starts_no_thread() {
    let m = TimerManager::try_new(ms(10)).unwrap();
    assert_eq!(block_on(m.timeout(ms(100), ready(5))), Ok(5));
    let metrics = m.metrics();
    assert_eq!(metrics.sweeper_threads_started, 0);
    assert_eq!(metrics.live_ticks, 0);
    assert_eq!(metrics.waiters, 0);
}

#[test]
fn creating_a_manager_starts_no_thread() {
    let m = TimerManager::try_new(ms(10)).unwrap();
    let _sleep = m.sleep(ms(10));
    let _timeout = m.timeout(ms(10), pending::<()>());
    assert_eq!(m.metrics().sweeper_threads_started, 0);
}

#[test]
fn pend_once_future_completes_and_cancels_its_timer() {
    let m = TimerManager::try_new(ms(10)).unwrap();
    assert_eq!(
        block_on(m.timeout(Duration::from_secs(5), PendOnce(false))),
        Ok(9)
    );
    let metrics = m.metrics();
    assert_eq!(metrics.cancelled, 1);
    assert_eq!(metrics.fired, 0);
    assert_eq!(metrics.waiters, 0);
}

#[test]
fn timeout_elapses_after_its_deadline_never_before() {
    let m = TimerManager::try_new(ms(1)).unwrap();
    let start = Instant::now();
    let r = block_on(m.timeout(ms(20), pending::<()>()));
    assert_eq!(r, Err(Elapsed::default()));
    assert!(start.elapsed() >= ms(20));
    assert_eq!(m.metrics().fired, 1);
}

#[test]
fn sleeps_never_end_early() {
    block_on(async {
        for d in [1, 3, 7, 9, 10, 11, 13, 29] {
            let start = Instant::now();
            sleep(ms(d)).await;
            let took = start.elapsed();
            assert!(took >= ms(d), "sleep({d} ms) took {took:?}");
        }
    });
}

#[test]
fn inner_result_wins_over_a_passed_deadline() {
    // The inner future is polled first, so a result that is ready is kept.
    let waker = Waker::noop();
    let mut t = pin!(timeout(Duration::ZERO, ready(1)));
    assert_eq!(
        t.as_mut().poll(&mut Context::from_waker(waker)),
        Poll::Ready(Ok(1))
    );
}

#[test]
fn zero_duration_fires_at_once_without_a_timer() {
    let m = TimerManager::try_new(ms(10)).unwrap();
    let waker = Waker::noop();
    let mut s = m.sleep(Duration::ZERO);
    assert_eq!(poll_once(&mut s, waker), Poll::Ready(()));
    let mut t = Box::pin(m.timeout(Duration::ZERO, pending::<()>()));
    assert_eq!(
        t.as_mut().poll(&mut Context::from_waker(waker)),
        Poll::Ready(Err(Elapsed::default()))
    );
    assert!(t.is_elapsed());
    assert_eq!(m.metrics().sweeper_threads_started, 0);
}

#[test]
fn duration_max_saturates_instead_of_panicking() {
    let m = TimerManager::try_new(ms(10)).unwrap();
    let waker = Waker::noop();
    let mut s = m.sleep(Duration::MAX);
    assert_eq!(poll_once(&mut s, waker), Poll::Pending);
    let mut t = Box::pin(m.timeout(Duration::MAX, pending::<()>()));
    assert!(
        t.as_mut()
            .poll(&mut Context::from_waker(waker))
            .is_pending()
    );
    let mut g = sleep(Duration::MAX);
    assert_eq!(poll_once(&mut g, waker), Poll::Pending);
    assert_eq!(m.metrics().waiters, 2);
    assert!(!s.is_elapsed());
    drop((s, t, g));
    assert_eq!(m.metrics().waiters, 0);
}

#[test]
fn waiters_of_one_tick_share_one_timer() {
    let m = TimerManager::try_new(Duration::from_secs(1)).unwrap();
    let waker = Waker::noop();
    let mut sleeps: Vec<_> = (0..100).map(|_| m.sleep(Duration::from_secs(10))).collect();
    for s in &mut sleeps {
        assert_eq!(poll_once(s, waker), Poll::Pending);
    }
    let metrics = m.metrics();
    assert_eq!(metrics.waiters, 100);
    // All in one tick, or two if a tick boundary passed while arming.
    assert!(metrics.live_ticks <= 2, "{metrics:?}");
}

#[test]
fn a_ticks_timer_is_freed_when_its_last_waiter_drops() {
    // pingora keeps a cancelled tick's timer until its deadline: memory grows
    // with cancelled timeouts. Here it is freed with its last waiter.
    let m = TimerManager::try_new(ms(10)).unwrap();
    let waker = Waker::noop();
    let mut sleeps: Vec<_> = (0..1000u64)
        .map(|i| m.sleep(Duration::from_secs(60) + ms(10 * i)))
        .collect();
    for s in &mut sleeps {
        assert_eq!(poll_once(s, waker), Poll::Pending);
    }
    assert!(m.metrics().live_ticks >= 1000);
    drop(sleeps);
    let metrics = m.metrics();
    // At most the few buckets this thread keeps cached for reuse (one per
    // recent duration, four durations).
    assert!(metrics.live_ticks <= 4, "{metrics:?}");
    assert_eq!(metrics.waiters, 0);
    assert_eq!(metrics.cancelled, 1000);
}

#[test]
fn a_timer_dropped_on_another_thread_is_released() {
    let m = TimerManager::try_new(ms(10)).unwrap();
    let waker = Waker::noop();
    let mut sleeps: Vec<_> = (0..10u64)
        .map(|i| m.sleep(Duration::from_secs(60 + i)))
        .collect();
    for s in &mut sleeps {
        assert_eq!(poll_once(s, waker), Poll::Pending);
    }
    std::thread::spawn(move || drop(sleeps)).join().unwrap();
    let metrics = m.metrics();
    assert!(metrics.live_ticks <= 4, "{metrics:?}");
    assert_eq!(metrics.waiters, 0);
    assert_eq!(metrics.cancelled, 10);
}

#[test]
fn a_repolled_waiter_is_woken_through_its_latest_waker() {
    let m = TimerManager::try_new(ms(1)).unwrap();
    let first = Arc::new(CountingWaker::default());
    let second = Arc::new(CountingWaker::default());
    let mut s = m.sleep(ms(5));
    assert_eq!(
        poll_once(&mut s, &Waker::from(first.clone())),
        Poll::Pending
    );
    assert_eq!(
        poll_once(&mut s, &Waker::from(second.clone())),
        Poll::Pending
    );
    eventually("the tick to fire", || second.0.load(Ordering::SeqCst) == 1);
    assert_eq!(first.0.load(Ordering::SeqCst), 0);
    assert_eq!(poll_once(&mut s, Waker::noop()), Poll::Ready(()));
}

#[test]
fn the_sweeper_parks_while_no_timer_is_armed() {
    // pingora's clock thread wakes every 10 ms forever once started.
    let m = TimerManager::try_new(ms(1)).unwrap();
    block_on(m.sleep(ms(3)));
    block_on(m.timeout(Duration::from_secs(5), PendOnce(false))).unwrap();
    assert_eq!(m.metrics().sweeper_threads_started, 1);
    // Let the sweeper finish its last pass (it has nothing armed, so once it
    // parks it stays parked however loaded the machine is), then watch it
    // for 100 ticks.
    let settle = Instant::now();
    loop {
        let before = m.metrics().sweeper_wakeups;
        std::thread::sleep(ms(50));
        if m.metrics().sweeper_wakeups == before {
            break;
        }
        assert!(
            settle.elapsed() < Duration::from_secs(3),
            "the sweeper keeps waking while nothing is armed"
        );
    }
    let before = m.metrics().sweeper_wakeups;
    std::thread::sleep(ms(100));
    let after = m.metrics().sweeper_wakeups;
    assert_eq!(before, after, "the sweeper woke while nothing was armed");
    // And it still comes back when needed.
    let start = Instant::now();
    block_on(m.sleep(ms(5)));
    assert!(start.elapsed() >= ms(5));
}

#[test]
fn timers_armed_during_a_fork_pause_do_not_fire_early() {
    // pingora hands out an already-fired timer while paused.
    let m = TimerManager::try_new(ms(1)).unwrap();
    block_on(m.sleep(ms(2))); // the sweeper is running
    assert!(m.pause_for_fork());
    // Taken before the unpauser starts its 40 ms, so `took` below is at
    // least as long as the pause.
    let start = Instant::now();
    let unpauser = {
        let m = m.clone();
        std::thread::spawn(move || {
            std::thread::sleep(ms(40));
            m.unpause();
        })
    };
    block_on(m.sleep(ms(15)));
    let took = start.elapsed();
    assert!(took >= ms(15), "fired early: {took:?}");
    // Paused past its deadline, it fired only after unpause.
    assert!(took >= ms(38), "fired while paused: {took:?}");
    unpauser.join().unwrap();
    let start = Instant::now();
    block_on(m.sleep(ms(5)));
    assert!(start.elapsed() >= ms(5));
}

#[test]
fn many_tasks_on_a_multi_thread_runtime() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap();
    let m = TimerManager::try_new(ms(5)).unwrap();
    rt.block_on(async {
        let mut handles = Vec::new();
        for i in 0..400u64 {
            let m = m.clone();
            handles.push(tokio::spawn(async move {
                if i % 4 == 0 {
                    // Times out.
                    m.timeout(ms(10 + i % 7), pending::<()>()).await.is_err()
                } else {
                    // Completes long before its deadline.
                    let r = m
                        .timeout(Duration::from_secs(10), async {
                            tokio::task::yield_now().await;
                            tokio::time::sleep(ms(i % 3)).await;
                            i
                        })
                        .await;
                    r == Ok(i)
                }
            }));
        }
        for h in handles {
            assert!(h.await.unwrap());
        }
    });
    let metrics = m.metrics();
    assert_eq!(metrics.fired, 100);
    assert_eq!(metrics.waiters, 0);
}

#[test]
fn elapsed_converts_to_io_timed_out() {
    let e: std::io::Error = Elapsed::default().into();
    assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
    assert_eq!(Elapsed::default().to_string(), "deadline has elapsed");
}

#[test]
fn bad_resolutions_are_rejected() {
    let e = TimerManager::try_new(Duration::ZERO).unwrap_err();
    assert_eq!(e, ConfigError::ResolutionOutOfRange(Duration::ZERO));
    assert!(TimerManager::try_new(Duration::from_nanos(10)).is_err());
    assert!(TimerManager::try_new(Duration::from_secs(7200)).is_err());
    assert!(TimerManager::try_new(Duration::MAX).is_err());
}

#[test]
fn into_inner_gives_back_the_future() {
    let t = timeout(ms(5), PendOnce(false));
    assert!(!t.get_ref().0);
    assert_eq!(block_on(t.into_inner()), 9);
}

#[test]
fn timers_armed_across_many_ticks_never_fire_early() {
    // Arms a timer every ~100 µs for ~30 ticks, so the per-thread cache
    // window opens and closes many times; each timer must fire no earlier
    // than its duration after it was armed.
    let m = TimerManager::try_new(ms(1)).unwrap();
    let d = ms(7);
    block_on(async {
        let mut tasks = Vec::new();
        for _ in 0..300 {
            let mut t = Box::pin(m.timeout(d, pending::<()>()));
            std::future::poll_fn(|cx| {
                assert!(t.as_mut().poll(cx).is_pending());
                Poll::Ready(())
            })
            .await;
            // Read after arming, so `elapsed` understates the true wait.
            let armed_at = Instant::now();
            tasks.push(tokio::spawn(async move {
                assert!(t.await.is_err());
                armed_at.elapsed()
            }));
            let spin = Instant::now();
            while spin.elapsed() < Duration::from_micros(100) {
                std::hint::spin_loop();
            }
        }
        for task in tasks {
            let waited = task.await.unwrap();
            assert!(waited >= d, "fired after {waited:?}");
        }
    });
    assert_eq!(m.metrics().fired, 300);
}

#[test]
fn alternating_durations_share_the_cache_and_free_everything() {
    // Read and write timeouts in turn; the two durations often land on the
    // same tick, so one bucket can be cached under both.
    let m = TimerManager::try_new(ms(10)).unwrap();
    let waker = Waker::noop();
    for i in 0..2_000u64 {
        let d = Duration::from_secs(5) + ms(i % 2);
        let mut s = m.sleep(d);
        assert_eq!(poll_once(&mut s, waker), Poll::Pending);
        if i % 100 == 0 {
            std::thread::sleep(ms(1));
        }
    }
    let metrics = m.metrics();
    assert_eq!(metrics.cancelled, 2_000);
    assert_eq!(metrics.waiters, 0);
    assert!(metrics.live_ticks <= 4, "{metrics:?}");
    drop(m);
}

/// A waker whose `wake` panics.
struct PanickingWaker;

impl Wake for PanickingWaker {
    fn wake(self: Arc<Self>) {
        panic!("this waker panics on purpose");
    }
}

#[test]
fn a_panicking_waker_does_not_stop_the_sweeper() {
    let m = TimerManager::try_new(ms(1)).unwrap();
    let mut bad = m.sleep(ms(2));
    assert_eq!(
        poll_once(&mut bad, &Waker::from(Arc::new(PanickingWaker))),
        Poll::Pending
    );
    eventually("the bad waker's tick to fire", || bad.is_elapsed());
    // The sweeper survived and fires later ticks (bounded by tokio's own
    // timer, so a dead sweeper fails the test instead of hanging it).
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let start = Instant::now();
    let slept = rt.block_on(async { tokio::time::timeout(ms(2_000), m.sleep(ms(5))).await });
    assert!(slept.is_ok(), "the sweeper died with the panicking waker");
    assert!(start.elapsed() >= ms(5));
    assert_eq!(m.metrics().sweeper_threads_started, 1);
}

/// A waker whose task owns timers: dropping the last reference to the waker
/// drops (disarms) them, as dropping a task drops its futures.
struct TaskOwningATimer {
    _timers: std::sync::Mutex<Vec<Pin<Box<weir_timeout::Sleep>>>>,
}

impl Wake for TaskOwningATimer {
    fn wake(self: Arc<Self>) {}
}

/// Cancelling a timer drops its waker at once. When that is the last
/// reference to a task, the task's other timers are dropped (disarmed)
/// inside that cancel: one in the same bucket, whose lock the cancel must
/// no longer hold, and one whose bucket is no longer cached, so its disarm
/// unlinks it under the table lock, which the cancel must not hold either.
#[test]
fn dropping_the_last_waker_on_cancel_does_not_deadlock() {
    let m = TimerManager::try_new(ms(10)).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let m2 = m.clone();
    std::thread::spawn(move || {
        let m = m2;
        // A long timer whose bucket is in the table but no longer cached.
        let mut long = Box::pin(m.sleep(Duration::from_secs(3600)));
        assert!(poll_once(&mut long, Waker::noop()).is_pending());
        for d in 1..=4 {
            // Four other durations push the hour out of the 4-entry cache.
            let mut other = Box::pin(m.sleep(Duration::from_secs(100 + d)));
            assert!(poll_once(&mut other, Waker::noop()).is_pending());
        }
        let mut sibling = Box::pin(m.sleep(ms(200)));
        assert!(poll_once(&mut sibling, Waker::noop()).is_pending());
        let task = Arc::new(TaskOwningATimer {
            _timers: std::sync::Mutex::new(vec![long, sibling]),
        });
        let waker = Waker::from(task);
        // Usually the sibling's tick; either way the cancel below drops
        // the task's last reference.
        let mut short = Box::pin(m.sleep(ms(200)));
        assert!(poll_once(&mut short, &waker).is_pending());
        drop(waker);
        drop(short);
        tx.send(m.metrics()).unwrap();
    });
    let metrics = rx
        .recv_timeout(Duration::from_secs(5))
        .expect("cancelling deadlocked on a lock it held");
    assert_eq!(metrics.waiters, 0);
}

/// A task's waker that counts wake-ups and, once its last reference is
/// gone, its own drop.
struct DropCountingTask {
    wakes: Arc<AtomicUsize>,
    drops: Arc<AtomicUsize>,
}

impl Wake for DropCountingTask {
    fn wake(self: Arc<Self>) {
        self.wakes.fetch_add(1, Ordering::SeqCst);
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.wakes.fetch_add(1, Ordering::SeqCst);
    }
}

impl Drop for DropCountingTask {
    fn drop(&mut self) {
        self.drops.fetch_add(1, Ordering::SeqCst);
    }
}

/// (waker, wake-ups, drops of the task behind the waker).
fn drop_counting_waker() -> (Waker, Arc<AtomicUsize>, Arc<AtomicUsize>) {
    let wakes = Arc::new(AtomicUsize::new(0));
    let drops = Arc::new(AtomicUsize::new(0));
    let waker = Waker::from(Arc::new(DropCountingTask {
        wakes: wakes.clone(),
        drops: drops.clone(),
    }));
    (waker, wakes, drops)
}

/// A cancelled timer must not keep its task alive: with a 300 s idle
/// timeout, a finished connection's task (and its future's memory) used to
/// stay pinned by the waker left in the free slot until the tick fired.
#[test]
fn a_cancelled_timer_releases_its_waker_at_once() {
    let m = TimerManager::try_new(ms(20)).unwrap();
    // Two waiters in one tick, so the bucket outlives the cancelled one.
    let (cancelled, mut kept, drops, wakes, kept_drops) = (0..100)
        .find_map(|_| {
            let (w1, _, drops) = drop_counting_waker();
            let (w2, wakes, kept_drops) = drop_counting_waker();
            let mut a = Box::pin(m.sleep(ms(40)));
            let mut b = Box::pin(m.sleep(ms(40)));
            assert!(poll_once(&mut a, &w1).is_pending());
            assert!(poll_once(&mut b, &w2).is_pending());
            // A tick boundary passed between the two arms: try again.
            (m.metrics().live_ticks == 1).then_some((a, b, drops, wakes, kept_drops))
        })
        .expect("two arms in one tick");
    // Only the registrations hold the wakers now.
    assert_eq!(drops.load(Ordering::SeqCst), 0);
    drop(cancelled);
    assert_eq!(
        drops.load(Ordering::SeqCst),
        1,
        "the cancelled timer's waker is still held"
    );
    // The other waiter of that tick still fires.
    assert_eq!(m.metrics().waiters, 1);
    eventually("the kept timer to fire", || {
        wakes.load(Ordering::SeqCst) == 1
    });
    assert_eq!(poll_once(&mut kept, Waker::noop()), Poll::Ready(()));
    drop(kept);
    assert_eq!(kept_drops.load(Ordering::SeqCst), 1);
}
