//! Limiters of one service sharing one connection through clones of a
//! `Target`, each keeping its own deadline.

use super::*;

/// Connections open to `server` other than the one asking.
fn clients(server: &RedisServer) -> Result<u32, Box<dyn std::error::Error>> {
    let info = server.cli(&["INFO", "clients"])?;
    let n: u32 = info
        .lines()
        .find_map(|l| l.trim().strip_prefix("connected_clients:"))
        .ok_or("no connected_clients")?
        .parse()?;
    Ok(n - 1)
}

/// Per-second, per-day and bytes limiters built from clones of one target
/// hold one connection between them; a target built apart holds its own.
#[test]
fn clones_of_a_target_share_one_connection() -> TestResult {
    let Some(server) = RedisServer::start_or_skip("shared connection")? else {
        return Ok(());
    };
    rt()?.block_on(async {
        let target = Target::server(server.url());
        let prefix = unique_prefix("share");
        let per_second = RedisLimiter::builder(Gcra::new(Quota::per_second(nz(10))))
            .prefix(format!("{prefix}:s"))
            .connect(target.clone())
            .await?;
        let per_day = RedisLimiter::builder(FixedWindow::new(Quota::per_day(nz(1000))))
            .prefix(format!("{prefix}:d"))
            .connect(target.clone())
            .await?;
        let bytes = RedisLimiter::builder(TokenBucket::new(Quota::per_second(nz(1 << 20))))
            .prefix(format!("{prefix}:b"))
            .connect(target)
            .await?;
        for l in [&per_second, &per_day, &bytes] {
            let a = l.check_verbose("k", 1).await?;
            assert_eq!(a.source, Source::Store, "{:?}", a.error);
        }
        assert_eq!(clients(&server)?, 1, "three limiters, one connection");
        let apart = RedisLimiter::builder(Gcra::new(Quota::per_second(nz(10))))
            .prefix(format!("{prefix}:apart"))
            .connect(Target::server(server.url()))
            .await?;
        assert_eq!(apart.check_verbose("k", 1).await?.source, Source::Store);
        assert_eq!(clients(&server)?, 2, "a target built apart connects apart");
        Ok(())
    })
}

/// A limiter that allows its calls two seconds shares a connection first
/// made for one that allows 50 ms: a server stalled for 300 ms answers the
/// patient one by Redis, while the hasty one falls back at its deadline.
#[cfg(unix)]
#[test]
fn a_shared_connection_waits_as_long_as_its_most_patient_limiter() -> TestResult {
    let Some(server) = RedisServer::start_or_skip("shared connection timeouts")? else {
        return Ok(());
    };
    let pid = server.pid().ok_or("not running")?;
    rt()?.block_on(async {
        let target = Target::server(server.url());
        let prefix = unique_prefix("patience");
        let limiter = |timeout, name: &str| {
            RedisLimiter::builder(Gcra::new(Quota::per_second(nz(1000))))
                .prefix(format!("{prefix}:{name}"))
                .timeout(timeout)
                .on_failure(FailurePolicy::Closed)
                .connect(target.clone())
        };
        let hasty = limiter(Duration::from_millis(50), "hasty").await?;
        let patient = limiter(Duration::from_secs(2), "patient").await?;
        for l in [&hasty, &patient] {
            assert_eq!(l.check_verbose("k", 1).await?.source, Source::Store);
        }
        weir_test_support::process::signal(pid, true)?;
        let (h, p) = (hasty.clone(), patient.clone());
        let calls =
            tokio::spawn(
                async move { tokio::join!(h.check_verbose("k", 1), p.check_verbose("k", 1)) },
            );
        tokio::time::sleep(Duration::from_millis(300)).await;
        weir_test_support::process::signal(pid, false)?;
        let (h, p) = calls.await?;
        let (h, p) = (h?, p?);
        assert_eq!(h.source, Source::FailClosed, "the hasty limiter's deadline");
        assert_eq!(p.source, Source::Store, "{:?}", p.error);
        Ok(())
    })
}
