//! A limit changed while serving, on a real Memcached: the stored time
//! (GCRA) or the window's count is read by the new limit, and a change of
//! algorithm or of a window's length is refused.

use super::*;

#[test]
fn a_new_limit_reads_what_was_spent() -> TestResult {
    let Some(server) = MemcachedServer::start_or_skip("limits changed on Memcached")? else {
        return Ok(());
    };
    rt()?.block_on(async {
        // The stored time, read at the new rate, as the in-process GCRA
        // reads it.
        let twin = weir_rate::KeyedLimiter::<String, _, _>::with_clock(
            Gcra::new(Quota::per_minute(nz(10))),
            weir_rate::clock::ManualClock::new(),
        );
        let gcra = limiter(
            Gcra::new(Quota::per_minute(nz(10))),
            "retune-gcra",
            &[&server],
        )
        .await?;
        for (per_minute, checks) in [(10, 8), (5, 3), (20, 20)] {
            let quota = Quota::per_minute(nz(per_minute));
            gcra.set_limit(Gcra::new(quota))?;
            twin.set_limit(Gcra::new(quota));
            let expected = (0..checks)
                .filter(|_| twin.check("alice").is_allowed())
                .count();
            assert_eq!(
                allowed(&gcra, "alice", checks).await,
                expected,
                "{per_minute}/min"
            );
            assert!(per_minute == 10 || expected < checks, "no fresh quota");
        }

        let window = limiter(
            FixedWindow::new(Quota::per_hour(nz(10))),
            "retune-window",
            &[&server],
        )
        .await?;
        assert_eq!(allowed(&window, "bob", 6).await, 6);
        window.set_limit(FixedWindow::new(Quota::per_hour(nz(7))))?;
        assert_eq!(allowed(&window, "bob", 5).await, 1, "7 of 7 spent");
        assert!(matches!(
            window.set_limit(FixedWindow::new(Quota::per_minute(nz(7)))),
            Err(ConfigError::Invalid(_))
        ));
        assert!(matches!(
            window.set_limit(TokenBucket::new(Quota::per_hour(nz(7)))),
            Err(ConfigError::Invalid(_))
        ));
        assert_eq!(window.quotas(), [Quota::per_hour(nz(7))]);
        Ok(())
    })
}
