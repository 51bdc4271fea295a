//! The outage log, read back through a process-wide `tracing` subscriber:
//! a binary of its own, because `tracing` caches per call site whether
//! anyone listens, and a subscriber scoped to one test's thread loses that
//! race to tests running beside it.
#![cfg(not(loom))]

#[path = "../support/mod.rs"]
mod support;

use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;
use support::*;
use weir_rate::{Gcra, Quota};
use weir_redis::{FailurePolicy, RedisLimiter, Source, Target};
use weir_test_support::redis_server::{RedisServer, limiter_acl};

/// Everything logged in this process, as text.
#[derive(Clone, Default)]
struct Lines(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Lines {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend_from_slice(b);
        Ok(b.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Lines {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(PoisonError::into_inner)).into_owned()
    }

    /// The lines of the limiter named `name`.
    fn of(&self, name: &str) -> Vec<String> {
        let field = format!("limiter={name} ");
        self.text()
            .lines()
            .filter(|l| l.contains(&field))
            .map(str::to_owned)
            .collect()
    }
}

/// The process's log, captured from the first call on (the tests of this
/// binary share it, each reading its own limiter's lines).
fn log() -> &'static Lines {
    static LINES: OnceLock<Lines> = OnceLock::new();
    LINES.get_or_init(|| {
        let lines = Lines::default();
        let writer = lines.clone();
        tracing::subscriber::set_global_default(
            tracing_subscriber::fmt()
                .with_ansi(false)
                .with_writer(move || writer.clone())
                .finish(),
        )
        .expect("the only subscriber of this process");
        lines
    })
}

/// An outage is one warning when the failure policy takes over, naming
/// the server and the policy, and one line when Redis decides again —
/// however many callers and probes meet it in between.
#[test]
fn an_outage_is_logged_once_when_it_starts_and_once_when_it_ends() -> TestResult {
    let Some(mut server) = RedisServer::start_or_skip("outage log")? else {
        return Ok(());
    };
    let lines = log();
    rt()?.block_on(async {
        let limiter = RedisLimiter::builder(Gcra::new(Quota::per_second(nz(1000))))
            .prefix(unique_prefix("log"))
            .name("api")
            .timeout(Duration::from_millis(100))
            .backoff(Duration::from_millis(20))
            .on_failure(FailurePolicy::Closed)
            .connect(Target::server(server.url()))
            .await?;
        assert_eq!(limiter.check_verbose("k", 1).await?.source, Source::Store);
        server.kill();
        for i in 0..100 {
            let a = limiter.check_verbose(&format!("k{i}"), 1).await?;
            assert_eq!(a.source, Source::FailClosed);
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        server.restart()?;
        let mut back = false;
        for _ in 0..200 {
            if limiter.check_verbose("k", 1).await?.source == Source::Store {
                back = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(back, "Redis never decided again");
        for _ in 0..20 {
            assert_eq!(limiter.check_verbose("k", 1).await?.source, Source::Store);
        }
        // Back for the log once it has answered for a second unfailing.
        tokio::time::sleep(Duration::from_millis(1100)).await;
        assert_eq!(limiter.check_verbose("k", 1).await?.source, Source::Store);
        Ok::<_, Box<dyn std::error::Error>>(())
    })?;
    let log = lines.of("api");
    let down: Vec<&String> = log
        .iter()
        .filter(|l| l.contains("store unreachable"))
        .collect();
    let back: Vec<&String> = log
        .iter()
        .filter(|l| l.contains("answering again"))
        .collect();
    assert_eq!((down.len(), back.len()), (1, 1), "{log:#?}");
    let server_addr = server.addr();
    assert!(
        down[0].contains("WARN") && down[0].contains(&server_addr),
        "{}",
        down[0]
    );
    assert!(
        down[0].contains("limiter=api") && down[0].contains("Closed"),
        "{}",
        down[0]
    );
    assert!(
        back[0].contains("INFO") && back[0].contains(&server_addr),
        "{}",
        back[0]
    );
    Ok(())
}

/// A store that answers but refuses the limiter (a permission taken away
/// while it serves) is logged once as a refusal naming what is missing,
/// never as the store being unreachable.
#[test]
fn a_refusal_is_logged_as_a_refusal_not_an_outage() -> TestResult {
    let Some(server) = RedisServer::start_or_skip("refusal log")? else {
        return Ok(());
    };
    let lines = log();
    let prefix = unique_prefix("refusal");
    server.add_user("weir", "s3cret", &limiter_acl(&prefix))?;
    rt()?.block_on(async {
        let limiter = RedisLimiter::builder(Gcra::new(Quota::per_second(nz(1000))))
            .prefix(prefix)
            .name("acl")
            .backoff(Duration::from_millis(10))
            .connect(Target::server(format!(
                "redis://weir:s3cret@{}/",
                server.addr()
            )))
            .await?;
        assert_eq!(limiter.check_verbose("k", 1).await?.source, Source::Store);
        server.cli(&["ACL", "SETUSER", "weir", "-time"])?;
        for _ in 0..50 {
            assert_ne!(limiter.check_verbose("k", 1).await?.source, Source::Store);
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        Ok::<_, Box<dyn std::error::Error>>(())
    })?;
    let log = lines.of("acl");
    assert!(log.iter().all(|l| !l.contains("unreachable")), "{log:#?}");
    let refused: Vec<&String> = log.iter().filter(|l| l.contains("refused")).collect();
    assert_eq!(refused.len(), 1, "{log:#?}");
    assert!(
        refused[0].contains("ERROR") && refused[0].contains("can't run this command"),
        "{}",
        refused[0]
    );
    Ok(())
}

/// A store that flaps (stopped for 60 ms of every 100 ms, answering in
/// between) is one outage in the log: one warning when it starts, one
/// line when it has answered for a second unfailing, with the count of
/// calls that failed in between, not a pair of lines per stall.
#[test]
fn a_flapping_store_is_logged_as_one_outage() -> TestResult {
    use weir_test_support::stalls::Stalling;
    let Some(server) = RedisServer::start_or_skip("flapping log")? else {
        return Ok(());
    };
    let lines = log();
    let pid = server.pid().ok_or("no server process")?;
    rt()?.block_on(async {
        let limiter = RedisLimiter::builder(Gcra::new(Quota::per_second(nz(1000))))
            .prefix(unique_prefix("flap"))
            .name("flapping")
            .timeout(Duration::from_millis(30))
            .backoff(Duration::from_millis(10))
            .connect(Target::server(server.url()))
            .await?;
        assert_eq!(limiter.check_verbose("k", 1).await?.source, Source::Store);
        let stalls = Stalling::start(pid, Duration::from_millis(60), Duration::from_millis(100));
        let until = tokio::time::Instant::now() + Duration::from_secs(2);
        while tokio::time::Instant::now() < until {
            let _ = limiter.check_verbose("k", 1).await?;
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        drop(stalls);
        let until = tokio::time::Instant::now() + Duration::from_millis(1500);
        while tokio::time::Instant::now() < until {
            let _ = limiter.check_verbose("k", 1).await?;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok::<_, Box<dyn std::error::Error>>(())
    })?;
    let log = lines.of("flapping");
    let down = log
        .iter()
        .filter(|l| l.contains("store unreachable"))
        .count();
    let back: Vec<&String> = log
        .iter()
        .filter(|l| l.contains("answering again"))
        .collect();
    assert_eq!((down, back.len()), (1, 1), "{log:#?}");
    let failed: u64 = back[0]
        .split("failed_calls=")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .ok_or("no failed_calls field")?;
    assert!(failed > 1, "{}", back[0]);
    Ok(())
}
