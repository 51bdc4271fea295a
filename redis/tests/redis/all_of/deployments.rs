//! All-of sets through an outage (the local fallback), on a cluster, and at the most limits one script takes.

use super::*;

/// During an outage the all-of limiter's default fallback keeps the
/// limits all-or-nothing per instance, takes forced charges (whose
/// receipts then refund there), and a refund of a Redis receipt is an
/// error rather than a silent loss; with a fail-closed policy a charge
/// during the outage is an error.
#[test]
fn outages_keep_all_of_and_charges_on_the_local_fallback() -> TestResult {
    let name = "outages_keep_all_of_and_charges_on_the_local_fallback";
    let Some(mut server) = RedisServer::start_or_skip(name)? else {
        return Ok(());
    };
    let rt = rt()?;
    rt.block_on(async {
        let build = |policy| {
            RedisLimiter::builder(Gcra::new(Quota::per_hour(nz(5))))
                .and(FixedWindow::new(per_day(3)))
                .prefix(unique_prefix("outage"))
                .timeout(Duration::from_millis(200))
                .on_failure(policy)
                .connect(Target::server(server.url()))
        };
        let limiter = build(FailurePolicy::PerInstance).await?;
        let closed = build(FailurePolicy::Closed).await?;
        let before = limiter.check("spent").await;
        assert!(before.receipt().is_some());
        server.kill();
        let mut outage = false;
        for _ in 0..50 {
            if limiter.check_verbose("probe", 1).await?.source != Source::Store {
                outage = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(outage, "the outage was never noticed");
        // All-or-nothing locally, as the in-process `AllOf`: three of
        // eight pass (the daily limit).
        let mut passed = 0;
        for _ in 0..8 {
            let v = limiter.check_verbose("victim", 1).await?;
            assert_eq!(v.source, Source::Local, "{:?}", v.error);
            passed += u32::from(v.decision.is_allowed());
        }
        assert_eq!(passed, 3);
        // A charge goes to the local limiter, and its receipt refunds there.
        let charged = limiter.charge("debtor", 8).await?;
        assert_eq!(charged.cost(), 8);
        assert!(!limiter.check("debtor").await.is_allowed());
        limiter.refund("debtor", &charged).await?;
        assert!(limiter.check("debtor").await.is_allowed());
        // A Redis receipt cannot be given back meanwhile: an error.
        assert!(limiter.refund("spent", &before).await.is_err());
        // Fail-closed has nowhere to put a charge.
        assert!(closed.charge("debtor", 1).await.is_err());
        Ok::<_, BoxError>(())
    })
}

/// An all-of limiter on the cluster fixture: keys on every master (and a
/// key starting with `}`) each pass exactly their tightest limit, plain
/// and batched, and each key's limits live in one slot.
#[test]
fn all_of_on_a_cluster() -> TestResult {
    let Some(cluster) = RedisCluster::start_or_skip("all_of_on_a_cluster", 3, 0)? else {
        return Ok(());
    };
    let rt = rt()?;
    let urls = cluster.urls();
    let mut keys: Vec<String> = (0..9).map(|i| format!("user{i}")).collect();
    keys.push("}brace".to_owned());
    for batched in [false, true] {
        let prefix = unique_prefix("cluster");
        let allowed = rt.block_on(async {
            let mut b = RedisLimiter::builder(Gcra::new(Quota::per_hour(nz(7))))
                .and(SlidingWindow::try_new(per_day(4), 3)?)
                .and(TokenBucket::new(Quota::per_hour(nz(9))))
                .prefix(prefix.clone())
                .timeout(Duration::from_secs(2))
                .on_failure(FailurePolicy::Closed);
            if batched {
                b = b.batching(Batching::default());
            }
            let limiter = b.connect(Target::cluster(urls.clone())).await?;
            let handles: Vec<_> = (0..keys.len() * 8)
                .map(|i| {
                    let (l, key) = (limiter.clone(), keys[i % keys.len()].clone());
                    tokio::spawn(async move { (key.clone(), l.check_verbose(&key, 1).await) })
                })
                .collect();
            let mut allowed = std::collections::HashMap::new();
            for h in handles {
                let (key, v) = h.await?;
                let v = v?;
                assert_eq!(v.source, Source::Store, "{key}: {:?}", v.error);
                *allowed.entry(key).or_insert(0u32) += u32::from(v.decision.is_allowed());
            }
            // Each key's limits share the slot of its base.
            for key in &keys {
                let slots: HashSet<u16> = limiter
                    .store()
                    .redis_keys(key)
                    .iter()
                    .map(|k| weir_redis::cluster_slot(k))
                    .collect();
                assert_eq!(slots.len(), 1, "{key}: limits in slots {slots:?}");
            }
            Ok::<_, BoxError>(allowed)
        })?;
        for key in &keys {
            assert_eq!(allowed.get(key), Some(&4), "{key} (batched {batched})");
        }
    }
    Ok(())
}

/// The most limits a limiter takes fit one script (each takes Lua locals,
/// of which a function has room for about two hundred), batched too; one
/// more is a configuration error, not a script that fails on every call.
#[test]
fn the_most_limits_fit_one_script() -> TestResult {
    let Some(server) = RedisServer::start_or_skip("the_most_limits_fit_one_script")? else {
        return Ok(());
    };
    let rt = rt()?;
    rt.block_on(async {
        let builder = || {
            // Limits of 3 to 18 an hour, of the four kinds in turn: the
            // tightest binds.
            let mut b = RedisLimiter::builder(Gcra::new(Quota::per_hour(nz(18))));
            for i in 1..weir_redis::MAX_LIMITS as u32 {
                let q = Quota::per_hour(nz(18 - i));
                b = match i % 4 {
                    0 => b.and(Gcra::new(q)),
                    1 => b.and(TokenBucket::new(q)),
                    2 => b.and(FixedWindow::new(q)),
                    _ => b.and(SlidingWindow::try_new(q, 3).expect("three counters fit an hour")),
                };
            }
            b.prefix(unique_prefix("most"))
                .on_failure(FailurePolicy::Closed)
        };
        for batched in [false, true] {
            let mut b = builder();
            if batched {
                b = b.batching(Batching::default());
            }
            let limiter = b.connect(Target::server(server.url())).await?;
            let mut allowed = 0;
            for _ in 0..5 {
                let v = limiter.check_verbose("k", 1).await?;
                assert_eq!(v.source, Source::Store, "{:?}", v.error);
                allowed += u32::from(v.decision.is_allowed());
            }
            assert_eq!(
                allowed, 3,
                "the tightest of sixteen limits (batched {batched})"
            );
            let receipt = limiter.charge("k", 2).await?;
            limiter.refund("k", &receipt).await?;
        }
        let too_many = builder()
            .and(Gcra::new(Quota::per_hour(nz(1))))
            .connect(Target::server(server.url()))
            .await;
        assert!(matches!(too_many, Err(ConfigError::Invalid(_))));
        Ok::<_, BoxError>(())
    })
}
