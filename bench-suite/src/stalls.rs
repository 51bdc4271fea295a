//! A store that stalls: what a store-backed limit lets through while its
//! server is stopped (`SIGSTOP`) for 60 ms of every 100 ms, past the
//! limiter's 30 ms timeout, against the same run with no stalls; Redis and
//! Memcached, one instance and two sharing the store.
//!
//! The bound the limiters state: over any window one instance admits no
//! more through the store and its fallback together than one limit (the
//! burst plus rate × time), so N instances admit at most N limits, however
//! many stalls. Figures are allowed ÷ that per-instance bound.

use crate::harness::report::{Report, Table};
use crate::harness::spread::Spread;
use std::num::NonZeroU32;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use weir_memcached::{MemcachedLimiter, Servers};
use weir_rate::{FixedWindow, Gcra, Quota};
use weir_redis::{RedisLimiter, Target};
use weir_test_support::memcached_server::MemcachedServer;
use weir_test_support::redis_server::RedisServer;
use weir_test_support::stalls::{self, Stalling};

/// Callers per instance, each checking one unit every 2 ms.
const CALLERS: usize = 8;

fn prefix(name: &str) -> String {
    let n = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() % 1_000_000_000);
    format!("bench-stalls-{name}-{n}")
}

/// The stores, each with what its limiters are built on.
#[derive(Clone, Copy)]
enum Store {
    Redis,
    Memcached,
}

impl Store {
    fn name(self) -> &'static str {
        match self {
            Self::Redis => "Redis (GCRA)",
            Self::Memcached => "Memcached (fixed window)",
        }
    }
}

/// One run: (by the store, by the fallback) of `instances` limiters on one
/// key for `run`, the server stalling or not.
fn one_run(
    rt: &tokio::runtime::Runtime,
    servers: (&RedisServer, &MemcachedServer),
    (store, instances, stalling): (Store, usize, bool),
    quota: Quota,
    run: Duration,
) -> Option<(u32, u32)> {
    let timeout = Duration::from_millis(30);
    let backoff = Duration::from_millis(20);
    let name = prefix("k");
    rt.block_on(async {
        match store {
            Store::Redis => {
                let mut limiters = Vec::new();
                for _ in 0..instances {
                    let limiter = RedisLimiter::builder(Gcra::new(quota))
                        .prefix(name.clone())
                        .timeout(timeout)
                        .backoff(backoff)
                        .connect(Target::server(servers.0.url()))
                        .await
                        .ok()?;
                    limiters.push(limiter);
                }
                measure(&limiters, servers.0.pid()?, stalling, run).await
            }
            Store::Memcached => {
                let mut limiters = Vec::new();
                for _ in 0..instances {
                    let limiter = MemcachedLimiter::builder(FixedWindow::new(quota))
                        .prefix(name.clone())
                        .timeout(timeout)
                        .backoff(backoff)
                        .connect(Servers::new([servers.1.addr()]))
                        .await
                        .ok()?;
                    limiters.push(limiter);
                }
                measure(&limiters, servers.1.pid()?, stalling, run).await
            }
        }
    })
}

/// [`stalls::allowed`] of `limiters`, with the server `pid` stopped for
/// 60 ms of every 100 ms meanwhile if `stalling`.
async fn measure<B: weir_store::Backend>(
    limiters: &[weir_store::StoreLimiter<B>],
    pid: u32,
    stalling: bool,
    run: Duration,
) -> Option<(u32, u32)> {
    let stalls = stalling
        .then(|| Stalling::start(pid, Duration::from_millis(60), Duration::from_millis(100)));
    let allowed = stalls::allowed(limiters, "k", CALLERS, run).await;
    drop(stalls);
    Some(allowed)
}

/// The section of the report.
pub fn run(report: &mut Report) {
    report.section("A store that stalls: allowed ÷ quota, both stores");
    let Some((memcached, redis, rt)) = crate::memcached::both_stores(report) else {
        return;
    };
    let scale = report.scale();
    let run = scale.pick(Duration::from_secs(2), Duration::from_secs(3));
    let repetitions = scale.pick(1, 3);
    let per_second = NonZeroU32::new(20).unwrap_or(NonZeroU32::MIN);
    let quota = Quota::per_second(per_second);
    // Burst (20) + rate × time, and one unit for the run's last instant.
    let bound = 20 + 20 * u32::try_from(run.as_secs()).unwrap_or(u32::MAX) + 1;
    report.text(&format!(
        "One key at 20 a second (burst 20), {CALLERS} callers per instance each checking every \
         2 ms for {:.0} s, the limiters' timeout 30 ms and back-off 20 ms, the default failure \
         policy (a fallback per instance). With stalls the server is stopped for 60 ms of every \
         100 ms. The bound per instance is {bound} (burst + rate × time); the figure is allowed \
         ÷ bound, median (min–max) of {repetitions} run(s), with the share the fallback \
         answered.",
        run.as_secs_f64()
    ));
    let mut table = Table::new(
        "store | instances | no stalls: allowed ÷ bound | stalls: allowed ÷ bound | stalls: by the fallback | stated bound",
    );
    for store in [Store::Redis, Store::Memcached] {
        for instances in [1usize, 2] {
            let (mut calm, mut stalled, mut fallback) = (Vec::new(), Vec::new(), Vec::new());
            for _ in 0..repetitions {
                report.progress(&format!("{} × {instances}", store.name()));
                let servers = (&redis, &memcached);
                let Some(c) = one_run(&rt, servers, (store, instances, false), quota, run) else {
                    continue;
                };
                let Some(s) = one_run(&rt, servers, (store, instances, true), quota, run) else {
                    continue;
                };
                calm.push(f64::from(c.0 + c.1) / f64::from(bound));
                stalled.push(f64::from(s.0 + s.1) / f64::from(bound));
                fallback.push(f64::from(s.1) / f64::from((s.0 + s.1).max(1)) * 100.0);
            }
            if calm.is_empty() {
                table.row(format!("{} | {instances} | – | – | – | –", store.name()));
                continue;
            }
            table.row(format!(
                "{} | {instances} | {} | {} | {} % | ≤ {instances}.00",
                store.name(),
                Spread::of(&calm).show(2),
                Spread::of(&stalled).show(2),
                Spread::of(&fallback).show(0),
            ));
        }
    }
    report.table(&table);
}
