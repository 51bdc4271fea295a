//! The Redis store on private Redis Clusters: limits held across slots by
//! tasks and processes, plain and batched, a master killed under load with
//! its replica promoted, refunds that survive the client's resends, and
//! slots migrating under load.
#![cfg(not(loom))]

#[path = "../support/mod.rs"]
mod support;

mod refunds;
mod resharding;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use support::*;
use weir_rate::{Gcra, Quota, SlidingWindow, TokenBucket};
use weir_redis::{Batching, FailurePolicy, RedisLimiter, Source, Target, cluster_slot};
use weir_test_support::redis_server::RedisCluster;

/// Held by each test for its whole run: each starts a cluster of its own,
/// and two at once on a machine of two cores miss the short deadlines the
/// tests are about (a live migration's share of fallbacks, most of all).
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Entry point of the worker processes (does nothing when run normally).
#[test]
fn worker_process_entry() -> TestResult {
    worker_main()
}

/// Both cluster scenarios share one cluster (building one takes seconds).
#[test]
fn cluster_limits_and_failover() -> TestResult {
    let _alone = one_at_a_time();
    let Some(mut cluster) = RedisCluster::start_or_skip("cluster_limits_and_failover", 3, 1)?
    else {
        return Ok(());
    };
    let rt = rt()?;
    let urls = cluster.urls();

    // 1. Limits hold on keys spread over all three masters.
    let keys: Vec<String> = (0..12).map(|i| format!("user{i}")).collect();
    for alg in ALGORITHMS {
        for batched in [false, true] {
            let spec = Spec {
                cluster: true,
                urls: urls.clone(),
                prefix: unique_prefix("cl"),
                algorithm: alg,
                limit: 40,
                window: Duration::from_secs(3600),
                keys: keys.clone(),
                tasks: 6,
                requests: 120,
                batched,
            };
            let first = window_index(spec.window);
            let started = Instant::now();
            let workers = spawn_workers("worker_process_entry", 2, &spec)?;
            let mut tally = rt.block_on(run_load(&spec))?;
            tally.merge(&collect_workers(workers)?);
            let what = if batched {
                "cluster batched"
            } else {
                "cluster plain"
            };
            assert_eq!(tally.not_redis, 0, "{alg} {what}: the cluster was healthy");
            check_tally(what, &spec, &tally, started, first)?;
        }
    }
    // The keys really are spread over the masters.
    let mut masters = std::collections::HashSet::new();
    for k in &keys {
        let slot = keyslot(&cluster, k)?;
        masters.insert(cluster.master_of(slot)?);
    }
    assert_eq!(masters.len(), 3, "12 keys should land on all 3 masters");

    // 2. A master dies under load; its replica takes over.
    failover(&mut cluster, &rt)
}

/// The slot of limiter key `key` (its hash tag).
/// The slot of limiter key `key` (its hash tag), as the server computes it
/// and as the client does.
fn keyslot(cluster: &RedisCluster, key: &str) -> Result<u16, Box<dyn std::error::Error>> {
    let rkey = format!("some:prefix:{{{key}}}");
    let server: u16 = cluster.nodes[0]
        .cli(&["CLUSTER", "KEYSLOT", &rkey])?
        .trim()
        .parse()?;
    assert_eq!(cluster_slot(&rkey), server, "slot of {rkey}");
    Ok(server)
}

fn failover(cluster: &mut RedisCluster, rt: &tokio::runtime::Runtime) -> TestResult {
    let urls = cluster.urls();
    let victim_slot = keyslot(cluster, "victim")?;
    let victim = cluster.master_of(victim_slot)?;
    let timeout = Duration::from_millis(300);
    let limiter = rt.block_on(
        RedisLimiter::builder(TokenBucket::new(Quota::per_second(nz(1_000_000))))
            .prefix(unique_prefix("fo"))
            .timeout(timeout)
            .backoff(Duration::from_millis(50))
            .on_failure(FailurePolicy::Closed)
            .batching(Batching::default())
            .connect(Target::cluster(urls.clone())),
    )?;
    let plain = rt.block_on(
        RedisLimiter::builder(Gcra::new(Quota::per_second(nz(1_000_000))))
            .prefix(unique_prefix("fo"))
            .timeout(timeout)
            .backoff(Duration::from_millis(50))
            .on_failure(FailurePolicy::Closed)
            .connect(Target::cluster(urls.clone())),
    )?;
    // Each task's second key lives on a master that survives.
    let mut survivors = Vec::new();
    for j in 0.. {
        if survivors.len() == 8 {
            break;
        }
        let key = format!("other{j}");
        if cluster.master_of(keyslot(cluster, &key)?)? != victim {
            survivors.push(key);
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    let outage = Arc::new(AtomicBool::new(false));
    let served_during_outage = Arc::new(AtomicU64::new(0));
    let mut handles = Vec::new();
    for (t, survivor) in survivors.into_iter().enumerate() {
        let l = if t % 2 == 0 {
            limiter.clone()
        } else {
            plain.clone()
        };
        let (stop, outage, served) = (stop.clone(), outage.clone(), served_during_outage.clone());
        handles.push(rt.spawn(async move {
            let mut seen: HashMap<(bool, Source), u64> = HashMap::new();
            let mut slowest = Duration::ZERO;
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) && n < 300_000 {
                let victim = n.is_multiple_of(2);
                let key = if victim { "victim" } else { survivor.as_str() };
                let start = Instant::now();
                let during = outage.load(Ordering::Relaxed);
                if let Ok(v) = l.check_verbose(key, 1).await {
                    *seen.entry((victim, v.source)).or_default() += 1;
                    // The policy is fail-closed: nothing but Redis allows.
                    assert!(v.source == Source::Store || !v.decision.is_allowed());
                    if during && !victim && v.source == Source::Store {
                        served.fetch_add(1, Ordering::Relaxed);
                    }
                }
                slowest = slowest.max(start.elapsed());
                n += 1;
                if n.is_multiple_of(8) {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
            (seen, slowest)
        }));
    }
    rt.block_on(async { tokio::time::sleep(Duration::from_millis(300)).await });
    // Kill and promote on another thread while the load keeps running here.
    outage.store(true, Ordering::Relaxed);
    let promoted = std::thread::scope(|s| {
        let h = s.spawn(|| cluster.kill_master_and_promote(victim));
        rt.block_on(async {
            while !h.is_finished() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });
        h.join()
    })
    .map_err(|_| "the failover thread panicked")??;
    // Decisions for the victim's slot come from Redis again.
    let resumed = rt.block_on(async {
        for _ in 0..400 {
            if plain
                .check_verbose("victim", 1)
                .await
                .is_ok_and(|v| v.source == Source::Store)
                && limiter
                    .check_verbose("victim", 1)
                    .await
                    .is_ok_and(|v| v.source == Source::Store)
            {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    });
    outage.store(false, Ordering::Relaxed);
    assert!(resumed, "decisions did not resume after the failover");
    rt.block_on(async { tokio::time::sleep(Duration::from_millis(200)).await });
    stop.store(true, Ordering::Relaxed);
    let mut total: HashMap<(bool, Source), u64> = HashMap::new();
    for h in handles {
        let (seen, slowest) = rt.block_on(h)?;
        assert!(slowest < timeout * 10, "a check took {slowest:?}");
        for (k, v) in seen {
            *total.entry(k).or_default() += v;
        }
    }
    assert!(total.get(&(true, Source::Store)).copied().unwrap_or(0) > 0);
    // Keys on the surviving masters were served by Redis while the
    // victim's slots were down: one dead master is not an outage of all.
    let served = served_during_outage.load(Ordering::Relaxed);
    assert!(
        served > 0,
        "no surviving master's key was served during the failover: {total:?}"
    );
    // The outage was seen, and answered by the policy.
    assert!(
        total.get(&(true, Source::FailClosed)).copied().unwrap_or(0) > 0,
        "the dead master's slot never failed closed: {total:?}"
    );
    // Correct decisions afterwards, on the promoted replica: exactly the
    // quota for a fresh key in the same slot.
    assert_eq!(cluster.master_of(victim_slot)?, promoted);
    rt.block_on(async {
        let fresh = RedisLimiter::builder(SlidingWindow::try_new(Quota::per_hour(nz(7)), 2)?)
            .prefix(unique_prefix("after"))
            .on_failure(FailurePolicy::Closed)
            .timeout(Duration::from_secs(2))
            .connect(Target::cluster(urls))
            .await?;
        let mut allowed = 0;
        for _ in 0..20 {
            let v = fresh.check_verbose("victim", 1).await?;
            assert_eq!(v.source, Source::Store, "{:?}", v.error);
            allowed += u32::from(v.decision.is_allowed());
        }
        assert_eq!(allowed, 7);
        Ok(())
    })
}
