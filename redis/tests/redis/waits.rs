//! Waiting until a limit on Redis allows: waiters released at its rate.

use std::time::Duration;
use weir_rate::wait::Jitter;
use weir_rate::{Gcra, Quota};

/// `n` a second with no burst, so that every unit after the first waits.
fn per_second(n: u32) -> Quota {
    Quota::per_second(std::num::NonZeroU32::new(n).unwrap()).allow_burst(std::num::NonZeroU32::MIN)
}

#[test]
fn redis_waiters_are_released_at_the_rate() -> Result<(), Box<dyn std::error::Error>> {
    use weir_redis::{FailurePolicy, RedisLimiter, Source, Target};
    use weir_test_support::redis_server::RedisServer;
    let Some(server) = RedisServer::start_or_skip("redis waits")? else {
        return Ok(());
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let limiter = RedisLimiter::builder(Gcra::new(per_second(20)))
            .prefix(format!("wait-{}", std::process::id()))
            .on_failure(FailurePolicy::Closed)
            .connect(Target::server(server.url()))
            .await?;
        let v = limiter.check_verbose("k", 1).await?;
        assert_eq!(v.source, Source::Store);
        let start = std::time::Instant::now();
        for _ in 0..4 {
            let d = limiter.until_ready("k", 1, Jitter::NONE).await?;
            assert!(d.is_allowed());
        }
        // Four more units at 20 a second: 200 ms at least (Redis keeps
        // time in microseconds, so allow one of them).
        let waited = start.elapsed();
        assert!(waited >= Duration::from_millis(199), "{waited:?}");
        assert!(
            limiter.until_ready("k", 2, Jitter::NONE).await.is_err(),
            "a cost above the burst waited"
        );
        Ok::<_, Box<dyn std::error::Error>>(())
    })
}
