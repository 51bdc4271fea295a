//! Sprays of timers, timers dropped at every poll point, and many threads at once (items 11-17).

use super::*;

// 11-13. Sprays

const SPRAY: u64 = 100_000;

/// `SPRAY` sleeps on distinct ticks spread over about 38 years (one every
/// 3 h 20 min, the first an hour away), armed in `order`.
fn spray(m: &TimerManager, order: impl Iterator<Item = u64>) -> Vec<Pin<Box<Sleep>>> {
    order
        .map(|i| {
            let mut s = Box::pin(m.sleep(Duration::from_secs(3600 + i * 12_007)));
            assert!(poll(s.as_mut(), Waker::noop()).is_pending());
            s
        })
        .collect()
}

/// A permutation of `0..n` (multiplication by a unit modulo a prime
/// above `n`, skipping the values past `n`).
fn scrambled(n: u64) -> impl Iterator<Item = u64> {
    const P: u64 = 100_003;
    assert!(n < P);
    (1..P)
        .map(|k| k * 48_271 % P)
        .filter(move |&v| v <= n)
        .map(|v| v - 1)
}

fn spray_and_drop(scramble: bool) {
    let m = manager(ms(10));
    // Warm up: this thread's table, the sweeper, the cache.
    drop(spray(&m, 0..8));
    let before = net_bytes();
    let mut sleeps = if scramble {
        spray(&m, scrambled(SPRAY))
    } else {
        spray(&m, 0..SPRAY)
    };
    let metrics = m.metrics();
    assert_eq!(metrics.waiters, SPRAY, "{metrics:?}");
    assert!(metrics.live_ticks >= SPRAY, "{metrics:?}");
    let peak = net_bytes() - before;
    assert!(
        peak > 64 * SPRAY as i64,
        "the allocator sees the spray: {peak}"
    );
    if scramble {
        // Drop in yet another order than the arming one.
        sleeps.reverse();
        let mut i = 0;
        sleeps.retain(|_| {
            i += 1;
            i % 2 == 0
        });
    }
    drop(sleeps);
    assert_drained(&m, 1);
    assert_eq!(m.metrics().cancelled, SPRAY + 8);
    let left = net_bytes() - before;
    assert!(
        left < 64 * 1024,
        "{left} bytes kept after dropping the spray (peak {peak})"
    );
}

#[test]
fn a_spray_of_distinct_ticks_is_released_in_order() {
    spray_and_drop(false);
}

#[test]
fn a_spray_of_distinct_ticks_is_released_scrambled() {
    spray_and_drop(true);
}

#[test]
fn a_spray_armed_on_four_threads_is_released_on_another() {
    let m = manager(ms(10));
    let barrier = Arc::new(Barrier::new(4));
    let sprays: Vec<_> = (0..4u64)
        .map(|t| {
            let (m, barrier) = (m.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                spray(&m, (0..SPRAY / 4).map(|i| i * 4 + t))
            })
        })
        .collect();
    let sprays: Vec<_> = sprays.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(m.metrics().waiters, SPRAY);
    drop(sprays);
    assert_drained(&m, 4);
    assert_eq!(m.metrics().cancelled, SPRAY);
}

// ---------------------------------------------------------------------------
// 14-16. Dropped at every poll point

/// Poll `f` up to `k` times, `gap` apart, then drop it; afterwards nobody
/// but us holds the waker, and so nothing can ever wake us for it.
fn poll_k_then_drop<F: Future>(f: F, k: usize, gap: Duration) {
    let counter = Arc::new(Counting::default());
    let waker = Waker::from(counter.clone());
    {
        let mut f = pin!(f);
        for _ in 0..k {
            if poll(f.as_mut(), &waker).is_ready() {
                break;
            }
            std::thread::sleep(gap);
        }
    }
    drop(waker);
    eventually("the dropped future's waker to be released", || {
        Arc::strong_count(&counter) == 1
    });
}

#[test]
fn a_timeout_dropped_at_every_poll_point() {
    let m = manager(ms(1));
    for k in 0..24 {
        // Fires around the 6th poll, completes at the 13th: every k drops
        // it in another state (idle, armed, fired, done).
        poll_k_then_drop(m.timeout(ms(3), Pends(12)), k, Duration::from_micros(500));
        poll_k_then_drop(m.timeout(Duration::MAX, Pends(12)), k, Duration::ZERO);
        poll_k_then_drop(m.timeout(Duration::ZERO, Pends(12)), k, Duration::ZERO);
        poll_k_then_drop(timeout(ms(3), Pends(12)), k, Duration::from_micros(500));
        assert_drained(&m, 1);
    }
}

#[test]
fn a_sleep_reset_and_dropped_at_every_poll_point() {
    let m = manager(ms(1));
    for k in 0..24 {
        let counter = Arc::new(Counting::default());
        let waker = Waker::from(counter.clone());
        {
            let mut s = pin!(m.sleep(ms(2)));
            for i in 0..k {
                if poll(s.as_mut(), &waker).is_ready() {
                    // Each end is followed by a new deadline.
                    s.as_mut().reset(Instant::now() + ms(1 + i as u64 % 3));
                }
                std::thread::sleep(Duration::from_micros(400));
            }
        }
        drop(waker);
        assert_drained(&m, 1);
        eventually("the waker to be released", || {
            Arc::strong_count(&counter) == 1
        });
    }
}

#[test]
fn a_pingora_timeout_dropped_at_every_poll_point() {
    // Sub-second durations take weir's timer whatever the threshold is, so
    // the threshold attack running beside this cannot change what it does.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let _enter = rt.enter();
    for k in 0..24 {
        let gap = Duration::from_micros(800);
        poll_k_then_drop(pingora_timeout::timeout(ms(5), Pends(12)), k, gap);
        poll_k_then_drop(pingora_timeout::tokio_timeout(ms(5), Pends(12)), k, gap);
        poll_k_then_drop(pingora_timeout::sleep(ms(5)), k, gap);
        let stub = pingora_timeout::timer::TimerManager::new().register_timer(ms(5));
        poll_k_then_drop(stub.poll(), k, gap);
    }
}

// ---------------------------------------------------------------------------
// 17. Many threads at once

/// A small deterministic generator, so a failure names its inputs.
fn lcg(seed: &mut u64) -> u64 {
    *seed = seed
        .wrapping_mul(6_364_136_223_846_793_005)
        .wrapping_add(1_442_695_040_888_963_407);
    *seed >> 33
}

#[test]
fn eight_threads_arm_and_wait_at_once() {
    const THREADS: u64 = 8;
    const TASKS: u64 = 100;
    let m = manager(ms(1));
    let barrier = Arc::new(Barrier::new(THREADS as usize));
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let (m, barrier) = (m.clone(), barrier.clone());
            std::thread::spawn(move || {
                // No time driver: weir's timers need none.
                let rt = tokio::runtime::Builder::new_current_thread()
                    .build()
                    .unwrap();
                barrier.wait();
                rt.block_on(async {
                    let mut seed = t;
                    let tasks: Vec<_> = (0..TASKS)
                        .map(|i| {
                            let d = Duration::from_micros(lcg(&mut seed) % 30_000);
                            let m = m.clone();
                            tokio::spawn(async move {
                                let start = Instant::now();
                                match i % 3 {
                                    0 => m.sleep(d).await,
                                    1 => assert!(m.timeout(d, pending::<()>()).await.is_err()),
                                    _ => sleep(d).await,
                                }
                                let took = start.elapsed();
                                assert!(took >= d, "thread {t} task {i}: {d:?} took {took:?}");
                                assert!(
                                    took <= d + LATE,
                                    "thread {t} task {i}: {d:?} took {took:?}"
                                );
                            })
                        })
                        .collect();
                    for task in tasks {
                        task.await.unwrap();
                    }
                });
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_drained(&m, THREADS);
    let metrics = m.metrics();
    // Every waiter on the custom manager either fired or found its tick
    // fired when it armed (a zero duration arms nothing).
    assert!(
        metrics.fired <= THREADS * TASKS * 2 / 3 + THREADS,
        "{metrics:?}"
    );
    assert_eq!(metrics.cancelled, 0, "{metrics:?}");
}
