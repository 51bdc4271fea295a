//! Under tokio's paused test clock, weir's timers follow virtual time.
//! pingora's timer runs on a real-time thread, so a paused test either hangs
//! or lets the inner future win.

use std::time::{Duration, Instant};

#[tokio::test(start_paused = true)]
async fn timeout_fires_at_virtual_time() {
    let virtual_start = tokio::time::Instant::now();
    let r = weir_timeout::timeout(
        Duration::from_secs(1),
        tokio::time::sleep(Duration::from_secs(10)),
    )
    .await;
    assert!(r.is_err(), "the 10 s sleep won against a 1 s timeout");
    let waited = virtual_start.elapsed();
    assert!(waited >= Duration::from_secs(1), "{waited:?}");
    // With a real-time timer tokio would have jumped straight to the inner
    // sleep's 10 s and the inner future would have won.
    assert!(waited < Duration::from_secs(2), "{waited:?}");
}

#[tokio::test(start_paused = true)]
async fn sleep_takes_no_real_time() {
    let virtual_start = tokio::time::Instant::now();
    let real_start = Instant::now();
    weir_timeout::sleep(Duration::from_secs(2)).await;
    assert!(virtual_start.elapsed() >= Duration::from_secs(2));
    // A real-time timer would take the full 2 s.
    assert!(real_start.elapsed() < Duration::from_millis(1_500));
}

#[tokio::test(start_paused = true)]
async fn inner_future_still_wins_in_virtual_time() {
    let r = weir_timeout::timeout(
        Duration::from_secs(10),
        tokio::time::sleep(Duration::from_secs(1)),
    )
    .await;
    assert!(r.is_ok());
}

/// On a paused clock too, a sleep reset without being polled again wakes
/// its task at the new deadline (here in virtual time): written first, the
/// reset dropped tokio's timer with the task's waker, and only the 3 s
/// guard ended the wait.
#[tokio::test(start_paused = true)]
async fn a_reset_keeps_the_task_on_the_paused_clock() {
    let mut idle = Box::pin(weir_timeout::sleep(Duration::from_secs(3600)));
    let mut reset = false;
    let woken = std::future::poll_fn(|cx| {
        if reset {
            return idle.as_mut().poll(cx);
        }
        assert!(idle.as_mut().poll(cx).is_pending());
        let soon = tokio::time::Instant::now() + Duration::from_millis(20);
        idle.as_mut().reset(soon.into_std());
        reset = true;
        std::task::Poll::Pending
    });
    let started = tokio::time::Instant::now();
    // The guard's own wake-up polls the task too: judge by when it ended.
    let _ = tokio::time::timeout(Duration::from_secs(3), woken).await;
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(2),
        "woken after {took:?} of virtual time"
    );
}
