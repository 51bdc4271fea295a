//! Waiting until allowed (`until_ready`, `until_key_ready`) on tokio's
//! paused clock: waiters released at the quota's rate, in order, none
//! early; a dropped wait spends nothing; an impossible cost fails at once;
//! seeded jitter replays. And on a real Redis server.
#![cfg(feature = "wait")]

use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use weir_rate::wait::{Jitter, TokioClock};
use weir_rate::{Gcra, KeyedLimiter, LeakyBucket, Quota, RateLimiter, SketchLimiter};

/// `n` a second, one at a time (no burst).
fn per_second(n: u32) -> Quota {
    Quota::per_second(NonZeroU32::new(n).unwrap()).allow_burst(NonZeroU32::MIN)
}

/// The tick weir-timeout rounds deadlines up to, plus scheduling slack.
const LATE: Duration = Duration::from_millis(25);

#[tokio::test(start_paused = true)]
async fn waiters_on_one_key_are_released_at_the_rate_in_order_none_early() {
    let limiter = Arc::new(KeyedLimiter::<String, _, _>::with_clock(
        Gcra::new(per_second(10)),
        TokioClock::new(),
    ));
    let start = tokio::time::Instant::now();
    let released = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..6u32 {
        let (limiter, released) = (limiter.clone(), released.clone());
        tasks.push(tokio::spawn(async move {
            let d = limiter.until_key_ready("k", 1, Jitter::NONE).await.unwrap();
            assert!(d.is_allowed());
            released.lock().unwrap().push((i, start.elapsed()));
        }));
        // Each waiter starts after the one before.
        tokio::task::yield_now().await;
    }
    for t in tasks {
        t.await.unwrap();
    }
    let released = released.lock().unwrap().clone();
    let order: Vec<u32> = released.iter().map(|r| r.0).collect();
    assert_eq!(order, (0..6).collect::<Vec<_>>(), "{released:?}");
    for (k, (_, at)) in released.iter().enumerate() {
        let due = Duration::from_millis(100) * k as u32;
        assert!(*at >= due, "waiter {k} released early at {at:?}");
        assert!(*at <= due + LATE, "waiter {k} released late at {at:?}");
    }
}

/// A shaper admits a unit at once and says when it may leave: ready means
/// that time has come, so units waited for leave `T` apart.
#[tokio::test(start_paused = true)]
async fn a_shapers_units_are_ready_when_their_delay_has_passed() {
    let quota = Quota::per_second(NonZeroU32::new(10).unwrap());
    let shaper = LeakyBucket::try_shaper(quota, Duration::from_secs(1)).unwrap();
    let single = RateLimiter::with_clock(shaper.clone(), TokioClock::new());
    let keyed = KeyedLimiter::<String, _, _>::with_clock(shaper, TokioClock::new());
    for limiter in ["single", "keyed"] {
        let start = tokio::time::Instant::now();
        for k in 0..4u32 {
            let decision = match limiter {
                "single" => single.until_ready(1, Jitter::NONE).await,
                _ => keyed.until_key_ready("k", 1, Jitter::NONE).await,
            };
            assert!(decision.unwrap().is_allowed());
            let (due, at) = (Duration::from_millis(100) * k, start.elapsed());
            assert!(at >= due, "{limiter}: unit {k} ready early at {at:?}");
            assert!(at <= due + LATE, "{limiter}: unit {k} ready late at {at:?}");
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_dropped_wait_spends_nothing() {
    let limiter = RateLimiter::with_clock(Gcra::new(per_second(10)), TokioClock::new());
    assert!(limiter.check().is_allowed());
    // The next unit is due in 100 ms; give up after 50.
    let gave_up = tokio::time::timeout(
        Duration::from_millis(50),
        limiter.until_ready(1, Jitter::NONE),
    )
    .await;
    assert!(gave_up.is_err());
    tokio::time::sleep(Duration::from_millis(60)).await;
    assert!(
        limiter.check().is_allowed(),
        "the dropped wait took the unit due at 100 ms"
    );
}

#[tokio::test(start_paused = true)]
async fn an_impossible_cost_fails_at_once() {
    let limiter = SketchLimiter::with_clock(
        per_second(10),
        weir_rate::Shape::rows::<2, 64>(),
        TokioClock::new(),
    );
    let start = tokio::time::Instant::now();
    let r = limiter.until_key_ready("k", 2, Jitter::NONE).await;
    assert!(r.is_err());
    assert_eq!(start.elapsed(), Duration::ZERO);
}

/// Release times of three waiters behind a spent key, with `jitter`.
async fn release_times(jitter: Jitter) -> Vec<Duration> {
    let limiter = Arc::new(KeyedLimiter::<String, _, _>::with_clock(
        Gcra::new(per_second(10)),
        TokioClock::new(),
    ));
    assert!(limiter.check(&"k".to_owned()).is_allowed());
    let start = tokio::time::Instant::now();
    let mut tasks = Vec::new();
    for i in 0..3u64 {
        let limiter = limiter.clone();
        let jitter = jitter.seeded(i);
        tasks.push(tokio::spawn(async move {
            assert!(
                limiter
                    .until_key_ready("k", 1, jitter)
                    .await
                    .unwrap()
                    .is_allowed()
            );
            start.elapsed()
        }));
    }
    let mut times = Vec::new();
    for t in tasks {
        times.push(t.await.unwrap());
    }
    times.sort();
    times
}

#[tokio::test(start_paused = true)]
async fn seeded_jitter_replays_and_is_never_early() {
    let jitter = Jitter::up_to(Duration::from_millis(40));
    let a = release_times(jitter).await;
    let b = release_times(jitter).await;
    assert_eq!(a, b, "the same seeds gave other delays");
    for (k, at) in a.iter().enumerate() {
        let due = Duration::from_millis(100) * (k as u32 + 1);
        assert!(*at >= due, "released early: {a:?}");
    }
    // The jitter did spread them: not all on the 100 ms grid.
    let plain = release_times(Jitter::NONE).await;
    assert_ne!(a, plain);
}
