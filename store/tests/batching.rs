//! Concurrent callers' decisions share store calls, one cell a call, a
//! repeated key decided in order, each caller answered by its deadline,
//! and a full queue shed without taking the store for down.

use std::num::NonZeroUsize;
use std::time::Duration;
use weir_rate::{Gcra, Quota, nonzero};
use weir_store::memory::{MemoryBackend, MemoryStore};
use weir_store::{Answer, Batching, FailurePolicy, Source, StoreLimiter, StoreLimiterBuilder};

fn builder() -> StoreLimiterBuilder<MemoryBackend> {
    StoreLimiter::builder(Gcra::new(Quota::per_second(nonzero!(10))))
        .on_failure(FailurePolicy::Open)
}

/// `keys[i]` checked once each, all at once.
async fn all_at_once(limiter: &StoreLimiter<MemoryBackend>, keys: &[String]) -> Vec<Answer> {
    let tasks: Vec<_> = keys
        .iter()
        .map(|key| {
            let (limiter, key) = (limiter.clone(), key.clone());
            tokio::spawn(async move { limiter.check_verbose(&key, 1).await.unwrap() })
        })
        .collect();
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.unwrap());
    }
    answers
}

#[tokio::test(start_paused = true)]
async fn concurrent_callers_share_calls_of_one_cell_each() {
    let store = MemoryStore::with_cells(NonZeroUsize::new(3).unwrap());
    store.set_latency(Duration::from_millis(5));
    let limiter = builder()
        .batching(Batching::default())
        .connect(store.clone())
        .await
        .unwrap();
    let keys: Vec<String> = (0..60).map(|i| format!("client-{i}")).collect();
    for round in 0..5 {
        let answers = all_at_once(&limiter, &keys).await;
        // A call mixing cells would be refused by the store, and answered
        // by the (open) policy.
        assert!(
            answers.iter().all(|a| a.source == Source::Store),
            "round {round}"
        );
        assert!(answers.iter().all(|a| a.decision.is_allowed()));
    }
    assert_eq!(store.decisions(), 300);
    assert!(
        store.calls() < 150,
        "{} calls for 300 decisions",
        store.calls()
    );
    assert!(store.largest_call() > 1);
}

#[tokio::test(start_paused = true)]
async fn a_key_repeated_in_a_batch_is_decided_in_order() {
    let store = MemoryStore::new();
    store.set_latency(Duration::from_millis(5));
    let limiter = builder()
        .batching(Batching::default())
        .connect(store.clone())
        .await
        .unwrap();
    let keys = vec!["alice".to_owned(); 30];
    let answers = all_at_once(&limiter, &keys).await;
    let allowed = answers.iter().filter(|a| a.decision.is_allowed()).count();
    assert_eq!(allowed, 10, "a burst of 10");
    assert!(store.largest_call() > 1);
}

#[tokio::test(start_paused = true)]
async fn a_full_queue_is_shed_and_the_store_is_not_taken_for_down() {
    let store = MemoryStore::new();
    store.set_latency(Duration::from_millis(30));
    let limiter = builder()
        .timeout(Duration::from_millis(100))
        .batching(Batching {
            max_batch: 1,
            max_in_flight: 1,
            queue: 2,
        })
        .connect(store.clone())
        .await
        .unwrap();
    let keys: Vec<String> = (0..40).map(|i| format!("client-{i}")).collect();
    let answers = all_at_once(&limiter, &keys).await;
    let shed = answers.iter().filter(|a| a.source == Source::Shed).count();
    assert!(shed > 0, "no caller was shed");
    // Shed is a denial whatever the policy (here: open).
    assert!(
        answers
            .iter()
            .filter(|a| a.source == Source::Shed)
            .all(|a| !a.decision.is_allowed())
    );
    assert!(answers.iter().any(|a| a.source == Source::Store));
    assert!(answers.iter().all(|a| a.source != Source::FailOpen));
    assert!(!limiter.is_backing_off("client-0"));
}
