//! Limits per key on a real Redis: two instances, each with free and paid
//! tiers on one prefix, hammered by concurrent tasks, admit exactly each
//! tier's quota per key; a key moved between tiers keeps what it spent on
//! both instances.

use super::*;
use weir_rate::{CheckKeyAsync, Tier};
use weir_redis::StoreTiers;

/// Free keys start `f`, paid ones `p`; `ops` is internal.
fn tier_of(key: &str) -> Option<&'static str> {
    match key.as_bytes().first() {
        Some(b'p') => Some("paid"),
        _ if key == "ops" => Some("internal"),
        _ => None,
    }
}

async fn instance(
    server: &RedisServer,
    prefix: &str,
) -> Result<
    StoreTiers<weir_redis::Redis, fn(&str) -> Option<&'static str>>,
    Box<dyn std::error::Error>,
> {
    let tier = |per_hour| {
        RedisLimiter::builder(Gcra::new(Quota::per_hour(nz(per_hour))))
            .prefix(prefix)
            .on_failure(FailurePolicy::Closed)
            .connect(Target::server(server.url()))
    };
    Ok(StoreTiers::try_new(
        vec![
            Tier::limited("free", tier(5).await?),
            Tier::limited("paid", tier(40).await?),
            Tier::unlimited("internal"),
        ],
        "free",
        tier_of as fn(&str) -> Option<&'static str>,
    )?)
}

#[test]
fn two_instances_under_load_hold_each_tiers_quota_exactly() -> TestResult {
    let Some(server) = RedisServer::start_or_skip("tiers on Redis")? else {
        return Ok(());
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let prefix = unique_prefix("tiers");
        let instances = Arc::new([
            instance(&server, &prefix).await?,
            instance(&server, &prefix).await?,
        ]);
        let keys = ["f1", "f2", "p1", "p2", "ops"];
        let mut tasks = Vec::new();
        for t in 0..32 {
            let instances = Arc::clone(&instances);
            tasks.push(tokio::spawn(async move {
                let mut allowed = std::collections::HashMap::<&str, u32>::new();
                for i in 0..20 {
                    let key = keys[(t + i) % keys.len()];
                    let decision = instances[t % 2]
                        .check_n_async(key, 1)
                        .await
                        .expect("a unit");
                    if decision.is_allowed() {
                        *allowed.entry(key).or_default() += 1;
                    }
                }
                allowed
            }));
        }
        let mut total = std::collections::HashMap::<&str, u32>::new();
        for task in tasks {
            for (key, n) in task.await? {
                *total.entry(key).or_default() += n;
            }
        }
        // 640 checks, 128 a key: each free key its 5, each paid its 40,
        // the internal one all.
        assert_eq!(
            [
                total["f1"],
                total["f2"],
                total["p1"],
                total["p2"],
                total["ops"]
            ],
            [5, 5, 40, 40, 128],
            "{total:?}"
        );
        Ok(())
    })
}

#[test]
fn a_key_moved_between_tiers_keeps_what_it_spent_on_every_instance() -> TestResult {
    let Some(server) = RedisServer::start_or_skip("tier changes on Redis")? else {
        return Ok(());
    };
    rt()?.block_on(async {
        let prefix = unique_prefix("tier-moves");
        let tier = |per_hour| {
            RedisLimiter::builder(Gcra::new(Quota::per_hour(nz(per_hour))))
                .prefix(prefix.clone())
                .on_failure(FailurePolicy::Closed)
                .connect(Target::server(server.url()))
        };
        let paid_now = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let resolver = {
            let paid_now = Arc::clone(&paid_now);
            move |_: &str| {
                Some(if paid_now.load(std::sync::atomic::Ordering::Relaxed) {
                    "paid"
                } else {
                    "free"
                })
            }
        };
        let one = StoreTiers::try_new(
            vec![
                Tier::limited("free", tier(2).await?),
                Tier::limited("paid", tier(10).await?),
            ],
            "free",
            resolver.clone(),
        )?;
        let two = StoreTiers::try_new(
            vec![
                Tier::limited("free", tier(2).await?),
                Tier::limited("paid", tier(10).await?),
            ],
            "free",
            resolver,
        )?;
        let mut paid = 0;
        for i in 0..8 {
            let instance = if i % 2 == 0 { &one } else { &two };
            paid += u32::from(instance.check_n("alice", 1).await?.is_allowed());
        }
        assert_eq!(paid, 8);
        paid_now.store(false, std::sync::atomic::Ordering::Relaxed);
        // 8 paid units are 48 minutes of schedule; the free tier's
        // tolerance is 60 minutes at 30 minutes a unit: nothing fits.
        for instance in [&one, &two] {
            let refused = instance.check_n("alice", 1).await?;
            assert!(!refused.is_allowed(), "no fresh free quota");
            assert_eq!(refused.policy(), Some("free"));
        }
        assert!(
            one.check_n("bob", 1).await?.is_allowed(),
            "a fresh key has its own"
        );
        Ok(())
    })
}
