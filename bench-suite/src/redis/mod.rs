//! weir-rate's Redis backend against `redis-benchmark`, on one private
//! `redis-server` (loopback, no persistence): every algorithm's plain path
//! at 1 and 50 callers and its batched path at 50, GCRA by callers, one hot
//! key plain and pre-aggregated, and what Redis itself pays per decision
//! (`cost`). Skipped, with a line saying so, when `redis-server` or
//! `redis-benchmark` is not installed.

pub mod cost;
mod redis_benchmark;
mod runs;

use crate::harness::contest::{self, Goal};
use crate::harness::machine;
use crate::harness::report::{Report, thousands};
use crate::harness::workload;
use std::fmt::Write as _;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::runtime::Runtime;
use weir_rate::{FixedWindow, Gcra, Quota, SlidingWindow, TokenBucket};
use weir_redis::{
    Batching, ConfigError, FailurePolicy, PreAggregation, RedisLimiter, RedisLimiterBuilder,
    Source, Target,
};
use weir_test_support::redis_server::{self as testing, RedisServer};

/// The scripts the report measures, each run over the section's quota.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    /// [`TokenBucket`].
    TokenBucket,
    /// [`Gcra`].
    Gcra,
    /// [`FixedWindow`].
    FixedWindow,
    /// [`SlidingWindow`] over two counters (Cloudflare's).
    SlidingWindow2,
}

/// The algorithms the report measures.
pub const ALGORITHMS: [Algorithm; 4] = [
    Algorithm::TokenBucket,
    Algorithm::Gcra,
    Algorithm::FixedWindow,
    Algorithm::SlidingWindow2,
];

impl Algorithm {
    /// A limiter builder running this algorithm over `quota`.
    pub fn over(self, quota: Quota) -> RedisLimiterBuilder {
        match self {
            Self::TokenBucket => RedisLimiter::builder(TokenBucket::new(quota)),
            Self::Gcra => RedisLimiter::builder(Gcra::new(quota)),
            Self::FixedWindow => RedisLimiter::builder(FixedWindow::new(quota)),
            Self::SlidingWindow2 => RedisLimiter::builder(
                SlidingWindow::try_new(quota, 2).expect("two counters fit any quota"),
            ),
        }
    }
}

impl std::fmt::Display for Algorithm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names = [
            "token bucket",
            "GCRA",
            "fixed window",
            "sliding-window counter (2 counters)",
        ];
        f.write_str(names[*self as usize])
    }
}

fn nz(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).unwrap_or(NonZeroU32::MIN)
}

fn kps(x: f64) -> String {
    format!("{:.1} k/s", x / 1000.0)
}

/// What one load run measured.
#[derive(Debug, Clone, Default)]
pub struct Run {
    /// Decisions answered.
    pub decisions: u64,
    /// Of those, allowed.
    pub allowed: u64,
    /// Of those, answered from a lease.
    pub leased: u64,
    /// Answered by the failure policy or an error.
    pub failed: u64,
    /// Wall time of the run.
    pub secs: f64,
    /// Median latency per decision, µs.
    pub p50_us: f64,
    /// 99th percentile latency per decision, µs.
    pub p99_us: f64,
    /// The redis-server's CPU seconds over the run (0 when unknown).
    pub server_cpu: f64,
    /// This process's CPU seconds over the run: the limiter client and the
    /// callers driving it (0 when unknown).
    pub client_cpu: f64,
}

impl Run {
    /// Decisions per second.
    pub fn rate(&self) -> f64 {
        self.decisions as f64 / self.secs.max(1e-9)
    }

    /// Redis CPU time per decision, in microseconds.
    pub fn server_us(&self) -> f64 {
        self.server_cpu * 1e6 / self.decisions.max(1) as f64
    }

    /// Client CPU time per decision (callers included), in microseconds.
    pub fn client_us(&self) -> f64 {
        self.client_cpu * 1e6 / self.decisions.max(1) as f64
    }
}

/// `callers` tasks check keys through `limiters` (round robin) for `dur`:
/// one key if `hot`, else keys drawn from 10 000. The report's load shape,
/// timed per decision, CPU read on both sides.
pub async fn load(
    limiters: &[RedisLimiter],
    callers: usize,
    dur: Duration,
    hot: bool,
    server_pid: Option<u32>,
) -> Run {
    let (me, start) = (std::process::id(), Instant::now());
    let cpu = |pid: Option<u32>| pid.and_then(machine::process_cpu_secs);
    let cpu_at_start = (cpu(server_pid), cpu(Some(me)));
    let (stop, failed) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
    );
    let caller = |c: usize| {
        let limiter = limiters[c % limiters.len()].clone();
        let (stop, failed) = (stop.clone(), failed.clone());
        tokio::spawn(async move {
            let (mut lat, mut allowed, mut leased) = (Vec::<u32>::with_capacity(1 << 16), 0, 0);
            let (mut x, mut key) = (0x9E37_79B9_7F4A_7C15u64 ^ (c as u64 + 1), String::new());
            while !stop.load(Ordering::Relaxed) {
                key.clear();
                let _ = match hot {
                    true => write!(key, "hot"),
                    false => write!(key, "k{}", workload::xorshift(&mut x) % 10_000),
                };
                let t = Instant::now();
                match limiter.check_verbose(&key, 1).await {
                    Ok(v) => {
                        leased += u64::from(v.source == Source::Lease);
                        if v.source != Source::Lease && v.source != Source::Store {
                            failed.fetch_add(1, Ordering::Relaxed);
                        }
                        allowed += u64::from(v.decision.is_allowed());
                    }
                    Err(_) => _ = failed.fetch_add(1, Ordering::Relaxed),
                }
                lat.push(u32::try_from(t.elapsed().as_nanos()).unwrap_or(u32::MAX));
            }
            (lat, allowed, leased)
        })
    };
    let handles: Vec<_> = (0..callers).map(caller).collect();
    tokio::time::sleep(dur).await;
    stop.store(true, Ordering::Relaxed);
    let (mut all, mut run) = (Vec::<u32>::new(), Run::default());
    for (lat, allowed, leased) in futures_ok(handles).await {
        all.extend_from_slice(&lat);
        (run.allowed, run.leased) = (run.allowed + allowed, run.leased + leased);
    }
    run.secs = start.elapsed().as_secs_f64();
    let used = |pid, at_start: Option<f64>| cpu(pid).zip(at_start).map_or(0.0, |(n, t)| n - t);
    run.server_cpu = used(server_pid, cpu_at_start.0);
    run.client_cpu = used(Some(me), cpu_at_start.1);
    (run.decisions, run.failed) = (all.len() as u64, failed.load(Ordering::Relaxed));
    all.sort_unstable();
    let pct = |p| contest::quantile(&all, p).map_or(0.0, |ns| f64::from(ns) / 1000.0);
    (run.p50_us, run.p99_us) = (pct(0.50), pct(0.99));
    run
}

/// The results of the tasks that did not panic.
async fn futures_ok<T>(handles: Vec<tokio::task::JoinHandle<T>>) -> Vec<T> {
    let mut out = Vec::new();
    for h in handles {
        out.extend(h.await.ok());
    }
    out
}

/// What every part of the section runs on: the private server, the
/// runtime the limiters live in, and how long each load runs.
struct Bench<'a> {
    server: &'a RedisServer,
    rt: &'a Runtime,
    target: Target,
    dur: Duration,
}

impl Bench<'_> {
    /// A limiter of `alg` over `quota` under `prefix`, plain or batched,
    /// pre-aggregating or not.
    fn connect(
        &self,
        alg: Algorithm,
        quota: Quota,
        prefix: &str,
        batched: bool,
        hot: Option<PreAggregation>,
    ) -> Result<RedisLimiter, ConfigError> {
        let b = alg
            .over(quota)
            .prefix(prefix)
            .timeout(Duration::from_secs(1));
        let mut b = b.on_failure(FailurePolicy::Closed);
        if batched {
            b = b.batching(Batching::default());
        }
        if let Some(h) = hot {
            b = b.pre_aggregate(h);
        }
        self.rt.block_on(b.connect(self.target.clone()))
    }

    /// [`load`] on the section's runtime, the server's CPU read.
    fn load(&self, limiters: &[RedisLimiter], callers: usize, dur: Duration, hot: bool) -> Run {
        let pid = self.server.pid();
        self.rt.block_on(load(limiters, callers, dur, hot, pid))
    }
}

/// The Redis section of the report.
pub fn run(report: &mut Report) {
    report.section("Redis backend: weir-rate's scripts against redis-benchmark");
    if !testing::installed() || !testing::runs("redis-benchmark") {
        return report.text(
            "**Skipped**: `redis-server`, `redis-cli` or `redis-benchmark` is not installed \
             (Debian: `apt-get install redis-server redis-tools`).",
        );
    }
    let server = match RedisServer::start() {
        Ok(s) => s,
        Err(e) => {
            return report.text(&format!(
                "**Skipped**: could not start a private redis-server: {e}"
            ));
        }
    };
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    let rt = match rt.worker_threads(2).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => return report.text(&format!("**Skipped**: no tokio runtime: {e}")),
    };
    let dur = report
        .scale()
        .pick(Duration::from_millis(900), Duration::from_secs(3));
    let target = Target::server(server.url());
    let bench = Bench {
        server: &server,
        rt: &rt,
        target,
        dur,
    };
    let roomy = Quota::per_second(nz(1_000_000));
    let paths = runs::paths(report, &bench, roomy);
    let by_callers = runs::by_callers(report, &bench, roomy);
    let hot = runs::hot(report, &bench);
    let inside = cost::section(report, &bench, &paths, roomy);
    goals(report, &paths, &by_callers, &hot, &inside);
}

/// The goals, and what explains the figures behind them.
fn goals(
    report: &mut Report,
    paths: &runs::Paths,
    by_callers: &[(usize, f64, f64)],
    hot: &runs::Hot,
    inside: &cost::Inside,
) {
    let (p50m, b50m) = (paths.at_50(false, Run::rate), paths.at_50(true, Run::rate));
    let (plain_cpu, batched_cpu) = (
        paths.at_50(false, Run::server_us),
        paths.at_50(true, Run::server_us),
    );
    let mut lines = Vec::new();
    let judged = |goal: Goal, x: f64| format!("goal {}: {}", goal.name, goal.verdict(x));
    if let Some(i) = paths.incr50 {
        let goal = judged(Goal::at_least("≥ 0.5×", 0.5), p50m / i);
        lines.push(format!(
            "* plain path at 50 callers (mean over the algorithms): {} = {:.2}× unpipelined INCR ({goal})",
            kps(p50m),
            p50m / i
        ));
    }
    let ratio = b50m / p50m.max(1e-9);
    lines.push(format!(
        "* batched path at 50 callers: {} = {ratio:.2}× the plain path ({}); Redis CPU per decision {batched_cpu:.2} µs \
         against the plain path's {plain_cpu:.2} µs ({:.2}× less)",
        kps(b50m),
        judged(Goal::at_least("≥ 4×", 4.0), ratio),
        plain_cpu / batched_cpu.max(1e-9)
    ));
    // Why batching gives what it gives: Redis's own work per decision, and
    // the most Redis can do with weir's script when the client costs
    // nothing, against the GCRA plain path measured above.
    let rows = inside.instructions.as_ref().ok().into_iter().flatten();
    if let Some(row) = rows
        .into_iter()
        .find(|r| r.algorithm == Some(Algorithm::Gcra))
    {
        let plain = row
            .per_call
            .iter()
            .find(|c| c.decisions == 1)
            .map_or(0.0, |c| c.busy_key);
        let each = row.per_call.iter().map(|c| {
            format!(
                "{} instructions at {} a call",
                thousands(c.busy_key.round() as u64),
                c.decisions
            )
        });
        let batched = row.per_call.iter().filter(|c| c.decisions > 1);
        let less = batched.map(|c| {
            format!(
                "{:.1}× ({} a call)",
                plain / c.busy_key.max(1.0),
                c.decisions
            )
        });
        lines.push(format!(
            "* Redis's work per GCRA decision on a busy key (callgrind): {}; per decision a plain call asks {} \
             the instructions of a batched one",
            each.collect::<Vec<_>>().join(", "),
            less.collect::<Vec<_>>().join(" and ")
        ));
    }
    if let (Some(plain), false) = (paths.gcra_plain50, inside.gcra_ceiling.is_empty()) {
        let ceilings = inside.gcra_ceiling.iter().map(|(n, r)| match r {
            Some(r) => format!("{} at {n} a call = {:.2}×", kps(*r), r / plain.max(1e-9)),
            None => format!("failed at {n} a call"),
        });
        lines.push(format!(
            "* Redis's ceiling with weir's GCRA script, the client out of the way (redis-benchmark, table above): {} \
             — the most batching can give over the plain GCRA path ({}) with a client that costs nothing. \
             50 closed-loop callers form calls of about 16 (table 'GCRA by callers'); a call of all 50 \
             leaves none to fill the next while it runs, and here the client shares Redis's two cores",
            ceilings.collect::<Vec<_>>().join(", "),
            kps(plain)
        ));
    }
    let by_callers = by_callers
        .iter()
        .map(|(n, plain, batched)| format!("{:.2}× at {n}", batched / plain.max(1e-9)));
    let by_callers = by_callers.collect::<Vec<_>>().join(", ");
    lines.push(format!(
        "* batched against plain by callers (GCRA, table above): {by_callers}"
    ));
    if let (Ok(p), Ok(h)) = (&hot.plain, &hot.pre) {
        let ratio = h.rate() / p.rate().max(1e-9);
        lines.push(format!(
            "* pre-aggregated hot key: {} = {ratio:.1}× the plain hot key ({})",
            kps(h.rate()),
            judged(Goal::at_least("≥ 10×", 10.0), ratio)
        ));
    }
    if let Some((r, ideal)) = &hot.admitted_pre {
        lines.push(format!(
            "* pre-aggregation admitted {} against {} allowed by the limit ({:+.2}%): every admitted unit was \
             counted in Redis (at most 2 × max_age earlier), so the excess over any window stays below \
             1.5 × instances × lease = {} units",
            thousands(r.allowed),
            thousands(*ideal as u64),
            100.0 * (r.allowed as f64 - ideal) / ideal,
            3 * hot.lease
        ));
    }
    report.text(&lines.join("\n"));
}
