//! What callers get while the store cannot answer: each failure policy,
//! against a store that fails, refuses, stalls or answers too late.

use std::time::Duration;
use tokio::time::Instant;
use weir_rate::{Gcra, Quota, nonzero};
use weir_store::memory::{MemoryBackend, MemoryStore};
use weir_store::{FailurePolicy, Source, StoreError, StoreLimiter, StoreLimiterBuilder};

/// Five a second, burst five.
fn five_a_second() -> StoreLimiterBuilder<MemoryBackend> {
    StoreLimiter::builder(Gcra::new(Quota::per_second(nonzero!(5))))
}

#[tokio::test(start_paused = true)]
async fn closed_denies_while_the_store_fails() {
    let store = MemoryStore::new();
    let limiter = five_a_second()
        .on_failure(FailurePolicy::Closed)
        .connect(store.clone())
        .await
        .unwrap();
    store.fail();
    let answer = limiter.check_verbose("alice", 1).await.unwrap();
    assert_eq!(answer.source, Source::FailClosed);
    assert!(!answer.decision.is_allowed());
    assert_eq!(answer.decision.retry_after(), Some(Duration::from_secs(1)));
    assert!(matches!(answer.error, Some(StoreError::Store(_))));
}

#[tokio::test(start_paused = true)]
async fn open_allows_while_the_store_fails() {
    let store = MemoryStore::new();
    let limiter = five_a_second()
        .on_failure(FailurePolicy::Open)
        .connect(store.clone())
        .await
        .unwrap();
    store.fail();
    for _ in 0..20 {
        let answer = limiter.check_verbose("alice", 1).await.unwrap();
        assert_eq!(answer.source, Source::FailOpen);
        assert!(answer.decision.is_allowed());
    }
}

#[tokio::test(start_paused = true)]
async fn per_instance_counts_what_the_store_allowed_before_it_failed() {
    let store = MemoryStore::new();
    let limiter = five_a_second().connect(store.clone()).await.unwrap();
    for _ in 0..3 {
        let answer = limiter.check_verbose("alice", 1).await.unwrap();
        assert_eq!(answer.source, Source::Store);
        assert!(answer.decision.is_allowed());
    }
    store.fail();
    // The fallback knows the three the store let through: two more, not a
    // fresh burst of five.
    let mut allowed = 0;
    for _ in 0..10 {
        let answer = limiter.check_verbose("alice", 1).await.unwrap();
        assert_eq!(answer.source, Source::Local);
        allowed += u32::from(answer.decision.is_allowed());
    }
    assert_eq!(allowed, 2);
}

#[tokio::test(start_paused = true)]
async fn after_an_outage_the_store_and_the_fallback_must_both_allow() {
    let store = MemoryStore::new();
    let limiter = five_a_second().connect(store.clone()).await.unwrap();
    store.fail();
    // The fallback spends the whole burst while the store sees nothing.
    let during: u32 = futures_allowed(&limiter, 10).await;
    assert_eq!(during, 5);
    store.heal();
    tokio::time::sleep(Duration::from_millis(150)).await; // past the back-off
    // The store has its full burst, but within the window after the outage
    // the fallback's room is needed too: little or nothing more.
    let after = futures_allowed(&limiter, 10).await;
    assert!(
        during + after <= 6,
        "{during} + {after} in about one second of a 5/s limit"
    );
}

/// Checks of `alice`, one after another; how many were allowed.
async fn futures_allowed(limiter: &StoreLimiter<MemoryBackend>, checks: u32) -> u32 {
    let mut allowed = 0;
    for _ in 0..checks {
        allowed += u32::from(limiter.check("alice").await.is_allowed());
    }
    allowed
}

#[tokio::test(start_paused = true)]
async fn a_stalled_store_is_answered_for_at_the_deadline() {
    let store = MemoryStore::new();
    let limiter = five_a_second()
        .timeout(Duration::from_millis(40))
        .on_failure(FailurePolicy::Closed)
        .connect(store.clone())
        .await
        .unwrap();
    store.stall();
    let started = Instant::now();
    let answer = limiter.check_verbose("alice", 1).await.unwrap();
    assert_eq!(started.elapsed(), Duration::from_millis(40));
    assert_eq!(answer.source, Source::FailClosed);
    assert!(matches!(answer.error, Some(StoreError::Timeout(_))));
}

#[tokio::test(start_paused = true)]
async fn a_refusing_store_is_a_refusal_not_an_outage() {
    let store = MemoryStore::new();
    let limiter = five_a_second()
        .on_failure(FailurePolicy::Closed)
        .connect(store.clone())
        .await
        .unwrap();
    store.refuse();
    let error = limiter.try_check_n("alice", 1).await.unwrap_err();
    assert!(error.is_refusal(), "{error}");
    let answer = limiter.check_verbose("alice", 1).await.unwrap();
    assert_eq!(answer.source, Source::FailClosed);
}

/// A store slower than the timeout still counts what it was asked: the
/// callers who gave up got the failure policy, which must not add a
/// second quota on top of the store's.
#[tokio::test(start_paused = true)]
async fn a_slow_store_does_not_loosen_the_limit() {
    let store = MemoryStore::new();
    let limiter =
        StoreLimiter::<MemoryBackend>::builder(Gcra::new(Quota::per_minute(nonzero!(120))))
            .timeout(Duration::from_millis(100))
            .connect(store.clone())
            .await
            .unwrap();
    let started = Instant::now();
    let mut allowed = 0;
    let mut checks = 0u32;
    while started.elapsed() < Duration::from_secs(60) {
        // Every third second the store's answers come back too late.
        let slow = started.elapsed().as_secs().is_multiple_of(3);
        store.set_latency(if slow {
            Duration::from_millis(150)
        } else {
            Duration::from_millis(1)
        });
        let mut tasks = Vec::new();
        for _ in 0..4 {
            let limiter = limiter.clone();
            tasks.push(tokio::spawn(async move {
                limiter.check("alice").await.is_allowed()
            }));
        }
        for task in tasks {
            allowed += u32::from(task.await.unwrap());
            checks += 1;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(checks > 1_000);
    // One minute of 120 a minute with a burst of 120: at most 240 (the
    // burst, then the minute's refill), however the stalls fall.
    assert!(
        allowed <= 240,
        "{allowed} allowed of a 120/min limit over a minute"
    );
    assert!(
        allowed >= 120,
        "{allowed}: the limit should still admit its quota"
    );
}
