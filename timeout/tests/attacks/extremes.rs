//! Extreme durations, resolutions and instants at every entry point, and any duration (items 1-10).

use super::*;

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
        assert_eq!(e, ConfigError::ResolutionOutOfRange(bad));
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
            Err(e) => prop_assert!(!within && e == ConfigError::ResolutionOutOfRange(res)),
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
