//! The invariant every fault keeps: one instance admits no more through
//! the store and its failure policy's fallback together than one limit
//! allows, whatever the store does meanwhile (fails, stalls, heals, turns
//! slow) and whenever.

use proptest::prelude::*;
use std::time::Duration;
use tokio::time::Instant;
use weir_rate::{Gcra, Quota, nonzero};
use weir_store::StoreLimiter;
use weir_store::memory::{MemoryBackend, MemoryStore};

#[derive(Debug, Clone)]
enum Step {
    Check,
    Fail,
    Stall,
    Heal,
    Slow(u64),
    Wait(u64),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => Just(Step::Check),
        1 => Just(Step::Fail),
        1 => Just(Step::Stall),
        2 => Just(Step::Heal),
        1 => (0u64..200).prop_map(Step::Slow),
        3 => (0u64..400).prop_map(Step::Wait),
    ]
}

/// Units allowed over the run, and the run's length.
fn run(steps: &[Step]) -> (u64, Duration) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    runtime.block_on(async {
        let store = MemoryStore::new();
        let limiter =
            StoreLimiter::<MemoryBackend>::builder(Gcra::new(Quota::per_second(nonzero!(5))))
                .timeout(Duration::from_millis(50))
                .backoff(Duration::from_millis(100))
                .connect(store.clone())
                .await
                .unwrap();
        let started = Instant::now();
        let mut allowed = 0;
        for step in steps {
            match step {
                Step::Check => {
                    // Three callers at once, as a busy instance has.
                    let checks = (0..3).map(|_| {
                        let limiter = limiter.clone();
                        tokio::spawn(async move { limiter.check("k").await.is_allowed() })
                    });
                    for check in checks.collect::<Vec<_>>() {
                        allowed += u64::from(check.await.unwrap());
                    }
                }
                Step::Fail => store.fail(),
                Step::Stall => store.stall(),
                Step::Heal => store.heal(),
                Step::Slow(ms) => store.set_latency(Duration::from_millis(*ms)),
                Step::Wait(ms) => tokio::time::sleep(Duration::from_millis(*ms)).await,
            }
        }
        (allowed, started.elapsed())
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn store_and_fallback_together_admit_one_limit(steps in prop::collection::vec(step(), 1..120)) {
        let (allowed, elapsed) = run(&steps);
        // GCRA at 5 a second with a burst of 5: over `elapsed`, the burst
        // and one unit per 200 ms.
        let most = 5 + elapsed.as_millis() as u64 / 200;
        prop_assert!(allowed <= most, "{} allowed in {:?} (at most {})", allowed, elapsed, most);
    }
}
