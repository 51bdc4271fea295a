//! Windows all-or-nothing on a real Memcached: decisions and fields as the
//! in-process set gives them, a refusal that spends nothing of the other
//! limits, and two instances hammering one key that together admit what
//! the binding limit allows and not a unit more.

use super::*;
use weir_rate::{KeyedLimiter, PolicyName};

/// An hourly fixed window of 10 and a daily sliding window of 6.
fn hour_and_day() -> (FixedWindow, SlidingWindow) {
    (
        FixedWindow::new(Quota::per_hour(nz(10))),
        SlidingWindow::try_new(Quota::per_day(nz(6)), 2).expect("fits"),
    )
}

/// A limiter of the hour-and-day set on `server` under `prefix`.
async fn set_on(server: &MemcachedServer, prefix: &str) -> Result<MemcachedLimiter, ConfigError> {
    let (hour, day) = hour_and_day();
    MemcachedLimiter::builder(hour)
        .and(day)
        .prefix(prefix)
        .timeout(Duration::from_millis(500))
        .on_failure(FailurePolicy::Closed)
        .connect(Servers::one(server.addr()))
        .await
}

#[test]
fn a_set_of_windows_decides_as_the_in_process_set() -> TestResult {
    let Some(server) = MemcachedServer::start_or_skip("memcached all-of decisions")? else {
        return Ok(());
    };
    rt()?.block_on(async {
        let prefix = unique_prefix("all-of");
        let set = set_on(&server, &prefix).await?;
        let twin = KeyedLimiter::<String, _, _>::with_clock(
            hour_and_day(),
            weir_rate::clock::ManualClock::new(),
        );
        let policy = PolicyName::new("api");
        // Costs 4, 4 (refused by the day: it spends nothing of the hour),
        // 2, then 1s refused by the day with the hour's 4 left.
        for cost in [4, 4, 2, 1, 1] {
            let got = set.check_n("alice", cost).await?;
            let expected = twin.check_n("alice", cost)?;
            assert_eq!(got.is_allowed(), expected.is_allowed(), "cost {cost}");
            assert_eq!(got.remaining(), expected.remaining(), "cost {cost}");
            // One list of fields, every limit in it.
            assert_eq!(
                got.ratelimit_policy(&policy),
                expected.ratelimit_policy(&policy)
            );
            assert_eq!(
                got.ratelimit_policy(&policy),
                "\"api-1h\";q=10;w=3600, \"api-1d\";q=6;w=86400"
            );
            let remaining = |d: &weir_rate::Decision| {
                d.ratelimit(&policy)
                    .split(", ")
                    .map(|item| item.split(";t=").next().unwrap_or_default().to_owned())
                    .collect::<Vec<_>>()
            };
            assert_eq!(remaining(&got), remaining(&expected), "cost {cost}");
        }
        // The refusals gave their hourly units back before they were
        // answered: the hour alone, on the same counters, has 10 − 6 = 4.
        let hour = MemcachedLimiter::builder(hour_and_day().0)
            .prefix(prefix.clone())
            .on_failure(FailurePolicy::Closed)
            .connect(Servers::one(server.addr()))
            .await?;
        assert!(hour.check_n("alice", 4).await?.is_allowed());
        assert!(!hour.check("alice").await.is_allowed());
        Ok(())
    })
}

#[test]
fn charges_and_refunds_reach_every_window() -> TestResult {
    let Some(server) = MemcachedServer::start_or_skip("memcached all-of settling")? else {
        return Ok(());
    };
    rt()?.block_on(async {
        let set = set_on(&server, &unique_prefix("all-of-settle")).await?;
        // A charge of 5 spends both; a refund of an admitted 1 gives both
        // back.
        set.charge("bob", 5).await?;
        let one = set.check("bob").await;
        assert!(one.is_allowed());
        assert_eq!(one.remaining(), 0, "the day's 6 spent");
        set.refund("bob", &one.receipt().expect("a receipt"))
            .await?;
        let again = set.check("bob").await;
        assert!(again.is_allowed(), "the refund reached the day");
        assert_eq!(again.remaining(), 0);
        assert!(!set.check("bob").await.is_allowed());
        Ok(())
    })
}

#[test]
fn two_instances_hammering_one_key_admit_the_binding_limit_exactly() -> TestResult {
    let Some(server) = MemcachedServer::start_or_skip("memcached all-of concurrent")? else {
        return Ok(());
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let prefix = unique_prefix("all-of-race");
        // A day of 30 within an hour of 50: the day binds.
        let build = || async {
            MemcachedLimiter::builder(FixedWindow::new(Quota::per_hour(nz(50))))
                .and(SlidingWindow::try_new(Quota::per_day(nz(30)), 2).expect("fits"))
                .prefix(prefix.clone())
                .on_failure(FailurePolicy::Closed)
                .connect(Servers::one(server.addr()))
                .await
        };
        let instances = [build().await?, build().await?];
        let mut tasks = Vec::new();
        for i in 0..64 {
            let limiter = instances[i % 2].clone();
            tasks.push(tokio::spawn(async move {
                let mut allowed = 0u32;
                for _ in 0..5 {
                    let a = limiter
                        .check_verbose("hot", 1 + (i % 2) as u32)
                        .await
                        .expect("a cost within the limits");
                    assert!(matches!(a.source, Source::Store), "{:?}", a.error);
                    if a.decision.is_allowed() {
                        allowed += 1 + (i % 2) as u32;
                    }
                }
                allowed
            }));
        }
        let mut admitted = 0;
        for task in tasks {
            admitted += task.await?;
        }
        assert!(admitted <= 30, "{admitted} units admitted of a day of 30");
        // Every refusal has given its units back: what the races refused
        // is there to spend, nothing was lost for good.
        while instances[0].check("hot").await.is_allowed() {
            admitted += 1;
        }
        assert_eq!(admitted, 30);
        // The hour spent exactly what was admitted.
        let hour = MemcachedLimiter::builder(FixedWindow::new(Quota::per_hour(nz(50))))
            .prefix(prefix.clone())
            .on_failure(FailurePolicy::Closed)
            .connect(Servers::one(server.addr()))
            .await?;
        assert!(hour.check_n("hot", 20).await?.is_allowed());
        assert!(!hour.check("hot").await.is_allowed());
        Ok(())
    })
}

#[test]
fn a_set_with_a_rate_in_it_is_refused_and_a_set_changes_while_serving() -> TestResult {
    let Some(server) = MemcachedServer::start_or_skip("memcached all-of config")? else {
        return Ok(());
    };
    rt()?.block_on(async {
        let with_a_rate = MemcachedLimiter::builder(FixedWindow::new(Quota::per_hour(nz(5))))
            .and(Gcra::new(Quota::per_second(nz(5))))
            .connect(Servers::one(server.addr()))
            .await;
        match with_a_rate {
            Err(ConfigError::Unsupported(why)) => assert!(why.contains("Redis"), "{why}"),
            other => panic!("expected Unsupported, got {other:?}"),
        }
        let set = set_on(&server, &unique_prefix("all-of-retune")).await?;
        assert!(set.check_n("carol", 5).await?.is_allowed());
        // The day lowered to 5 of which 5 are spent; the hour raised.
        set.set_limits(&[
            weir_memcached::Limit::of(&FixedWindow::new(Quota::per_hour(nz(20)))),
            weir_memcached::Limit::of(
                &SlidingWindow::try_new(Quota::per_day(nz(5)), 2).expect("fits"),
            ),
        ])?;
        let refused = set.check("carol").await;
        assert!(!refused.is_allowed(), "what the day spent carried over");
        assert_eq!(
            refused.ratelimit_policy(&weir_rate::PolicyName::new("api")),
            "\"api-1h\";q=20;w=3600, \"api-1d\";q=5;w=86400"
        );
        Ok(())
    })
}
