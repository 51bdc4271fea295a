//! After a failure the store is skipped for the back-off, but for one
//! probe call a period, and only for the keys of the cell that failed.

use std::num::NonZeroUsize;
use std::time::Duration;
use weir_rate::{Gcra, Quota, nonzero};
use weir_store::memory::{MemoryBackend, MemoryStore};
use weir_store::{FailurePolicy, Source, StoreLimiter};

async fn limiter(store: &MemoryStore) -> StoreLimiter<MemoryBackend> {
    StoreLimiter::builder(Gcra::new(Quota::per_second(nonzero!(1000))))
        .backoff(Duration::from_millis(100))
        .on_failure(FailurePolicy::Open)
        .connect(store.clone())
        .await
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn the_store_is_skipped_after_a_failure_but_for_one_probe_a_period() {
    let store = MemoryStore::new();
    let limiter = limiter(&store).await;
    store.fail();
    assert_eq!(
        limiter.check_verbose("k", 1).await.unwrap().source,
        Source::FailOpen
    );
    let after_failure = store.calls();
    assert!(limiter.is_backing_off("k"));
    for _ in 0..50 {
        let _ = limiter.check("k").await;
    }
    assert_eq!(
        store.calls(),
        after_failure,
        "checks reached the store during its back-off"
    );

    // Over the next second, about one probe each back-off period.
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(10)).await;
        let _ = limiter.check("k").await;
    }
    let probes = store.calls() - after_failure;
    assert!(
        (5..=12).contains(&probes),
        "{probes} probes in one second of 100 ms back-offs"
    );

    store.heal();
    tokio::time::sleep(Duration::from_millis(150)).await;
    let answer = limiter.check_verbose("k", 1).await.unwrap();
    assert_eq!(answer.source, Source::Store);
    assert!(!limiter.is_backing_off("k"));
}

#[tokio::test(start_paused = true)]
async fn a_failing_cell_sends_only_its_own_keys_to_the_policy() {
    let store = MemoryStore::with_cells(NonZeroUsize::new(4).unwrap());
    let limiter = limiter(&store).await;
    let keys: Vec<String> = (0..64).map(|i| format!("client-{i}")).collect();
    let broken = limiter.store().cell_of(&keys[0]);
    store.fail_cell(broken);
    let (mut store_answers, mut policy_answers) = (0, 0);
    for key in &keys {
        let answer = limiter.check_verbose(key, 1).await.unwrap();
        if limiter.store().cell_of(key) == broken {
            assert_eq!(answer.source, Source::FailOpen, "{key}");
            policy_answers += 1;
        } else {
            assert_eq!(answer.source, Source::Store, "{key}");
            store_answers += 1;
        }
    }
    assert!(store_answers > 0 && policy_answers > 0);
}
