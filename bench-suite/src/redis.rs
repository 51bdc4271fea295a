//! weir-rate's Redis backend against `redis-benchmark`, in one run, on one
//! private `redis-server` started for the purpose (loopback, no
//! persistence).
//!
//! * Baselines from `redis-benchmark` on that server: unpipelined `INCR`
//!   at 50 clients, `EVALSHA` of a minimal token-bucket script, and both
//!   pipelined 16 deep.
//! * Every algorithm's plain path (one script call per decision) at 1 and
//!   50 concurrent callers, and the batched path at 50: decisions per
//!   second and p50/p99 latency per decision, measured by the callers;
//!   Redis's CPU and this process's CPU per decision.
//! * GCRA plain and batched at 50, 200 and 800 callers: how many decisions
//!   a script call carries and what that does to each side's CPU per
//!   decision.
//! * One hot key at 50 callers: plain against local pre-aggregation
//!   (leases), and, with a limit that is reached, how many requests each
//!   admits against what the limit allows.
//! * What Redis pays per key inside a script, and Redis's own ceiling for
//!   batched calls (`redis-benchmark` driving bare and real scripts at 16
//!   and 50 decisions a call): the bound on what batching can give.
//!
//! Skipped, with a line saying so, when `redis-server` or
//! `redis-benchmark` is not installed.

use crate::machine;
use crate::plot::{BarPlot, BarSeries};
use crate::redis_cost::{self, redis_benchmark};
use crate::report::{Report, Table, thousands};
use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use weir_rate::redis::{
    Batching, FailurePolicy, PreAggregation, RedisLimiter, RedisLimiterBuilder, Source, Target,
};
use weir_rate::{FixedWindow, Gcra, Quota, SlidingWindow, TokenBucket};
use weir_test_support::redis_server::{self as testing, RedisServer};

/// A minimal token bucket, the baseline for "one script per decision".
const MINIMAL_TOKEN_BUCKET: &str = "local t = redis.call('TIME') \
local now = t[1] * 1000000 + t[2] \
local v = redis.call('HMGET', KEYS[1], 'n', 'ts') \
local cap = tonumber(ARGV[2]) \
local n = tonumber(v[1]) or cap \
local ts = tonumber(v[2]) or now \
n = math.min(cap, n + (now - ts) * tonumber(ARGV[1])) \
local ok = 0 \
if n >= 1 then n = n - 1 ok = 1 end \
redis.call('HSET', KEYS[1], 'n', n, 'ts', now) \
redis.call('PEXPIRE', KEYS[1], 60000) \
return ok";

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
        f.write_str(match self {
            Self::TokenBucket => "token bucket",
            Self::Gcra => "GCRA",
            Self::FixedWindow => "fixed window",
            Self::SlidingWindow2 => "sliding-window counter (2 counters)",
        })
    }
}

/// The algorithms the report measures.
pub const ALGORITHMS: [Algorithm; 4] = [
    Algorithm::TokenBucket,
    Algorithm::Gcra,
    Algorithm::FixedWindow,
    Algorithm::SlidingWindow2,
];

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
    /// The redis-server process's CPU seconds over the run (0 when unknown).
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

/// `callers` tasks check keys for `dur`: `hot` = one key, else keys drawn
/// from 10 000 (the report's load shape; `examples/redis_batched.rs` runs
/// it alone for profiling).
pub async fn load(
    limiters: &[RedisLimiter],
    callers: usize,
    dur: Duration,
    hot: bool,
    server_pid: Option<u32>,
) -> Run {
    let cpu_at_start = server_pid.and_then(machine::process_cpu_secs);
    let me = std::process::id();
    let own_cpu_at_start = machine::process_cpu_secs(me);
    let stop = Arc::new(AtomicBool::new(false));
    let failed = Arc::new(AtomicU64::new(0));
    let mut handles = Vec::with_capacity(callers);
    let start = Instant::now();
    for c in 0..callers {
        let limiter = limiters[c % limiters.len()].clone();
        let stop = stop.clone();
        let failed = failed.clone();
        handles.push(tokio::spawn(async move {
            let mut lat: Vec<u32> = Vec::with_capacity(1 << 16);
            let (mut allowed, mut leased) = (0u64, 0u64);
            let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ (c as u64 + 1);
            let mut key = String::new();
            while !stop.load(Ordering::Relaxed) {
                key.clear();
                if hot {
                    key.push_str("hot");
                } else {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    key.push('k');
                    key.push_str(&(x % 10_000).to_string());
                }
                let t = Instant::now();
                match limiter.check_verbose(&key, 1).await {
                    Ok(v) => {
                        if v.source == Source::Lease {
                            leased += 1;
                        } else if v.source != Source::Redis {
                            failed.fetch_add(1, Ordering::Relaxed);
                        }
                        allowed += u64::from(v.decision.is_allowed());
                    }
                    Err(_) => {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
                lat.push(u32::try_from(t.elapsed().as_nanos()).unwrap_or(u32::MAX));
            }
            (lat, allowed, leased)
        }));
    }
    tokio::time::sleep(dur).await;
    stop.store(true, Ordering::Relaxed);
    let mut all: Vec<u32> = Vec::new();
    let mut run = Run::default();
    for h in handles {
        if let Ok((lat, allowed, leased)) = h.await {
            all.extend_from_slice(&lat);
            run.allowed += allowed;
            run.leased += leased;
        }
    }
    run.secs = start.elapsed().as_secs_f64();
    if let (Some(pid), Some(at_start)) = (server_pid, cpu_at_start) {
        run.server_cpu = machine::process_cpu_secs(pid).map_or(0.0, |now| now - at_start);
    }
    if let (Some(now), Some(at_start)) = (machine::process_cpu_secs(me), own_cpu_at_start) {
        run.client_cpu = now - at_start;
    }
    run.decisions = all.len() as u64;
    run.failed = failed.load(Ordering::Relaxed);
    all.sort_unstable();
    let pct = |p: f64| -> f64 {
        if all.is_empty() {
            return 0.0;
        }
        let i = ((all.len() as f64 - 1.0) * p).round() as usize;
        f64::from(all[i]) / 1000.0
    };
    run.p50_us = pct(0.50);
    run.p99_us = pct(0.99);
    run
}

fn nz(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).unwrap_or(NonZeroU32::MIN)
}

pub(crate) fn kps(x: f64) -> String {
    format!("{:.1} k/s", x / 1000.0)
}

/// Plain and batched GCRA at 50, 200 and 800 callers: rate, decisions
/// per script call and CPU per decision on each side.
fn by_callers(
    rt: &tokio::runtime::Runtime,
    server: &RedisServer,
    connect: &dyn Fn(
        Algorithm,
        Quota,
        bool,
        Option<PreAggregation>,
    ) -> Result<RedisLimiter, weir_rate::redis::RedisLimitError>,
    quota: Quota,
    dur: Duration,
    pid: Option<u32>,
) -> (Table, Vec<(usize, f64, f64)>) {
    let mut t = Table::new([
        "path",
        "callers",
        "decisions/s",
        "p50 µs",
        "decisions per script call",
        "Redis CPU per decision",
        "client CPU per decision",
    ]);
    let mut ratios = Vec::new();
    for callers in [50, 200, 800] {
        let mut rates = [0.0f64; 2];
        for (path, batched) in [("plain", false), ("batched", true)] {
            let Ok(limiter) = connect(Algorithm::Gcra, quota, batched, None) else {
                continue;
            };
            let calls_before = server.command_stats("evalsha").map(|s| s.calls);
            let r = rt.block_on(load(
                std::slice::from_ref(&limiter),
                callers,
                dur,
                false,
                pid,
            ));
            let per_call = server
                .command_stats("evalsha")
                .map(|s| s.calls)
                .ok()
                .zip(calls_before.ok())
                .map(|(after, before)| {
                    r.decisions as f64 / after.saturating_sub(before).max(1) as f64
                });
            t.row([
                path.to_owned(),
                callers.to_string(),
                kps(r.rate()),
                format!("{:.0}", r.p50_us),
                per_call.map_or_else(|| "—".into(), |n| format!("{n:.1}")),
                format!("{:.2} µs", r.server_us()),
                format!("{:.2} µs", r.client_us()),
            ]);
            rates[usize::from(batched)] = r.rate();
        }
        if rates.iter().all(|&r| r > 0.0) {
            ratios.push((callers, rates[0], rates[1]));
        }
    }
    (t, ratios)
}

/// The Redis section of the report.
pub fn run(report: &mut Report) {
    report.section("Redis backend: weir-rate's scripts against redis-benchmark");
    if !testing::installed() || !testing::runs("redis-benchmark") {
        report.text(
            "**Skipped**: `redis-server`, `redis-cli` or `redis-benchmark` is not installed \
             (Debian: `apt-get install redis-server redis-tools`).",
        );
        return;
    }
    let server = match RedisServer::start() {
        Ok(s) => s,
        Err(e) => {
            report.text(&format!(
                "**Skipped**: could not start a private redis-server: {e}"
            ));
            return;
        }
    };
    let version = server
        .cli(&["INFO", "server"])
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("redis_version:").map(str::to_owned))
        })
        .unwrap_or_else(|| "?".into());
    let pid = server.pid();
    let scale = report.scale();
    let port = server.port();

    // 1. redis-benchmark on the same server.
    let n_plain = scale.pick("50000", "1000000");
    let n_piped = scale.pick("300000", "4000000");
    let sha = server
        .cli(&["SCRIPT", "LOAD", MINIMAL_TOKEN_BUCKET])
        .map(|s| s.trim().to_owned())
        .unwrap_or_default();
    let evalsha = ["EVALSHA", &sha, "1", "tb:__rand_int__", "0.001", "100"];
    // Measured in every round, interleaved with weir's runs (best of).
    let baseline = || -> [Option<f64>; 4] {
        let incr = redis_benchmark(
            port,
            &["-c", "50", "-n", n_plain, "-r", "10000", "-t", "incr"],
        );
        let mut args: Vec<&str> = vec!["-c", "50", "-n", n_plain, "-r", "10000"];
        args.extend_from_slice(&evalsha);
        let eval = redis_benchmark(port, &args);
        let piped_incr = redis_benchmark(
            port,
            &[
                "-c", "50", "-n", n_piped, "-r", "10000", "-P", "16", "-t", "incr",
            ],
        );
        let mut args: Vec<&str> = vec!["-c", "50", "-n", n_plain, "-r", "10000", "-P", "16"];
        args.extend_from_slice(&evalsha);
        let piped_eval = redis_benchmark(port, &args);
        [incr, eval, piped_incr, piped_eval]
    };
    let mut base: [Option<f64>; 4] = [None; 4];

    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            report.text(&format!("**Skipped**: no tokio runtime: {e}"));
            return;
        }
    };
    let dur = scale.pick(Duration::from_millis(900), Duration::from_secs(3));
    let target = Target::server(server.url());
    let connect = |alg: Algorithm, quota: Quota, batched: bool, hot: Option<PreAggregation>| {
        let mut b = alg
            .over(quota)
            .prefix(format!("bench{}", if batched { "b" } else { "" }))
            .timeout(Duration::from_secs(1))
            .on_failure(FailurePolicy::Closed);
        if batched {
            b = b.batching(Batching::default());
        }
        if let Some(h) = hot {
            b = b.pre_aggregate(h);
        }
        rt.block_on(b.connect(target.clone()))
    };

    // 2. Every algorithm, plain at 1 and 50 callers, batched at 50.
    let roomy = Quota::per_second(nz(1_000_000));
    let mut t = Table::new([
        "algorithm",
        "path",
        "callers",
        "decisions/s",
        "p50 µs",
        "p99 µs",
        "vs INCR@50",
        "Redis CPU per decision",
        "client CPU per decision",
    ]);
    let mut plain50 = Vec::new();
    let mut batched50 = Vec::new();
    let (mut plain_cpu, mut batched_cpu) = (Vec::new(), Vec::new());
    // Interleaved rounds, best of each: the machine's noise (other
    // processes) then hits every configuration alike.
    let rounds = scale.pick(3u32, 5);
    let mut configs = Vec::new();
    for alg in ALGORITHMS {
        for (path, batched, callers) in [
            ("plain", false, 1),
            ("plain", false, 50),
            ("batched", true, 50),
        ] {
            match connect(alg, roomy, batched, None) {
                Ok(l) => configs.push((alg, path, batched, callers, l, None::<Run>)),
                Err(e) => report.text(&format!("{alg}: could not connect: {e}")),
            }
        }
    }
    for round in 0..rounds {
        report.progress(&format!(
            "redis-benchmark, every algorithm and path: round {} of {rounds}",
            round + 1
        ));
        for (best, now) in base.iter_mut().zip(baseline()) {
            if let Some(x) = now {
                *best = Some(best.map_or(x, |b| b.max(x)));
            }
        }
        for (_, _, _, callers, limiter, best) in configs.iter_mut() {
            let r = rt.block_on(load(
                std::slice::from_ref(limiter),
                *callers,
                dur / rounds,
                false,
                pid,
            ));
            if best.as_ref().is_none_or(|b| r.rate() > b.rate()) {
                *best = Some(r);
            }
        }
    }
    let [incr50, eval50, piped_incr, piped_eval] = base;
    let show = |x: Option<f64>| x.map_or_else(|| "failed".into(), kps);
    let mut bt = Table::new(["redis-benchmark (50 clients, 10 000 keys)", "requests/s"]);
    bt.row(["INCR".to_owned(), show(incr50)]);
    bt.row(["EVALSHA minimal token bucket".to_owned(), show(eval50)]);
    bt.row(["INCR, pipelined 16 deep".to_owned(), show(piped_incr)]);
    bt.row([
        "EVALSHA minimal token bucket, pipelined 16 deep".to_owned(),
        show(piped_eval),
    ]);
    report.text(&format!(
        "One private redis-server {version} on 127.0.0.1 (no persistence), shared by \
         redis-benchmark and weir in this run; the client runs on the same 2 cores. \
         Every figure is the best of {rounds} interleaved rounds (redis-benchmark, then each \
         weir configuration, per round)."
    ));
    report.table(&bt);
    for (alg, path, batched, callers, _, best) in &configs {
        let Some(r) = best else { continue };
        if *callers == 50 {
            if *batched {
                batched50.push(r.rate());
                batched_cpu.push(r.server_us());
            } else {
                plain50.push(r.rate());
                plain_cpu.push(r.server_us());
            }
        }
        let mut cells = vec![
            alg.to_string(),
            (*path).to_owned(),
            callers.to_string(),
            kps(r.rate()),
            format!("{:.0}", r.p50_us),
            format!("{:.0}", r.p99_us),
            incr50.map_or_else(|| "—".into(), |i| format!("{:.2}×", r.rate() / i)),
            format!("{:.2} µs", r.server_us()),
            format!("{:.2} µs", r.client_us()),
        ];
        if r.failed > 0 {
            cells[3] = format!("{} ({} failed)", cells[3], thousands(r.failed));
        }
        t.row(cells);
    }
    report.table(&t);
    let paths = [("plain", 1), ("plain", 50), ("batched", 50)];
    report.plot(
        "redis-decisions-by-path",
        &BarPlot {
            title: "Redis: decisions per second by algorithm, path and callers (best round)".into(),
            x_label: "algorithm".into(),
            y_label: "thousand decisions/s".into(),
            groups: ALGORITHMS.iter().map(ToString::to_string).collect(),
            series: paths
                .iter()
                .map(|&(path, callers)| {
                    let rate = |alg: &Algorithm| {
                        configs.iter().find_map(|(a, p, _, c, _, best)| {
                            let found = a == alg && *p == path && *c == callers;
                            best.as_ref().filter(|_| found).map(|r| r.rate() / 1e3)
                        })
                    };
                    BarSeries::new(
                        format!(
                            "{path}, {callers} caller{}",
                            if callers == 1 { "" } else { "s" }
                        ),
                        ALGORITHMS.iter().map(rate),
                    )
                })
                .collect(),
            references: incr50
                .map(|i| (i / 1e3, "redis-benchmark INCR, 50 clients".to_owned()))
                .into_iter()
                .collect(),
            values: true,
            ..BarPlot::default()
        },
    );

    // 2b. What a batch carries, by the number of callers.
    report.progress("GCRA by callers: decisions per script call");
    let (by_callers, by_callers_rates) = by_callers(&rt, &server, &connect, roomy, dur, pid);
    report.text(
        "GCRA by the number of concurrent callers (one run each): decisions per script call \
         (`INFO commandstats`), and the CPU each side spends per decision. A script call has a \
         fixed cost on both sides (on this VM mostly the cross-core wake-up of a loopback write and \
         the reply's read), which a batch shares among its decisions; closed-loop callers bound \
         the batch, since a caller waits for its answer before asking again.",
    );
    report.table(&by_callers);
    report.plot(
        "redis-gcra-by-callers",
        &BarPlot {
            title: "Redis: GCRA decisions per second by callers, plain against batched".into(),
            x_label: "concurrent callers".into(),
            y_label: "thousand decisions/s".into(),
            groups: by_callers_rates
                .iter()
                .map(|(callers, _, _)| format!("{callers} callers"))
                .collect(),
            series: vec![
                BarSeries::new("plain", by_callers_rates.iter().map(|r| Some(r.1 / 1e3))),
                BarSeries::new("batched", by_callers_rates.iter().map(|r| Some(r.2 / 1e3))),
            ],
            values: true,
            ..BarPlot::default()
        },
    );

    // 3. One hot key: plain against pre-aggregation, far from the limit.
    report.progress("hot key: plain and pre-aggregated");
    let leases = PreAggregation {
        lease: 1024,
        hot_after: 100,
        max_age: Duration::from_millis(50),
        ..Default::default()
    };
    let huge = Quota::per_second(nz(100_000_000));
    let hot_plain = connect(Algorithm::Gcra, huge, false, None)
        .map(|l| rt.block_on(load(&[l], 50, dur, true, pid)));
    let hot_pre = connect(Algorithm::Gcra, huge, false, Some(leases))
        .map(|l| rt.block_on(load(&[l], 50, dur, true, pid)));

    // 4. A hot key that reaches its limit: admitted against the limit.
    report.progress("hot key at its limit: admitted requests");
    let limit = 100_000u32;
    let tight = Quota::per_second(nz(limit));
    let admitted = |pre: bool| -> Option<(Run, f64)> {
        // Two "instances" (limiters with their own leases), 25 callers each,
        // each run on a fresh prefix so the bucket starts full.
        let mut ls = Vec::new();
        for i in 0..2 {
            let mut b = Algorithm::Gcra
                .over(tight)
                .prefix(format!("adm{}{}", u8::from(pre), i / 2))
                .timeout(Duration::from_secs(1))
                .on_failure(FailurePolicy::Closed);
            if pre {
                b = b.pre_aggregate(leases);
            }
            ls.push(rt.block_on(b.connect(target.clone())).ok()?);
        }
        let r = rt.block_on(load(&ls, 50, dur, true, pid));
        // burst + rate × elapsed
        let ideal = f64::from(limit) + f64::from(limit) * r.secs;
        Some((r, ideal))
    };
    let adm_plain = admitted(false);
    let adm_pre = admitted(true);

    let mut t = Table::new([
        "hot key, 50 callers",
        "decisions/s",
        "p50 µs",
        "p99 µs",
        "from leases",
    ]);
    for (name, r) in [
        ("plain (GCRA)", &hot_plain),
        ("pre-aggregated (lease 1024, max age 50 ms)", &hot_pre),
    ] {
        match r {
            Ok(r) => t.row([
                name.to_owned(),
                kps(r.rate()),
                format!("{:.1}", r.p50_us),
                format!("{:.0}", r.p99_us),
                format!(
                    "{:.1}%",
                    100.0 * r.leased as f64 / r.decisions.max(1) as f64
                ),
            ]),
            Err(e) => t.row([
                name.to_owned(),
                format!("failed: {e}"),
                "".into(),
                "".into(),
                "".into(),
            ]),
        }
    }
    report.table(&t);
    let mut t = Table::new([
        "hot key at 100 000/s (2 instances × 25 callers)",
        "decisions/s",
        "admitted",
        "limit allows (burst + rate × elapsed)",
        "extra admitted",
    ]);
    for (name, r) in [("plain", &adm_plain), ("pre-aggregated", &adm_pre)] {
        if let Some((r, ideal)) = r {
            t.row([
                name.to_owned(),
                kps(r.rate()),
                thousands(r.allowed),
                thousands(*ideal as u64),
                format!(
                    "{:+.0} ({:+.2}%)",
                    r.allowed as f64 - ideal,
                    100.0 * (r.allowed as f64 - ideal) / ideal
                ),
            ]);
        }
    }
    report.table(&t);

    // 5. What a decision costs Redis itself, apart from any client.
    report.progress("per-key steps inside a script");
    let mut t = Table::new(["one step inside a script", "Redis time per key"]);
    for (name, us) in redis_cost::script_steps(&server) {
        t.row([
            name.to_owned(),
            us.map_or_else(|| "failed".into(), |us| format!("{us:.2} µs")),
        ]);
    }
    report.text(
        "What a script deciding many keys still pays per key, measured in one EVAL looping over \
         10 000 keys (`INFO commandstats`, the bare loop subtracted, best of 3). Every allowed decision \
         writes its key once, so the batched path's Redis time per decision cannot fall below a write \
         plus a share of `MGET`, however many keys a call decides. The scripts overwrite a busy key \
         in place with `SETRANGE` (its expiry kept) and set a new expiry only when it moves.",
    );
    report.table(&t);

    report.progress("Redis instructions per decision (callgrind)");
    let instructions = redis_cost::instructions(&rt, &ALGORITHMS, roomy, redis_cost::Costs::One);
    match &instructions {
        Ok(rows) => {
            report.text(
                "Instructions Redis executes per decision, counted by callgrind (within a few percent from \
                 run to run, where timings on this VM move by a third): each algorithm's script sent exactly as its limiter sends \
                 it, at 1 decision a call (the plain path) and 16 or 50 (the batched path), for new keys \
                 (written with an expiry) and busy keys (decided again at once: overwritten in place). \
                 Everything the server does for a call counts, from reading the request to writing the \
                 reply; the kernel's share of the socket calls does not.",
            );
            report.table(&redis_cost::instructions_table(rows));
        }
        Err(e) => report.text(&format!("Instructions per decision: **skipped**: {e}.")),
    }

    // 6. Redis's own ceiling for batched calls, the client out of the way.
    report.progress("Redis's ceiling for batched calls");
    let gcra_call = configs
        .iter()
        .find(|c| c.0 == Algorithm::Gcra && !c.2)
        .ok_or_else(|| "no plain GCRA limiter connected".to_owned())
        .and_then(|c| redis_cost::capture(&server, &rt, &c.4));
    let (ceilings, gcra_ceiling) = match &gcra_call {
        Ok(call) => redis_cost::ceiling(&server, call, scale),
        Err(e) => (
            Table::new([format!("ceiling not measured: {e}")]),
            Vec::new(),
        ),
    };
    report.text(
        "Redis's own ceiling for a batched call, with the client out of the way: `redis-benchmark` \
         (C, 4 connections, one call each in flight) sends script calls of 16 or 50 decisions on random \
         keys of 10 000 until Redis is saturated (best of 3). The bare scripts do only what any \
         script keeping per-key state must: read the clock, read the keys, write each one back. 50 \
         closed-loop callers can never put more than 50 decisions into one call.",
    );
    report.table(&ceilings);

    // 7. Against the goals.
    let mean = |v: &[f64]| {
        if v.is_empty() {
            0.0
        } else {
            v.iter().sum::<f64>() / v.len() as f64
        }
    };
    let (p50m, b50m) = (mean(&plain50), mean(&batched50));
    let mut lines = Vec::new();
    if let Some(i) = incr50 {
        lines.push(format!(
            "* plain path at 50 callers (mean over the algorithms): {} = {:.2}× unpipelined INCR (goal ≥ 0.5×)",
            kps(p50m),
            p50m / i
        ));
    }
    lines.push(format!(
        "* batched path at 50 callers: {} = {:.2}× the plain path (goal ≥ 4×); Redis CPU per decision {:.2} µs \
         against the plain path's {:.2} µs ({:.2}× less)",
        kps(b50m),
        b50m / p50m.max(1e-9),
        mean(&batched_cpu),
        mean(&plain_cpu),
        mean(&plain_cpu) / mean(&batched_cpu).max(1e-9)
    ));
    // Why batching gives what it gives: Redis's own work per decision, and
    // the most Redis can do with weir's script when the client costs
    // nothing, against the GCRA plain path measured above.
    let gcra_instr = instructions.as_ref().ok().and_then(|rows| {
        rows.iter()
            .find(|r| r.algorithm == Some(Algorithm::Gcra))
            .map(|r| r.per_call.clone())
    });
    if let Some(counts) = gcra_instr {
        let plain = counts
            .iter()
            .find(|c| c.decisions == 1)
            .map_or(0.0, |c| c.busy_key);
        lines.push(format!(
            "* Redis's work per GCRA decision on a busy key (callgrind): {}; per decision a plain call asks {} \
             the instructions of a batched one",
            counts
                .iter()
                .map(|c| format!(
                    "{} instructions at {} a call",
                    thousands(c.busy_key.round() as u64),
                    c.decisions
                ))
                .collect::<Vec<_>>()
                .join(", "),
            counts
                .iter()
                .filter(|c| c.decisions > 1)
                .map(|c| format!(
                    "{:.1}× ({} a call)",
                    plain / c.busy_key.max(1.0),
                    c.decisions
                ))
                .collect::<Vec<_>>()
                .join(" and ")
        ));
    }
    let gcra_plain50 = configs
        .iter()
        .find(|c| c.0 == Algorithm::Gcra && !c.2 && c.3 == 50)
        .and_then(|c| c.5.as_ref())
        .map(Run::rate);
    if let (Some(plain), false) = (gcra_plain50, gcra_ceiling.is_empty()) {
        lines.push(format!(
            "* Redis's ceiling with weir's GCRA script, the client out of the way (redis-benchmark, table above): {} \
             — the most batching can give over the plain GCRA path ({}) with a client that costs nothing. \
             50 closed-loop callers form calls of about 16 (table 'GCRA by callers'); a call of all 50 \
             leaves none to fill the next while it runs, and here the client shares Redis's two cores",
            gcra_ceiling
                .iter()
                .map(|(n, r)| match r {
                    Some(r) => format!("{} at {n} a call = {:.2}×", kps(*r), r / plain.max(1e-9)),
                    None => format!("failed at {n} a call"),
                })
                .collect::<Vec<_>>()
                .join(", "),
            kps(plain)
        ));
    }
    lines.push(format!(
        "* batched against plain by callers (GCRA, table above): {}",
        by_callers_rates
            .iter()
            .map(|(callers, plain, batched)| format!(
                "{:.2}× at {callers}",
                batched / plain.max(1e-9)
            ))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    if let (Ok(p), Ok(h)) = (&hot_plain, &hot_pre) {
        lines.push(format!(
            "* pre-aggregated hot key: {} = {:.1}× the plain hot key (goal ≥ 10×)",
            kps(h.rate()),
            h.rate() / p.rate().max(1e-9)
        ));
    }
    if let Some((r, ideal)) = &adm_pre {
        lines.push(format!(
            "* pre-aggregation admitted {} against {} allowed by the limit ({:+.2}%): every admitted unit was \
             counted in Redis (at most 2 × max_age earlier), so the excess over any window stays below \
             1.5 × instances × lease = {} units",
            thousands(r.allowed),
            thousands(*ideal as u64),
            100.0 * (r.allowed as f64 - ideal) / ideal,
            3 * leases.lease
        ));
    }
    report.text(&lines.join("\n"));
    drop(server);
}
