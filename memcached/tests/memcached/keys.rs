//! Keys of any length and bytes, prefixes and limits that never meet, and
//! keys spread over several servers.

use super::*;

/// Keys Memcached itself could not take (spaces, control characters,
/// `|`, `%`, anything over 250 bytes) each get a counter of their own, and
/// two keys that differ only where the encoding could be confused do not
/// share one.
#[test]
fn every_key_gets_a_counter_of_its_own() -> TestResult {
    let Some(server) = MemcachedServer::start_or_skip("memcached keys")? else {
        return Ok(());
    };
    rt()?.block_on(async {
        let l = limiter(FixedWindow::new(Quota::per_hour(nz(1))), "keys", &[&server]).await?;
        let long = "k".repeat(300);
        let longer = "k".repeat(301);
        let keys = [
            "plain",
            "with space",
            "with\nnewline",
            "pipe|0",
            "percent%7c0",
            "pipe%7c0",
            "#hash",
            "é",
            "",
            &long,
            &longer,
        ];
        for key in keys {
            let a = l.check_verbose(key, 1).await?;
            assert_eq!(a.source, Source::Store, "{key:?}: {:?}", a.error);
            assert!(a.decision.is_allowed(), "{key:?} shares a counter");
        }
        for key in keys {
            assert!(!l.check(key).await.is_allowed(), "{key:?} lost its count");
        }
        Ok(())
    })
}

/// Limiters on different prefixes, or with different windows on one
/// prefix, never read each other's counters.
#[test]
fn prefixes_and_windows_never_share_a_counter() -> TestResult {
    let Some(server) = MemcachedServer::start_or_skip("memcached prefixes")? else {
        return Ok(());
    };
    rt()?.block_on(async {
        let prefix = unique_prefix("shared");
        let make = |quota: Quota, prefix: String| {
            MemcachedLimiter::builder(FixedWindow::new(quota))
                .prefix(prefix)
                .on_failure(FailurePolicy::Closed)
                .connect(Servers::one(server.addr()))
        };
        let hourly = make(Quota::per_hour(nz(1)), prefix.clone()).await?;
        let daily = make(
            Quota::try_new(1, Duration::from_secs(86_400))?,
            prefix.clone(),
        )
        .await?;
        let other = make(Quota::per_hour(nz(1)), format!("{prefix}x")).await?;
        assert!(hourly.check("k").await.is_allowed());
        assert!(
            daily.check("k").await.is_allowed(),
            "a daily window read the hourly counter"
        );
        assert!(
            other.check("k").await.is_allowed(),
            "another prefix read the counter"
        );
        assert!(!hourly.check("k").await.is_allowed());
        Ok(())
    })
}

/// Over several servers each key lives on one, every instance placing it
/// alike, and the keys spread over all of them.
#[test]
fn keys_spread_over_several_servers() -> TestResult {
    let servers = [
        MemcachedServer::start_or_skip("memcached servers")?,
        MemcachedServer::start_or_skip("memcached servers")?,
        MemcachedServer::start_or_skip("memcached servers")?,
    ];
    let [Some(a), Some(b), Some(c)] = &servers else {
        return Ok(());
    };
    rt()?.block_on(async {
        let prefix = unique_prefix("spread");
        let make = |order: [&MemcachedServer; 3]| {
            MemcachedLimiter::builder(FixedWindow::new(Quota::per_hour(nz(2))))
                .prefix(prefix.clone())
                .on_failure(FailurePolicy::Closed)
                .connect(Servers::new(order.map(|s| s.addr())))
        };
        let one = make([a, b, c]).await?;
        let two = make([c, a, b]).await?;
        for k in 0..60 {
            let key = format!("user{k}");
            assert_eq!(one.store().server_of(&key), two.store().server_of(&key));
            assert!(one.check(&key).await.is_allowed());
            assert!(two.check(&key).await.is_allowed());
            assert!(
                !one.check(&key).await.is_allowed(),
                "{key}: the instances count apart"
            );
        }
        for s in [a, b, c] {
            assert!(
                s.stat("curr_items")? > 5,
                "{} holds almost nothing",
                s.addr()
            );
        }
        Ok(())
    })
}
