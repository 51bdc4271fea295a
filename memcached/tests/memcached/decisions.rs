//! What the store decides: the in-process answers, limits held by
//! concurrent callers and by two limiters, refunds and charges, waits.

use super::*;

/// A burst at a slow rate decides exactly as in process, remaining
/// included (the burst takes microseconds, against a unit a minute).
#[test]
fn a_burst_is_decided_as_in_process_for_every_algorithm() -> TestResult {
    let Some(server) = MemcachedServer::start_or_skip("memcached decisions")? else {
        return Ok(());
    };
    rt()?.block_on(async {
        let quota = Quota::per_hour(nz(5)).allow_burst(nz(3));
        async fn pattern(l: &MemcachedLimiter, key: &str) -> Vec<(bool, u32)> {
            let mut out = Vec::new();
            for _ in 0..8 {
                let a = l.check_verbose(key, 1).await.expect("within the max cost");
                assert_eq!(a.source, Source::Store, "{:?}", a.error);
                out.push((a.decision.is_allowed(), a.decision.remaining()));
            }
            out
        }
        let fixed = limiter(FixedWindow::new(quota), "burst-fw", &[&server]).await?;
        assert_eq!(
            pattern(&fixed, "k").await,
            in_process(FixedWindow::new(quota), 8)
        );
        let gcra = limiter(Gcra::new(quota), "burst-gcra", &[&server]).await?;
        assert_eq!(pattern(&gcra, "k").await, in_process(Gcra::new(quota), 8));
        let bucket = limiter(TokenBucket::new(quota), "burst-tb", &[&server]).await?;
        assert_eq!(
            pattern(&bucket, "k").await,
            in_process(TokenBucket::new(quota), 8)
        );
        for n in [2, 5] {
            let sliding = SlidingWindow::try_new(quota, n)?;
            let on_store = limiter(sliding.clone(), &format!("burst-sw{n}"), &[&server]).await?;
            let got = pattern(&on_store, "k").await;
            // The in-process limiter's first window is where the store's
            // counters begin too: an empty past, the same allowances.
            let expected = in_process(sliding, 8);
            assert_eq!(
                got.iter().map(|p| p.0).collect::<Vec<_>>(),
                expected.iter().map(|p| p.0).collect::<Vec<_>>(),
                "sliding window of {n}"
            );
        }
        Ok(())
    })
}

/// Many callers on one key, through two limiters (two instances) sharing
/// the server: never more than the limit, for the counters and for the
/// compare-and-swap algorithms alike.
#[test]
fn concurrent_callers_of_two_instances_never_pass_more_than_the_limit() -> TestResult {
    let Some(server) = MemcachedServer::start_or_skip("memcached concurrency")? else {
        return Ok(());
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        // 40 an hour: nothing refills during the test.
        let quota = Quota::per_hour(nz(40));
        for kind in ["fw", "sw", "gcra", "tb"] {
            let prefix = unique_prefix(&format!("conc-{kind}"));
            let make = || {
                let b = match kind {
                    "fw" => MemcachedLimiter::builder(FixedWindow::new(quota)),
                    "sw" => MemcachedLimiter::builder(SlidingWindow::try_new(quota, 3).unwrap()),
                    "gcra" => MemcachedLimiter::builder(Gcra::new(quota)),
                    _ => MemcachedLimiter::builder(TokenBucket::new(quota)),
                };
                b.prefix(prefix.clone())
                    .timeout(Duration::from_secs(2))
                    .on_failure(FailurePolicy::Closed)
                    .connect(Servers::one(server.addr()))
            };
            let (a, b) = (make().await?, make().await?);
            let mut tasks = Vec::new();
            for t in 0..32 {
                let l = if t % 2 == 0 { a.clone() } else { b.clone() };
                tasks.push(tokio::spawn(async move {
                    let mut mine = (0, 0, 0);
                    for _ in 0..10 {
                        let answer = l.check_verbose("hot", 1).await.expect("max cost");
                        match answer.source {
                            Source::Store if answer.decision.is_allowed() => mine.0 += 1,
                            Source::Store => mine.1 += 1,
                            Source::Shed => mine.2 += 1,
                            other => panic!("answered by {other:?}: {:?}", answer.error),
                        }
                    }
                    mine
                }));
            }
            let mut total = (0, 0, 0);
            for t in tasks {
                let (allowed, denied, shed) = t.await?;
                total = (total.0 + allowed, total.1 + denied, total.2 + shed);
            }
            assert!(total.0 <= 40, "{kind}: {total:?} let more than 40 through");
            // The counters allow exactly the limit; the swaps allow what did
            // not lose to another writer too often.
            if kind == "fw" || kind == "sw" {
                assert_eq!(total.0, 40, "{kind}: {total:?}");
            } else {
                // Each round of colliding writes has a winner, so the limit
                // is reached; a request that loses every round is shed.
                assert!(total.0 >= 30, "{kind}: {total:?}");
            }
        }
        Ok(())
    })
}

/// A refund gives back what its spending still counts for, and a forced
/// charge puts the key in debt, on the store.
#[test]
fn refunds_and_charges_settle_on_the_store() -> TestResult {
    let Some(server) = MemcachedServer::start_or_skip("memcached settling")? else {
        return Ok(());
    };
    rt()?.block_on(async {
        let quota = Quota::per_hour(nz(3));
        let fixed = limiter(FixedWindow::new(quota), "settle-fw", &[&server]).await?;
        let gcra = limiter(Gcra::new(quota), "settle-gcra", &[&server]).await?;
        let sliding = limiter(SlidingWindow::try_new(quota, 4)?, "settle-sw", &[&server]).await?;
        for l in [&fixed, &gcra, &sliding] {
            let spent = l.check_n("k", 3).await?;
            assert!(spent.is_allowed(), "{l:?}");
            assert!(!l.check("k").await.is_allowed());
            // A denial's increment is taken back by a call nobody waits for
            // (a late one only leaves the count stricter): let it land, or
            // the checks below could see it still counted.
            tokio::time::sleep(Duration::from_millis(50)).await;
            l.refund("k", &spent).await?;
            assert_eq!(
                allowed(l, "k", 5).await,
                3,
                "the refund gave all 3 back: {l:?}"
            );
            let receipt = l.charge("debt", 5).await?;
            assert!(receipt.is_remote());
            assert!(!l.check("debt").await.is_allowed(), "in debt: {l:?}");
            l.refund("debt", &receipt).await?;
            assert_eq!(allowed(l, "debt", 5).await, 3, "{l:?}");
        }
        Ok(())
    })
}

/// weir-rate's waits work over the store: waiters are released at the rate.
#[test]
fn waiters_are_released_at_the_rate() -> TestResult {
    let Some(server) = MemcachedServer::start_or_skip("memcached waits")? else {
        return Ok(());
    };
    rt()?.block_on(async {
        let quota = Quota::per_second(nz(20)).allow_burst(nz(1));
        let l = limiter(Gcra::new(quota), "waits", &[&server]).await?;
        let start = std::time::Instant::now();
        for _ in 0..5 {
            let d = l.until_ready("k", 1, weir_rate::wait::Jitter::NONE).await?;
            assert!(d.is_allowed());
        }
        let waited = start.elapsed();
        assert!(waited >= Duration::from_millis(195), "{waited:?}");
        Ok(())
    })
}

/// A rate among several limits all-or-nothing needs a transaction:
/// refused at connect, with a reason that names the way out; so is a bad
/// prefix.
#[test]
fn a_set_with_a_rate_and_a_bad_prefix_are_refused_at_connect() -> TestResult {
    let Some(server) = MemcachedServer::start_or_skip("memcached all-of")? else {
        return Ok(());
    };
    rt()?.block_on(async {
        let q = Quota::per_second(nz(5));
        let both = MemcachedLimiter::builder(Gcra::new(q))
            .and(FixedWindow::new(Quota::per_hour(nz(100))))
            .connect(Servers::one(server.addr()))
            .await;
        match both {
            Err(ConfigError::Unsupported(why)) => assert!(why.contains("Redis"), "{why}"),
            other => panic!("expected Unsupported, got {other:?}"),
        }
        let bad_prefix = MemcachedLimiter::builder(Gcra::new(q))
            .prefix("has space")
            .connect(Servers::one(server.addr()))
            .await;
        assert!(matches!(bad_prefix, Err(ConfigError::Invalid(_))));
        Ok(())
    })
}

/// Batched callers share pipelines and decide as the plain path does.
#[test]
fn batched_callers_hold_the_limit() -> TestResult {
    let Some(server) = MemcachedServer::start_or_skip("memcached batching")? else {
        return Ok(());
    };
    rt()?.block_on(async {
        let quota = Quota::per_hour(nz(25));
        for algorithm in ["fw", "gcra"] {
            let b = match algorithm {
                "fw" => MemcachedLimiter::builder(FixedWindow::new(quota)),
                _ => MemcachedLimiter::builder(Gcra::new(quota)),
            };
            let l = b
                .prefix(unique_prefix("batch"))
                .batching(weir_memcached::Batching::default())
                .on_failure(FailurePolicy::Closed)
                .connect(Servers::one(server.addr()))
                .await?;
            let mut tasks = Vec::new();
            for i in 0..100 {
                let l = l.clone();
                tasks.push(tokio::spawn(async move {
                    l.check_verbose(&format!("k{}", i % 4), 1).await
                }));
            }
            let mut allowed = 0;
            for t in tasks {
                let a = t.await??;
                assert!(matches!(a.source, Source::Store), "{:?}", a.error);
                allowed += usize::from(a.decision.is_allowed());
            }
            assert_eq!(allowed, 100, "{algorithm}: 25 for each of 4 keys");
        }
        Ok(())
    })
}

/// A forced charge whose debt runs past the furthest expiry memcached
/// keeps (2038-01-19, the largest absolute time it accepts) still holds
/// the key: the debt is kept up to that time instead of the item being
/// written with an expiry memcached drops, which decided the key as one
/// never seen.
#[test]
fn a_debt_past_memcacheds_last_expiry_still_holds_the_key() -> TestResult {
    let Some(server) = MemcachedServer::start_or_skip("memcached long debt")? else {
        return Ok(());
    };
    rt()?.block_on(async {
        let quota = Quota::per_day(nz(1_000));
        let gcra = limiter(Gcra::new(quota), "long-debt-gcra", &[&server]).await?;
        let bucket = limiter(TokenBucket::new(quota), "long-debt-tb", &[&server]).await?;
        for l in [&gcra, &bucket] {
            // 4,431,204 units at 1,000 a day: 12.1 years of debt.
            l.charge("k", 4_431_204).await?;
            assert_eq!(allowed(l, "k", 201).await, 0, "in debt for years: {l:?}");
            // Held until memcached's last expiry, 2038-01-19, not beyond:
            // the next unit is due a burst's worth (a day) before it.
            let retry = l.check("k").await.retry_after().map(|d| d.as_secs());
            let until_2038 = i32::MAX as u64 - now_secs();
            assert!(
                retry.is_some_and(|r| r + 86_400 + 5 >= until_2038 && r <= until_2038),
                "{retry:?} against {until_2038} s: {l:?}"
            );
            // A debt that ends just inside memcached's range is kept whole.
            let days_left = (i32::MAX as u64 - now_secs()) / 86_400;
            let units = u32::try_from(days_left.saturating_sub(2) * 1_000)?;
            l.charge("edge", units).await?;
            assert_eq!(allowed(l, "edge", 20).await, 0, "{l:?}");
        }
        Ok(())
    })
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The servers read from one address string, the limiter as the one type
/// any store's is: exact on Memcached, shared by a second instance.
#[test]
fn a_limiter_chosen_by_its_address_decides_as_one_type() -> TestResult {
    use weir_rate::{AnyLimiter, CheckKeyAsync};
    let Some(server) = MemcachedServer::start_or_skip("memcached by address")? else {
        return Ok(());
    };
    let address = format!("memcached://{}", server.addr());
    let prefix = unique_prefix("any");
    rt()?.block_on(async {
        let mut counts = Vec::new();
        for _instance in 0..2 {
            let limiter: AnyLimiter<str> = AnyLimiter::new(
                MemcachedLimiter::builder(FixedWindow::new(Quota::per_hour(nz(5))))
                    .prefix(prefix.clone())
                    .connect(Servers::parse(&address)?)
                    .await?,
            );
            let mut allowed = 0;
            for _ in 0..8 {
                allowed += u32::from(limiter.check_n_async("k", 1).await?.is_allowed());
            }
            counts.push(allowed);
        }
        assert_eq!(counts, [5, 0]);
        Ok(())
    })
}
