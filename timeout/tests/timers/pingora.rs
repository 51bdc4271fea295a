//! `weir_timeout::pingora` against pingora-timeout 0.9's signatures and
//! documented behaviour, plus the faults of pingora it fixes.
//!
//! Waits are bounded (by tokio's own timer or a channel timeout) so that a
//! broken timer fails a test instead of hanging it; nothing here measures
//! speed.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};
use weir_timeout::pingora::fast_timeout::{
    DEFAULT_FAST_TIMEOUT_TO_TOKIO_THRESHOLD, FastOrTokioTimeout, FastTimeout, fast_sleep,
    fast_timeout, fast_timeout_to_tokio_threshold, pause_for_fork, unpause,
};
use weir_timeout::pingora::timer::{TimerManager, TimerStub};
use weir_timeout::pingora::{
    Elapsed, Timeout, ToTimeout, TokioTimeout, sleep, timeout, tokio_timeout,
};

/// Code written against pingora-timeout, unchanged except for the one `use`
/// line: if a signature drifted from pingora's this module stops compiling.
mod written_for_pingora {
    use weir_timeout::pingora as pingora_timeout;

    use pingora_timeout::fast_timeout::{self, FastOrTokioTimeout};
    use pingora_timeout::timer::TimerManager;
    use pingora_timeout::{Elapsed, Timeout, TokioTimeout, sleep, timeout, tokio_timeout};
    use std::future::Future;
    use std::sync::Arc;
    use std::time::Duration;

    pub async fn read_body<F: Future<Output = Vec<u8>>>(read: F) -> Result<Vec<u8>, Elapsed> {
        match timeout(Duration::from_millis(30), read).await {
            Ok(body) => Ok(body),
            Err(Elapsed) => Err(Elapsed {}),
        }
    }

    pub async fn io_step() -> std::io::Result<u32> {
        let n = timeout(Duration::from_secs(5), async { 4u32 })
            .await
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::TimedOut, e))?;
        Ok(n)
    }

    pub async fn boxed_error() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        timeout(Duration::from_millis(10), sleep(Duration::from_secs(60))).await?;
        Ok(())
    }

    pub fn named<F: Future>(f: F) -> Timeout<F, FastOrTokioTimeout> {
        fast_timeout::fast_timeout(Duration::from_secs(1), f)
    }

    pub fn named_tokio<F: Future>(f: F) -> Timeout<F, TokioTimeout> {
        tokio_timeout(Duration::from_secs(1), f)
    }

    pub fn threshold_roundtrip() -> Option<Duration> {
        let before = fast_timeout::fast_timeout_to_tokio_threshold();
        fast_timeout::set_fast_timeout_to_tokio_threshold(before);
        fast_timeout::fast_timeout_to_tokio_threshold()
    }

    pub async fn own_manager() {
        let tm = Arc::new(TimerManager::new());
        let a = tm.register_timer(Duration::from_millis(10));
        let b = tm.register_timer(Duration::from_millis(10));
        a.poll().await;
        b.poll().await;
    }

    pub fn around_fork() {
        fast_timeout::pause_for_fork();
        fast_timeout::unpause();
    }
}

/// Bounds a whole test body by tokio's own timer (which weir does not use
/// for these durations), so a timer that never fires fails fast.
async fn bounded<F: Future>(f: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(10), f)
        .await
        .expect("finished within 10 s")
}

#[tokio::test]
async fn pingora_style_code_runs_on_weir() {
    bounded(async {
        let body = written_for_pingora::read_body(async { b"ok".to_vec() }).await;
        assert_eq!(body.unwrap(), b"ok");
        let stuck = written_for_pingora::read_body(std::future::pending()).await;
        assert_eq!(stuck, Err(Elapsed));
        assert_eq!(written_for_pingora::io_step().await.unwrap(), 4);
        let e = written_for_pingora::boxed_error().await.unwrap_err();
        assert_eq!(e.to_string(), "Timeout Elapsed");
        assert_eq!(written_for_pingora::named(async { 1 }).await, Ok(1));
        assert_eq!(written_for_pingora::named_tokio(async { 2 }).await, Ok(2));
        assert!(written_for_pingora::threshold_roundtrip().is_some());
        written_for_pingora::own_manager().await;
        written_for_pingora::around_fork();
    })
    .await
}

#[tokio::test]
async fn a_timeout_fires() {
    bounded(async {
        let start = Instant::now();
        let r = timeout(
            Duration::from_millis(20),
            tokio::time::sleep(Duration::from_secs(1000)),
        )
        .await;
        assert!(r.is_err());
        assert!(start.elapsed() >= Duration::from_millis(20), "never early");
    })
    .await
}

#[tokio::test]
async fn a_ready_future_returns_at_once() {
    let r = timeout(Duration::from_secs(1), async { 1 }).await;
    assert_eq!(r.unwrap(), 1);
}

#[tokio::test]
async fn a_future_that_finishes_first_returns_its_value() {
    bounded(async {
        let fut = async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            1
        };
        assert_eq!(timeout(Duration::from_secs(1000), fut).await.unwrap(), 1);
    })
    .await
}

#[tokio::test]
async fn fast_sleep_and_sleep_wait_at_least_their_duration() {
    bounded(async {
        let start = Instant::now();
        fast_sleep(Duration::from_millis(25)).await;
        assert!(start.elapsed() >= Duration::from_millis(25));
        let start = Instant::now();
        sleep(Duration::from_millis(15)).await;
        assert!(start.elapsed() >= Duration::from_millis(15));
        let inner = async {
            fast_sleep(Duration::from_millis(10)).await;
            1
        };
        assert_eq!(fast_timeout(Duration::from_secs(60), inner).await, Ok(1));
    })
    .await
}

#[tokio::test]
async fn tokio_timeout_fires_and_returns() {
    bounded(async {
        let r = tokio_timeout(Duration::from_millis(10), std::future::pending::<()>()).await;
        assert_eq!(r, Err(Elapsed));
        assert_eq!(
            tokio_timeout(Duration::from_secs(1), async { 3 }).await,
            Ok(3)
        );
    })
    .await
}

#[tokio::test(start_paused = true)]
async fn timeouts_follow_tokios_paused_clock() {
    // With pingora's fast timer this hangs: its clock thread runs on real
    // time and never sees an hour pass. Here the virtual clock jumps to the
    // two-hour bound instead, and the test fails.
    let start = tokio::time::Instant::now();
    let r = tokio::time::timeout(
        Duration::from_secs(7200),
        fast_timeout(Duration::from_secs(3600), std::future::pending::<()>()),
    )
    .await
    .expect("the fast timer fired in virtual time");
    assert_eq!(r, Err(Elapsed));
    assert!(tokio::time::Instant::now() - start >= Duration::from_secs(3600));
    let r = tokio_timeout(Duration::from_secs(3600), std::future::pending::<()>()).await;
    assert_eq!(r, Err(Elapsed));
}

#[tokio::test]
async fn huge_durations_do_not_panic() {
    // pingora panics computing `now + Duration::MAX` when the timer starts.
    let mut t = Box::pin(fast_timeout(Duration::MAX, std::future::pending::<()>()));
    assert!(poll_once(t.as_mut()).is_pending());
    let mut s = Box::pin(fast_sleep(Duration::MAX));
    assert!(poll_once(s.as_mut()).is_pending());
}

#[tokio::test]
async fn a_zero_timeout_elapses_at_the_first_wait() {
    let mut t = Box::pin(fast_timeout(Duration::ZERO, std::future::pending::<()>()));
    assert_eq!(poll_once(t.as_mut()), Poll::Ready(Err(Elapsed)));
}

#[test]
fn the_default_threshold_is_fifteen_minutes() {
    assert_eq!(
        DEFAULT_FAST_TIMEOUT_TO_TOKIO_THRESHOLD,
        Duration::from_secs(15 * 60)
    );
    // No test in this binary changes the threshold.
    assert_eq!(
        fast_timeout_to_tokio_threshold(),
        Some(DEFAULT_FAST_TIMEOUT_TO_TOKIO_THRESHOLD)
    );
}

#[tokio::test]
async fn every_to_timeout_starts_a_timer_that_expires() {
    bounded(async {
        TokioTimeout::create(Duration::from_millis(5))
            .timeout()
            .await;
        FastTimeout::create(Duration::from_millis(5))
            .timeout()
            .await;
        FastOrTokioTimeout::create(Duration::from_millis(5))
            .timeout()
            .await;
        // Above the threshold this is tokio's timer: poll once only.
        let long = FastOrTokioTimeout::create(DEFAULT_FAST_TIMEOUT_TO_TOKIO_THRESHOLD * 2);
        assert!(poll_once(long.timeout().as_mut()).is_pending());
    })
    .await
}

#[tokio::test]
async fn timer_manager_stubs_fire_and_never_early() {
    bounded(async {
        let tm = TimerManager::new();
        let start = Instant::now();
        let t1: TimerStub = tm.register_timer(Duration::from_millis(30));
        let t2 = tm.register_timer(Duration::from_millis(30));
        tokio::join!(t1.poll(), t2.poll());
        assert!(start.elapsed() >= Duration::from_millis(30));
        // pingora's own managers have no clock thread: this never fires there.
        TimerManager::default()
            .register_timer(Duration::from_millis(5))
            .poll()
            .await;
    })
    .await
}

#[tokio::test]
async fn timer_manager_counts_from_registration_not_from_the_poll() {
    let tm = TimerManager::new();
    let stub = tm.register_timer(Duration::from_millis(40));
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut waiting = Box::pin(stub.poll());
    assert_eq!(
        poll_once(waiting.as_mut()),
        Poll::Ready(()),
        "was due already"
    );
}

#[test]
fn pause_for_fork_and_unpause_do_not_deadlock() {
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        // Start the global sweeper, pause it, resume it, and check that
        // timers still fire, also ones armed while paused.
        rt.block_on(fast_sleep(Duration::from_millis(5)));
        pause_for_fork();
        let armed_while_paused = Instant::now();
        let mut early = Box::pin(fast_sleep(Duration::from_millis(20)));
        assert!(poll_once(early.as_mut()).is_pending());
        pause_for_fork();
        unpause();
        rt.block_on(early);
        assert!(armed_while_paused.elapsed() >= Duration::from_millis(20));
        rt.block_on(fast_sleep(Duration::from_millis(5)));

        let tm = TimerManager::new();
        rt.block_on(tm.register_timer(Duration::from_millis(5)).poll());
        tm.pause_for_fork();
        tm.unpause();
        rt.block_on(tm.register_timer(Duration::from_millis(5)).poll());
        done.send(()).unwrap();
    });
    finished
        .recv_timeout(Duration::from_secs(10))
        .expect("pause/unpause and the timers after it finished within 10 s");
}

#[test]
fn public_types_are_send_and_sync_where_pingoras_are() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Elapsed>();
    send_sync::<TokioTimeout>();
    send_sync::<FastTimeout>();
    send_sync::<FastOrTokioTimeout>();
    send_sync::<TimerManager>();
    send_sync::<TimerStub>();
    send_sync::<Timeout<std::future::Ready<u8>, FastOrTokioTimeout>>();
    fn send<T: Send>(_: &T) {}
    send(&fast_sleep(Duration::from_millis(1)));
    send(
        &TimerManager::new()
            .register_timer(Duration::from_millis(1))
            .poll(),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeouts_can_be_spawned() {
    bounded(async {
        let task = tokio::spawn(fast_timeout(
            Duration::from_millis(10),
            std::future::pending::<()>(),
        ));
        assert_eq!(task.await.unwrap(), Err(Elapsed));
    })
    .await
}

fn poll_once<F: Future + ?Sized>(f: Pin<&mut F>) -> Poll<F::Output> {
    f.poll(&mut Context::from_waker(Waker::noop()))
}
