//! Limits changed while a store limiter serves: what a key spent carries
//! over, a change of layout is refused whole, the fallback follows, and
//! under concurrent checks no decision mixes the old and the new parts of
//! an all-of set.

use std::time::Duration;
use weir_rate::{
    FixedWindow, Gcra, KeyedLimiter, PolicyName, Quota, SlidingWindow, TokenBucket, nonzero,
};
use weir_store::memory::{MemoryBackend, MemoryStore};
use weir_store::{ConfigError, FailurePolicy, Limit, StoreLimiter};

async fn gcra_per_minute(
    n: std::num::NonZeroU32,
    store: &MemoryStore,
) -> StoreLimiter<MemoryBackend> {
    StoreLimiter::builder(Gcra::new(Quota::per_minute(n)))
        .connect(store.clone())
        .await
        .unwrap()
}

/// What the in-process limiter answers to `steps` at one instant: each
/// step a limit of so many a minute, then so many checks of one key.
fn in_process(steps: &[(u32, usize)]) -> Vec<bool> {
    let clock = weir_rate::clock::ManualClock::new();
    let limiter =
        KeyedLimiter::<String, _, _>::with_clock(Gcra::new(Quota::per_minute(nonzero!(1))), clock);
    let mut answers = Vec::new();
    for &(per_minute, checks) in steps {
        limiter.set_limit(Gcra::new(Quota::per_minute(per_minute.try_into().unwrap())));
        answers.extend((0..checks).map(|_| limiter.check("alice").is_allowed()));
    }
    answers
}

#[tokio::test(start_paused = true)]
async fn what_a_key_spent_carries_over_as_in_process() {
    let steps = [(10, 8), (5, 3), (20, 20), (2, 3)];
    let store = MemoryStore::new();
    let limiter = gcra_per_minute(nonzero!(10), &store).await;
    let mut answers = Vec::new();
    for (per_minute, checks) in steps {
        limiter
            .set_limit(Gcra::new(Quota::per_minute(per_minute.try_into().unwrap())))
            .unwrap();
        for _ in 0..checks {
            answers.push(limiter.check("alice").await.is_allowed());
        }
    }
    assert_eq!(answers, in_process(&steps));
    // Lowering never hands a fresh quota: after 8 of 10, fewer than 5 of 5.
    let allowed = |from: usize, to: usize| answers[from..to].iter().filter(|a| **a).count();
    assert_eq!(allowed(0, 8), 8);
    assert!(allowed(8, 11) < 3, "{answers:?}");
    assert!(allowed(11, 31) < 20, "{answers:?}");
    assert_eq!(limiter.quotas(), [Quota::per_minute(nonzero!(2))]);
    assert!(
        limiter.check("bob").await.is_allowed(),
        "a new key starts under the new limit"
    );
}

#[tokio::test(start_paused = true)]
async fn a_window_changes_its_limit_and_keeps_its_count() {
    let store = MemoryStore::new();
    let limiter =
        StoreLimiter::<MemoryBackend>::builder(FixedWindow::new(Quota::per_minute(nonzero!(10))))
            .connect(store.clone())
            .await
            .unwrap();
    for _ in 0..6 {
        assert!(limiter.check("k").await.is_allowed());
    }
    limiter
        .set_limit(FixedWindow::new(Quota::per_minute(nonzero!(7))))
        .unwrap();
    let decision = limiter.check("k").await;
    assert!(decision.is_allowed());
    assert_eq!(decision.remaining(), 0, "7 of 7 spent");
    assert!(!limiter.check("k").await.is_allowed());
}

#[tokio::test(start_paused = true)]
async fn a_change_of_layout_is_refused_and_changes_nothing() {
    let store = MemoryStore::new();
    let minute = Quota::per_minute(nonzero!(10));
    let limiter = StoreLimiter::<MemoryBackend>::builder(Gcra::new(minute))
        .and(FixedWindow::new(Quota::per_hour(nonzero!(100))))
        .connect(store.clone())
        .await
        .unwrap();
    let before = limiter.quotas();
    let refused: [&[Limit]; 4] = [
        &[Limit::of(&Gcra::new(minute))],
        &[
            Limit::of(&TokenBucket::new(minute)),
            Limit::of(&FixedWindow::new(Quota::per_hour(nonzero!(100)))),
        ],
        &[
            Limit::of(&Gcra::new(minute)),
            Limit::of(&FixedWindow::new(Quota::per_day(nonzero!(100)))),
        ],
        &[
            Limit::of(&Gcra::new(minute)),
            Limit::of(&SlidingWindow::try_new(Quota::per_hour(nonzero!(100)), 4).unwrap()),
        ],
    ];
    for limits in refused {
        assert!(
            matches!(limiter.set_limits(limits), Err(ConfigError::Invalid(_))),
            "{limits:?}"
        );
        assert_eq!(limiter.quotas(), before);
    }
    limiter
        .set_limits(&[
            Limit::of(&Gcra::new(Quota::per_minute(nonzero!(20)))),
            Limit::of(&FixedWindow::new(Quota::per_hour(nonzero!(50)))),
        ])
        .unwrap();
    assert_eq!(
        limiter.quotas(),
        [
            Quota::per_minute(nonzero!(20)),
            Quota::per_hour(nonzero!(50))
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn the_per_instance_fallback_takes_the_new_limit_and_keeps_its_count() {
    let store = MemoryStore::new();
    let limiter =
        StoreLimiter::<MemoryBackend>::builder(FixedWindow::new(Quota::per_minute(nonzero!(10))))
            .on_failure(FailurePolicy::PerInstance)
            .connect(store.clone())
            .await
            .unwrap();
    store.fail();
    for _ in 0..4 {
        assert!(limiter.check("k").await.is_allowed(), "the fallback allows");
    }
    limiter
        .set_limit(FixedWindow::new(Quota::per_minute(nonzero!(5))))
        .unwrap();
    assert!(limiter.check("k").await.is_allowed(), "the fifth of 5");
    assert!(
        !limiter.check("k").await.is_allowed(),
        "the fallback counted the four"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_decision_mixes_the_old_and_the_new_parts_of_a_set() {
    let store = MemoryStore::new();
    store.set_latency(Duration::from_micros(50));
    let old = [
        Limit::of(&Gcra::new(Quota::per_second(nonzero!(1_000_000)))),
        Limit::of(&FixedWindow::new(Quota::per_day(nonzero!(1_000_000_000)))),
    ];
    let new = [
        Limit::of(&Gcra::new(Quota::per_second(nonzero!(2_000_000)))),
        Limit::of(&FixedWindow::new(Quota::per_day(nonzero!(2_000_000_000)))),
    ];
    let limiter = StoreLimiter::<MemoryBackend>::builder(Gcra::new(old[0].quota()))
        .and(FixedWindow::new(old[1].quota()))
        .connect(store.clone())
        .await
        .unwrap();
    let policy = PolicyName::new("p");
    let fields = |limits: &[Limit; 2]| {
        format!(
            "\"p-1s\";q={};w=1, \"p-1d\";q={};w=86400",
            limits[0].quota().limit(),
            limits[1].quota().limit()
        )
    };
    let (old_fields, new_fields) = (fields(&old), fields(&new));
    let checkers: Vec<_> = (0..4)
        .map(|i| {
            let (limiter, policy) = (limiter.clone(), policy.clone());
            let (old_fields, new_fields) = (old_fields.clone(), new_fields.clone());
            tokio::spawn(async move {
                let mut seen = [0u32; 2];
                for n in 0..2_000 {
                    let d = limiter.check(&format!("key-{}", (i + n) % 8)).await;
                    let rendered = d.ratelimit_policy(&policy);
                    if rendered == old_fields {
                        seen[0] += 1;
                    } else if rendered == new_fields {
                        seen[1] += 1;
                    } else {
                        panic!("a mix: {rendered}");
                    }
                }
                seen
            })
        })
        .collect();
    let flipper = {
        let limiter = limiter.clone();
        tokio::spawn(async move {
            for flip in 0..200 {
                limiter
                    .set_limits(if flip % 2 == 0 { &new } else { &old })
                    .unwrap();
                tokio::time::sleep(Duration::from_micros(200)).await;
            }
        })
    };
    let mut seen = [0; 2];
    for checker in checkers {
        let [a, b] = checker.await.unwrap();
        seen[0] += a;
        seen[1] += b;
    }
    flipper.await.unwrap();
    assert!(seen[0] > 0 && seen[1] > 0, "both sets decided: {seen:?}");
}
