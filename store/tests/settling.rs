//! Charges and refunds reach the store, and an all-of set is decided
//! all-or-nothing there.

use std::time::Duration;
use weir_rate::{FixedWindow, Gcra, Quota, nonzero};
use weir_store::memory::{MemoryBackend, MemoryStore};
use weir_store::{Source, StoreLimiter};

#[tokio::test(start_paused = true)]
async fn a_refund_gives_the_units_back_on_the_store() {
    let store = MemoryStore::new();
    let limiter = StoreLimiter::<MemoryBackend>::builder(Gcra::new(Quota::per_minute(nonzero!(2))))
        .connect(store.clone())
        .await
        .unwrap();
    let first = limiter.check("k").await;
    assert!(limiter.check("k").await.is_allowed());
    assert!(!limiter.check("k").await.is_allowed());
    limiter.refund("k", &first).await.unwrap();
    let again = limiter.check_verbose("k", 1).await.unwrap();
    assert_eq!(again.source, Source::Store);
    assert!(again.decision.is_allowed());
}

#[tokio::test(start_paused = true)]
async fn a_charge_spends_past_the_limit_and_later_checks_wait_it_out() {
    let store = MemoryStore::new();
    let limiter = StoreLimiter::<MemoryBackend>::builder(Gcra::new(Quota::per_second(nonzero!(2))))
        .connect(store.clone())
        .await
        .unwrap();
    limiter.charge("k", 6).await.unwrap();
    let denied = limiter.check("k").await;
    assert!(!denied.is_allowed());
    let wait = denied.retry_after().unwrap();
    assert!(
        wait >= Duration::from_millis(1500),
        "{wait:?} for a debt of 4 units at 2/s"
    );
    tokio::time::sleep(wait).await;
    assert!(limiter.check("k").await.is_allowed());
}

#[tokio::test(start_paused = true)]
async fn an_all_of_set_spends_nothing_on_a_refused_request() {
    let store = MemoryStore::new();
    let limiter =
        StoreLimiter::<MemoryBackend>::builder(FixedWindow::new(Quota::per_second(nonzero!(5))))
            .and(FixedWindow::new(Quota::per_minute(nonzero!(7))))
            .connect(store.clone())
            .await
            .unwrap();
    let mut allowed = 0;
    for _ in 0..30 {
        allowed += u32::from(limiter.check("k").await.is_allowed());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Three seconds: five in the first, the minute's last two after; the
    // per-second windows spend nothing on what the minute refused.
    assert_eq!(allowed, 7);
    assert_eq!(limiter.quotas().len(), 2);
}
