//! Limits held by concurrent tasks, processes and leases, over every span.

use super::*;

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
                        if let Ok(v) = l.check_verbose("hot", 1).await
                            && v.decision.is_allowed()
                        {
                            allowed += 1;
                            leased += u64::from(v.source == Source::Lease);
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
                        if let Ok(v) = v
                            && v.source == Source::Store
                            && v.decision.is_allowed()
                        {
                            spans.push((start, end));
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
