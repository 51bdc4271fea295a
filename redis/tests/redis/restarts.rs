//! What a restart forgets: without persistence, every count; with an
//! append-only file synced on every write, nothing.

use super::*;

/// Allowed of `n` checks of `key` once Redis decides again.
async fn allowed_on_redis(
    l: &RedisLimiter,
    key: &str,
    n: usize,
) -> Result<u32, Box<dyn std::error::Error>> {
    let mut allowed = 0;
    for _ in 0..n {
        let a = l.check_verbose(key, 1).await?;
        assert_eq!(a.source, Source::Store, "{:?}", a.error);
        allowed += u32::from(a.decision.is_allowed());
    }
    Ok(allowed)
}

/// Spend a window of 50, kill Redis (SIGKILL, as a crash), restart it, and
/// count what the same key is allowed again in the same window: the
/// overshoot one restart adds.
fn overshoot_of_a_restart(persistence: &[&str]) -> Result<Option<u32>, Box<dyn std::error::Error>> {
    let Some(()) =
        weir_test_support::redis_server::available_or_skip("redis restart")?.then_some(())
    else {
        return Ok(None);
    };
    let mut server = RedisServer::start_with(persistence)?;
    rt()?.block_on(async {
        let l = RedisLimiter::builder(FixedWindow::new(Quota::per_hour(nz(50))))
            .prefix(unique_prefix("restart"))
            .on_failure(FailurePolicy::Closed)
            .backoff(Duration::from_millis(20))
            .connect(Target::server(server.url()))
            .await?;
        assert_eq!(allowed_on_redis(&l, "k", 80).await?, 50);
        server.restart()?;
        let mut back = false;
        for _ in 0..200 {
            if l.check_verbose("probe", 1).await?.source == Source::Store {
                back = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(back, "Redis never decided again");
        Ok(Some(allowed_on_redis(&l, "k", 80).await?))
    })
}

#[test]
fn a_restart_without_persistence_forgets_every_count() -> TestResult {
    let Some(overshoot) = overshoot_of_a_restart(&[])? else {
        return Ok(());
    };
    eprintln!("restart without persistence: {overshoot} of a spent window of 50 allowed again");
    assert_eq!(overshoot, 50, "the whole window again");
    Ok(())
}

#[test]
fn a_restart_with_an_fsynced_append_only_file_forgets_nothing() -> TestResult {
    let Some(overshoot) =
        overshoot_of_a_restart(&["--appendonly", "yes", "--appendfsync", "always"])?
    else {
        return Ok(());
    };
    eprintln!("restart with appendfsync always: {overshoot} of a spent window of 50 allowed again");
    assert_eq!(overshoot, 0, "the count survived the restart");
    Ok(())
}

/// A connection a restart broke is not an outage: the first call once the
/// server is back goes again on a fresh connection, and no decision falls
/// to the failure policy (under load, one failed call would hand the
/// fallback every request of its back-off).
#[test]
fn the_first_call_after_a_restart_is_decided_by_the_store() -> TestResult {
    if !weir_test_support::redis_server::available_or_skip("redis restart")? {
        return Ok(());
    }
    let mut server = RedisServer::start()?;
    rt()?.block_on(async {
        let l = RedisLimiter::builder(FixedWindow::new(Quota::per_hour(nz(50))))
            .prefix(unique_prefix("reconnect"))
            .on_failure(FailurePolicy::Closed)
            .connect(Target::server(server.url()))
            .await?;
        assert_eq!(allowed_on_redis(&l, "k", 3).await?, 3);
        for round in 0..3 {
            server.restart()?;
            let a = l.check_verbose("k", 1).await?;
            assert_eq!(a.source, Source::Store, "restart {round}: {:?}", a.error);
        }
        Ok(())
    })
}
