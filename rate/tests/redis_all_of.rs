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
#![cfg(feature = "redis")]

mod support;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use std::collections::HashSet;
use std::time::Duration;
use support::*;
use weir_rate::redis::{
    Batching, FailurePolicy, RedisLimitError, RedisLimiter, RedisLimiterBuilder, Source, Target,
};
use weir_rate::{
    AllOf, Decision, FixedWindow, Gcra, Limiter, Mode, NeverAllowed, Quota, Receipt, SlidingWindow,
    TokenBucket,
};
use weir_test_support::redis_server::{RedisCluster, RedisServer};

const DAY: Duration = Duration::from_secs(24 * 3600);

type BoxError = Box<dyn std::error::Error>;

fn per_day(limit: u32) -> Quota {
    Quota::try_new(limit, DAY).unwrap_or(Quota::per_hour(nz(limit)))
}

/// redis-cell #22: a gateway limiting per second and per day must not
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
            assert_eq!(v.source, Source::Redis, "{:?}", v.error);
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
    let keys = server.cli(&["KEYS", &format!("{{{prefix}:k}}:*")])?;
    let mut keys: Vec<&str> = keys.lines().collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            format!("{{{prefix}:k}}:0:gcra"),
            format!("{{{prefix}:k}}:1:fw")
        ]
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
async fn same_decisions<L: Limiter>(
    name: &str,
    redis: &RedisLimiter,
    local: L,
    key: &str,
    ops: &[Op],
) -> Result<(usize, usize), TestCaseError> {
    let fail = |e: RedisLimitError| TestCaseError::fail(format!("{name}: {e}"));
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
                        prop_assert_eq!(v.source, Source::Redis, "{}: {:?}", name, v.error);
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
        Ok::<_, RedisLimitError>([
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

/// Concurrent callers on a batched all-of limiter: every key passes
/// exactly its daily limit, and the refused requests spend nothing of the
/// hourly limit (observed through a limiter on the same state with a
/// daily limit that cannot bind).
#[test]
fn batched_all_of_spends_nothing_on_refusals() -> TestResult {
    let Some(server) = RedisServer::start_or_skip("batched_all_of_spends_nothing_on_refusals")?
    else {
        return Ok(());
    };
    let rt = rt()?;
    let prefix = unique_prefix("batched");
    let hourly = || Gcra::new(Quota::per_hour(nz(10)));
    rt.block_on(async {
        let limiter = RedisLimiter::builder(hourly())
            .and(FixedWindow::new(per_day(6)))
            .prefix(prefix.clone())
            .on_failure(FailurePolicy::Closed)
            .batching(Batching::default())
            .connect(Target::server(server.url()))
            .await?;
        let handles: Vec<_> = (0..90)
            .map(|i| {
                let l = limiter.clone();
                tokio::spawn(
                    async move { (i % 3, l.check_verbose(&format!("k{}", i % 3), 1).await) },
                )
            })
            .collect();
        let mut allowed = [0u32; 3];
        for h in handles {
            let (k, v) = h.await?;
            let v = v?;
            assert_eq!(v.source, Source::Redis, "{:?}", v.error);
            allowed[k] += u32::from(v.decision.is_allowed());
        }
        assert_eq!(allowed, [6, 6, 6], "the daily limit of six per key");
        let observer = RedisLimiter::builder(hourly())
            .and(FixedWindow::new(per_day(1000)))
            .prefix(prefix.clone())
            .on_failure(FailurePolicy::Closed)
            .connect(Target::server(server.url()))
            .await?;
        for k in 0..3 {
            let key = format!("k{k}");
            let d = observer.check_n(&key, 4).await?;
            assert!(
                d.is_allowed(),
                "k{k}: refusals spent the hourly budget: {d:?}"
            );
            assert!(!observer.check_n(&key, 1).await?.is_allowed());
        }
        Ok::<_, BoxError>(())
    })
}

/// A receipt from Redis names the server's instant; a charge's debt is
/// waited out and its refund at once takes it back; a refund of a check
/// frees its place; a key that starts with `}` keeps its limits in one
/// slot; costs beyond the smallest capacity are refused.
#[test]
fn receipts_charges_and_refunds_on_redis() -> TestResult {
    let Some(server) = RedisServer::start_or_skip("receipts_charges_and_refunds_on_redis")? else {
        return Ok(());
    };
    let rt = rt()?;
    rt.block_on(async {
        let limiter = RedisLimiter::builder(Gcra::new(Quota::per_second(nz(20))))
            .and(TokenBucket::new(Quota::per_hour(nz(5))))
            .prefix(unique_prefix("receipts"))
            .on_failure(FailurePolicy::Closed)
            .connect(Target::server(server.url()))
            .await?;
        assert_eq!(limiter.quotas().len(), 2);
        let wall = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?;
        let d = limiter.check("}odd").await;
        let receipt = d.receipt().ok_or("an allowed check without a receipt")?;
        let server_time = Duration::from_nanos(receipt.at_nanos());
        assert!(
            server_time.abs_diff(wall) < Duration::from_secs(5),
            "the receipt names {server_time:?}, the wall clock says {wall:?}"
        );
        assert_eq!(
            limiter.check_n("}odd", 6).await,
            Err(NeverAllowed {
                cost: 6,
                capacity: 5
            })
        );
        // Four left of the hourly five; a refund of the check gives five.
        limiter.refund("}odd", &d).await?;
        assert!(limiter.check_n("}odd", 5).await?.is_allowed());
        // A charge of 10 with none left: refused until paid, but a refund
        // at once takes it back (the check's five stay spent).
        let charged = limiter.charge("other", 10).await?;
        assert!(!limiter.check("other").await.is_allowed());
        limiter.refund("other", &charged).await?;
        assert!(limiter.check_n("other", 5).await?.is_allowed());
        // Refunding what spent nothing is nothing.
        let denied = limiter.check("other").await;
        assert!(!denied.is_allowed());
        limiter.refund("other", &denied).await?;
        assert!(!limiter.check("other").await.is_allowed());
        Ok::<_, BoxError>(())
    })
}

/// During an outage the all-of limiter's default fallback keeps the
/// limits all-or-nothing per instance, takes forced charges (whose
/// receipts then refund there), and a refund of a Redis receipt is an
/// error rather than a silent loss; with a fail-closed policy a charge
/// during the outage is an error.
#[test]
fn outages_keep_all_of_and_charges_on_the_local_fallback() -> TestResult {
    let name = "outages_keep_all_of_and_charges_on_the_local_fallback";
    let Some(mut server) = RedisServer::start_or_skip(name)? else {
        return Ok(());
    };
    let rt = rt()?;
    rt.block_on(async {
        let build = |policy| {
            RedisLimiter::builder(Gcra::new(Quota::per_hour(nz(5))))
                .and(FixedWindow::new(per_day(3)))
                .prefix(unique_prefix("outage"))
                .timeout(Duration::from_millis(200))
                .on_failure(policy)
                .connect(Target::server(server.url()))
        };
        let limiter = build(FailurePolicy::PerInstance).await?;
        let closed = build(FailurePolicy::Closed).await?;
        let before = limiter.check("spent").await;
        assert!(before.receipt().is_some());
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
        // All-or-nothing locally, as the in-process `AllOf`: three of
        // eight pass (the daily limit).
        let mut passed = 0;
        for _ in 0..8 {
            let v = limiter.check_verbose("victim", 1).await?;
            assert_eq!(v.source, Source::Local, "{:?}", v.error);
            passed += u32::from(v.decision.is_allowed());
        }
        assert_eq!(passed, 3);
        // A charge goes to the local limiter, and its receipt refunds there.
        let charged = limiter.charge("debtor", 8).await?;
        assert_eq!(charged.cost(), 8);
        assert!(!limiter.check("debtor").await.is_allowed());
        limiter.refund("debtor", &charged).await?;
        assert!(limiter.check("debtor").await.is_allowed());
        // A Redis receipt cannot be given back meanwhile: an error.
        assert!(limiter.refund("spent", &before).await.is_err());
        // Fail-closed has nowhere to put a charge.
        assert!(closed.charge("debtor", 1).await.is_err());
        Ok::<_, BoxError>(())
    })
}

/// An all-of limiter on the cluster fixture: keys on every master (and a
/// key starting with `}`) each pass exactly their tightest limit, plain
/// and batched, and each key's limits live in one slot.
#[test]
fn all_of_on_a_cluster() -> TestResult {
    let Some(cluster) = RedisCluster::start_or_skip("all_of_on_a_cluster", 3, 0)? else {
        return Ok(());
    };
    let rt = rt()?;
    let urls = cluster.urls();
    let mut keys: Vec<String> = (0..9).map(|i| format!("user{i}")).collect();
    keys.push("}brace".to_owned());
    for batched in [false, true] {
        let prefix = unique_prefix("cluster");
        let allowed = rt.block_on(async {
            let mut b = RedisLimiter::builder(Gcra::new(Quota::per_hour(nz(7))))
                .and(SlidingWindow::try_new(per_day(4), 3)?)
                .and(TokenBucket::new(Quota::per_hour(nz(9))))
                .prefix(prefix.clone())
                .timeout(Duration::from_secs(2))
                .on_failure(FailurePolicy::Closed);
            if batched {
                b = b.batching(Batching::default());
            }
            let limiter = b.connect(Target::cluster(urls.clone())).await?;
            let handles: Vec<_> = (0..keys.len() * 8)
                .map(|i| {
                    let (l, key) = (limiter.clone(), keys[i % keys.len()].clone());
                    tokio::spawn(async move { (key.clone(), l.check_verbose(&key, 1).await) })
                })
                .collect();
            let mut allowed = std::collections::HashMap::new();
            for h in handles {
                let (key, v) = h.await?;
                let v = v?;
                assert_eq!(v.source, Source::Redis, "{key}: {:?}", v.error);
                *allowed.entry(key).or_insert(0u32) += u32::from(v.decision.is_allowed());
            }
            // Each key's limits share the slot of its base.
            for key in &keys {
                let slots: HashSet<u16> = limiter
                    .redis_keys(key)
                    .iter()
                    .map(|k| weir_rate::redis::cluster_slot(k))
                    .collect();
                assert_eq!(slots.len(), 1, "{key}: limits in slots {slots:?}");
            }
            Ok::<_, BoxError>(allowed)
        })?;
        for key in &keys {
            assert_eq!(allowed.get(key), Some(&4), "{key} (batched {batched})");
        }
    }
    Ok(())
}

/// The most limits a limiter takes fit one script (each takes Lua locals,
/// of which a function has room for about two hundred), batched too; one
/// more is a configuration error, not a script that fails on every call.
#[test]
fn the_most_limits_fit_one_script() -> TestResult {
    let Some(server) = RedisServer::start_or_skip("the_most_limits_fit_one_script")? else {
        return Ok(());
    };
    let rt = rt()?;
    rt.block_on(async {
        let builder = || {
            // Limits of 3 to 18 an hour, of the four kinds in turn: the
            // tightest binds.
            let mut b = RedisLimiter::builder(Gcra::new(Quota::per_hour(nz(18))));
            for i in 1..weir_rate::redis::MAX_LIMITS as u32 {
                let q = Quota::per_hour(nz(18 - i));
                b = match i % 4 {
                    0 => b.and(Gcra::new(q)),
                    1 => b.and(TokenBucket::new(q)),
                    2 => b.and(FixedWindow::new(q)),
                    _ => b.and(SlidingWindow::try_new(q, 3).expect("three counters fit an hour")),
                };
            }
            b.prefix(unique_prefix("most"))
                .on_failure(FailurePolicy::Closed)
        };
        for batched in [false, true] {
            let mut b = builder();
            if batched {
                b = b.batching(Batching::default());
            }
            let limiter = b.connect(Target::server(server.url())).await?;
            let mut allowed = 0;
            for _ in 0..5 {
                let v = limiter.check_verbose("k", 1).await?;
                assert_eq!(v.source, Source::Redis, "{:?}", v.error);
                allowed += u32::from(v.decision.is_allowed());
            }
            assert_eq!(
                allowed, 3,
                "the tightest of sixteen limits (batched {batched})"
            );
            let receipt = limiter.charge("k", 2).await?;
            limiter.refund("k", &receipt).await?;
        }
        let too_many = builder()
            .and(Gcra::new(Quota::per_hour(nz(1))))
            .connect(Target::server(server.url()))
            .await;
        assert!(matches!(too_many, Err(RedisLimitError::Config(_))));
        Ok::<_, BoxError>(())
    })
}
