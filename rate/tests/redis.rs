//! The Redis backend against real, private `redis-server` processes:
//! semantics equal to the in-process limiters, limits held by concurrent
//! tasks and processes, and faults (server killed and restarted,
//! `SCRIPT FLUSH`) under load with each failure policy.
#![cfg(feature = "redis")]

mod support;

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::*;
use weir_rate::redis::{
    Batching, FailurePolicy, PreAggregation, RedisLimitError, RedisLimiter, Source, Target,
};
use weir_rate::{
    FixedWindow, Gcra, KeyedLimiter, Limiter, Quota, RateLimiter, SlidingWindow, TokenBucket,
};
use weir_test_support::redis_server::{RedisServer, wait_until};

/// Entry point of the worker processes spawned by the tests (does nothing
/// when run normally).
#[test]
fn worker_process_entry() -> TestResult {
    worker_main()
}

/// The in-process limiter equivalent to `alg` over `quota`, time frozen.
fn local_pattern<L: Limiter>(l: L, n: usize) -> Vec<(bool, u32)> {
    let clock = weir_rate::clock::ManualClock::new();
    let limiter = RateLimiter::with_clock(l, clock);
    (0..n)
        .map(|_| {
            let d = limiter.check();
            (d.is_allowed(), d.remaining())
        })
        .collect()
}

#[test]
fn decisions_match_the_in_process_limiters() -> TestResult {
    let Some(server) = RedisServer::start_or_skip("decisions_match_the_in_process_limiters")?
    else {
        return Ok(());
    };
    let rt = rt()?;
    // A long window: the few microseconds between calls refill nothing.
    let quota = Quota::per_hour(nz(5));
    // Five counters, and the most the builder accepts (the whole ring is
    // packed into one value and unpacked onto Lua's stack).
    let more_counters = [5, 1024].map(|counters| Algorithm::SlidingWindow { counters });
    for alg in ALGORITHMS.into_iter().chain(more_counters) {
        let expected = match alg {
            Algorithm::TokenBucket => local_pattern(TokenBucket::new(quota), 8),
            Algorithm::Gcra => local_pattern(Gcra::new(quota), 8),
            Algorithm::FixedWindow => local_pattern(FixedWindow::new(quota), 8),
            Algorithm::SlidingWindow { counters } => {
                local_pattern(SlidingWindow::try_new(quota, counters)?, 8)
            }
        };
        let prefix = unique_prefix("match");
        let (got, last_reset): (Vec<(bool, u32)>, Duration) = rt.block_on(async {
            let limiter = alg
                .builder(quota)
                .prefix(prefix.clone())
                .on_failure(FailurePolicy::Closed)
                .connect(Target::server(server.url()))
                .await?;
            let mut got = Vec::new();
            let mut last_reset = Duration::ZERO;
            for _ in 0..8 {
                let v = limiter.check_verbose("k", 1).await?;
                if v.source != Source::Redis {
                    return Err(format!("{alg}: not from Redis: {:?}", v.error).into());
                }
                let d = v.decision;
                if !d.is_allowed() {
                    let retry = d.retry_after().ok_or("denial without retry-after")?;
                    // At most a window and a sub-window (sliding counter).
                    if retry.is_zero() || retry > Duration::from_secs(2 * 3600) {
                        return Err(format!("{alg}: retry-after {retry:?}").into());
                    }
                    if d.headers("p").len() != 3 {
                        return Err("a denial renders three headers".into());
                    }
                }
                got.push((d.is_allowed(), d.remaining()));
                last_reset = d.reset_after();
            }
            // Beyond capacity: an error, not a denial.
            if limiter.check_n("k", 6).await.is_ok() {
                return Err(format!("{alg}: cost 6 > capacity 5 was not refused").into());
            }
            Ok::<_, Box<dyn std::error::Error>>((got, last_reset))
        })?;
        assert_eq!(got, expected, "{alg}: Redis and in-process disagree");
        // One key, hash-tagged, with a TTL.
        let keys = server.cli(&["KEYS", &format!("{prefix}:*")])?;
        let keys: Vec<&str> = keys.lines().collect();
        assert_eq!(
            keys.len(),
            1,
            "{alg}: one Redis key per limiter key: {keys:?}"
        );
        assert!(keys[0].ends_with(":{k}"), "{alg}: key {}", keys[0]);
        let ttl: i64 = server.cli(&["PTTL", keys[0]])?.trim().parse()?;
        assert!(ttl > 0, "{alg}: key without TTL ({ttl})");
        // The key outlives its state: it expires no earlier than the state
        // becomes fresh again (reset_after, less the time since).
        let reset_ms = last_reset.as_millis() as i64;
        assert!(
            ttl + 1_000 >= reset_ms,
            "{alg}: expires in {ttl} ms, state fresh only in {reset_ms} ms"
        );
        assert!(
            ttl <= reset_ms + 2_100,
            "{alg}: lingers {ttl} ms for {reset_ms} ms"
        );
    }
    Ok(())
}

/// A batch that mixes keys decides each key from one read of its state, in
/// arrival order: with five units per key, every key admits exactly five
/// of its eight requests, remaining 4, 3, 2, 1, 0 — a key loaded twice in
/// one script call would admit some twice.
#[test]
fn batches_mixing_keys_decide_each_key_once_and_in_order() -> TestResult {
    let Some(server) =
        RedisServer::start_or_skip("batches_mixing_keys_decide_each_key_once_and_in_order")?
    else {
        return Ok(());
    };
    let rt = rt()?;
    let quota = Quota::per_hour(nz(5));
    for alg in ALGORITHMS {
        server.cli(&["CONFIG", "RESETSTAT"])?;
        let per_key: Vec<Vec<u32>> = rt.block_on(async {
            let limiter = alg
                .builder(quota)
                .prefix(unique_prefix("mixed"))
                .on_failure(FailurePolicy::Closed)
                .batching(Batching::default())
                .connect(Target::server(server.url()))
                .await?;
            // Interleaved: k0 k1 k2 k0 k1 k2 …, all queued before any answer.
            let handles: Vec<_> = (0..24)
                .map(|i| {
                    let l = limiter.clone();
                    tokio::spawn(async move { l.check_verbose(&format!("k{}", i % 3), 1).await })
                })
                .collect();
            let mut per_key = vec![Vec::new(); 3];
            for (i, h) in handles.into_iter().enumerate() {
                let v = h.await??;
                if v.source != Source::Redis {
                    return Err(format!("{alg}: not from Redis: {:?}", v.error).into());
                }
                if v.decision.is_allowed() {
                    per_key[i % 3].push(v.decision.remaining());
                }
            }
            Ok::<_, Box<dyn std::error::Error>>(per_key)
        })?;
        for (k, remaining) in per_key.iter().enumerate() {
            assert_eq!(remaining, &[4, 3, 2, 1, 0], "{alg}: key k{k}");
        }
        let calls = server.command_stats("evalsha")?.calls;
        assert!(
            calls < 24,
            "{alg}: {calls} script calls for 24 decisions: nothing was batched"
        );
    }
    Ok(())
}

/// The script call a batch of unequal costs becomes carries one cost per
/// decision (equal costs travel as one), and each decision spends its
/// own: costs 1, 2, 3, 4 against a limit of 10 leave 9, 7, 4, 0 in
/// arrival order, then nothing is left.
#[test]
fn a_batch_of_unequal_costs_spends_each_its_own() -> TestResult {
    let Some(server) = RedisServer::start_or_skip("a_batch_of_unequal_costs_spends_each_its_own")?
    else {
        return Ok(());
    };
    // One thread: every spawned caller queues its decision before the
    // batching task runs, so the four are one call, in spawn order.
    let rt = rt()?;
    let quota = Quota::per_hour(nz(10));
    for alg in ALGORITHMS {
        let (remaining, calls, last) = rt.block_on(async {
            let limiter = alg
                .builder(quota)
                .prefix(unique_prefix("costs"))
                .on_failure(FailurePolicy::Closed)
                .batching(Batching::default())
                .connect(Target::server(server.url()))
                .await?;
            // Load the script first, so that the batch is one call.
            let _warm_up = limiter.check_n("warm-up", 1).await?;
            server.cli(&["CONFIG", "RESETSTAT"])?;
            let handles: Vec<_> = (1..=4)
                .map(|cost| {
                    let l = limiter.clone();
                    tokio::spawn(async move { l.check_verbose("k", cost).await })
                })
                .collect();
            let mut remaining = Vec::new();
            for h in handles {
                let v = h.await??;
                if v.source != Source::Redis || !v.decision.is_allowed() {
                    return Err(format!("{alg}: {v:?}").into());
                }
                remaining.push(v.decision.remaining());
            }
            let calls = server.command_stats("evalsha")?.calls;
            let last = limiter.check_verbose("k", 1).await?;
            Ok::<_, Box<dyn std::error::Error>>((remaining, calls, last))
        })?;
        assert_eq!(calls, 1, "{alg}: the four decisions were not one call");
        assert_eq!(remaining, [9, 7, 4, 0], "{alg}: costs misapplied");
        assert_eq!(last.source, Source::Redis, "{alg}: {:?}", last.error);
        assert!(!last.decision.is_allowed(), "{alg}: spent beyond the limit");
    }
    Ok(())
}

/// A busy key is overwritten in place and keeps its expiry: after many
/// quick decisions it still holds exactly one state's bytes and expires
/// within two seconds of becoming fresh. A value of another size under a
/// limiter's key is replaced whole, never overwritten in part.
#[test]
fn busy_keys_keep_their_expiry_and_their_size() -> TestResult {
    let Some(server) = RedisServer::start_or_skip("busy_keys_keep_their_expiry_and_their_size")?
    else {
        return Ok(());
    };
    let rt = rt()?;
    let quota = Quota::per_second(nz(1_000));
    let state_bytes = |alg: Algorithm| match alg {
        Algorithm::TokenBucket | Algorithm::Gcra | Algorithm::FixedWindow => 16,
        Algorithm::SlidingWindow { counters } => 16 * counters as usize,
    };
    let connect = |alg: Algorithm, prefix: &str| {
        rt.block_on(
            alg.builder(quota)
                .prefix(prefix)
                .on_failure(FailurePolicy::Closed)
                .connect(Target::server(server.url())),
        )
    };
    for alg in ALGORITHMS {
        let prefix = unique_prefix("busy");
        let limiter = connect(alg, &prefix)?;
        let mut fresh_in = Duration::ZERO;
        let _warm_up = rt.block_on(limiter.check_verbose("warm-up", 1))?;
        server.cli(&["CONFIG", "RESETSTAT"])?;
        for _ in 0..20 {
            let v = rt.block_on(limiter.check_verbose("k", 1))?;
            assert!(
                v.decision.is_allowed() && v.source == Source::Redis,
                "{alg}: {v:?}"
            );
            fresh_in = v.decision.reset_after();
        }
        // Written whole once (a new key), then in place, but where its
        // expiry second moved on (at most twice in the time taken).
        let in_place = server.command_stats("setrange")?.calls;
        assert!(in_place >= 17, "{alg}: {in_place} of 19 writes in place");
        let key = limiter.redis_key("k");
        let len: usize = server.cli(&["STRLEN", &key])?.trim().parse()?;
        assert_eq!(len, state_bytes(alg), "{alg}: state of {len} bytes");
        let ttl: i64 = server.cli(&["PTTL", &key])?.trim().parse()?;
        let fresh_ms = fresh_in.as_millis() as i64;
        assert!(
            ttl > 0 && ttl + 100 >= fresh_ms && ttl <= fresh_ms + 2_100,
            "{alg}: expires in {ttl} ms, fresh in {fresh_ms} ms"
        );
        // A foreign value under a limiter's key (here a valid state with
        // eight stray bytes after it, as an older format might leave) is
        // not this algorithm's state: the key starts fresh and its value
        // is replaced whole, never overwritten in part.
        let foreign = limiter.redis_key("foreign");
        server.cli(&[
            "EVAL",
            "redis.call('SET', KEYS[2], redis.call('GET', KEYS[1]) .. 'stray!!!', 'PX', 60000)",
            "2",
            &key,
            &foreign,
        ])?;
        let v = rt.block_on(limiter.check_verbose("foreign", 1))?;
        assert_eq!(v.source, Source::Redis, "{alg}: {:?}", v.error);
        assert_eq!(
            v.decision.remaining(),
            999,
            "{alg}: took the foreign value for its state"
        );
        let len: usize = server.cli(&["STRLEN", &foreign])?.trim().parse()?;
        assert_eq!(len, state_bytes(alg), "{alg}: foreign bytes left behind");
    }
    Ok(())
}

#[test]
fn short_windows_refill_and_expire() -> TestResult {
    let Some(server) = RedisServer::start_or_skip("short_windows_refill_and_expire")? else {
        return Ok(());
    };
    let rt = rt()?;
    let quota = Quota::try_new(3, Duration::from_millis(300))?;
    for alg in ALGORITHMS {
        rt.block_on(async {
            let limiter = alg
                .builder(quota)
                .prefix(unique_prefix("refill"))
                .connect(Target::server(server.url()))
                .await?;
            let mut allowed = 0;
            for _ in 0..10 {
                allowed += u32::from(limiter.check("k").await.is_allowed());
            }
            assert!((3..=4).contains(&allowed), "{alg}: burst allowed {allowed}");
            let denied = limiter.check("k").await;
            let retry = denied.retry_after().unwrap_or(Duration::from_secs(1));
            // After the retry-after (and for the sliding counter, the rest of
            // the window), the request is allowed again.
            tokio::time::sleep(retry + Duration::from_millis(5)).await;
            let mut ok = limiter.check("k").await.is_allowed();
            if !ok {
                tokio::time::sleep(Duration::from_millis(700)).await;
                ok = limiter.check("k").await.is_allowed();
            }
            assert!(ok, "{alg}: not allowed again after retry-after {retry:?}");
            Ok::<_, Box<dyn std::error::Error>>(())
        })?;
    }
    // Every key expires on its own once idle.
    assert!(
        wait_until(Duration::from_secs(5), || server
            .cli(&["DBSIZE"])
            .is_ok_and(|s| s.trim() == "0")),
        "keys left behind: {}",
        server.cli(&["KEYS", "*"])?
    );
    Ok(())
}

#[test]
fn tasks_and_processes_never_exceed_the_limit() -> TestResult {
    let Some(server) = RedisServer::start_or_skip("tasks_and_processes_never_exceed_the_limit")?
    else {
        return Ok(());
    };
    let rt = rt()?;
    for alg in ALGORITHMS {
        for batched in [false, true] {
            let spec = Spec {
                cluster: false,
                urls: vec![server.url()],
                prefix: unique_prefix("load"),
                algorithm: alg,
                limit: 150,
                window: Duration::from_secs(3600),
                keys: vec!["a".into(), "b".into(), "c".into()],
                tasks: 6,
                requests: 120,
                batched,
            };
            let first = window_index(spec.window);
            let started = Instant::now();
            // Two other processes and six tasks here: 3 × 6 × 120 = 2160
            // attempts on 3 keys of 150 each.
            let workers = spawn_workers("worker_process_entry", 2, &spec)?;
            let mut tally = rt.block_on(run_load(&spec))?;
            tally.merge(&collect_workers(workers)?);
            let what = if batched { "batched" } else { "plain" };
            assert_eq!(tally.not_redis, 0, "{alg} {what}: Redis was healthy");
            check_tally(what, &spec, &tally, started, first)?;
        }
    }
    Ok(())
}

#[test]
fn hot_key_leases_never_exceed_the_limit() -> TestResult {
    let Some(server) = RedisServer::start_or_skip("hot_key_leases_never_exceed_the_limit")? else {
        return Ok(());
    };
    let rt = rt()?;
    rt.block_on(async {
        let quota = Quota::per_hour(nz(2_000));
        let hot = PreAggregation {
            lease: 50,
            hot_after: 10,
            max_age: Duration::from_secs(5),
            ..Default::default()
        };
        let prefix = unique_prefix("hot");
        let mut limiters = Vec::new();
        for _ in 0..3 {
            // Three "instances", each with its own leases.
            limiters.push(
                RedisLimiter::builder(Gcra::new(quota))
                    .prefix(prefix.clone())
                    .pre_aggregate(hot)
                    .connect(Target::server(server.url()))
                    .await?,
            );
        }
        let mut handles = Vec::new();
        for (i, l) in limiters.iter().enumerate() {
            for _ in 0..4 {
                let l = l.clone();
                handles.push(tokio::spawn(async move {
                    let (mut allowed, mut leased) = (0u64, 0u64);
                    for _ in 0..300 + i {
                        if let Ok(v) = l.check_verbose("hot", 1).await {
                            if v.decision.is_allowed() {
                                allowed += 1;
                                leased += u64::from(v.source == Source::Lease);
                            }
                        }
                    }
                    (allowed, leased)
                }));
            }
        }
        let (mut allowed, mut leased) = (0, 0);
        for h in handles {
            let (a, l) = h.await?;
            allowed += a;
            leased += l;
        }
        // Every unit was counted in Redis: never more than the limit (plus
        // the refill of a few seconds at 2000/h, under 2).
        assert!(allowed <= 2_002, "hot key allowed {allowed} > 2000");
        assert!(leased > 1_000, "leases answered only {leased} checks");
        // Far from the limit at first, close to it at the end: the units
        // lost in unused leases are at most one lease per instance.
        assert!(allowed + 3 * 50 >= 2_000, "hot key allowed only {allowed}");
        Ok::<_, Box<dyn std::error::Error>>(())
    })
}

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
                    if n % 16 == 0 {
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
            if limiter.check_verbose("probe", 1).await?.source == Source::Redis {
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
            total.get(&Source::Redis).copied().unwrap_or(0) > 0,
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
            assert_eq!(v.source, Source::Redis);
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
            Source::Redis
        );
        server.kill();
        let mut outage = false;
        for _ in 0..50 {
            if limiter.check_verbose("probe", 1).await?.source != Source::Redis {
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
            Source::Redis
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
            Source::Redis,
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
            Source::Redis
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
        assert!(matches!(bad, Err(RedisLimitError::Config(_))));
        let bad_url = RedisLimiter::builder(Gcra::new(Quota::per_second(NonZeroU32::MIN)))
            .connect(Target::server("not a url"))
            .await;
        assert!(matches!(bad_url, Err(RedisLimitError::Redis(_))));
        Ok(())
    })
}

/// Short windows under concurrent load: for every allowed decision, the
/// allowed decisions that surely happened (on the server clock) within a
/// span `d` after it never exceed what the algorithm allows over `d`.
#[test]
fn short_windows_hold_over_every_span() -> TestResult {
    let Some(server) = RedisServer::start_or_skip("short_windows_hold_over_every_span")? else {
        return Ok(());
    };
    let rt = rt()?;
    let (limit, window) = (20u32, Duration::from_millis(400));
    let quota = Quota::try_new(limit, window)?;
    for alg in [
        Algorithm::Gcra,
        Algorithm::TokenBucket,
        Algorithm::FixedWindow,
    ] {
        let prefix = unique_prefix("span");
        let spans: Vec<(u128, u128)> = rt.block_on(async {
            // Two "instances" with their own connections, 4 tasks each.
            let mut limiters = Vec::new();
            for batched in [false, true] {
                let mut b = alg
                    .builder(quota)
                    .prefix(prefix.clone())
                    .timeout(Duration::from_secs(2));
                if batched {
                    b = b.batching(Batching::default());
                }
                limiters.push(b.connect(Target::server(server.url())).await?);
            }
            let epoch = Instant::now();
            let mut handles = Vec::new();
            for t in 0..8 {
                let l = limiters[t % 2].clone();
                handles.push(tokio::spawn(async move {
                    let mut spans = Vec::new();
                    for _ in 0..300 {
                        let start = epoch.elapsed().as_micros();
                        let v = l.check_verbose("k", 1).await;
                        let end = epoch.elapsed().as_micros();
                        if let Ok(v) = v {
                            if v.source == Source::Redis && v.decision.is_allowed() {
                                spans.push((start, end));
                            }
                        }
                        tokio::time::sleep(Duration::from_millis(2)).await;
                    }
                    spans
                }));
            }
            let mut all = Vec::new();
            for h in handles {
                all.extend(h.await?);
            }
            Ok::<_, Box<dyn std::error::Error>>(all)
        })?;
        let w = window.as_micros();
        let limit = u128::from(limit);
        // Spans checked, and the most each may hold: a rate algorithm
        // (burst = limit) allows burst + d / T; a fixed window at most two
        // windows' worth over a span of one window.
        let checks: Vec<(u128, u128)> = match alg {
            Algorithm::FixedWindow => vec![(w, 2 * limit)],
            _ => vec![(w / 4, limit + limit / 4 + 1), (w, 2 * limit + 1)],
        };
        assert!(
            spans.len() as u128 > limit,
            "{alg}: only {} allowed",
            spans.len()
        );
        for (d, most) in checks {
            for &(s0, _) in &spans {
                // Decisions that started after s0 and ended before s0 + d
                // were decided by the server within [s0, s0 + d].
                let inside = spans
                    .iter()
                    .filter(|&&(s, e)| s >= s0 && e <= s0 + d)
                    .count() as u128;
                assert!(
                    inside <= most,
                    "{alg}: {inside} allowed within {d} µs (at most {most})"
                );
            }
        }
    }
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
                Source::Redis
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
                    Some(RedisLimitError::Timeout(_) | RedisLimitError::BackingOff) => true,
                    Some(RedisLimitError::Redis(e)) => e.is_timeout(),
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
                    if limiter.check_verbose("warm", 1).await?.source == Source::Redis {
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
            Source::Redis
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
            Source::Redis,
            "b was cut short with its batch: {:?}",
            b.error
        );
        assert!(b.decision.is_allowed());
        Ok(())
    })
}

/// `(allowed, remaining, reset µs, retry µs)` of a decision, durations
/// rounded up to whole microseconds as the Redis backend reports them.
type Summary = (bool, u32, u128, u128);

fn summary(d: &weir_rate::Decision) -> Summary {
    let us = |t: Duration| t.as_nanos().div_ceil(1000);
    (
        d.is_allowed(),
        d.remaining(),
        us(d.reset_after()),
        d.retry_after().map_or(0, us),
    )
}

/// The in-process decisions of `l` for `costs`, all at one instant.
fn local_costs<L: Limiter>(
    l: L,
    costs: &[u32],
) -> Result<Vec<Summary>, Box<dyn std::error::Error>> {
    let limiter = RateLimiter::with_clock(l, weir_rate::clock::ManualClock::new());
    let mut out = Vec::new();
    for &c in costs {
        out.push(summary(&limiter.check_n(c)?));
    }
    Ok(out)
}

/// High rates and byte costs, where a unit is worth less than the 0.25 µs
/// between doubles near today's epoch microseconds: every decision of one
/// script call (one server instant, as the in-process limiters' frozen
/// clock) equals the in-process one — allowed, remaining, reset and
/// retry-after to the microsecond. Before the state was kept in whole
/// nanoseconds from a recent base, GCRA at 10 M/s allowed everything and
/// at 3 M/s about a third more than its burst.
#[test]
fn high_rates_and_byte_costs_decide_as_the_in_process_limiters() -> TestResult {
    let Some(server) =
        RedisServer::start_or_skip("high_rates_and_byte_costs_decide_as_the_in_process_limiters")?
    else {
        return Ok(());
    };
    let rt = rt()?;
    // Packet sizes, 40 to 1500 bytes, in a fixed pseudo-random order.
    let mut x = 12_345u32;
    let bytes: Vec<u32> = (0..300)
        .map(|_| {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            40 + (x >> 16) % 1461
        })
        .collect();
    let ones = vec![1u32; 400];
    let mixed: Vec<u32> = (0..400).map(|i| 1 + i % 7).collect();
    let per_second = |limit: u32, burst: u32| Quota::per_second(nz(limit)).allow_burst(nz(burst));
    let cases: Vec<(Algorithm, Quota, &[u32])> = vec![
        (Algorithm::Gcra, per_second(10_000_000, 100), &ones),
        (Algorithm::Gcra, per_second(3_000_000, 100), &ones),
        (Algorithm::Gcra, per_second(3_000_000, 1_000), &mixed),
        (Algorithm::TokenBucket, per_second(10_000_000, 100), &ones),
        (Algorithm::TokenBucket, per_second(3_000_000, 1_000), &mixed),
        // Byte rates: 3 MB/s with 64 KiB bursts; 100 MB per 7 s.
        (
            Algorithm::TokenBucket,
            per_second(3_000_000, 65_536),
            &bytes,
        ),
        (Algorithm::Gcra, per_second(3_000_000, 65_536), &bytes),
        (
            Algorithm::TokenBucket,
            Quota::try_new(100_000_000, Duration::from_secs(7))?.allow_burst(nz(100_000)),
            &bytes,
        ),
    ];
    for (alg, quota, costs) in cases {
        let expected = match alg {
            Algorithm::Gcra => local_costs(Gcra::new(quota), costs)?,
            _ => local_costs(TokenBucket::new(quota), costs)?,
        };
        let (got, calls) = rt.block_on(async {
            let limiter = alg
                .builder(quota)
                .prefix(unique_prefix("exact"))
                .timeout(Duration::from_secs(5))
                .on_failure(FailurePolicy::Closed)
                .batching(Batching {
                    max_batch: 4096,
                    max_in_flight: 1,
                    queue: 4096,
                })
                .connect(Target::server(server.url()))
                .await?;
            // Load the script first, so that the batch is one call.
            let _warm_up = limiter.check_n("warm-up", 1).await?;
            server.cli(&["CONFIG", "RESETSTAT"])?;
            // One thread: every caller queues before the batching task
            // runs, so all are one script call, in this order.
            let handles: Vec<_> = costs
                .iter()
                .map(|&cost| {
                    let l = limiter.clone();
                    tokio::spawn(async move { l.check_verbose("k", cost).await })
                })
                .collect();
            let mut got = Vec::new();
            for h in handles {
                let v = h.await??;
                if v.source != Source::Redis {
                    return Err(format!("{alg}: not from Redis: {:?}", v.error).into());
                }
                got.push(summary(&v.decision));
            }
            let calls = server.command_stats("evalsha")?.calls;
            Ok::<_, Box<dyn std::error::Error>>((got, calls))
        })?;
        assert_eq!(calls, 1, "{alg} {quota}: the decisions were not one call");
        let allowed = |v: &[Summary]| v.iter().filter(|d| d.0).count();
        assert_eq!(
            allowed(&got),
            allowed(&expected),
            "{alg} {quota}: allowed count (Redis, in-process)"
        );
        for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
            assert_eq!(
                g, e,
                "{alg} {quota}: decision {i} (cost {}) differs",
                costs[i]
            );
        }
    }
    Ok(())
}

/// A quota change keeps each key at least until it is full again under
/// the new quota. Lowering a token bucket's rate used to leave the key with
/// the expiry of the old quota (kept by in-place overwrites, and untouched
/// by denials), so it vanished early and came back with a full burst.
#[test]
fn a_quota_change_keeps_keys_until_they_are_full_again() -> TestResult {
    let Some(server) =
        RedisServer::start_or_skip("a_quota_change_keeps_keys_until_they_are_full_again")?
    else {
        return Ok(());
    };
    let rt = rt()?;
    // 1000/s, full in 1 s; then 100/s with the same burst, full in 10 s.
    let before = Quota::per_second(nz(1_000));
    let after = Quota::per_second(nz(100)).allow_burst(nz(1_000));
    let ttl_ms = |key: &str| -> Result<i64, Box<dyn std::error::Error>> {
        Ok(server.cli(&["PTTL", key])?.trim().parse()?)
    };
    rt.block_on(async {
        let mut new_limiters = Vec::new();
        for alg in [Algorithm::TokenBucket, Algorithm::Gcra] {
            let prefix = unique_prefix("requota");
            let connect = |quota: Quota| {
                alg.builder(quota)
                    .prefix(prefix.clone())
                    .on_failure(FailurePolicy::Closed)
                    .connect(Target::server(server.url()))
            };
            let old = connect(before).await?;
            let new = connect(after).await?;
            // "empty" spent its whole burst, "busy" a tenth of it: both
            // full again within a second, so they expire within 3 s.
            for (key, cost) in [("empty", 1_000), ("busy", 100)] {
                let v = old.check_verbose(key, cost).await?;
                assert!(
                    v.decision.is_allowed() && v.source == Source::Redis,
                    "{alg}: {v:?}"
                );
            }
            // Under the new quota: "empty" is denied (a denial writes
            // nothing), "busy" allowed (overwritten in place).
            let mut full_in = Vec::new();
            for (key, cost, allowed) in [("empty", 10, false), ("busy", 1, true)] {
                let v = new.check_verbose(key, cost).await?;
                assert_eq!(v.source, Source::Redis, "{alg}: {:?}", v.error);
                if alg == Algorithm::TokenBucket {
                    assert_eq!(v.decision.is_allowed(), allowed, "{alg} {key}: {v:?}");
                }
                full_in.push((key, v.decision.reset_after().as_millis() as i64));
            }
            for (key, full_in) in full_in {
                let ttl = ttl_ms(&new.redis_key(key))?;
                assert!(
                    ttl >= full_in,
                    "{alg} {key}: expires in {ttl} ms, full again only in {full_in} ms"
                );
            }
            new_limiters.push((alg, new));
        }
        // Past the expiry the old quota gave: no key came back full.
        tokio::time::sleep(Duration::from_millis(3_300)).await;
        for (alg, new) in &new_limiters {
            if *alg != Algorithm::TokenBucket {
                continue; // GCRA keeps its deficit in time: full by now
            }
            // 3.3 s at 100/s refilled about 330: "empty" has about 330,
            // "busy" about 420 (its 0.9 s since empty were 90 tokens at
            // the new rate, less the one spent); a reset key has 999.
            for (key, most) in [("empty", 500), ("busy", 900)] {
                let v = new.check_verbose(key, 1).await?;
                assert_eq!(v.source, Source::Redis, "{alg}: {:?}", v.error);
                assert!(
                    v.decision.remaining() < most,
                    "{alg} {key}: reset with a full burst ({} left)",
                    v.decision.remaining()
                );
            }
        }
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
                        matches!(v.error, Some(RedisLimitError::Overloaded)),
                        "{what}: shed for {:?}",
                        v.error
                    );
                }
                *sources.entry(v.source).or_default() += 1;
            }
            for (v, backing_off) in unrelated.await? {
                let v = v?;
                assert!(
                    matches!(v.source, Source::Redis | Source::Shed),
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
                sources.get(&Source::Redis).copied().unwrap_or(0) > 0,
                "{what}: Redis decided nothing: {sources:?}"
            );
            // Once the flood is over, Redis decides at once.
            let v = limiter.check_verbose("after", 1).await?;
            assert_eq!(v.source, Source::Redis, "{what}: {:?}", v.error);
            Ok::<_, Box<dyn std::error::Error>>(())
        })?;
    }
    Ok(())
}

/// Keys written in the former state format of the token bucket and GCRA
/// (one double of epoch microseconds) are read, not reset: a release that
/// changes the format does not hand every busy key a fresh burst. The
/// first write replaces them in the current format.
#[test]
fn former_state_format_is_read_not_reset() -> TestResult {
    let Some(server) = RedisServer::start_or_skip("former_state_format_is_read_not_reset")? else {
        return Ok(());
    };
    let rt = rt()?;
    // 5 an hour: 720 s a unit. Two units spent, three left.
    let quota = Quota::per_hour(nz(5));
    let unit_us: i64 = 720_000_000;
    for (alg, offset) in [
        (Algorithm::Gcra, 2 * unit_us),         // tat two units ahead
        (Algorithm::TokenBucket, -3 * unit_us), // empty three units ago
    ] {
        let limiter = rt.block_on(
            alg.builder(quota)
                .prefix(unique_prefix("former"))
                .on_failure(FailurePolicy::Closed)
                .connect(Target::server(server.url())),
        )?;
        let key = limiter.redis_key("k");
        server.cli(&[
            "EVAL",
            "local t = redis.call('TIME') \
             local now = tonumber(t[1]) * 1000000 + tonumber(t[2]) \
             redis.call('SET', KEYS[1], struct.pack('<d', now + tonumber(ARGV[1])), 'PX', 60000)",
            "1",
            &key,
            &offset.to_string(),
        ])?;
        let v = rt.block_on(limiter.check_verbose("k", 1))?;
        assert_eq!(v.source, Source::Redis, "{alg}: {:?}", v.error);
        assert!(v.decision.is_allowed(), "{alg}: {v:?}");
        assert_eq!(
            v.decision.remaining(),
            2,
            "{alg}: the former state was not read"
        );
        let len: usize = server.cli(&["STRLEN", &key])?.trim().parse()?;
        assert_eq!(len, 16, "{alg}: not rewritten in the current format");
        let v = rt.block_on(limiter.check_verbose("k", 2))?;
        assert!(
            v.decision.is_allowed() && v.decision.remaining() == 0,
            "{alg}: {v:?}"
        );
        assert!(
            !rt.block_on(limiter.check("k")).is_allowed(),
            "{alg}: beyond the quota"
        );
    }
    Ok(())
}
