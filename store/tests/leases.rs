//! Hot keys answered from leases: fewer store calls, no unit admitted
//! that the store did not count, and a check dropped while it waits for a
//! lease losing nothing.

use std::time::Duration;
use weir_rate::{Gcra, Quota, nonzero};
use weir_store::memory::{MemoryBackend, MemoryStore};
use weir_store::{PreAggregation, Source, StoreLimiter};

const LEASE: u32 = 10;

async fn limiter(store: &MemoryStore, quota: Quota) -> StoreLimiter<MemoryBackend> {
    StoreLimiter::builder(Gcra::new(quota))
        .pre_aggregate(PreAggregation {
            lease: LEASE,
            hot_after: 5,
            max_age: Duration::from_secs(60),
            ..Default::default()
        })
        .connect(store.clone())
        .await
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_hot_key_is_answered_from_leases_in_few_calls() {
    let store = MemoryStore::new();
    let limiter = limiter(&store, Quota::per_second(nonzero!(10_000))).await;
    let mut from_leases = 0;
    for _ in 0..500 {
        let answer = limiter.check_verbose("hot", 1).await.unwrap();
        assert!(answer.decision.is_allowed());
        from_leases += u32::from(answer.source == Source::Lease);
    }
    assert!(from_leases > 400, "{from_leases} of 500 from leases");
    assert!(
        store.calls() < 100,
        "{} calls for 500 checks",
        store.calls()
    );
}

#[tokio::test(start_paused = true)]
async fn no_unit_is_admitted_that_the_store_did_not_count() {
    let store = MemoryStore::new();
    // A burst of 100, refilled at 100 a minute: no refill to speak of
    // within the test's few milliseconds.
    let limiter = limiter(&store, Quota::per_minute(nonzero!(100))).await;
    let mut allowed = 0;
    for _ in 0..300 {
        allowed += u32::from(limiter.check("hot").await.is_allowed());
    }
    assert!(allowed <= 100, "{allowed} admitted of a burst of 100");
    // Units taken in leases and unused may be lost, fewer than 1.5 leases.
    assert!(
        allowed + LEASE * 3 / 2 > 100,
        "{allowed} admitted of a burst of 100"
    );
}

#[tokio::test(start_paused = true)]
async fn a_check_dropped_while_a_lease_is_fetched_loses_no_units() {
    let store = MemoryStore::new();
    let limiter = limiter(&store, Quota::per_minute(nonzero!(100))).await;
    for _ in 0..5 {
        assert!(limiter.check("hot").await.is_allowed()); // now hot
    }
    // The next lease takes 50 ms to come; its callers give up after 1 ms.
    store.set_latency(Duration::from_millis(50));
    let (mut dropped, mut admitted_meanwhile) = (0, 0);
    for _ in 0..20 {
        match tokio::time::timeout(Duration::from_millis(1), limiter.check("hot")).await {
            Ok(decision) => admitted_meanwhile += u32::from(decision.is_allowed()),
            Err(_) => dropped += 1,
        }
    }
    assert!(dropped > 0, "no check was dropped while it waited");
    store.set_latency(Duration::ZERO);
    tokio::time::sleep(Duration::from_millis(100)).await; // the fetch lands
    let mut allowed = 5;
    for _ in 0..300 {
        allowed += u32::from(limiter.check("hot").await.is_allowed());
    }
    // The dropped checks' units went back to the lease; whatever else was
    // answered in between was admitted (and counted) too. Nothing more than
    // the burst, and nothing lost beyond the unused rest of the leases.
    let total = allowed + admitted_meanwhile;
    assert!(total <= 100, "{total} admitted of a burst of 100");
    assert!(
        total + LEASE * 3 / 2 > 100,
        "{total}: units lost with the dropped checks"
    );
}
