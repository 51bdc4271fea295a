//! `thread_local` hands a thread's id to the next thread started after it
//! exits, and with it that thread's timer table. A new thread must not
//! inherit the old one's paused-clock answer or its cached buckets.
//!
//! One test only: the scenarios run in sequence so that each new thread gets
//! the id its predecessor freed.

use std::future::{Future, poll_fn};
use std::pin::pin;
use std::task::Poll;
use std::time::Duration;
use tokio::runtime::Builder;
use weir_timeout::{MAX_RESOLUTION, TimerManager};

fn on_new_thread(f: impl FnOnce() + Send + 'static) {
    std::thread::spawn(f).join().unwrap();
}

#[test]
fn a_new_thread_inherits_neither_the_paused_check_nor_the_cache() {
    // One tick is an hour: every arm below falls in the same tick, so a
    // memo or cache entry left by a previous thread would still be "valid".
    let m = TimerManager::try_new(MAX_RESOLUTION).unwrap();

    // 1. A paused test arms a timer (and records "paused" for this tick).
    let m1 = m.clone();
    on_new_thread(move || {
        let rt = Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        rt.block_on(m1.sleep(Duration::from_secs(1)));
    });

    // 2. The next thread runs a runtime without a time driver: it must get a
    // weir timer, not a tokio one (whose first poll would panic).
    let m2 = m.clone();
    on_new_thread(move || {
        let rt = Builder::new_current_thread().build().unwrap();
        rt.block_on(async {
            let mut s = pin!(m2.sleep(Duration::from_secs(1)));
            poll_fn(|cx| {
                assert!(s.as_mut().poll(cx).is_pending());
                Poll::Ready(())
            })
            .await;
        });
    });

    // 3. A real-time thread arms the same duration twice, 30 ms apart, so
    // that the cache window is open (the counter is calibrated by then)...
    let m3 = m.clone();
    on_new_thread(move || {
        let rt = Builder::new_current_thread().build().unwrap();
        rt.block_on(async {
            for _ in 0..2 {
                let mut s = pin!(m3.sleep(Duration::from_secs(2)));
                poll_fn(|cx| {
                    assert!(s.as_mut().poll(cx).is_pending());
                    Poll::Ready(())
                })
                .await;
                std::thread::sleep(Duration::from_millis(30));
            }
        });
    });

    // 4. ...and a paused test on the next thread must still follow virtual
    // time: a real-time timer on an hour tick would lose against tokio's 3 s.
    let m4 = m.clone();
    on_new_thread(move || {
        let rt = Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        rt.block_on(async {
            let r = tokio::time::timeout(Duration::from_secs(3), m4.sleep(Duration::from_secs(2)))
                .await;
            assert!(
                r.is_ok(),
                "a paused thread used the previous thread's real-time bucket"
            );
        });
    });
}
