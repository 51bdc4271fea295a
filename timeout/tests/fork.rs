//! After `fork()`, the child's timers work at once. pingora's child has no
//! clock thread and waits for a 2 s watchdog before anything fires.
#![cfg(unix)]

use std::time::{Duration, Instant};

fn child_sleeps_work(manager: &weir_timeout::TimerManager) -> i32 {
    manager.unpause();
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
    {
        Ok(rt) => rt,
        Err(_) => return 3,
    };
    let start = Instant::now();
    // Bounded by tokio's own timer, so a child without a working sweeper
    // fails instead of hanging.
    let slept = rt.block_on(async {
        tokio::time::timeout(
            Duration::from_secs(1),
            manager.sleep(Duration::from_millis(20)),
        )
        .await
    });
    if slept.is_err() {
        return 5;
    }
    let took = start.elapsed();
    if took < Duration::from_millis(20) {
        return 4;
    }
    // Far below pingora's 2 s watchdog gap.
    if took > Duration::from_millis(1000) {
        return 5;
    }
    0
}

#[test]
fn a_forked_child_fires_timers_without_a_gap() {
    let manager = weir_timeout::TimerManager::try_new(Duration::from_millis(5)).unwrap();
    // Start the sweeper in the parent and leave a timer armed.
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(manager.sleep(Duration::from_millis(6)));
    let mut armed = Box::pin(manager.sleep(Duration::from_secs(60)));
    assert!(
        futures_poll(&mut armed).is_pending(),
        "a 60 s sleep is pending"
    );

    assert!(manager.pause_for_fork(), "the sweeper stopped");
    let child = weir_test_support::fork::spawn(|| child_sleeps_work(&manager));
    manager.unpause();
    assert_eq!(
        child.wait(Duration::from_secs(30)),
        0,
        "child reported a failure"
    );

    // The parent's timers still work after the pause.
    let start = Instant::now();
    rt.block_on(manager.sleep(Duration::from_millis(10)));
    assert!(start.elapsed() >= Duration::from_millis(10));
    drop(armed);
}

fn futures_poll<F: std::future::Future + ?Sized>(
    f: &mut std::pin::Pin<Box<F>>,
) -> std::task::Poll<F::Output> {
    f.as_mut()
        .poll(&mut std::task::Context::from_waker(std::task::Waker::noop()))
}
