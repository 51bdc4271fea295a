//! Deadlines given as instants: `sleep_until`, `timeout_at`, and a `Sleep`
//! reset and reused, as in a `select!` loop.

use std::future::pending;
use std::pin::pin;
use std::time::{Duration, Instant};
use weir_timeout::{TimerManager, sleep, sleep_until, timeout_at};

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
        .block_on(f)
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn sleep_until_never_ends_before_its_instant() {
    block_on(async {
        for wait in [1, 12, 25] {
            let at = Instant::now() + ms(wait);
            sleep_until(at).await;
            assert!(Instant::now() >= at, "{wait} ms");
        }
        // An instant already past: done at the first poll.
        let past = Instant::now() - ms(5);
        let sleep = sleep_until(past);
        assert!(sleep.is_elapsed());
        sleep.await;
    });
}

#[test]
fn timeout_at_fires_at_its_instant_and_lets_ready_futures_through() {
    block_on(async {
        let at = Instant::now() + ms(20);
        assert!(timeout_at(at, pending::<()>()).await.is_err());
        assert!(Instant::now() >= at);
        assert_eq!(timeout_at(at, async { 7 }).await, Ok(7));
        let manager = TimerManager::try_new(ms(5)).unwrap();
        let at = Instant::now() + ms(15);
        assert!(manager.timeout_at(at, pending::<()>()).await.is_err());
        assert!(Instant::now() >= at);
        let at = Instant::now() + ms(15);
        manager.sleep_until(at).await;
        assert!(Instant::now() >= at);
    });
}

#[test]
fn a_reset_sleep_serves_a_select_loop() {
    block_on(async {
        let mut tick = pin!(sleep(ms(5)));
        assert_eq!(tick.deadline(), None, "a duration has no instant yet");
        let (mut deadlines, mut fired) = (Vec::new(), Vec::new());
        let mut other = pin!(pending::<()>());
        while fired.len() < 3 {
            tokio::select! {
                () = tick.as_mut() => {
                    fired.push(Instant::now());
                    let next = Instant::now() + ms(10);
                    tick.as_mut().reset(next);
                    assert_eq!(tick.deadline(), Some(next));
                    assert!(!tick.is_elapsed());
                    deadlines.push(next);
                }
                () = other.as_mut() => unreachable!(),
            }
        }
        // Every reset deadline was kept, none early.
        for (deadline, fired) in deadlines.iter().zip(&fired[1..]) {
            assert!(fired >= deadline);
        }
    });
}

#[test]
fn reset_moves_an_armed_deadline_both_ways() {
    block_on(async {
        // Armed far away, then pulled in: ends at the new instant.
        let mut far = pin!(sleep(Duration::from_secs(3600)));
        assert!(futures_poll_once(far.as_mut()).await.is_none());
        let soon = Instant::now() + ms(15);
        far.as_mut().reset(soon);
        far.as_mut().await;
        assert!(Instant::now() >= soon);
        // Ended, then pushed out: waits again.
        let later = Instant::now() + ms(20);
        far.as_mut().reset(later);
        assert!(!far.is_elapsed());
        far.as_mut().await;
        assert!(Instant::now() >= later);
    });
}

/// Poll once; `Some` if it was ready.
async fn futures_poll_once<F: std::future::Future + Unpin>(mut f: F) -> Option<F::Output> {
    std::future::poll_fn(|cx| {
        std::task::Poll::Ready(match std::pin::Pin::new(&mut f).poll(cx) {
            std::task::Poll::Ready(v) => Some(v),
            std::task::Poll::Pending => None,
        })
    })
    .await
}

/// A task that resets its armed sleep and returns `Pending` without
/// polling it again is still woken at the new deadline, as with tokio's
/// `Sleep::reset` (an idle timer reset on activity in a hand-written
/// `poll`). Written first, the task was woken only by the 1 h deadline it
/// had left behind.
#[test]
fn a_reset_keeps_the_task_it_was_armed_for() {
    block_on(async {
        let mut idle = Box::pin(sleep(Duration::from_secs(3600)));
        let mut reset = false;
        let woken = std::future::poll_fn(|cx| {
            if reset {
                return idle.as_mut().poll(cx);
            }
            assert!(idle.as_mut().poll(cx).is_pending());
            // Activity: the idle deadline moves, nothing is polled.
            idle.as_mut().reset(Instant::now() + ms(20));
            reset = true;
            std::task::Poll::Pending
        });
        let started = Instant::now();
        // The guard's own wake-up polls the task too: judge by when it ended.
        let _ = tokio::time::timeout(Duration::from_secs(3), woken).await;
        let took = started.elapsed();
        assert!(
            took >= ms(20) && took < Duration::from_secs(2),
            "woken after {took:?}"
        );
    });
}
