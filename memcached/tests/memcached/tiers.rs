//! Limits per key on a real Memcached: two instances with free and paid
//! tiers on one prefix, hammered by concurrent tasks, admit exactly each
//! tier's quota per key, for the counters (a sliding window) and for
//! compare-and-swap (GCRA); a key moved down keeps what it spent.

use super::*;
use std::sync::Arc;
use weir_memcached::StoreTiers;
use weir_rate::{CheckKeyAsync, Tier};

/// Free keys start `f`, paid ones `p`.
fn tier_of(key: &str) -> Option<&'static str> {
    key.starts_with('p').then_some("paid")
}

type Tiers = StoreTiers<weir_memcached::Memcached, fn(&str) -> Option<&'static str>>;

async fn instance<L: weir_store::StoreAlgorithm>(
    server: &MemcachedServer,
    prefix: &str,
    free: L,
    paid: L,
) -> Result<Tiers, ConfigError> {
    let tier = |algorithm: L| {
        MemcachedLimiter::builder(algorithm)
            .prefix(prefix)
            .on_failure(FailurePolicy::Closed)
            .connect(Servers::one(server.addr()))
    };
    StoreTiers::try_new(
        vec![
            Tier::limited("free", tier(free).await?),
            Tier::limited("paid", tier(paid).await?),
        ],
        "free",
        tier_of as fn(&str) -> Option<&'static str>,
    )
}

async fn hammer(instances: Arc<[Tiers; 2]>) -> Result<[u32; 4], Box<dyn Error>> {
    let keys = ["f1", "f2", "p1", "p2"];
    let mut tasks = Vec::new();
    for t in 0..32 {
        let instances = Arc::clone(&instances);
        tasks.push(tokio::spawn(async move {
            let mut allowed = [0u32; 4];
            for i in 0..20 {
                let k = (t + i) % keys.len();
                let a = instances[t % 2]
                    .check_n_async(keys[k], 1)
                    .await
                    .expect("a unit");
                allowed[k] += u32::from(a.is_allowed());
            }
            allowed
        }));
    }
    let mut total = [0u32; 4];
    for task in tasks {
        for (sum, n) in total.iter_mut().zip(task.await?) {
            *sum += n;
        }
    }
    Ok(total)
}

#[test]
fn two_instances_under_load_hold_each_tiers_quota_exactly() -> TestResult {
    let Some(server) = MemcachedServer::start_or_skip("tiers on Memcached")? else {
        return Ok(());
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let sliding = |n| SlidingWindow::try_new(Quota::per_hour(nz(n)), 2).expect("fits");
        let prefix = unique_prefix("tiers-sw");
        let windows = Arc::new([
            instance(&server, &prefix, sliding(5), sliding(40)).await?,
            instance(&server, &prefix, sliding(5), sliding(40)).await?,
        ]);
        assert_eq!(hammer(windows).await?, [5, 5, 40, 40], "sliding windows");
        let gcra = |n| Gcra::new(Quota::per_hour(nz(n)));
        let prefix = unique_prefix("tiers-gcra");
        let cas = Arc::new([
            instance(&server, &prefix, gcra(5), gcra(40)).await?,
            instance(&server, &prefix, gcra(5), gcra(40)).await?,
        ]);
        // Compare-and-swap under 16 writers a key may shed a check that
        // kept losing (refused, never admitted): at most the quota.
        let got = hammer(Arc::clone(&cas)).await?;
        assert!(
            got[0] <= 5 && got[1] <= 5 && got[2] <= 40 && got[3] <= 40,
            "{got:?}"
        );
        // What was shed is still there to spend, one check at a time.
        let mut filled = got;
        for (k, key) in ["f1", "f2", "p1", "p2"].iter().enumerate() {
            while cas[0].check_n(key, 1).await?.is_allowed() {
                filled[k] += 1;
            }
        }
        assert_eq!(filled, [5, 5, 40, 40], "GCRA by compare-and-swap");
        // A paid key moved to free keeps its 40 spent: p1 asked as free.
        let moved = StoreTiers::try_new(
            vec![Tier::limited(
                "free",
                MemcachedLimiter::builder(gcra(5))
                    .prefix(prefix.clone())
                    .on_failure(FailurePolicy::Closed)
                    .connect(Servers::one(server.addr()))
                    .await?,
            )],
            "free",
            |_: &str| None,
        )?;
        assert!(
            !moved.check_n("p1", 1).await?.is_allowed(),
            "no fresh free quota"
        );
        Ok(())
    })
}
