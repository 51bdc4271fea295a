//! A bad day on real servers: killed and restarted (its counts are gone),
//! absent at start-up, stalled past the timeout, one of several down, and
//! counters evicted for want of memory.

use super::*;
use std::time::Instant;

/// A limiter that answers by the per-instance fallback while Memcached is
/// down, and probes it every 50 ms.
async fn resilient<L: weir_store::StoreAlgorithm>(
    algorithm: L,
    name: &str,
    servers: &[&MemcachedServer],
) -> Result<MemcachedLimiter, ConfigError> {
    MemcachedLimiter::builder(algorithm)
        .prefix(unique_prefix(name))
        .timeout(Duration::from_millis(100))
        .backoff(Duration::from_millis(50))
        .connect(Servers::new(servers.iter().map(|s| s.addr())))
        .await
}

/// Checks `key` until the store answers it again (or 5 s pass).
async fn until_the_store_answers(l: &MemcachedLimiter, key: &str) -> bool {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(5) {
        if l.check_verbose(key, 0)
            .await
            .is_ok_and(|a| a.source == Source::Store)
        {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

/// Killed, the server's counts are gone: the fallback answers during the
/// outage, and after the restart a key that had spent its window could
/// spend it again. An instance that saw the outage does not let it: its
/// fallback counted what the store allowed it and is asked too for a
/// window after the failure. An instance that saw no failure (here one
/// started after it) does: the overshoot of one restart is one window's
/// limit per key, across the instances that saw nothing, which this
/// measures.
#[test]
fn a_restart_forgets_the_window_and_the_fallback_covers_the_outage() -> TestResult {
    let Some(mut server) = MemcachedServer::start_or_skip("memcached restart")? else {
        return Ok(());
    };
    rt()?.block_on(async {
        let l = resilient(
            FixedWindow::new(Quota::per_hour(nz(50))),
            "restart",
            &[&server],
        )
        .await?;
        assert_eq!(allowed(&l, "k", 80).await, 50);
        server.kill();
        let during = l.check_verbose("other", 1).await?;
        assert_eq!(during.source, Source::Local, "{:?}", during.error);
        assert!(during.error.is_some());
        server.restart()?;
        assert!(
            until_the_store_answers(&l, "k").await,
            "never answered again"
        );
        let after = allowed(&l, "k", 80).await;
        assert_eq!(
            after, 0,
            "the instance that saw the outage remembers the window"
        );
        let unaware = MemcachedLimiter::builder(FixedWindow::new(Quota::per_hour(nz(50))))
            .prefix(l.name())
            .connect(Servers::new([server.addr()]))
            .await?;
        let after = allowed(&unaware, "k", 80).await;
        assert_eq!(after, 50, "a restart forgets the count: the window again");
        Ok(())
    })
}

/// Absent when the service starts: the limiter is built all the same,
/// answers by its fallback, and decides on Memcached once it is there.
#[test]
fn absent_at_start_up_is_no_error() -> TestResult {
    let Some(mut server) = MemcachedServer::start_or_skip("memcached absent")? else {
        return Ok(());
    };
    server.kill();
    rt()?.block_on(async {
        let start = Instant::now();
        let l = resilient(Gcra::new(Quota::per_second(nz(100))), "absent", &[&server]).await?;
        assert!(start.elapsed() < Duration::from_secs(3));
        assert!(l.is_backing_off("k"));
        let a = l.check_verbose("k", 1).await?;
        assert_eq!(a.source, Source::Local);
        server.restart()?;
        assert!(until_the_store_answers(&l, "k").await);
        Ok(())
    })
}

/// A stalled server (stopped: connections open, nothing answered) costs
/// callers the timeout once, then the back-off answers at once; a caller
/// never waits past the timeout.
#[test]
fn a_stalled_server_costs_callers_at_most_the_timeout() -> TestResult {
    let Some(server) = MemcachedServer::start_or_skip("memcached stall")? else {
        return Ok(());
    };
    rt()?.block_on(async {
        let l = resilient(
            FixedWindow::new(Quota::per_second(nz(1000))),
            "stall",
            &[&server],
        )
        .await?;
        assert!(l.check("warm").await.is_allowed());
        server.pause()?;
        let mut slowest = Duration::ZERO;
        for i in 0..20 {
            let start = Instant::now();
            let a = l.check_verbose(&format!("k{i}"), 1).await?;
            slowest = slowest.max(start.elapsed());
            assert_eq!(a.source, Source::Local, "{:?}", a.error);
        }
        server.resume()?;
        assert!(
            slowest < Duration::from_millis(400),
            "a caller waited {slowest:?} with a 100 ms timeout"
        );
        assert!(until_the_store_answers(&l, "warm").await);
        Ok(())
    })
}

/// One of two servers down: its keys go to the fallback, the other
/// server's keys are still decided on Memcached.
#[test]
fn one_server_down_sends_only_its_keys_to_the_fallback() -> TestResult {
    let (Some(mut a), Some(b)) = (
        MemcachedServer::start_or_skip("memcached one down")?,
        MemcachedServer::start_or_skip("memcached one down")?,
    ) else {
        return Ok(());
    };
    rt()?.block_on(async {
        let l = resilient(
            Gcra::new(Quota::per_second(nz(1000))),
            "one-down",
            &[&a, &b],
        )
        .await?;
        let dead = a.addr();
        let (on_a, on_b): (Vec<String>, Vec<String>) = (0..40)
            .map(|i| format!("user{i}"))
            .partition(|k| l.store().server_of(k) == dead);
        assert!(!on_a.is_empty() && !on_b.is_empty());
        a.kill();
        for key in &on_a {
            let answer = l.check_verbose(key, 1).await?;
            assert_eq!(answer.source, Source::Local, "{key}");
        }
        for key in &on_b {
            let answer = l.check_verbose(key, 1).await?;
            assert_eq!(answer.source, Source::Store, "{key}: {:?}", answer.error);
        }
        Ok(())
    })
}

/// Counters evicted for want of memory are a looser limit: keys that had
/// spent their window spend it again. With memory for every key that
/// spends within a window (the sizing rule in the crate docs) nothing is
/// evicted and nothing passes twice.
#[test]
fn evicted_counters_loosen_the_limit_and_enough_memory_prevents_it() -> TestResult {
    if !weir_test_support::memcached_server::installed() {
        MemcachedServer::start_or_skip("memcached eviction")?;
        return Ok(());
    }
    // 2 MB: a few tens of thousands of small items; 64 MB: far more than
    // the keys below.
    let small = MemcachedServer::start_with(2, &[])?;
    let roomy = MemcachedServer::start_with(64, &[])?;
    rt()?.block_on(async {
        let keys = 60_000;
        let mut passed_twice = Vec::new();
        for server in [&small, &roomy] {
            let l = MemcachedLimiter::builder(FixedWindow::new(Quota::per_hour(nz(1))))
                .prefix(unique_prefix("evict"))
                .timeout(Duration::from_secs(2))
                .on_failure(FailurePolicy::Closed)
                .batching(weir_memcached::Batching::default())
                .connect(Servers::one(server.addr()))
                .await?;
            let spend = |l: MemcachedLimiter| async move {
                let mut tasks = Vec::new();
                for chunk in 0..16 {
                    let l = l.clone();
                    tasks.push(tokio::spawn(async move {
                        let mut allowed = 0u32;
                        for k in (chunk..keys).step_by(16) {
                            let a = l.check_verbose(&format!("user{k}"), 1).await.expect("max cost");
                            assert_eq!(a.source, Source::Store, "{:?}", a.error);
                            allowed += u32::from(a.decision.is_allowed());
                        }
                        allowed
                    }));
                }
                let mut total = 0;
                for t in tasks {
                    total += t.await.expect("a task");
                }
                total
            };
            assert_eq!(spend(l.clone()).await, keys as u32, "every key spends once");
            passed_twice.push((spend(l).await, server.stat("evictions")?));
        }
        let [(small_twice, small_evictions), (roomy_twice, roomy_evictions)] = passed_twice[..]
        else {
            unreachable!()
        };
        assert!(small_evictions > 0, "2 MB held {keys} counters: no pressure");
        assert!(small_twice > 0, "evicted counters did not loosen the limit");
        eprintln!(
            "eviction: with 2 MB, {small_evictions} counters evicted and {small_twice} of {keys} \
             keys passed a second time in their window; with 64 MB, {roomy_evictions} and {roomy_twice}"
        );
        assert_eq!((roomy_evictions, roomy_twice), (0, 0));
        Ok(())
    })
}

/// The per-instance fallback of a window counts the same windows as the
/// store: both start a window at a multiple of its length since the Unix
/// epoch, so a window spent late in the fallback is whole again right
/// after the grid's boundary (a rate-based fallback, or windows on another
/// grid, would still refuse there).
#[test]
fn the_fallback_windows_fall_on_the_stores_grid() -> TestResult {
    let Some(mut server) = MemcachedServer::start_or_skip("memcached grid")? else {
        return Ok(());
    };
    rt()?.block_on(async {
        let window = Duration::from_secs(2);
        let l = resilient(
            FixedWindow::new(Quota::try_new(3, window)?),
            "grid",
            &[&server],
        )
        .await?;
        server.kill();
        assert_eq!(l.check_verbose("warm", 1).await?.source, Source::Local);
        let into_window = || {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .expect("after 1970");
            Duration::from_nanos((now.as_nanos() % window.as_nanos()) as u64)
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
        assert_eq!(allowed(&l, "k", 5).await, 3);
        // ...and just after it, it is whole again.
        tokio::time::sleep(window - into_window() + Duration::from_millis(50)).await;
        assert_eq!(
            allowed(&l, "k", 5).await,
            3,
            "the fallback's window did not end on the grid"
        );
        Ok(())
    })
}

/// A server that stalls past the timeout ten times a second never loosens
/// the limit beyond its stated bound: one instance admits no more than one
/// limit (burst + rate × time) through Memcached and its fallback
/// together, two instances no more than two, however many stalls; and
/// without stalls the store holds the limit exactly.
#[test]
fn a_server_stalling_ten_times_a_second_never_loosens_the_limit() -> TestResult {
    use weir_test_support::stalls::{self, Stalling};
    let Some(server) = MemcachedServer::start_or_skip("memcached stalling")? else {
        return Ok(());
    };
    let pid = server.pid().ok_or("no server process")?;
    let quota = Quota::per_second(nz(20));
    let run = Duration::from_secs(3);
    let bound = 20 + 20 * 3 + 1;
    rt()?.block_on(async {
        for instances in [1u32, 2] {
            let mut allowed = Vec::new();
            for stalling in [false, true] {
                let prefix = unique_prefix("stalls");
                let mut limiters = Vec::new();
                for _ in 0..instances {
                    limiters.push(
                        MemcachedLimiter::builder(FixedWindow::new(quota))
                            .prefix(prefix.clone())
                            .timeout(Duration::from_millis(30))
                            .backoff(Duration::from_millis(20))
                            .connect(Servers::new([server.addr()]))
                            .await?,
                    );
                }
                let stalls = stalling.then(|| {
                    Stalling::start(pid, Duration::from_millis(60), Duration::from_millis(100))
                });
                allowed.push(stalls::allowed(&limiters, "k", 8, run).await);
                drop(stalls);
            }
            stalls::assert_bounded("Memcached", instances, bound, allowed[0], allowed[1]);
        }
        Ok(())
    })
}
