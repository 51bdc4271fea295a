//! pingora's drop-in at its extremes, and tokio's paused clock (items 27-31).

use super::*;

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
