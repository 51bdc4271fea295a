//! Limits changed while serving, on a real Redis: every instance that
//! takes the new limit reads what a key spent under the old one, and
//! under load, batched or not, no decision mixes the parts of two
//! all-of sets.

use super::*;
use weir_rate::PolicyName;
use weir_rate::clock::ManualClock;
use weir_redis::Limit;

/// Limits of so many a minute, each followed by so many checks of one key.
const STEPS: [(u32, usize); 4] = [(10, 8), (5, 3), (20, 20), (2, 3)];

/// What one in-process GCRA answers to [`STEPS`] at one instant.
fn in_process() -> Vec<bool> {
    let limiter = KeyedLimiter::<String, _, _>::with_clock(
        Gcra::new(Quota::per_minute(nz(1))),
        ManualClock::new(),
    );
    let mut answers = Vec::new();
    for (per_minute, checks) in STEPS {
        limiter.set_limit(Gcra::new(Quota::per_minute(nz(per_minute))));
        answers.extend((0..checks).map(|_| limiter.check("alice").is_allowed()));
    }
    answers
}

#[test]
fn two_instances_take_a_new_limit_over_what_was_spent() -> TestResult {
    let Some(server) = RedisServer::start_or_skip("limits changed on Redis")? else {
        return Ok(());
    };
    rt()?.block_on(async {
        let prefix = unique_prefix("retune");
        let connect = || {
            RedisLimiter::builder(Gcra::new(Quota::per_minute(nz(10))))
                .prefix(prefix.clone())
                .connect(Target::server(server.url()))
        };
        let (a, b) = (connect().await?, connect().await?);
        let mut answers = Vec::new();
        for (per_minute, checks) in STEPS {
            for limiter in [&a, &b] {
                limiter.set_limit(Gcra::new(Quota::per_minute(nz(per_minute))))?;
            }
            for i in 0..checks {
                let limiter = if i % 2 == 0 { &a } else { &b };
                answers.push(limiter.check("alice").await.is_allowed());
            }
        }
        assert_eq!(
            answers,
            in_process(),
            "both instances read what the key spent"
        );
        assert!(
            answers[8..11].iter().filter(|a| **a).count() < 3,
            "no fresh quota: {answers:?}"
        );
        assert_eq!(b.check("bob").await.limit(), 2);
        Ok(())
    })
}

#[test]
fn under_load_each_decision_is_by_the_old_set_or_the_new() -> TestResult {
    let Some(server) = RedisServer::start_or_skip("an all-of set changed under load")? else {
        return Ok(());
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let sets = [(1_000_000, 1_000_000_000), (2_000_000, 2_000_000_000)].map(|(s, d)| {
            [
                Limit::of(&Gcra::new(Quota::per_second(nz(s)))),
                Limit::of(&FixedWindow::new(Quota::per_day(nz(d)))),
            ]
        });
        let policy = PolicyName::new("p");
        let rendered = sets.map(|[s, d]| {
            format!(
                "\"p-1s\";q={};w=1, \"p-1d\";q={};w=86400",
                s.quota().limit(),
                d.quota().limit()
            )
        });
        for batching in [None, Some(Batching::default())] {
            let mut builder = RedisLimiter::builder(Gcra::new(sets[0][0].quota()))
                .and(FixedWindow::new(sets[0][1].quota()))
                .prefix(unique_prefix("retune-load"));
            if let Some(batching) = batching {
                builder = builder.batching(batching);
            }
            let limiter = builder.connect(Target::server(server.url())).await?;
            let checkers: Vec<_> = (0..16)
                .map(|i| {
                    let (limiter, policy, rendered) =
                        (limiter.clone(), policy.clone(), rendered.clone());
                    tokio::spawn(async move {
                        let mut seen = [0u32; 2];
                        for n in 0..300 {
                            let d = limiter.check(&format!("key-{}", (i + n) % 8)).await;
                            let fields = d.ratelimit_policy(&policy);
                            let which = rendered.iter().position(|r| *r == fields);
                            seen[which.unwrap_or_else(|| panic!("a mix: {fields}"))] += 1;
                        }
                        seen
                    })
                })
                .collect();
            let flipper = {
                let limiter = limiter.clone();
                tokio::spawn(async move {
                    for flip in 1..=100 {
                        limiter.set_limits(&sets[flip % 2]).unwrap();
                        tokio::time::sleep(Duration::from_micros(500)).await;
                    }
                })
            };
            let mut seen = [0; 2];
            for checker in checkers {
                let [a, b] = checker.await?;
                seen[0] += a;
                seen[1] += b;
            }
            flipper.await?;
            assert!(seen[0] > 0 && seen[1] > 0, "both sets decided: {seen:?}");
        }
        Ok(())
    })
}
