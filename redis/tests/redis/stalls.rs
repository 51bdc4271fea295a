//! Stalled servers and calls, and callers dropped or shed: nothing waits past its deadline or fails open.

use super::*;
use weir_test_support::stalls::{self, Stalling};

/// The one caller allowed to probe Redis after a back-off may be cancelled
/// (a client gone, a layer's own timeout): the probe is then handed to the
/// next caller at once, rather than Redis being skipped, and the failure
/// policy answering for it, for one more back-off.
#[test]
fn a_dropped_probe_hands_the_probe_to_the_next_caller() -> TestResult {
    let name = "a_dropped_probe_hands_the_probe_to_the_next_caller";
    let Some(server) = RedisServer::start_or_skip(name)? else {
        return Ok(());
    };
    let pid = server.pid().ok_or("no server process")?;
    let rt = rt()?;
    rt.block_on(async {
        let backoff = Duration::from_millis(500);
        let limiter = RedisLimiter::builder(Gcra::new(Quota::per_hour(nz(1000))))
            .prefix(unique_prefix("probe"))
            .timeout(Duration::from_millis(100))
            .backoff(backoff)
            .on_failure(FailurePolicy::Open)
            .connect(Target::server(server.url()))
            .await?;
        assert_eq!(
            limiter.check_verbose("warm", 1).await?.source,
            Source::Store
        );
        // A stalled server: the call times out and the back-off starts.
        let frozen = Frozen::freeze(pid)?;
        let stalled = limiter.check_verbose("stalled", 1).await?;
        drop(frozen);
        assert_eq!(stalled.source, Source::FailOpen);
        assert!(limiter.is_backing_off("any"));
        tokio::time::sleep(backoff + Duration::from_millis(100)).await;
        // The back-off is over: the next caller probes, and is cancelled
        // while its call is in flight.
        let mut probe = Box::pin(limiter.check_verbose("probe", 1));
        let first =
            std::future::poll_fn(|cx| std::task::Poll::Ready(probe.as_mut().poll(cx))).await;
        assert!(first.is_pending(), "the probe finished on its first poll");
        drop(probe);
        let next = limiter.check_verbose("next", 1).await?;
        assert_eq!(
            next.source,
            Source::Store,
            "the caller after a dropped probe was answered by {:?} ({:?})",
            next.source,
            next.error
        );
        Ok::<_, Box<dyn std::error::Error>>(())
    })
}

/// Callers queued for the batching task behind a call that then fails,
/// with less than half a timeout left, are answered with the failure, not
/// sent to the failing server one by one as slots free up: a stalled Redis
/// receives the call that found it stalled and at most one more per slot,
/// not a stream of scripts whose callers have already been answered (and
/// whose units it would still charge when it wakes).
#[test]
fn callers_queued_behind_a_failed_call_are_not_sent() -> TestResult {
    let name = "callers_queued_behind_a_failed_call_are_not_sent";
    let Some(server) = RedisServer::start_or_skip(name)? else {
        return Ok(());
    };
    let pid = server.pid().ok_or("no server process")?;
    let rt = rt()?;
    let prefix = unique_prefix("queued");
    rt.block_on(async {
        let limiter = RedisLimiter::builder(Gcra::new(Quota::per_hour(nz(1000))))
            .prefix(prefix.clone())
            .timeout(Duration::from_millis(100))
            .backoff(Duration::from_secs(10))
            .on_failure(FailurePolicy::Open)
            .batching(Batching {
                max_batch: 1,
                max_in_flight: 1,
                queue: 64,
            })
            .connect(Target::server(server.url()))
            .await?;
        assert_eq!(
            limiter.check_verbose("warm", 1).await?.source,
            Source::Store
        );
        let frozen = Frozen::freeze(pid)?;
        // Twenty callers, 4 ms apart: the first call goes out, the rest
        // queue behind it (one call in flight) until it fails at 100 ms.
        let mut tasks = Vec::new();
        for i in 0..20u64 {
            let limiter = limiter.clone();
            tasks.push(tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(4 * i)).await;
                limiter.check_verbose(&format!("k{i}"), 1).await
            }));
        }
        for task in tasks {
            let outcome = task.await??;
            assert_eq!(outcome.source, Source::FailOpen, "{outcome:?}");
        }
        drop(frozen);
        tokio::time::sleep(Duration::from_millis(300)).await;
        Ok::<_, Box<dyn std::error::Error>>(())
    })?;
    let keys = server.cli(&["KEYS", &format!("{prefix}*")])?;
    let sent: Vec<&str> = keys.lines().filter(|k| !k.contains("warm")).collect();
    assert!(
        sent.len() <= 2,
        "the stalled server received {} calls: {sent:?}",
        sent.len()
    );
    Ok(())
}

/// Sends `SIGCONT` to a stopped process when dropped, so a failing
/// assertion never leaves the server frozen.
struct Frozen(u32);

impl Frozen {
    fn freeze(pid: u32) -> std::io::Result<Self> {
        signal(pid, "-STOP")?;
        Ok(Self(pid))
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        let _ = signal(self.0, "-CONT");
    }
}

fn signal(pid: u32, sig: &str) -> std::io::Result<()> {
    let status = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()?;
    if status.success() {
        Ok(())
    } else {
        Err(std::io::Error::other(format!("kill {sig} {pid}: {status}")))
    }
}

/// A server that accepts connections but never answers (stopped with
/// `SIGSTOP`): every caller, plain or batched, many at once, gets the
/// failure policy's answer with a timeout error by its deadline instead of
/// waiting, and Redis decides again once the server resumes.
#[test]
fn stalled_server_is_answered_by_the_deadline() -> TestResult {
    let Some(server) = RedisServer::start_or_skip("stalled_server_is_answered_by_the_deadline")?
    else {
        return Ok(());
    };
    let pid = server.pid().ok_or("the server's pid is unknown")?;
    let rt = rt()?;
    rt.block_on(async {
        let timeout = Duration::from_millis(100);
        for batched in [false, true] {
            let mut b = RedisLimiter::builder(Gcra::new(Quota::per_second(nz(1_000_000))))
                .prefix(unique_prefix("stall"))
                .timeout(timeout)
                .backoff(Duration::from_millis(20))
                .on_failure(FailurePolicy::Closed);
            if batched {
                b = b.batching(Batching {
                    max_batch: 4,
                    max_in_flight: 1,
                    queue: 1024,
                });
            }
            let limiter = b.connect(Target::server(server.url())).await?;
            assert_eq!(
                limiter.check_verbose("warm", 1).await?.source,
                Source::Store
            );
            let frozen = Frozen::freeze(pid)?;
            // 64 callers on a batcher of 4 a call, 1 in flight: most wait
            // in the queue behind calls that cannot finish.
            let calls = (0..64).map(|i| {
                let l = limiter.clone();
                tokio::spawn(async move {
                    let start = Instant::now();
                    let v = l.check_verbose(&format!("k{i}"), 1).await;
                    (v, start.elapsed())
                })
            });
            let answers = tokio::time::timeout(Duration::from_secs(10), async {
                let mut out = Vec::new();
                for c in calls.collect::<Vec<_>>() {
                    out.push(c.await);
                }
                out
            })
            .await
            .map_err(|_| format!("callers hung on a stalled server (batched: {batched})"))?;
            for answer in answers {
                let (v, took) = answer?;
                let v = v?;
                assert_eq!(v.source, Source::FailClosed, "batched: {batched}");
                assert!(!v.decision.is_allowed());
                // Our deadline, the connection's response timeout (set to
                // the same), or the back-off that follows either.
                let timed_out = match &v.error {
                    Some(StoreError::Timeout(_) | StoreError::BackingOff) => true,
                    Some(StoreError::Store(e)) => e
                        .downcast_ref::<redis::RedisError>()
                        .is_some_and(redis::RedisError::is_timeout),
                    _ => false,
                };
                assert!(timed_out, "batched: {batched}: {:?}", v.error);
                // By the deadline, with slack for a loaded test machine
                // (without the batcher's deadlines the last of these
                // callers waited 16 calls' timeouts, 1.6 s).
                assert!(took < timeout * 3, "batched: {batched}: took {took:?}");
            }
            drop(frozen);
            let back = async {
                loop {
                    if limiter.check_verbose("warm", 1).await?.source == Source::Store {
                        return Ok::<_, Box<dyn std::error::Error>>(());
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            };
            tokio::time::timeout(Duration::from_secs(10), back)
                .await
                .map_err(|_| "Redis did not decide again after SIGCONT")??;
        }
        Ok(())
    })
}

/// A batch mixing a caller near its deadline with one far from it, on a
/// server busy (a long script) until between the two deadlines: the first
/// is answered with a timeout at its deadline, the second still gets
/// Redis's answer — one caller's deadline does not cut its batch short.
#[test]
fn a_late_caller_does_not_time_out_its_batch() -> TestResult {
    let Some(server) = RedisServer::start_or_skip("a_late_caller_does_not_time_out_its_batch")?
    else {
        return Ok(());
    };
    let rt = rt()?;
    rt.block_on(async {
        let timeout = Duration::from_millis(600);
        let limiter = RedisLimiter::builder(Gcra::new(Quota::per_second(nz(1_000_000))))
            .prefix(unique_prefix("late"))
            .timeout(timeout)
            .on_failure(FailurePolicy::Closed)
            .batching(Batching {
                max_batch: 16,
                max_in_flight: 1,
                queue: 64,
            })
            .connect(Target::server(server.url()))
            .await?;
        assert_eq!(
            limiter.check_verbose("warm", 1).await?.source,
            Source::Store
        );
        // Redis busy from about t = 10 ms to t = 910 ms.
        let busy = "local t0 = redis.call('TIME') \
            repeat local t = redis.call('TIME') \
            until (t[1] - t0[1]) * 1000000 + (t[2] - t0[2]) > 900000 return 1";
        let mut blocker = std::process::Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &server.port().to_string()])
            .args(["EVAL", busy, "0"])
            .stdout(std::process::Stdio::null())
            .spawn()?;
        let start = Instant::now();
        let at = |ms: u64| tokio::time::sleep_until((start + Duration::from_millis(ms)).into());
        let spawn_check = |key: &'static str| {
            let l = limiter.clone();
            tokio::spawn(async move { l.check_verbose(key, 1).await })
        };
        // x: sent alone at 100 ms, holds the one slot until its deadline
        // (700 ms); a (deadline 720 ms) and b (deadline 1080 ms) queue
        // behind it and go out together at 700 ms.
        at(100).await;
        let x = spawn_check("x");
        at(120).await;
        let a = spawn_check("a");
        at(480).await;
        let b = spawn_check("b");
        let (x, a, b) = (x.await??, a.await??, b.await??);
        blocker.wait()?;
        assert_eq!(x.source, Source::FailClosed, "x: {:?}", x.error);
        assert_eq!(a.source, Source::FailClosed, "a: {:?}", a.error);
        assert_eq!(
            b.source,
            Source::Store,
            "b was cut short with its batch: {:?}",
            b.error
        );
        assert!(b.decision.is_allowed());
        Ok(())
    })
}

/// A caller dropped while its check fetches a hot key's lease (a client
/// gone, a `timeout` around `check`) does not stall the key: the next
/// check is answered at once, from a lease. It used to wait the whole call
/// timeout for a fetch nobody would finish, and the key never got a lease
/// again.
#[test]
fn a_dropped_lease_fetch_does_not_stall_its_key() -> TestResult {
    let Some(server) = RedisServer::start_or_skip("a_dropped_lease_fetch_does_not_stall_its_key")?
    else {
        return Ok(());
    };
    let rt = rt()?;
    rt.block_on(async {
        let timeout = Duration::from_secs(2);
        for batched in [false, true] {
            let mut b = RedisLimiter::builder(Gcra::new(Quota::per_hour(nz(10_000))))
                .prefix(unique_prefix("dropped"))
                .timeout(timeout)
                .on_failure(FailurePolicy::Closed)
                // Hot from the first check: it fetches a lease.
                .pre_aggregate(PreAggregation {
                    lease: 10,
                    hot_after: 1,
                    max_age: Duration::from_secs(60),
                    ..Default::default()
                });
            if batched {
                b = b.batching(Batching::default());
            }
            let limiter = b.connect(Target::server(server.url())).await?;
            let _warm_up = limiter.try_check_n("warm-up", 1).await?;
            // Polled once (the fetch is under way), then dropped.
            let mut first = Box::pin(limiter.check_verbose("k", 1));
            let polled =
                std::future::poll_fn(|cx| std::task::Poll::Ready(first.as_mut().poll(cx))).await;
            assert!(polled.is_pending(), "answered before Redis could");
            drop(first);
            for i in 0..5 {
                let start = Instant::now();
                let v = limiter.check_verbose("k", 1).await?;
                let took = start.elapsed();
                assert!(
                    took < timeout / 4,
                    "batched: {batched}: check {i} took {took:?}"
                );
                assert_eq!(
                    v.source,
                    Source::Lease,
                    "batched: {batched}: check {i}: {:?}",
                    v.error
                );
                // The dropped caller's unit went back to the lease: 10
                // counted in Redis, one spent per check.
                assert_eq!(v.decision.remaining(), 9_999 - i, "batched: {batched}");
            }
        }
        Ok(())
    })
}

/// A batching queue too small for the load sheds the excess callers — a
/// denial with its own source and error — but Redis stays in use: the
/// server is never taken for down, so keys are never answered by the
/// failure policy (here fail-open) while Redis is healthy. The same holds
/// for callers whose deadline passes while they are queued. Both used to
/// start the back-off, and every key was allowed unchecked meanwhile.
#[test]
fn local_overload_sheds_callers_and_never_fails_open() -> TestResult {
    let Some(server) =
        RedisServer::start_or_skip("local_overload_sheds_callers_and_never_fails_open")?
    else {
        return Ok(());
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    // A full queue (one slot); a queue that takes longer to drain than a
    // caller's deadline (one decision a call, one call at a time).
    let cases = [
        (
            "full queue",
            Batching {
                max_batch: 4,
                max_in_flight: 1,
                queue: 1,
            },
            Duration::from_secs(1),
        ),
        (
            "late in the queue",
            Batching {
                max_batch: 1,
                max_in_flight: 1,
                queue: 100_000,
            },
            Duration::from_millis(200),
        ),
    ];
    for (what, batching, timeout) in cases {
        rt.block_on(async {
            let limiter = RedisLimiter::builder(Gcra::new(Quota::per_hour(nz(1_000_000))))
                .prefix(unique_prefix("shed"))
                .timeout(timeout)
                .backoff(Duration::from_secs(1))
                .on_failure(FailurePolicy::Open)
                .batching(batching)
                .connect(Target::server(server.url()))
                .await?;
            let _warm_up = limiter.try_check_n("warm-up", 1).await?;
            // A flood of 4000 callers at once on their own keys …
            let flood: Vec<_> = (0..4_000)
                .map(|i| {
                    let l = limiter.clone();
                    tokio::spawn(async move { l.check_verbose(&format!("flood{i}"), 1).await })
                })
                .collect();
            // … and, meanwhile, an unrelated key checked again and again.
            let unrelated = {
                let l = limiter.clone();
                tokio::spawn(async move {
                    let mut seen = Vec::new();
                    for _ in 0..200 {
                        seen.push((
                            l.check_verbose("unrelated", 1).await,
                            l.is_backing_off("unrelated"),
                        ));
                        tokio::task::yield_now().await;
                    }
                    seen
                })
            };
            let mut sources = std::collections::HashMap::<Source, u64>::new();
            for h in flood {
                let v = h.await??;
                if v.source == Source::Shed {
                    assert!(
                        !v.decision.is_allowed(),
                        "{what}: a shed caller was allowed"
                    );
                    assert!(
                        matches!(v.error, Some(StoreError::Overloaded)),
                        "{what}: shed for {:?}",
                        v.error
                    );
                }
                *sources.entry(v.source).or_default() += 1;
            }
            for (v, backing_off) in unrelated.await? {
                let v = v?;
                assert!(
                    matches!(v.source, Source::Store | Source::Shed),
                    "{what}: the unrelated key was answered by {:?} ({:?})",
                    v.source,
                    v.error
                );
                assert!(!backing_off, "{what}: Redis taken for down");
                *sources.entry(v.source).or_default() += 1;
            }
            assert!(
                sources.get(&Source::Shed).copied().unwrap_or(0) > 0,
                "{what}: nothing was shed: {sources:?}"
            );
            assert!(
                sources.get(&Source::Store).copied().unwrap_or(0) > 0,
                "{what}: Redis decided nothing: {sources:?}"
            );
            // Once the flood is over, Redis decides at once.
            let v = limiter.check_verbose("after", 1).await?;
            assert_eq!(v.source, Source::Store, "{what}: {:?}", v.error);
            Ok::<_, Box<dyn std::error::Error>>(())
        })?;
    }
    Ok(())
}

/// What `instances` limiters (each its own instance: connection, fallback)
/// allow one key, 8 callers each, over `run`, with Redis stopped for 60 ms
/// of every 100 ms if `stalling`: by Redis, and by the fallback.
fn allowed_under_stalls(
    server: &RedisServer,
    quota: Quota,
    instances: usize,
    run: Duration,
    stalling: bool,
) -> Result<(u32, u32), Box<dyn std::error::Error>> {
    let pid = server.pid().ok_or("no server process")?;
    let prefix = unique_prefix("stalls");
    rt()?.block_on(async {
        let mut limiters = Vec::new();
        for _ in 0..instances {
            limiters.push(
                RedisLimiter::builder(Gcra::new(quota))
                    .prefix(prefix.clone())
                    .timeout(Duration::from_millis(30))
                    .backoff(Duration::from_millis(20))
                    .connect(Target::server(server.url()))
                    .await?,
            );
        }
        let stalls = stalling
            .then(|| Stalling::start(pid, Duration::from_millis(60), Duration::from_millis(100)));
        let allowed = stalls::allowed(&limiters, "k", 8, run).await;
        drop(stalls);
        Ok(allowed)
    })
}

/// A store that stalls past the timeout ten times a second never loosens
/// the limit beyond its stated bound: one instance admits no more than one
/// limit (burst + rate × time) through Redis and its fallback together,
/// and N instances no more than N limits, however many stalls.
#[test]
fn a_store_stalling_ten_times_a_second_never_loosens_the_limit() -> TestResult {
    let Some(server) = RedisServer::start_or_skip("stalling ten times a second")? else {
        return Ok(());
    };
    let quota = Quota::per_second(nz(20));
    let run = Duration::from_secs(3);
    // burst + rate × time, and one unit for the run's last instant.
    let bound = 20 + 20 * 3 + 1;
    for instances in [1, 2] {
        let calm = allowed_under_stalls(&server, quota, instances, run, false)?;
        let stalled = allowed_under_stalls(&server, quota, instances, run, true)?;
        stalls::assert_bounded("Redis", instances as u32, bound, calm, stalled);
    }
    Ok(())
}

/// What the store gives back, the fallback gives back too. A stacked
/// layer refunds every request an inner limit refused; were the fallback
/// to keep counting those units, a stall (and the window after it, while
/// the store's admissions also need the fallback's room) would find the
/// key spent when it has spent nothing.
#[test]
fn a_refund_on_the_store_is_given_back_on_the_fallback_too() -> TestResult {
    let Some(server) = RedisServer::start_or_skip("refund reaches the fallback")? else {
        return Ok(());
    };
    let pid = server.pid().ok_or("no server process")?;
    rt()?.block_on(async {
        let backoff = Duration::from_millis(200);
        let limiter = RedisLimiter::builder(FixedWindow::new(Quota::per_day(nz(5))))
            .prefix(unique_prefix("refund-fallback"))
            .timeout(Duration::from_millis(50))
            .backoff(backoff)
            .connect(Target::server(server.url()))
            .await?;
        for _ in 0..5 {
            let spent = limiter.check_verbose("k", 1).await?;
            assert_eq!(spent.source, Source::Store, "{:?}", spent.error);
            assert!(spent.decision.is_allowed());
            limiter.refund("k", &spent.decision).await?;
        }
        // Redis stalls: the fallback decides, and the key spent nothing.
        let frozen = Frozen::freeze(pid)?;
        let stalled = limiter.check_verbose("k", 1).await?;
        drop(frozen);
        assert_eq!(stalled.source, Source::Local, "{:?}", stalled.error);
        assert!(
            stalled.decision.is_allowed(),
            "the fallback still counts the refunded units"
        );
        // Back on Redis, within the window after the stall: Redis and the
        // fallback together admit the rest of the day's 5, no more.
        tokio::time::sleep(backoff + Duration::from_millis(50)).await;
        let mut allowed = 0;
        for _ in 0..8 {
            allowed += u32::from(limiter.check("k").await.is_allowed());
        }
        assert_eq!(allowed, 4, "one of the 5 went to the stall");
        Ok::<_, Box<dyn std::error::Error>>(())
    })
}

/// A refund asked for while Redis is being skipped after a failure (the
/// back-off, when no call goes out) is not lost: it waits for the store
/// to answer again and lands then, so the key gets its units back.
#[test]
fn a_refund_during_the_back_off_lands_when_the_store_is_back() -> TestResult {
    let Some(server) = RedisServer::start_or_skip("refund survives a back-off")? else {
        return Ok(());
    };
    let pid = server.pid().ok_or("no server process")?;
    rt()?.block_on(async {
        let limiter = RedisLimiter::builder(FixedWindow::new(Quota::per_day(nz(3))))
            .prefix(unique_prefix("refund-backoff"))
            .timeout(Duration::from_millis(50))
            .backoff(Duration::from_millis(300))
            .on_failure(FailurePolicy::Closed)
            .connect(Target::server(server.url()))
            .await?;
        let mut spent = Vec::new();
        for _ in 0..3 {
            let d = limiter.check_verbose("k", 1).await?;
            assert_eq!(d.source, Source::Store, "{:?}", d.error);
            spent.push(d.decision);
        }
        // A stall starts the back-off; the refunds are asked for during it.
        let frozen = Frozen::freeze(pid)?;
        let stalled = limiter.check_verbose("other", 1).await?;
        drop(frozen);
        assert_eq!(stalled.source, Source::FailClosed);
        assert!(limiter.is_backing_off("k"));
        for d in &spent {
            tokio::time::timeout(Duration::from_secs(5), limiter.refund("k", d)).await??;
        }
        // Every unit is back on Redis.
        let mut allowed = 0;
        for _ in 0..5 {
            let d = limiter.check_verbose("k", 1).await?;
            assert_eq!(d.source, Source::Store, "{:?}", d.error);
            allowed += u32::from(d.decision.is_allowed());
        }
        assert_eq!(allowed, 3);
        Ok::<_, Box<dyn std::error::Error>>(())
    })
}
