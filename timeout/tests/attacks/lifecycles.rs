//! Runtimes, threads and managers that end with timers armed, re-entrant wakers, and pause and unpause hammered (items 18-26, 33).

use super::*;

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
        .args([
            "--exact",
            "lifecycles::timers_armed_in_a_thread_local_destructor",
        ])
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
    // A filter that matches nothing passes too: the child must have run
    // this very test.
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("test result: ok. 1 passed"),
        "the child ran no test: {stdout}"
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
