//! Refunds on a Redis Cluster, whose client resends a call whose reply it
//! lost: a refund sent twice gives back once, for one limit and for
//! several; a key whose hash tag is empty and a slot being migrated still
//! take a single limit's refunds.

use crate::support::*;
use std::time::Duration;
use weir_rate::{Decision, Gcra, Quota, TokenBucket};
use weir_redis::{FailurePolicy, RedisLimiter, Target, cluster_slot};
use weir_test_support::redis_server::{RedisCluster, RedisServer};

/// The arguments of the first `EVALSHA` that `server` runs while `act`
/// does, read from `SLOWLOG` with every command logged.
fn capture_evalsha(
    server: &RedisServer,
    act: impl FnOnce() -> Result<(), Box<dyn std::error::Error>>,
) -> Result<Vec<Vec<u8>>, Box<dyn std::error::Error>> {
    let mut raw = redis::Client::open(server.url())?.get_connection()?;
    let option = "slowlog-log-slower-than";
    let was: String = redis::cmd("CONFIG")
        .arg(&["GET", option])
        .query::<Vec<String>>(&mut raw)?
        .pop()
        .ok_or("no slowlog threshold")?;
    redis::cmd("CONFIG")
        .arg(&["SET", option, "0"])
        .query::<()>(&mut raw)?;
    redis::cmd("SLOWLOG").arg("RESET").query::<()>(&mut raw)?;
    let acted = act();
    let log = redis::cmd("SLOWLOG")
        .arg(&["GET", "32"])
        .query::<Vec<redis::Value>>(&mut raw);
    redis::cmd("CONFIG")
        .arg(&["SET", option, &was])
        .query::<()>(&mut raw)?;
    acted?;
    let calls = log?.into_iter().filter_map(|entry| match entry {
        redis::Value::Array(mut fields) if fields.len() >= 4 => {
            redis::from_redis_value::<Vec<Vec<u8>>>(fields.swap_remove(3)).ok()
        }
        _ => None,
    });
    let call = calls
        .filter(|args| {
            args.first()
                .is_some_and(|a| a.eq_ignore_ascii_case(b"EVALSHA"))
        })
        .last()
        .ok_or("no EVALSHA in SLOWLOG")?;
    if call.len() >= 32 || call.iter().any(|a| a.ends_with(b"more bytes)")) {
        return Err(format!("SLOWLOG shortened the call: {call:?}").into());
    }
    Ok(call)
}

/// Three checks spending an hourly limit of three on `key`.
fn spend(rt: &tokio::runtime::Runtime, limiter: &RedisLimiter, key: &str) -> Vec<Decision> {
    let spent: Vec<Decision> = (0..3).map(|_| rt.block_on(limiter.check(key))).collect();
    assert!(spent.iter().all(Decision::is_allowed), "{key}: {spent:?}");
    spent
}

/// After one refund of [`spend`]'s checks: exactly one unit to spend
/// again, the next a whole emission interval (20 minutes) away.
fn one_unit_given_back(rt: &tokio::runtime::Runtime, limiter: &RedisLimiter, key: &str) {
    let again = rt.block_on(limiter.check(key));
    assert!(
        again.is_allowed(),
        "{key}: the refund gave nothing back: {again:?}"
    );
    let next = rt.block_on(limiter.check(key));
    assert!(
        next.retry_after() > Some(Duration::from_secs(600)),
        "{key}: given back more than one unit: {next:?}"
    );
}

#[test]
fn refunds_on_a_cluster() -> TestResult {
    let _alone = crate::one_at_a_time();
    let Some(mut cluster) = RedisCluster::start_or_skip("refunds on a cluster", 3, 0)? else {
        return Ok(());
    };
    let rt = rt()?;
    let limiter = rt.block_on(
        RedisLimiter::builder(Gcra::new(Quota::per_hour(nz(3))))
            .prefix(unique_prefix("refunds"))
            .timeout(Duration::from_secs(1))
            .on_failure(FailurePolicy::Closed)
            .connect(Target::cluster(cluster.urls())),
    )?;

    // 1. A cluster client resends a call whose reply it lost (redis-rs
    // retries, which MOVED and ASK redirects need): the refund's call,
    // captured on its master and sent there once more, gives back once.
    // Also for several limits of a key decided all-or-nothing, whose
    // mark follows all their keys.
    let all_of = rt.block_on(
        RedisLimiter::builder(Gcra::new(Quota::per_hour(nz(3))))
            .and(TokenBucket::new(Quota::try_new(
                1000,
                Duration::from_secs(86_400),
            )?))
            .prefix(unique_prefix("refunds-all"))
            .timeout(Duration::from_secs(1))
            .on_failure(FailurePolicy::Closed)
            .connect(Target::cluster(cluster.urls())),
    )?;
    for (limiter, key) in [(&limiter, "resent"), (&all_of, "resent")] {
        let state = limiter.store().redis_keys(key).remove(0);
        let master = cluster.master_of(cluster_slot(&state))?;
        let spent = spend(&rt, limiter, key);
        let call = capture_evalsha(&cluster.nodes[master], || {
            rt.block_on(limiter.refund(key, &spent[0]))?;
            Ok(())
        })?;
        let mut raw = redis::Client::open(cluster.nodes[master].url())?.get_connection()?;
        let mut resend = redis::cmd("EVALSHA");
        for arg in &call[1..] {
            resend.arg(arg.as_slice());
        }
        resend.query::<redis::Value>(&mut raw)?;
        one_unit_given_back(&rt, limiter, key);
    }

    // 2. A key that starts with `}` leaves its Redis key's hash tag empty
    // (Redis then hashes the whole name): its refunds still work.
    let spent = spend(&rt, &limiter, "}odd");
    rt.block_on(limiter.refund("}odd", &spent[0]))?;
    one_unit_given_back(&rt, &limiter, "}odd");

    // 3. While a slot is being migrated, refunds still work: of a key
    // whose state is still on the old master, and of one whose state has
    // moved to the new master.
    let staying = "moving0";
    let slot = cluster_slot(staying);
    let moved = (1..)
        .map(|i| format!("moving{i}"))
        .find(|k| cluster_slot(k) == slot)
        .ok_or("no second key in the slot")?;
    let spent = [staying, moved.as_str()].map(|k| spend(&rt, &limiter, k));
    let (from, to) = cluster.start_migrating(slot)?;
    let state = limiter.store().redis_keys(&moved).remove(0);
    let to_port = cluster.nodes[to].port().to_string();
    let out = cluster.nodes[from].cli(&["MIGRATE", "127.0.0.1", &to_port, &state, "0", "5000"])?;
    assert!(out.contains("OK"), "migrate: {out}");
    for (key, spent) in [staying, moved.as_str()].into_iter().zip(&spent) {
        let refunded = rt.block_on(limiter.refund(key, &spent[0]));
        assert!(refunded.is_ok(), "{key}: {refunded:?}");
        one_unit_given_back(&rt, &limiter, key);
    }
    Ok(())
}
