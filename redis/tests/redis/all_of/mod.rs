//! Several limits of one key decided all-or-nothing on Redis, refunds by
//! receipt and forced charges on Redis, against private `redis-server`
//! processes (and the cluster fixture): decisions equal to the in-process
//! ones, the failure policy's local fallback kept all-or-nothing and
//! charged during an outage.
//!
//! How time is handled: the Redis scripts read the server's `TIME`, which
//! a test can neither stop nor set, and a refund (by the GCRA's and the
//! buckets' rule) returns less the later it comes, so after refunds the
//! decisions depend on instants a few microseconds apart. The comparison
//! with the in-process limiters therefore brackets them: two in-process
//! runs on the server's clock (epoch nanoseconds, so fixed windows fall
//! on the same boundaries) read through charges of nothing made before
//! and after every step. An allowed check and a charge carry their exact
//! server instant in the receipt, and both runs take them then, spending
//! just what Redis spent; a denial and a refund, which name no instant,
//! happened between the two readings, so the *strict* run takes a denial
//! at the earlier reading and a refund at the later one, the *lenient*
//! run the reverse. Every operation is monotone in the state and in time,
//! so Redis's answer must lie between the two runs' answers (allowed if
//! the strict one allows, denied if the lenient one denies, `remaining`
//! between theirs), and equal them (`allowed`, `remaining`, `limit`,
//! `window`, receipt) wherever the two agree, which is almost every step.
//! `reset` and `retry` (rounded to microseconds on Redis) are not compared.

use crate::support::*;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use std::collections::HashSet;
use std::time::Duration;
use weir_rate::{
    Algorithm, AllOf, Decision, FixedWindow, Gcra, Mode, NeverAllowed, Quota, Receipt,
    SlidingWindow, TokenBucket,
};
use weir_redis::{
    Batching, ConfigError, FailurePolicy, RedisLimiter, RedisLimiterBuilder, Source, StoreError,
    Target,
};
use weir_test_support::redis_server::{RedisCluster, RedisServer};

const DAY: Duration = Duration::from_secs(24 * 3600);

type BoxError = Box<dyn std::error::Error>;

fn per_day(limit: u32) -> Quota {
    Quota::try_new(limit, DAY).unwrap_or(Quota::per_hour(nz(limit)))
}

/// What redis-cell's users ask for: a gateway limiting per second and per day must not
/// spend the per-second budget on requests the daily limit refuses. Three
/// requests pass, the daily limit refuses ten more; the per-second budget
/// (ten, refilled at ten a second) must still hold the seven the three
/// passed requests left.
///
/// Written first against two separate limiters (the per-second one asked
/// first), it failed: the refused requests had spent the per-second
/// budget (`check_n(7)` denied, remaining 0).
#[test]
fn a_daily_refusal_leaves_the_per_second_budget_unspent() -> TestResult {
    let Some(server) =
        RedisServer::start_or_skip("a_daily_refusal_leaves_the_per_second_budget_unspent")?
    else {
        return Ok(());
    };
    let rt = rt()?;
    let per_second = || Gcra::new(Quota::per_second(nz(10)));
    let prefix = unique_prefix("gateway");
    let (passed, left) = rt.block_on(async {
        let gateway = RedisLimiter::builder(per_second())
            .and(FixedWindow::new(per_day(3)))
            .prefix(prefix.clone())
            .on_failure(FailurePolicy::Closed)
            .connect(Target::server(server.url()))
            .await?;
        let mut passed = 0;
        for _ in 0..13 {
            let v = gateway.check_verbose("k", 1).await?;
            assert_eq!(v.source, Source::Store, "{:?}", v.error);
            passed += u32::from(v.decision.is_allowed());
        }
        // The same prefix and kinds of limits in the same order share the
        // state: a daily limit of a thousand leaves the per-second budget
        // as the only one that can bind.
        let observer = RedisLimiter::builder(per_second())
            .and(FixedWindow::new(per_day(1000)))
            .prefix(prefix.clone())
            .on_failure(FailurePolicy::Closed)
            .connect(Target::server(server.url()))
            .await?;
        let left = observer.check_n("k", 7).await?;
        Ok::<_, BoxError>((passed, left))
    })?;
    assert_eq!(passed, 3, "the daily limit passes three");
    assert!(
        left.is_allowed(),
        "the refused requests spent the per-second budget: {left:?}"
    );
    // One Redis key per limit, all of one key in one Cluster slot.
    let keys = server.cli(&["KEYS", &format!("{prefix}:all:*")])?;
    let mut keys: Vec<&str> = keys.lines().collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            format!("{prefix}:all:{{{prefix}:k}}:0:gcra"),
            format!("{prefix}:all:{{{prefix}:k}}:1:fw")
        ]
    );
    Ok(())
}

/// Two limiters whose prefixes differ must never share a key, whatever the
/// keys: a client naming itself `ip:203.0.113.5` under the prefix `login`
/// must not spend what the prefix `login:ip` holds for that address.
///
/// Written first against the layout `{<prefix>:<key>}:<i>:<alg>`, it
/// failed: the two limiters' keys were the same Redis keys.
#[test]
fn limiters_with_different_prefixes_never_share_a_key() -> TestResult {
    let Some(server) =
        RedisServer::start_or_skip("limiters_with_different_prefixes_never_share_a_key")?
    else {
        return Ok(());
    };
    let rt = rt()?;
    let prefix = unique_prefix("login");
    let left = rt.block_on(async {
        let connect = |prefix: String| {
            RedisLimiter::builder(Gcra::new(Quota::per_hour(nz(2))))
                .and(FixedWindow::new(per_day(100)))
                .prefix(prefix)
                .on_failure(FailurePolicy::Closed)
                .connect(Target::server(server.url()))
        };
        let by_name = connect(prefix.clone()).await?;
        let by_ip = connect(format!("{prefix}:ip")).await?;
        for _ in 0..3 {
            let v = by_name.check_verbose("ip:203.0.113.5", 1).await?;
            assert_eq!(v.source, Source::Store, "{:?}", v.error);
        }
        let v = by_ip.check_verbose("203.0.113.5", 1).await?;
        assert_eq!(v.source, Source::Store, "{:?}", v.error);
        Ok::<_, BoxError>(v.decision)
    })?;
    assert!(
        left.is_allowed() && left.remaining() == 1,
        "a name under one prefix spent an address under another: {left:?}"
    );
    Ok(())
}

/// One step of a request sequence: a check of a cost, a forced charge, or
/// a refund of an earlier spending (check or charge) picked by index.
#[derive(Debug, Clone)]
enum Op {
    Check(u32),
    Charge(u32),
    Refund(usize),
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        5 => (1u32..5).prop_map(Op::Check),
        2 => (0u32..12).prop_map(Op::Charge),
        2 => any::<usize>().prop_map(Op::Refund),
    ];
    proptest::collection::vec(op, 1..40)
}

/// What is compared of a decision (see the module docs).
fn seen(d: &Decision) -> (bool, u32, u32, Duration) {
    (d.is_allowed(), d.remaining(), d.limit(), d.window())
}

/// The server's clock (epoch ns), read by a charge of nothing, which
/// changes no decision.
async fn server_now(redis: &RedisLimiter, key: &str) -> Result<u64, TestCaseError> {
    let receipt = redis
        .charge(key, 0)
        .await
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    Ok(receipt.at_nanos())
}

/// One in-process run of a comparison: the limits' state.
struct Run<S> {
    state: S,
}

/// Plays `ops` (and a final check of one unit) on `key` of `redis` and on
/// two in-process runs of `local` bracketing its instants (see the module
/// docs); returns how many steps the runs agreed on, where Redis had to
/// match them exactly, and how many steps there were.
async fn same_decisions<L: Algorithm>(
    name: &str,
    redis: &RedisLimiter,
    local: L,
    key: &str,
    ops: &[Op],
) -> Result<(usize, usize), TestCaseError> {
    let fail = |e: StoreError| TestCaseError::fail(format!("{name}: {e}"));
    let mut before = server_now(redis, key).await?;
    let (mut strict, mut lenient) = (
        Run {
            state: local.new_state(before),
        },
        Run {
            state: local.new_state(before),
        },
    );
    // Spendings not yet refunded: the in-process receipt and Redis's.
    let mut open: Vec<(Receipt, Receipt)> = Vec::new();
    let mut exact = 0;
    let steps: Vec<Op> = ops.iter().cloned().chain([Op::Check(1)]).collect();
    for (i, op) in steps.iter().enumerate() {
        match *op {
            Op::Check(cost) => {
                let there = match redis.check_verbose(key, cost).await {
                    Ok(v) => {
                        prop_assert_eq!(v.source, Source::Store, "{}: {:?}", name, v.error);
                        Ok(v.decision)
                    }
                    Err(never) => Err(never),
                };
                let after = server_now(redis, key).await?;
                // A Redis spending's own instant, else the readings around.
                let spent_at = there
                    .as_ref()
                    .ok()
                    .and_then(|d| d.receipt())
                    .map(|r| r.at_nanos());
                let peek = |run: &mut Run<L::State>, at: u64| {
                    local.check(&mut run.state, spent_at.unwrap_or(at), cost, Mode::Peek)
                };
                let (s, l) = (peek(&mut strict, before), peek(&mut lenient, after));
                match (&s, &l, &there) {
                    (Ok(s), Ok(l), Ok(t)) => {
                        let what = format!(
                            "{name}: step {i} ({op:?}): strict {s:?}, lenient {l:?}, Redis {t:?}"
                        );
                        prop_assert_eq!(
                            t.receipt().is_some(),
                            t.is_allowed() && cost > 0,
                            "{}",
                            what
                        );
                        if seen(s) == seen(l) {
                            exact += 1;
                            prop_assert_eq!(seen(s), seen(t), "{}", what);
                        }
                        prop_assert!(!s.is_allowed() || t.is_allowed(), "{}", what);
                        prop_assert!(l.is_allowed() || !t.is_allowed(), "{}", what);
                        if s.is_allowed() == t.is_allowed() {
                            prop_assert!(s.remaining() <= t.remaining(), "{}", what);
                        }
                        if l.is_allowed() == t.is_allowed() {
                            prop_assert!(t.remaining() <= l.remaining(), "{}", what);
                        }
                        // Both runs spend what Redis spent, when it did.
                        if let Some(r) = t.receipt() {
                            let a = local.charge(&mut strict.state, r.at_nanos(), cost);
                            local.charge(&mut lenient.state, r.at_nanos(), cost);
                            prop_assert_eq!((a.at_nanos(), a.cost()), (r.at_nanos(), r.cost()));
                            open.push((a, r));
                        }
                    }
                    (Err(s), Err(l), Err(t)) => {
                        exact += 1;
                        prop_assert_eq!(s, t, "{}: step {}", name, i);
                        prop_assert_eq!(l, t, "{}: step {}", name, i);
                    }
                    _ => prop_assert!(false, "{}: step {}: {:?} {:?} {:?}", name, i, s, l, there),
                }
                before = after;
            }
            Op::Charge(cost) => {
                let r = redis.charge(key, cost).await.map_err(fail)?;
                prop_assert_eq!(r.cost(), cost);
                prop_assert!(
                    r.at_nanos() >= before,
                    "{}: the server's clock went back",
                    name
                );
                let a = local.charge(&mut strict.state, r.at_nanos(), cost);
                local.charge(&mut lenient.state, r.at_nanos(), cost);
                open.push((a, r));
                exact += 1;
                before = r.at_nanos();
            }
            Op::Refund(pick) => {
                if open.is_empty() {
                    continue;
                }
                let (a, r) = open.remove(pick % open.len());
                redis.refund(key, &r).await.map_err(fail)?;
                let after = server_now(redis, key).await?;
                local.refund(&mut strict.state, after, a);
                local.refund(&mut lenient.state, before, a);
                exact += 1;
                before = after;
            }
        }
    }
    Ok((exact, steps.len()))
}

/// A Redis limiter of one limit or an all-of set makes the decisions of
/// the in-process limiter (a pair, a nested pair, an [`AllOf`]) on the same
/// random sequence of checks, forced charges and refunds of either, with
/// costs beyond capacity refused alike.
#[test]
fn redis_all_of_decides_as_the_in_process_limits() -> TestResult {
    let Some(server) = RedisServer::start_or_skip("redis_all_of_decides_as_the_in_process_limits")?
    else {
        return Ok(());
    };
    let rt = rt()?;
    let gcra = || Gcra::new(Quota::per_hour(nz(5)));
    let bucket = || TokenBucket::new(Quota::per_hour(nz(6)).allow_burst(nz(4)));
    let window = || FixedWindow::new(per_day(8));
    let sliding = || SlidingWindow::try_new(per_day(9), 2).expect("two counters fit a day");
    let small = || Gcra::new(Quota::per_hour(nz(4)).allow_burst(nz(3)));
    let gcras = || {
        vec![
            Gcra::new(Quota::per_hour(nz(5))),
            Gcra::new(Quota::try_new(7, Duration::from_secs(7200)).expect("a valid quota")),
            Gcra::new(Quota::per_hour(nz(3)).allow_burst(nz(2))),
        ]
    };
    let connect = |b: RedisLimiterBuilder| {
        b.prefix(unique_prefix("same"))
            .on_failure(FailurePolicy::Closed)
            .timeout(Duration::from_secs(2))
            .connect(Target::server(server.url()))
    };
    let limiters = rt.block_on(async {
        let set = gcras();
        let mut all = RedisLimiter::builder(set[0].clone());
        for g in &set[1..] {
            all = all.and(g.clone());
        }
        Ok::<_, ConfigError>([
            connect(RedisLimiter::builder(gcra())).await?,
            connect(RedisLimiter::builder(bucket())).await?,
            connect(RedisLimiter::builder(window())).await?,
            connect(RedisLimiter::builder(sliding())).await?,
            connect(RedisLimiter::builder(gcra()).and(window())).await?,
            connect(RedisLimiter::builder(bucket()).and(sliding()).and(small())).await?,
            connect(all).await?,
            // The batched path expands each key into its limits' keys too.
            connect(
                RedisLimiter::builder(window())
                    .and(bucket())
                    .batching(Batching::default()),
            )
            .await?,
        ])
    })?;
    let case = std::cell::Cell::new(0u64);
    // Steps where the two in-process runs agreed (Redis had to match them
    // exactly), of all steps.
    let tally = std::cell::Cell::new((0usize, 0usize));
    let mut runner = TestRunner::new(Config {
        cases: 24,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&ops(), |ops| {
            case.set(case.get() + 1);
            let key = format!("case{}", case.get());
            rt.block_on(async {
                let l = &limiters;
                let nested = ((bucket(), sliding()), small());
                for (exact, steps) in [
                    same_decisions("gcra", &l[0], gcra(), &key, &ops).await?,
                    same_decisions("tb", &l[1], bucket(), &key, &ops).await?,
                    same_decisions("fw", &l[2], window(), &key, &ops).await?,
                    same_decisions("sw", &l[3], sliding(), &key, &ops).await?,
                    same_decisions("gcra+fw", &l[4], (gcra(), window()), &key, &ops).await?,
                    same_decisions("tb+sw+gcra", &l[5], nested, &key, &ops).await?,
                    same_decisions("all of gcra", &l[6], AllOf::new(gcras()), &key, &ops).await?,
                    same_decisions("batched fw+tb", &l[7], (window(), bucket()), &key, &ops)
                        .await?,
                ] {
                    let (e, s) = tally.get();
                    tally.set((e + exact, s + steps));
                }
                Ok(())
            })
        })
        .map_err(|e| e.to_string())?;
    // The bracket is two runs a fraction of a millisecond apart: they
    // disagree only where a refund left a state on a unit's boundary.
    let (exact, steps) = tally.get();
    assert!(
        exact * 10 >= steps * 9,
        "only {exact} of {steps} steps were compared exactly"
    );
    Ok(())
}

mod deployments;
mod spending;
