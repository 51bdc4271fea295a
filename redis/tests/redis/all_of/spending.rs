//! What a set of limits spends: nothing on refusals in a batch, and receipts, charges and refunds on Redis.

use super::*;

/// Concurrent callers on a batched all-of limiter: every key passes
/// exactly its daily limit, and the refused requests spend nothing of the
/// hourly limit (observed through a limiter on the same state with a
/// daily limit that cannot bind).
#[test]
fn batched_all_of_spends_nothing_on_refusals() -> TestResult {
    let Some(server) = RedisServer::start_or_skip("batched_all_of_spends_nothing_on_refusals")?
    else {
        return Ok(());
    };
    let rt = rt()?;
    let prefix = unique_prefix("batched");
    let hourly = || Gcra::new(Quota::per_hour(nz(10)));
    rt.block_on(async {
        let limiter = RedisLimiter::builder(hourly())
            .and(FixedWindow::new(per_day(6)))
            .prefix(prefix.clone())
            .on_failure(FailurePolicy::Closed)
            .batching(Batching::default())
            .connect(Target::server(server.url()))
            .await?;
        let handles: Vec<_> = (0..90)
            .map(|i| {
                let l = limiter.clone();
                tokio::spawn(
                    async move { (i % 3, l.check_verbose(&format!("k{}", i % 3), 1).await) },
                )
            })
            .collect();
        let mut allowed = [0u32; 3];
        for h in handles {
            let (k, v) = h.await?;
            let v = v?;
            assert_eq!(v.source, Source::Store, "{:?}", v.error);
            allowed[k] += u32::from(v.decision.is_allowed());
        }
        assert_eq!(allowed, [6, 6, 6], "the daily limit of six per key");
        let observer = RedisLimiter::builder(hourly())
            .and(FixedWindow::new(per_day(1000)))
            .prefix(prefix.clone())
            .on_failure(FailurePolicy::Closed)
            .connect(Target::server(server.url()))
            .await?;
        for k in 0..3 {
            let key = format!("k{k}");
            let d = observer.check_n(&key, 4).await?;
            assert!(
                d.is_allowed(),
                "k{k}: refusals spent the hourly budget: {d:?}"
            );
            assert!(!observer.check_n(&key, 1).await?.is_allowed());
        }
        Ok::<_, BoxError>(())
    })
}

/// A receipt from Redis names the server's instant; a charge's debt is
/// waited out and its refund at once takes it back; a refund of a check
/// frees its place; a key that starts with `}` keeps its limits in one
/// slot; costs beyond the smallest capacity are refused.
#[test]
fn receipts_charges_and_refunds_on_redis() -> TestResult {
    let Some(server) = RedisServer::start_or_skip("receipts_charges_and_refunds_on_redis")? else {
        return Ok(());
    };
    let rt = rt()?;
    rt.block_on(async {
        let limiter = RedisLimiter::builder(Gcra::new(Quota::per_second(nz(20))))
            .and(TokenBucket::new(Quota::per_hour(nz(5))))
            .prefix(unique_prefix("receipts"))
            .on_failure(FailurePolicy::Closed)
            .connect(Target::server(server.url()))
            .await?;
        assert_eq!(limiter.quotas().len(), 2);
        let wall = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?;
        let d = limiter.check("}odd").await;
        let receipt = d.receipt().ok_or("an allowed check without a receipt")?;
        let server_time = Duration::from_nanos(receipt.at_nanos());
        assert!(
            server_time.abs_diff(wall) < Duration::from_secs(5),
            "the receipt names {server_time:?}, the wall clock says {wall:?}"
        );
        assert_eq!(
            limiter.check_n("}odd", 6).await,
            Err(NeverAllowed {
                cost: 6,
                max_cost: 5
            })
        );
        // Four left of the hourly five; a refund of the check gives five.
        limiter.refund("}odd", &d).await?;
        assert!(limiter.check_n("}odd", 5).await?.is_allowed());
        // A charge of 10 with none left: refused until paid, but a refund
        // at once takes it back (the check's five stay spent).
        let charged = limiter.charge("other", 10).await?;
        assert!(!limiter.check("other").await.is_allowed());
        limiter.refund("other", &charged).await?;
        assert!(limiter.check_n("other", 5).await?.is_allowed());
        // Refunding what spent nothing is nothing.
        let denied = limiter.check("other").await;
        assert!(!denied.is_allowed());
        limiter.refund("other", &denied).await?;
        assert!(!limiter.check("other").await.is_allowed());
        Ok::<_, BoxError>(())
    })
}

/// A refusal spends nothing on Redis either: the limit that did not bind
/// reports what it has left in its RateLimit field, as in process.
#[test]
fn a_refusal_reports_what_the_other_limits_have_left() -> TestResult {
    let Some(server) = RedisServer::start_or_skip("all-of refusal parts")? else {
        return Ok(());
    };
    rt()?.block_on(async {
        let limiter = RedisLimiter::builder(FixedWindow::new(Quota::per_second(nz(1))))
            .and(FixedWindow::new(per_day(1000)))
            .prefix(unique_prefix("parts"))
            .on_failure(FailurePolicy::Closed)
            .connect(Target::server(server.url()))
            .await?;
        let day_left = |d: &Decision| {
            let headers = d.headers("p");
            let field = headers
                .iter()
                .find(|(name, _)| *name == "RateLimit")
                .map(|(_, v)| v.clone())
                .unwrap_or_default();
            field.split(',').nth(1).unwrap_or_default().to_owned()
        };
        let first = limiter.check("k").await;
        assert!(first.is_allowed());
        assert!(day_left(&first).contains("r=999"), "{}", day_left(&first));
        let refused = limiter.check("k").await;
        assert!(!refused.is_allowed());
        assert!(
            day_left(&refused).contains("r=999"),
            "nothing spent, 999 left: {}",
            day_left(&refused)
        );
        Ok::<_, BoxError>(())
    })
}
