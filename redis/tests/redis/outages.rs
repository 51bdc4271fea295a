//! Servers killed, restarted or absent, and scripts flushed, under load with each failure policy.

use super::*;

/// Kill the server under load, observe the policy, restart it, observe
/// decisions from Redis again, correct ones.
fn kill_and_restart(policy: FailurePolicy, expect: Source, batched: bool) -> TestResult {
    let name = format!("kill_and_restart({policy:?})");
    let Some(mut server) = RedisServer::start_or_skip(&name)? else {
        return Ok(());
    };
    let rt = rt()?;
    rt.block_on(async {
        let timeout = Duration::from_millis(200);
        let mut b = RedisLimiter::builder(TokenBucket::new(Quota::per_second(nz(1_000_000))))
            .prefix(unique_prefix("kill"))
            .timeout(timeout)
            .backoff(Duration::from_millis(50))
            .on_failure(policy);
        if batched {
            b = b.batching(Batching::default());
        }
        let limiter = b.connect(Target::server(server.url())).await?;
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut handles = Vec::new();
        for t in 0..8 {
            let l = limiter.clone();
            let stop = stop.clone();
            handles.push(tokio::spawn(async move {
                let mut seen = std::collections::HashMap::<Source, u64>::new();
                let mut slowest = Duration::ZERO;
                let mut n = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) && n < 200_000 {
                    let start = Instant::now();
                    let v = l.check_verbose(&format!("k{t}"), 1).await;
                    slowest = slowest.max(start.elapsed());
                    if let Ok(v) = v {
                        *seen.entry(v.source).or_default() += 1;
                    }
                    n += 1;
                    if n.is_multiple_of(16) {
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                }
                (seen, slowest)
            }));
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        server.kill();
        // During the outage, callers get the policy's answer.
        tokio::time::sleep(Duration::from_millis(800)).await;
        let during = limiter.check_verbose("probe", 1).await?;
        assert_eq!(
            during.source, expect,
            "outage answered by {:?}",
            during.source
        );
        assert!(during.error.is_some());
        server.restart()?;
        // Decisions come from Redis again once it is back.
        let mut back = false;
        for _ in 0..200 {
            if limiter.check_verbose("probe", 1).await?.source == Source::Store {
                back = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(
            back,
            "decisions did not resume from Redis after the restart"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let mut total = std::collections::HashMap::<Source, u64>::new();
        for h in handles {
            let (seen, slowest) = h.await?;
            // Never hung: one timeout plus scheduling slack on a busy machine.
            assert!(slowest < timeout * 10, "a check took {slowest:?}");
            for (k, v) in seen {
                *total.entry(k).or_default() += v;
            }
        }
        assert!(
            total.get(&Source::Store).copied().unwrap_or(0) > 0,
            "{total:?}"
        );
        assert!(total.get(&expect).copied().unwrap_or(0) > 0, "{total:?}");
        // And correct decisions afterwards: exactly the quota on a fresh key.
        let fresh = RedisLimiter::builder(Gcra::new(Quota::per_hour(nz(7))))
            .prefix(unique_prefix("after"))
            .on_failure(FailurePolicy::Closed)
            .connect(Target::server(server.url()))
            .await?;
        let mut allowed = 0;
        for _ in 0..20 {
            let v = fresh.check_verbose("x", 1).await?;
            assert_eq!(v.source, Source::Store);
            allowed += u32::from(v.decision.is_allowed());
        }
        assert_eq!(allowed, 7);
        Ok::<_, Box<dyn std::error::Error>>(())
    })
}

#[test]
fn server_killed_and_restarted_fail_open() -> TestResult {
    kill_and_restart(FailurePolicy::Open, Source::FailOpen, false)
}

#[test]
fn server_killed_and_restarted_fail_closed_batched() -> TestResult {
    kill_and_restart(FailurePolicy::Closed, Source::FailClosed, true)
}

#[test]
fn server_killed_and_restarted_local_fallback() -> TestResult {
    let local: KeyedLimiter<String, Gcra> =
        KeyedLimiter::new(Gcra::new(Quota::per_second(nz(1_000_000))));
    kill_and_restart(FailurePolicy::Local(Arc::new(local)), Source::Local, false)
}

/// During an outage the local fallback's own limit holds: its decisions are
/// the answer (denials included), and a cost it can never allow is denied
/// as fail-closed, not let through.
#[test]
fn local_fallback_enforces_its_own_limit_during_an_outage() -> TestResult {
    let name = "local_fallback_enforces_its_own_limit_during_an_outage";
    let Some(mut server) = RedisServer::start_or_skip(name)? else {
        return Ok(());
    };
    let rt = rt()?;
    rt.block_on(async {
        let local: KeyedLimiter<String, Gcra> =
            KeyedLimiter::new(Gcra::new(Quota::per_hour(nz(2))));
        let limiter = RedisLimiter::builder(Gcra::new(Quota::per_hour(nz(1000))))
            .prefix(unique_prefix("local"))
            .timeout(Duration::from_millis(200))
            .on_failure(FailurePolicy::Local(Arc::new(local)))
            .connect(Target::server(server.url()))
            .await?;
        assert_eq!(
            limiter.check_verbose("warm", 1).await?.source,
            Source::Store
        );
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
        let mut allowed = 0;
        for _ in 0..10 {
            let v = limiter.check_verbose("victim", 1).await?;
            assert_eq!(v.source, Source::Local);
            allowed += u32::from(v.decision.is_allowed());
        }
        assert_eq!(allowed, 2, "the local quota (2 per hour) must hold");
        let v = limiter.check_verbose("other", 5).await?;
        assert_eq!(v.source, Source::FailClosed);
        assert!(!v.decision.is_allowed());
        Ok::<_, Box<dyn std::error::Error>>(())
    })
}

#[test]
fn script_flush_under_load_is_invisible() -> TestResult {
    let Some(server) = RedisServer::start_or_skip("script_flush_under_load_is_invisible")? else {
        return Ok(());
    };
    let rt = rt()?;
    for alg in ALGORITHMS {
        for batched in [false, true] {
            let spec = Spec {
                cluster: false,
                urls: vec![server.url()],
                prefix: unique_prefix("flush"),
                algorithm: alg,
                limit: 300,
                window: Duration::from_secs(3600),
                keys: vec!["x".into(), "y".into()],
                tasks: 6,
                requests: 150,
                batched,
            };
            let first = window_index(spec.window);
            let started = Instant::now();
            let tally = rt.block_on(async {
                let load = tokio::spawn({
                    let spec = spec.clone();
                    async move { run_load(&spec).await.map_err(|e| e.to_string()) }
                });
                for _ in 0..5 {
                    tokio::time::sleep(Duration::from_millis(3)).await;
                    let flushed = server.cli(&["SCRIPT", "FLUSH"])?;
                    assert_eq!(flushed.trim(), "OK");
                }
                Ok::<_, Box<dyn std::error::Error>>(load.await??)
            })?;
            // NOSCRIPT is answered by reloading: no caller ever saw it.
            let loads = server.command_stats("script|load")?.calls;
            assert!(
                loads >= 2,
                "{alg}: the flushes hit no load ({loads} SCRIPT LOADs)"
            );
            assert_eq!(tally.not_redis, 0, "{alg}: decisions lost to SCRIPT FLUSH");
            check_tally("flush", &spec, &tally, started, first)?;
        }
    }
    Ok(())
}

#[test]
fn unreachable_at_start_is_the_failure_policy_not_an_error_or_a_hang() -> TestResult {
    let rt = rt()?;
    rt.block_on(async {
        // A port nobody listens on (bound, then released).
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let start = Instant::now();
        let limiter = RedisLimiter::builder(Gcra::new(Quota::per_second(NonZeroU32::MIN)))
            .timeout(Duration::from_millis(100))
            .on_failure(FailurePolicy::Closed)
            .connect(Target::server(format!("redis://127.0.0.1:{port}/")))
            .await?;
        assert!(start.elapsed() < Duration::from_secs(10));
        let v = limiter.check_verbose("k", 1).await?;
        assert_eq!(v.source, Source::FailClosed, "{:?}", v.error);
        assert!(start.elapsed() < Duration::from_secs(10));
        // Settings no connection could fix are still errors.
        let bad = RedisLimiter::builder(Gcra::new(Quota::per_second(NonZeroU32::MIN)))
            .prefix("a{b")
            .connect(Target::server("redis://127.0.0.1:1/"))
            .await;
        assert!(matches!(bad, Err(ConfigError::Invalid(_))));
        let bad_url = RedisLimiter::builder(Gcra::new(Quota::per_second(NonZeroU32::MIN)))
            .connect(Target::server("not a url"))
            .await;
        assert!(matches!(bad_url, Err(ConfigError::Target(_))));
        Ok(())
    })
}

/// A daily window ends at UTC midnight on Redis, and so it does in the
/// per-instance fallback: both count windows from the Unix epoch, so a
/// window spent in the fallback late in its span is whole again right
/// after the boundary (two-second windows stand in for days here).
#[test]
fn the_fallback_windows_fall_on_the_servers_grid() -> TestResult {
    let Some(mut server) = RedisServer::start_or_skip("redis grid")? else {
        return Ok(());
    };
    rt()?.block_on(async {
        let window = Duration::from_secs(2);
        let l = RedisLimiter::builder(FixedWindow::new(Quota::try_new(3, window)?))
            .prefix(unique_prefix("grid"))
            .timeout(Duration::from_millis(100))
            .connect(Target::server(server.url()))
            .await?;
        server.kill();
        assert_eq!(l.check_verbose("warm", 1).await?.source, Source::Local);
        let into_window = || {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
            Duration::from_nanos((now % window.as_nanos()) as u64)
        };
        let allowed = |l: RedisLimiter| async move {
            let mut n = 0;
            for _ in 0..5 {
                let a = l.check_verbose("k", 1).await.expect("max cost");
                assert_eq!(a.source, Source::Local);
                n += u32::from(a.decision.is_allowed());
            }
            n
        };
        // 300 ms before a boundary of the grid, spend the window...
        let before = window - Duration::from_millis(300);
        let at = into_window();
        let wait = if at < before {
            before - at
        } else {
            window - at + before
        };
        tokio::time::sleep(wait).await;
        assert_eq!(allowed(l.clone()).await, 3);
        // ...and just after it, it is whole again.
        tokio::time::sleep(window - into_window() + Duration::from_millis(50)).await;
        assert_eq!(
            allowed(l).await,
            3,
            "the fallback's window did not end on the grid"
        );
        Ok(())
    })
}
