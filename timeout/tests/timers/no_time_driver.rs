//! On a tokio runtime built without `enable_time()`, weir's timers work and
//! never panic: they defer to tokio's timer (which panics there) only when
//! the runtime's clock is paused.

use std::future::{Future, pending};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use weir_timeout::TimerManager;

/// Run `f` on a fresh thread inside a current-thread runtime without a
/// time driver; `None` if it did not finish within 5 s (or panicked).
fn on_runtime_without_timers<T: Send + 'static>(
    f: impl FnOnce(&tokio::runtime::Runtime) -> T + Send + 'static,
) -> Option<T> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let _ = tx.send(f(&rt));
    });
    rx.recv_timeout(Duration::from_secs(5)).ok()
}

/// Pending on its first poll (waking itself), ready on the second.
struct PendOnce(bool);

impl Future for PendOnce {
    type Output = u8;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<u8> {
        if std::mem::replace(&mut self.0, true) {
            Poll::Ready(9)
        } else {
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }
}

#[test]
fn sleep_and_timeout_work_without_a_time_driver() {
    let r = on_runtime_without_timers(|rt| {
        rt.block_on(async {
            let start = Instant::now();
            weir_timeout::sleep(Duration::from_millis(15)).await;
            let slept = start.elapsed();
            let fired = weir_timeout::timeout(Duration::from_millis(20), pending::<()>()).await;
            let done = weir_timeout::timeout(Duration::from_secs(1), PendOnce(false)).await;
            (slept, fired, done)
        })
    });
    let (slept, fired, done) = r.expect("panicked or hung");
    assert!(slept >= Duration::from_millis(15), "{slept:?}");
    assert!(fired.is_err());
    assert_eq!(done, Ok(9));
}

/// The paused-clock answer used to be remembered for the rest of the tick,
/// paused or not: a thread that ran a paused runtime and then, within that
/// tick, one without a time driver sent the second one's timers to tokio's
/// timer, which panicked ("timers are disabled").
#[test]
fn a_paused_runtime_then_one_without_timers_on_the_same_thread() {
    // Hour-long ticks: both runtimes run in tick 0.
    let m = TimerManager::try_new(Duration::from_secs(3600)).unwrap();
    let r = on_runtime_without_timers(move |rt| {
        let paused = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        paused.block_on(m.sleep(Duration::from_secs(1)));
        drop(paused);
        rt.block_on(m.timeout(Duration::from_secs(5), PendOnce(false)))
    });
    assert_eq!(r.expect("panicked or hung"), Ok(9));
}
