//! The Redis backend on its worst days: a failover that demotes the
//! limiter's server behind a stable address, Redis absent when the service
//! starts, the default failure policy during an outage, and extreme
//! settings. Each test starts its own `redis-server` processes on loopback.

use crate::support::*;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use weir_rate::{Gcra, Quota};
use weir_redis::{FailurePolicy, RedisLimiter, Source, Target};
use weir_test_support::redis_server::RedisServer;

/// A TCP forwarder on a loopback port, standing in for the virtual IP or
/// DNS name of a managed Redis primary: each new connection goes to the
/// backend it points at *then*; connections already open stay where they
/// are, as they do behind a real VIP after a failover.
struct Forwarder {
    port: u16,
    backend: Arc<Mutex<String>>,
    stop: Arc<AtomicBool>,
}

impl Forwarder {
    fn start(backend: &str) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let port = listener.local_addr()?.port();
        let backend = Arc::new(Mutex::new(backend.to_owned()));
        let stop = Arc::new(AtomicBool::new(false));
        let (b, s) = (backend.clone(), stop.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if s.load(Ordering::Relaxed) {
                    break;
                }
                let Ok(client) = client else { continue };
                let to = b.lock().map(|b| b.clone()).unwrap_or_default();
                let Ok(server) = TcpStream::connect(&to) else {
                    continue;
                };
                pipe(&client, &server, s.clone());
                pipe(&server, &client, s.clone());
            }
        });
        Ok(Self {
            port,
            backend,
            stop,
        })
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    fn point_at(&self, backend: &str) {
        if let Ok(mut b) = self.backend.lock() {
            *b = backend.to_owned();
        }
    }
}

/// Copy `from` to `to` on a thread until either side closes (or the
/// forwarder stops: the read timeout bounds each thread's life).
fn pipe(from: &TcpStream, to: &TcpStream, stop: Arc<AtomicBool>) {
    let (Ok(mut from), Ok(mut to)) = (from.try_clone(), to.try_clone()) else {
        return;
    };
    let _ = from.set_read_timeout(Some(Duration::from_millis(200)));
    std::thread::spawn(move || {
        let mut buf = [0u8; 16 * 1024];
        loop {
            match from.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    if to.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                }
                Err(_) => break,
            }
        }
        let _ = to.shutdown(Shutdown::Both);
        let _ = from.shutdown(Shutdown::Both);
    });
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// A failover behind a stable address: the limiter's server is demoted to
/// a replica (`REPLICAOF`), the address now leads to the promoted server.
/// Writes on the old connection fail with `READONLY` forever; the limiter
/// must drop that connection and reconnect by name, so decisions come
/// from Redis again within about one back-off, not never.
#[test]
fn a_demoted_master_behind_a_stable_address_is_left_for_the_new_one() -> TestResult {
    let Some(a) = RedisServer::start_or_skip("demoted master (a)")? else {
        return Ok(());
    };
    let b = RedisServer::start()?;
    let vip = Forwarder::start(&a.addr())?;
    let rt = rt()?;
    rt.block_on(async {
        let backoff = Duration::from_millis(100);
        let limiter = RedisLimiter::builder(Gcra::new(Quota::per_second(nz(5))))
            .prefix(unique_prefix("demoted"))
            .backoff(backoff)
            .on_failure(FailurePolicy::Closed)
            .connect(Target::server(vip.url()))
            .await?;
        let v = limiter.check_verbose("k", 1).await?;
        assert_eq!(v.source, Source::Store, "{:?}", v.error);
        // The failover: A follows B, the address leads to B.
        a.cli(&["REPLICAOF", "127.0.0.1", &b.port().to_string()])?;
        vip.point_at(&b.addr());
        let failed_over = Instant::now();
        let mut from_redis_again = None;
        let mut sources = std::collections::HashMap::<Source, u32>::new();
        while failed_over.elapsed() < Duration::from_secs(3) {
            let v = limiter.check_verbose("k", 1).await?;
            *sources.entry(v.source).or_default() += 1;
            if v.source == Source::Store && sources.len() > 1 {
                from_redis_again = Some(failed_over.elapsed());
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let Some(after) = from_redis_again else {
            return Err(
                format!("never decided by Redis again after the failover: {sources:?}").into(),
            );
        };
        // One failing call, one back-off, one reconnect (plus a busy
        // machine's slack).
        assert!(after < backoff * 10, "back on Redis only after {after:?}");
        // And it is B that decides now: the key lives there.
        let keys = b.cli(&["DBSIZE"])?;
        assert_ne!(keys.trim(), "0", "B holds no key: {keys}");
        Ok::<_, Box<dyn std::error::Error>>(())
    })
}

/// Redis down while the service starts: the limiter is built all the
/// same, answers by its failure policy at once, and decides by Redis once
/// a server is there.
#[test]
fn redis_absent_at_start_up_is_the_failure_policy_then_redis() -> TestResult {
    let Some(mut server) = RedisServer::start_or_skip("absent at start-up")? else {
        return Ok(());
    };
    server.kill();
    let rt = rt()?;
    rt.block_on(async {
        let start = Instant::now();
        let limiter = RedisLimiter::builder(Gcra::new(Quota::per_hour(nz(3))))
            .prefix(unique_prefix("absent"))
            .timeout(Duration::from_millis(100))
            .backoff(Duration::from_millis(50))
            .connect(Target::server(server.url()))
            .await?;
        assert!(start.elapsed() < Duration::from_secs(5), "connect hung");
        // The default policy keeps a limit: three of ten.
        let mut allowed = 0;
        for _ in 0..10 {
            let v = limiter.check_verbose("k", 1).await?;
            assert_eq!(v.source, Source::Local, "{:?}", v.error);
            allowed += u32::from(v.decision.is_allowed());
        }
        assert_eq!(allowed, 3);
        server.restart()?;
        let back = back_on_redis(&limiter).await;
        assert!(back, "decisions never came from Redis once it started");
        Ok::<_, Box<dyn std::error::Error>>(())
    })
}

/// No default switches a limit off: a limiter built without a failure
/// policy keeps limiting each key while Redis is killed, and Redis decides
/// again once it is back.
#[test]
fn the_default_failure_policy_keeps_a_limit_during_an_outage() -> TestResult {
    let Some(mut server) = RedisServer::start_or_skip("default policy")? else {
        return Ok(());
    };
    let rt = rt()?;
    rt.block_on(async {
        let limiter = RedisLimiter::builder(Gcra::new(Quota::per_hour(nz(4))))
            .prefix(unique_prefix("default"))
            .backoff(Duration::from_millis(50))
            .connect(Target::server(server.url()))
            .await?;
        assert_eq!(
            limiter.check_verbose("warm", 1).await?.source,
            Source::Store
        );
        server.kill();
        let mut allowed = 0;
        let mut sources = std::collections::HashMap::<Source, u32>::new();
        for _ in 0..40 {
            let v = limiter.check_verbose("k", 1).await?;
            *sources.entry(v.source).or_default() += 1;
            allowed += u32::from(v.decision.is_allowed());
        }
        assert!(
            !sources.contains_key(&Source::FailOpen),
            "the default failed open: {sources:?}"
        );
        assert!(
            allowed <= 4,
            "{allowed} of 40 allowed at 4 per hour: {sources:?}"
        );
        assert!(
            allowed >= 1,
            "the local limit refused a fresh key: {sources:?}"
        );
        server.restart()?;
        assert!(
            back_on_redis(&limiter).await,
            "decisions never came back to Redis"
        );
        Ok::<_, Box<dyn std::error::Error>>(())
    })
}

/// Whether decisions come from Redis again within five seconds.
async fn back_on_redis(limiter: &RedisLimiter) -> bool {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(5) {
        if matches!(limiter.check_verbose("after", 1).await, Ok(v) if v.source == Source::Store) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

/// Units Redis has counted for `key` under `prefix` (a GCRA quota of
/// `limit` per hour), read through a plain limiter on the same prefix: its
/// own check spends one more.
async fn spent_in_redis(
    server: &RedisServer,
    prefix: &str,
    limit: u32,
    key: &str,
) -> Result<u32, Box<dyn std::error::Error>> {
    let plain = RedisLimiter::builder(Gcra::new(Quota::per_hour(nz(limit))))
        .prefix(prefix)
        .on_failure(FailurePolicy::Closed)
        .connect(Target::server(server.url()))
        .await?;
    let v = plain.check_verbose(key, 1).await?;
    assert_eq!(v.source, Source::Store, "{:?}", v.error);
    Ok(limit - 1 - v.decision.remaining())
}

/// A lease that "never expires" (`max_age` of `Duration::MAX`) is a lease
/// like any other: the checks answered from it spend what they count, no
/// panic, no lease per check.
#[test]
fn a_huge_lease_age_saturates_instead_of_burning_the_limit() -> TestResult {
    let Some(server) = RedisServer::start_or_skip("huge max_age")? else {
        return Ok(());
    };
    let rt = rt()?;
    rt.block_on(async {
        let prefix = unique_prefix("max-age");
        let lease = 8;
        let limiter = RedisLimiter::builder(Gcra::new(Quota::per_hour(nz(1000))))
            .prefix(prefix.clone())
            .on_failure(FailurePolicy::Closed)
            .pre_aggregate(weir_redis::PreAggregation {
                lease,
                hot_after: 1,
                max_age: Duration::MAX,
                max_keys: 16,
            })
            .connect(Target::server(server.url()))
            .await?;
        let checks = 40;
        for _ in 0..checks {
            let v = limiter.check_verbose("k", 1).await?;
            assert!(v.decision.is_allowed(), "{:?}", v.source);
        }
        // Let a background prefetch land.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let spent = spent_in_redis(&server, &prefix, 1000, "k").await?;
        // Checks plus the unused rest of at most one and a half leases.
        assert!(
            spent <= checks + lease * 3 / 2,
            "{checks} checks spent {spent} units in Redis"
        );
        Ok::<_, Box<dyn std::error::Error>>(())
    })
}

/// Batching sizes no queue or semaphore can hold are configuration
/// errors from `connect`, not a panic inside it or in its task.
#[test]
fn huge_batching_sizes_are_config_errors() -> TestResult {
    let rt = rt()?;
    rt.block_on(async {
        let huge = [
            weir_redis::Batching {
                queue: usize::MAX,
                ..Default::default()
            },
            weir_redis::Batching {
                max_in_flight: usize::MAX,
                ..Default::default()
            },
        ];
        for batching in huge {
            let r = RedisLimiter::builder(Gcra::new(Quota::per_second(nz(1))))
                .batching(batching)
                .connect(Target::server("redis://127.0.0.1:1/"))
                .await;
            assert!(
                matches!(r, Err(weir_redis::ConfigError::Invalid(_))),
                "{batching:?}: {r:?}"
            );
        }
        // A batch size beyond any queue is only an upper bound.
        let limiter = RedisLimiter::builder(Gcra::new(Quota::per_second(nz(1))))
            .batching(weir_redis::Batching {
                max_batch: usize::MAX,
                ..Default::default()
            })
            .on_failure(FailurePolicy::Closed)
            .connect(Target::server("redis://127.0.0.1:1/"))
            .await?;
        assert_eq!(
            limiter.check_verbose("k", 1).await?.source,
            Source::FailClosed
        );
        Ok::<_, Box<dyn std::error::Error>>(())
    })
}

/// Headers tell no lie a client would act on: a fail-open answer does not
/// promise the whole quota (nobody counted), and an answer from a lease
/// reports a reset that moves with time, not the one Redis gave when the
/// lease was taken.
#[test]
fn headers_from_a_lease_or_the_failure_policy_do_not_lie() -> TestResult {
    let Some(mut server) = RedisServer::start_or_skip("honest headers")? else {
        return Ok(());
    };
    let rt = rt()?;
    rt.block_on(async {
        let limiter = RedisLimiter::builder(Gcra::new(Quota::per_hour(nz(1000))))
            .prefix(unique_prefix("honest"))
            .on_failure(FailurePolicy::Closed)
            .pre_aggregate(weir_redis::PreAggregation {
                lease: 64,
                hot_after: 1,
                max_age: Duration::from_secs(30),
                max_keys: 16,
            })
            .connect(Target::server(server.url()))
            .await?;
        let mut first_lease = None;
        for _ in 0..4 {
            let v = limiter.check_verbose("k", 1).await?;
            if v.source == Source::Lease {
                first_lease.get_or_insert((Instant::now(), v.decision.reset_after()));
            }
        }
        let Some((at, reset)) = first_lease else {
            return Err("no check was answered from a lease".into());
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        let v = limiter.check_verbose("k", 1).await?;
        assert_eq!(v.source, Source::Lease);
        let passed = at.elapsed();
        // Nothing was spent in Redis since (no second lease: too few
        // checks), so the reset is the same instant, `passed` closer.
        let now = v.decision.reset_after();
        assert!(
            now + passed <= reset + Duration::from_millis(50)
                && now + passed + Duration::from_millis(50) >= reset,
            "reset {reset:?}, then {now:?} after {passed:?}"
        );

        let open = RedisLimiter::builder(Gcra::new(Quota::per_hour(nz(1000))))
            .prefix(unique_prefix("honest-open"))
            .on_failure(FailurePolicy::Open)
            .connect(Target::server(server.url()))
            .await?;
        server.kill();
        let v = open.check_verbose("k", 1).await?;
        assert_eq!(v.source, Source::FailOpen);
        assert!(v.decision.is_allowed());
        assert!(
            v.decision.remaining() < 1000,
            "a fail-open answer promised the whole quota: {}",
            v.decision.remaining()
        );
        Ok::<_, Box<dyn std::error::Error>>(())
    })
}

/// Poll `f` at most `polls` times, letting the connection and the
/// batching task make progress in between (`pause`), then drop it.
async fn poll_then_drop<F: std::future::Future>(
    f: F,
    polls: usize,
    pause: Option<Duration>,
) -> Option<F::Output> {
    let mut f = std::pin::pin!(f);
    for _ in 0..polls {
        let step = std::future::poll_fn(|cx| std::task::Poll::Ready(f.as_mut().poll(cx))).await;
        if let std::task::Poll::Ready(v) = step {
            return Some(v);
        }
        match pause {
            Some(pause) => tokio::time::sleep(pause).await,
            None => tokio::task::yield_now().await,
        }
    }
    None
}

/// Checks dropped at every await point, on the plain path, the batching
/// path and the lease path: the limiter keeps deciding by Redis
/// afterwards (no probe, permit, queue slot or lease fetch left behind),
/// and no dropped check is charged twice.
#[test]
fn checks_dropped_at_every_await_point_leave_nothing_behind() -> TestResult {
    let Some(server) = RedisServer::start_or_skip("dropped at every await point")? else {
        return Ok(());
    };
    let rt = rt()?;
    rt.block_on(async {
        for path in ["plain", "batched", "leased"] {
            let prefix = unique_prefix(path);
            let mut b = RedisLimiter::builder(Gcra::new(Quota::per_hour(nz(10_000))))
                .prefix(prefix.clone())
                .on_failure(FailurePolicy::Closed);
            match path {
                "batched" => b = b.batching(weir_redis::Batching::default()),
                "leased" => {
                    b = b.pre_aggregate(weir_redis::PreAggregation {
                        lease: 4,
                        hot_after: 1,
                        max_age: Duration::from_secs(5),
                        max_keys: 16,
                    })
                }
                _ => {}
            }
            let limiter = b.connect(Target::server(server.url())).await?;
            let mut started = 0u32;
            // Yields step through the await points finely; millisecond
            // pauses reach the late ones on a loaded machine too.
            let pauses = [None, Some(Duration::from_millis(1))];
            for (polls, pause) in (0..40).flat_map(|p| pauses.map(|pause| (p, pause))) {
                started += 1;
                if let Some(v) = poll_then_drop(limiter.check_verbose("k", 1), polls, pause).await {
                    let v = v?;
                    assert!(
                        matches!(v.source, Source::Store | Source::Lease),
                        "{path}: answered by {:?} ({:?}) after drops",
                        v.source,
                        v.error
                    );
                }
            }
            // Still decided by Redis (or its lease), promptly.
            let v = limiter.check_verbose("k", 1).await?;
            assert!(
                matches!(v.source, Source::Store | Source::Lease),
                "{path}: {:?} {:?}",
                v.source,
                v.error
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
            let spent = spent_in_redis(&server, &prefix, 10_000, "k").await?;
            // Every started check at most once, plus one lease's rest.
            assert!(
                spent <= started + 1 + 4,
                "{path}: {started} checks started, {spent} units spent"
            );
        }
        Ok::<_, Box<dyn std::error::Error>>(())
    })
}

/// A Redis server's clock that steps back (a failover to a node whose
/// clock lags, an NTP step) never reopens a fixed window the key has
/// filled: the state a server one window ahead wrote, full, stays full.
/// Written first, the lagging server counted the key from zero again.
#[test]
fn a_server_clock_stepping_back_never_reopens_a_full_window() -> TestResult {
    let Some(server) = RedisServer::start_or_skip("server clock stepping back")? else {
        return Ok(());
    };
    let mut raw = redis::Client::open(server.url())?.get_connection()?;
    let rt = rt()?;
    let minute = 60_000_000u64; // the window, in µs
    let limiter = rt.block_on(
        RedisLimiter::builder(weir_rate::FixedWindow::new(Quota::per_minute(nz(5))))
            .prefix(unique_prefix("clock-back"))
            .on_failure(FailurePolicy::Closed)
            .connect(Target::server(server.url())),
    )?;
    let state = limiter.store().redis_keys("k").remove(0);
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query(&mut raw)?;
    let ahead = ((secs * 1_000_000 + micros) / minute + 1) as f64;
    let full: Vec<u8> = [ahead.to_le_bytes(), 5f64.to_le_bytes()].concat();
    redis::cmd("SET")
        .arg(&state)
        .arg(full)
        .arg("PX")
        .arg(3_600_000)
        .query::<()>(&mut raw)?;
    let d = rt.block_on(limiter.check("k"));
    assert!(
        !d.is_allowed(),
        "a full later window was counted from zero: {d:?}"
    );
    assert!(d.retry_after() > Some(Duration::from_secs(60)), "{d:?}");
    Ok(())
}

/// A window algorithm ignores its quota's burst (its capacity is its
/// limit), and so must the default failure policy standing in for it:
/// written first, a fixed window of 5 a minute with a burst of 1000 let
/// 40 of 40 through per instance while Redis was down.
#[test]
fn the_default_failure_policy_of_a_window_ignores_the_burst() -> TestResult {
    let Some(mut server) = RedisServer::start_or_skip("window fallback")? else {
        return Ok(());
    };
    let rt = rt()?;
    rt.block_on(async {
        let quota = Quota::per_minute(nz(5)).allow_burst(nz(1000));
        let limiter = RedisLimiter::builder(weir_rate::FixedWindow::new(quota))
            .prefix(unique_prefix("window-fallback"))
            .backoff(Duration::from_millis(50))
            .connect(Target::server(server.url()))
            .await?;
        server.kill();
        let mut allowed = 0;
        for _ in 0..40 {
            let v = limiter.check_verbose("k", 1).await?;
            assert_ne!(v.source, Source::Store);
            allowed += u32::from(v.decision.is_allowed());
        }
        assert!(allowed <= 5, "{allowed} of 40 allowed at 5 a minute");
        Ok::<_, Box<dyn std::error::Error>>(())
    })
}
