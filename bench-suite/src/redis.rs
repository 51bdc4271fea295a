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

use crate::contest::{self, Goal};
use crate::machine;
use crate::plot::{BarPlot, BarSeries};
use crate::redis_cost::{self, redis_benchmark};
use crate::report::{Report, Table, thousands};
use crate::workload;
use std::fmt::Write as _;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::runtime::Runtime;
use weir_rate::redis::{
    Batching, FailurePolicy, PreAggregation, RedisLimitError, RedisLimiter, RedisLimiterBuilder,
    Source, Target,
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
        let names = [
            "token bucket",
            "GCRA",
            "fixed window",
            "sliding-window counter (2 counters)",
        ];
        f.write_str(names[*self as usize])
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
    let (me, start) = (std::process::id(), Instant::now());
    let cpu_at_start = (
        server_pid.and_then(machine::process_cpu_secs),
        machine::process_cpu_secs(me),
    );
    let (stop, failed) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
    );
    let caller = |c: usize| {
        let (limiter, stop, failed) = (
            limiters[c % limiters.len()].clone(),
            stop.clone(),
            failed.clone(),
        );
        tokio::spawn(async move {
            let (mut lat, mut allowed, mut leased) =
                (Vec::<u32>::with_capacity(1 << 16), 0u64, 0u64);
            let (mut x, mut key) = (0x9E37_79B9_7F4A_7C15u64 ^ (c as u64 + 1), String::new());
            while !stop.load(Ordering::Relaxed) {
                key.clear();
                let _ = if hot {
                    write!(key, "hot")
                } else {
                    write!(key, "k{}", workload::xorshift(&mut x) % 10_000)
                };
                let t = Instant::now();
                match limiter.check_verbose(&key, 1).await {
                    Ok(v) => {
                        leased += u64::from(v.source == Source::Lease);
                        if v.source != Source::Lease && v.source != Source::Redis {
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
    for h in handles {
        if let Ok((lat, allowed, leased)) = h.await {
            all.extend_from_slice(&lat);
            (run.allowed, run.leased) = (run.allowed + allowed, run.leased + leased);
        }
    }
    run.secs = start.elapsed().as_secs_f64();
    let used = |pid: Option<u32>, at_start: Option<f64>| {
        pid.and_then(machine::process_cpu_secs)
            .zip(at_start)
            .map_or(0.0, |(now, then)| now - then)
    };
    (run.server_cpu, run.client_cpu) = (
        used(server_pid, cpu_at_start.0),
        used(Some(me), cpu_at_start.1),
    );
    (run.decisions, run.failed) = (all.len() as u64, failed.load(Ordering::Relaxed));
    all.sort_unstable();
    let pct = |p| contest::quantile(&all, p).map_or(0.0, |ns| f64::from(ns) / 1000.0);
    (run.p50_us, run.p99_us) = (pct(0.50), pct(0.99));
    run
}

fn nz(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).unwrap_or(NonZeroU32::MIN)
}

pub(crate) fn kps(x: f64) -> String {
    format!("{:.1} k/s", x / 1000.0)
}

/// Connects a limiter of `algorithm` over a quota, plain or batched, with
/// pre-aggregation or not.
type Connect<'a> = dyn Fn(Algorithm, Quota, bool, Option<PreAggregation>) -> Result<RedisLimiter, RedisLimitError>
    + 'a;

/// Plain and batched GCRA at 50, 200 and 800 callers: rate, decisions
/// per script call and CPU per decision on each side.
fn by_callers(
    rt: &Runtime,
    server: &RedisServer,
    connect: &Connect<'_>,
    quota: Quota,
    dur: Duration,
) -> (Table, Vec<(usize, f64, f64)>) {
    let mut t = Table::new(
        "path | callers | decisions/s | p50 µs | decisions per script call | Redis CPU per decision | client CPU per decision",
    );
    let mut ratios = Vec::new();
    for callers in [50, 200, 800] {
        let mut rates = [0.0f64; 2];
        for (path, batched) in [("plain", false), ("batched", true)] {
            let Ok(limiter) = connect(Algorithm::Gcra, quota, batched, None) else {
                continue;
            };
            let calls = || server.command_stats("evalsha").map(|s| s.calls).ok();
            let before = calls();
            let r = rt.block_on(load(
                std::slice::from_ref(&limiter),
                callers,
                dur,
                false,
                server.pid(),
            ));
            let per_call = calls().zip(before).map(|(after, before)| {
                r.decisions as f64 / after.saturating_sub(before).max(1) as f64
            });
            let per_call = per_call.map_or_else(|| "—".into(), |n| format!("{n:.1}"));
            let (rate, server_us, client_us) = (kps(r.rate()), r.server_us(), r.client_us());
            t.row(format!("{path} | {callers} | {rate} | {:.0} | {per_call} | {server_us:.2} µs | {client_us:.2} µs", r.p50_us));
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
            return report.text(&format!(
                "**Skipped**: could not start a private redis-server: {e}"
            ));
        }
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return report.text(&format!("**Skipped**: no tokio runtime: {e}")),
    };
    measure(report, &server, &rt);
}

/// The section's measurements on a running server.
fn measure(report: &mut Report, server: &RedisServer, rt: &Runtime) {
    let info = server.cli(&["INFO", "server"]).unwrap_or_default();
    let version = info
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .unwrap_or("?");
    let (scale, pid, port) = (report.scale(), server.pid(), server.port());

    // 1. redis-benchmark on the same server, measured in every round,
    // interleaved with weir's runs (best of).
    let (n_plain, n_piped) = (
        scale.pick("50000", "1000000"),
        scale.pick("300000", "4000000"),
    );
    let sha = server
        .cli(&["SCRIPT", "LOAD", MINIMAL_TOKEN_BUCKET])
        .map(|s| s.trim().to_owned())
        .unwrap_or_default();
    let evalsha = ["EVALSHA", &sha, "1", "tb:__rand_int__", "0.001", "100"];
    let benchmark = |n: &str, piped: bool, script: bool| {
        let mut args = vec!["-c", "50", "-n", n, "-r", "10000"];
        args.extend(if piped { &["-P", "16"][..] } else { &[] });
        args.extend(if script {
            &evalsha[..]
        } else {
            &["-t", "incr"][..]
        });
        redis_benchmark(port, &args)
    };
    let baseline = || {
        [
            benchmark(n_plain, false, false),
            benchmark(n_plain, false, true),
            benchmark(n_piped, true, false),
            benchmark(n_plain, true, true),
        ]
    };

    let dur = scale.pick(Duration::from_millis(900), Duration::from_secs(3));
    let target = Target::server(server.url());
    let connect = |alg: Algorithm, quota: Quota, batched: bool, hot: Option<PreAggregation>| {
        let prefix = format!("bench{}", if batched { "b" } else { "" });
        let mut b = alg
            .over(quota)
            .prefix(prefix)
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
    let paths = [
        ("plain", false, 1),
        ("plain", false, 50),
        ("batched", true, 50),
    ];
    let mut configs = Vec::new();
    for alg in ALGORITHMS {
        for (path, batched, callers) in paths {
            match connect(alg, roomy, batched, None) {
                Ok(l) => configs.push((alg, path, batched, callers, l)),
                Err(e) => report.text(&format!("{alg}: could not connect: {e}")),
            }
        }
    }
    // Interleaved rounds, best of each: the machine's noise (other
    // processes) then hits every configuration alike. Contender 0 is
    // redis-benchmark.
    let rounds = scale.pick(3u32, 5);
    let measured = contest::rotate(
        report,
        "redis-benchmark, every algorithm and path",
        1 + configs.len(),
        rounds as usize,
        |c, _| {
            if c == 0 {
                return (baseline(), None);
            }
            let (_, _, _, callers, limiter) = &configs[c - 1];
            (
                Default::default(),
                Some(rt.block_on(load(
                    std::slice::from_ref(limiter),
                    *callers,
                    dur / rounds,
                    false,
                    pid,
                ))),
            )
        },
    );
    let best_of = |xs: &mut dyn Iterator<Item = f64>| xs.reduce(f64::max);
    let [incr50, eval50, piped_incr, piped_eval] =
        std::array::from_fn(|k| best_of(&mut measured[0].iter().filter_map(|m| m.0[k])));
    let best: Vec<Run> = measured[1..]
        .iter()
        .map(|runs| {
            runs.iter()
                .filter_map(|m| m.1.clone())
                .max_by(|a, b| a.rate().total_cmp(&b.rate()))
                .unwrap_or_default()
        })
        .collect();
    let show = |x: Option<f64>| x.map_or_else(|| "failed".into(), kps);
    let mut bt = Table::new("redis-benchmark (50 clients, 10 000 keys) | requests/s");
    bt.row(format!("INCR | {}", show(incr50)));
    bt.row(format!("EVALSHA minimal token bucket | {}", show(eval50)));
    bt.row(format!("INCR, pipelined 16 deep | {}", show(piped_incr)));
    bt.row(format!(
        "EVALSHA minimal token bucket, pipelined 16 deep | {}",
        show(piped_eval)
    ));
    report.text(&format!(
        "One private redis-server {version} on 127.0.0.1 (no persistence), shared by \
         redis-benchmark and weir in this run; the client runs on the same 2 cores. \
         Every figure is the best of {rounds} interleaved rounds (redis-benchmark, then each \
         weir configuration, per round)."
    ));
    report.table(&bt);
    let mut t = Table::new(
        "algorithm | path | callers | decisions/s | p50 µs | p99 µs | vs INCR@50 | Redis CPU per decision | client CPU per decision",
    );
    let at_50 = |batched: bool, f: fn(&Run) -> f64| {
        let runs = configs
            .iter()
            .zip(&best)
            .filter(|(c, _)| c.2 == batched && c.3 == 50);
        let xs: Vec<f64> = runs.map(|(_, r)| f(r)).collect();
        if xs.is_empty() {
            0.0
        } else {
            xs.iter().sum::<f64>() / xs.len() as f64
        }
    };
    for ((alg, path, _, callers, _), r) in configs.iter().zip(&best) {
        let failed = if r.failed > 0 {
            format!(" ({} failed)", thousands(r.failed))
        } else {
            String::new()
        };
        let vs = incr50.map_or_else(|| "—".into(), |i| format!("{:.2}×", r.rate() / i));
        let (p50, p99, server_us, client_us) = (r.p50_us, r.p99_us, r.server_us(), r.client_us());
        let rate = kps(r.rate());
        t.row(format!("{alg} | {path} | {callers} | {rate}{failed} | {p50:.0} | {p99:.0} | {vs} | {server_us:.2} µs | {client_us:.2} µs"));
    }
    report.table(&t);
    let series = paths[..].iter().map(|&(path, batched, callers)| {
        let rate = |alg: &Algorithm| {
            let mut found = configs
                .iter()
                .zip(&best)
                .filter(|(c, _)| c.0 == *alg && c.2 == batched && c.3 == callers);
            found.next().map(|(_, r)| r.rate() / 1e3)
        };
        BarSeries::new(
            format!(
                "{path}, {callers} caller{}",
                if callers == 1 { "" } else { "s" }
            ),
            ALGORITHMS.iter().map(rate),
        )
    });
    report.plot(
        "redis-decisions-by-path",
        &BarPlot {
            title: "Redis: decisions per second by algorithm, path and callers (best round)".into(),
            x_label: "algorithm".into(),
            y_label: "thousand decisions/s".into(),
            groups: ALGORITHMS.iter().map(ToString::to_string).collect(),
            series: series.collect(),
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
    let (by_callers, by_callers_rates) = by_callers(rt, server, &connect, roomy, dur);
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
    let hot = |pre: Option<PreAggregation>| {
        connect(Algorithm::Gcra, huge, false, pre)
            .map(|l| rt.block_on(load(&[l], 50, dur, true, pid)))
    };
    let (hot_plain, hot_pre) = (hot(None), hot(Some(leases)));

    // 4. A hot key that reaches its limit: admitted against the limit.
    report.progress("hot key at its limit: admitted requests");
    let limit = 100_000u32;
    let admitted = |pre: bool| -> Option<(Run, f64)> {
        // Two "instances" (limiters with their own leases), 25 callers each,
        // each run on a fresh prefix so the bucket starts full.
        let instance = |_| {
            let b = Algorithm::Gcra
                .over(Quota::per_second(nz(limit)))
                .prefix(format!("adm{}0", u8::from(pre)));
            let b = b
                .timeout(Duration::from_secs(1))
                .on_failure(FailurePolicy::Closed);
            rt.block_on(if pre { b.pre_aggregate(leases) } else { b }.connect(target.clone()))
                .ok()
        };
        let limiters = (0..2).map(instance).collect::<Option<Vec<_>>>()?;
        let r = rt.block_on(load(&limiters, 50, dur, true, pid));
        // burst + rate × elapsed
        let ideal = f64::from(limit) + f64::from(limit) * r.secs;
        Some((r, ideal))
    };
    let (adm_plain, adm_pre) = (admitted(false), admitted(true));

    let mut t = Table::new("hot key, 50 callers | decisions/s | p50 µs | p99 µs | from leases");
    for (name, r) in [
        ("plain (GCRA)", &hot_plain),
        ("pre-aggregated (lease 1024, max age 50 ms)", &hot_pre),
    ] {
        match r {
            Ok(r) => {
                let leased = 100.0 * r.leased as f64 / r.decisions.max(1) as f64;
                t.row(format!(
                    "{name} | {} | {:.1} | {:.0} | {leased:.1}%",
                    kps(r.rate()),
                    r.p50_us,
                    r.p99_us
                ));
            }
            Err(e) => t.cells([
                name.to_owned(),
                format!("failed: {e}"),
                String::new(),
                String::new(),
                String::new(),
            ]),
        }
    }
    report.table(&t);
    let mut t = Table::new(
        "hot key at 100 000/s (2 instances × 25 callers) | decisions/s | admitted | limit allows (burst + rate × elapsed) | extra admitted",
    );
    for (name, (r, ideal)) in [("plain", &adm_plain), ("pre-aggregated", &adm_pre)]
        .into_iter()
        .filter_map(|(n, r)| Some((n, r.as_ref()?)))
    {
        let extra = r.allowed as f64 - ideal;
        let (rate, allowed, ideal_n) = (
            kps(r.rate()),
            thousands(r.allowed),
            thousands(*ideal as u64),
        );
        t.row(format!(
            "{name} | {rate} | {allowed} | {ideal_n} | {extra:+.0} ({:+.2}%)",
            100.0 * extra / ideal
        ));
    }
    report.table(&t);

    // 5. What a decision costs Redis itself, apart from any client.
    report.progress("per-key steps inside a script");
    let mut t = Table::new("one step inside a script | Redis time per key");
    for (name, us) in redis_cost::script_steps(server) {
        t.cells([
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
    let instructions = redis_cost::instructions(rt, &ALGORITHMS, roomy, redis_cost::Costs::One);
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
    let gcra_plain = configs
        .iter()
        .find(|c| c.0 == Algorithm::Gcra && !c.2)
        .ok_or("no plain GCRA limiter connected".to_owned());
    let (ceilings, gcra_ceiling) =
        match gcra_plain.and_then(|c| redis_cost::capture(server, rt, &c.4)) {
            Ok(call) => redis_cost::ceiling(server, &call, scale),
            Err(e) => (
                Table::with_headers([format!("ceiling not measured: {e}")]),
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
    let (p50m, b50m) = (at_50(false, Run::rate), at_50(true, Run::rate));
    let (plain_cpu, batched_cpu) = (at_50(false, Run::server_us), at_50(true, Run::server_us));
    let mut lines = Vec::new();
    if let Some(i) = incr50 {
        let goal = Goal::at_least("≥ 0.5×", 0.5);
        let (ratio, rate) = (p50m / i, kps(p50m));
        lines.push(format!(
            "* plain path at 50 callers (mean over the algorithms): {rate} = {ratio:.2}× unpipelined INCR (goal {}: {})",
            goal.name,
            goal.verdict(ratio)
        ));
    }
    let goal = Goal::at_least("≥ 4×", 4.0);
    let ratio = b50m / p50m.max(1e-9);
    lines.push(format!(
        "* batched path at 50 callers: {} = {ratio:.2}× the plain path (goal {}: {}); Redis CPU per decision {batched_cpu:.2} µs \
         against the plain path's {plain_cpu:.2} µs ({:.2}× less)",
        kps(b50m),
        goal.name,
        goal.verdict(ratio),
        plain_cpu / batched_cpu.max(1e-9)
    ));
    // Why batching gives what it gives: Redis's own work per decision, and
    // the most Redis can do with weir's script when the client costs
    // nothing, against the GCRA plain path measured above.
    let gcra_instr = instructions
        .as_ref()
        .ok()
        .and_then(|rows| rows.iter().find(|r| r.algorithm == Some(Algorithm::Gcra)));
    if let Some(counts) = gcra_instr.map(|r| &r.per_call) {
        let plain = counts
            .iter()
            .find(|c| c.decisions == 1)
            .map_or(0.0, |c| c.busy_key);
        let each = counts.iter().map(|c| {
            format!(
                "{} instructions at {} a call",
                thousands(c.busy_key.round() as u64),
                c.decisions
            )
        });
        let batched = counts.iter().filter(|c| c.decisions > 1);
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
    let gcra_plain50 = configs
        .iter()
        .zip(&best)
        .find(|(c, _)| c.0 == Algorithm::Gcra && !c.2 && c.3 == 50)
        .map(|(_, r)| r.rate());
    if let (Some(plain), false) = (gcra_plain50, gcra_ceiling.is_empty()) {
        let ceilings = gcra_ceiling.iter().map(|(n, r)| match r {
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
    let by_callers = by_callers_rates
        .iter()
        .map(|(callers, plain, batched)| format!("{:.2}× at {callers}", batched / plain.max(1e-9)));
    lines.push(format!(
        "* batched against plain by callers (GCRA, table above): {}",
        by_callers.collect::<Vec<_>>().join(", ")
    ));
    if let (Ok(p), Ok(h)) = (&hot_plain, &hot_pre) {
        let (goal, ratio) = (Goal::at_least("≥ 10×", 10.0), h.rate() / p.rate().max(1e-9));
        lines.push(format!(
            "* pre-aggregated hot key: {} = {ratio:.1}× the plain hot key (goal {}: {})",
            kps(h.rate()),
            goal.name,
            goal.verdict(ratio)
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
}
