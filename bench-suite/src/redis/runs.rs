//! The load runs: every algorithm's plain and batched paths against
//! `redis-benchmark` in interleaved rounds, GCRA by the number of callers,
//! and one hot key plain and pre-aggregated.

use super::{ALGORITHMS, Algorithm, Bench, Run, kps, nz};
use crate::harness::contest;
use crate::harness::plot::{BarPlot, BarSeries};
use crate::harness::report::{Report, Table, thousands};
use std::time::Duration;
use weir_rate::Quota;
use weir_redis::{ConfigError, PreAggregation};

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

/// Algorithm, path, batched, callers.
type Config = (Algorithm, &'static str, bool, usize);

/// What the paths measured: each configuration (algorithm, path, batched,
/// callers) and its best round, and `redis-benchmark`'s unpipelined `INCR`
/// at 50 clients.
pub(super) struct Paths {
    pub(super) best: Vec<(Config, Run)>,
    pub(super) incr50: Option<f64>,
    pub(super) gcra_plain50: Option<f64>,
    /// A connected plain GCRA limiter, for capturing its script call.
    pub(super) gcra: Option<weir_redis::RedisLimiter>,
}

impl Paths {
    /// The mean of `f` over the algorithms at 50 callers, plain or batched.
    pub(super) fn at_50(&self, batched: bool, f: fn(&Run) -> f64) -> f64 {
        let runs = self
            .best
            .iter()
            .filter(|(c, _)| c.2 == batched && c.3 == 50);
        let xs: Vec<f64> = runs.map(|(_, r)| f(r)).collect();
        xs.iter().sum::<f64>() / xs.len().max(1) as f64
    }
}

fn prefix(batched: bool) -> &'static str {
    if batched { "benchb" } else { "bench" }
}

/// redis-benchmark's baselines and every configuration, over `roomy`.
pub(super) fn paths(report: &mut Report, bench: &Bench<'_>, roomy: Quota) -> Paths {
    let info = bench.server.cli(&["INFO", "server"]).unwrap_or_default();
    let version = info
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .unwrap_or("?");
    let (scale, port) = (report.scale(), bench.server.port());
    let (n_plain, n_piped) = (
        scale.pick("50000", "1000000"),
        scale.pick("300000", "4000000"),
    );
    let sha = bench
        .server
        .cli(&["SCRIPT", "LOAD", MINIMAL_TOKEN_BUCKET])
        .unwrap_or_default();
    let evalsha = [
        "EVALSHA",
        sha.trim(),
        "1",
        "tb:__rand_int__",
        "0.001",
        "100",
    ];
    let benchmark = |n: &str, piped: bool, script: bool| {
        let mut args = vec!["-c", "50", "-n", n, "-r", "10000"];
        args.extend(if piped { &["-P", "16"][..] } else { &[] });
        args.extend(if script {
            &evalsha[..]
        } else {
            &["-t", "incr"][..]
        });
        super::redis_benchmark::redis_benchmark(port, &args)
    };
    let mut configs = Vec::new();
    for alg in ALGORITHMS {
        for (path, batched, callers) in [
            ("plain", false, 1),
            ("plain", false, 50),
            ("batched", true, 50),
        ] {
            match bench.connect(alg, roomy, prefix(batched), batched, None) {
                Ok(l) => configs.push(((alg, path, batched, callers), l)),
                Err(e) => report.text(&format!("{alg}: could not connect: {e}")),
            }
        }
    }
    // redis-benchmark (contender 0) and every configuration in interleaved
    // rounds, best of each: the machine's noise then hits all alike.
    let rounds = scale.pick(3u32, 5);
    let what = "redis-benchmark, every algorithm and path";
    let measured = contest::rotate(report, what, 1 + configs.len(), rounds as usize, |c, _| {
        let Some(((_, _, _, callers), limiter)) = c.checked_sub(1).map(|c| &configs[c]) else {
            let baseline = [
                (n_plain, false, false),
                (n_plain, false, true),
                (n_piped, true, false),
            ];
            let baseline = baseline.into_iter().chain([(n_plain, true, true)]);
            return (baseline.map(|(n, p, s)| benchmark(n, p, s)).collect(), None);
        };
        let dur = bench.dur / rounds;
        (
            Vec::new(),
            Some(bench.load(std::slice::from_ref(limiter), *callers, dur, false)),
        )
    });
    let best_of = |k: usize| measured[0].iter().filter_map(|m| m.0[k]).reduce(f64::max);
    let [incr50, eval50, piped_incr, piped_eval] = [0, 1, 2, 3].map(best_of);
    let best_run = |runs: &Vec<(Vec<Option<f64>>, Option<Run>)>| {
        let runs = runs.iter().filter_map(|m| m.1.clone());
        runs.max_by(|a, b| a.rate().total_cmp(&b.rate()))
            .unwrap_or_default()
    };
    let best: Vec<_> = configs
        .iter()
        .zip(&measured[1..])
        .map(|(c, runs)| (c.0, best_run(runs)))
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
    for ((alg, path, _, callers), r) in &best {
        let failed = if r.failed > 0 {
            format!(" ({} failed)", thousands(r.failed))
        } else {
            String::new()
        };
        let vs = incr50.map_or_else(|| "—".into(), |i| format!("{:.2}×", r.rate() / i));
        let (rate, p50, p99, server_us, client_us) = (
            kps(r.rate()),
            r.p50_us,
            r.p99_us,
            r.server_us(),
            r.client_us(),
        );
        t.row(format!("{alg} | {path} | {callers} | {rate}{failed} | {p50:.0} | {p99:.0} | {vs} | {server_us:.2} µs | {client_us:.2} µs"));
    }
    report.table(&t);
    let rate = |alg: Algorithm, batched: bool, callers: usize| {
        let mut found = best
            .iter()
            .filter(|(c, _)| c.0 == alg && c.2 == batched && c.3 == callers);
        found.next().map(|(_, r)| r.rate())
    };
    let series = [
        ("plain", false, 1),
        ("plain", false, 50),
        ("batched", true, 50),
    ]
    .map(|(path, batched, n)| {
        let name = format!("{path}, {n} caller{}", if n == 1 { "" } else { "s" });
        BarSeries::new(
            name,
            ALGORITHMS.map(|alg| rate(alg, batched, n).map(|r| r / 1e3)),
        )
    });
    let title = "Redis: decisions per second by algorithm, path and callers (best round)";
    let groups = ALGORITHMS.iter().map(ToString::to_string).collect();
    let plot = BarPlot::new(
        title,
        "algorithm",
        "thousand decisions/s",
        groups,
        series.into(),
    );
    let references = incr50
        .map(|i| (i / 1e3, "redis-benchmark INCR, 50 clients".to_owned()))
        .into_iter()
        .collect();
    report.plot("redis-decisions-by-path", &BarPlot { references, ..plot });
    let gcra = configs
        .into_iter()
        .find(|(c, _)| c.0 == Algorithm::Gcra && !c.2)
        .map(|c| c.1);
    Paths {
        incr50,
        gcra_plain50: rate(Algorithm::Gcra, false, 50),
        gcra,
        best,
    }
}

/// Plain and batched GCRA at 50, 200 and 800 callers, one run each: rate,
/// decisions per script call and CPU per decision on each side; returns
/// (callers, plain rate, batched rate) where both ran.
pub(super) fn by_callers(
    report: &mut Report,
    bench: &Bench<'_>,
    quota: Quota,
) -> Vec<(usize, f64, f64)> {
    report.progress("GCRA by callers: decisions per script call");
    let mut t = Table::new(
        "path | callers | decisions/s | p50 µs | decisions per script call | Redis CPU per decision | client CPU per decision",
    );
    let mut ratios = Vec::new();
    for callers in [50, 200, 800] {
        let mut rates = [0.0f64; 2];
        for (path, batched) in [("plain", false), ("batched", true)] {
            let Ok(limiter) = bench.connect(Algorithm::Gcra, quota, prefix(batched), batched, None)
            else {
                continue;
            };
            let calls = || bench.server.command_stats("evalsha").map(|s| s.calls).ok();
            let before = calls();
            let r = bench.load(std::slice::from_ref(&limiter), callers, bench.dur, false);
            let per_call = calls()
                .zip(before)
                .map(|(a, b)| r.decisions as f64 / a.saturating_sub(b).max(1) as f64);
            let per_call = per_call.map_or_else(|| "—".into(), |n| format!("{n:.1}"));
            let (rate, p50, server_us, client_us) =
                (kps(r.rate()), r.p50_us, r.server_us(), r.client_us());
            t.row(format!("{path} | {callers} | {rate} | {p50:.0} | {per_call} | {server_us:.2} µs | {client_us:.2} µs"));
            rates[usize::from(batched)] = r.rate();
        }
        if rates.iter().all(|&r| r > 0.0) {
            ratios.push((callers, rates[0], rates[1]));
        }
    }
    report.text(
        "GCRA by the number of concurrent callers (one run each): decisions per script call \
         (`INFO commandstats`), and the CPU each side spends per decision. A script call has a \
         fixed cost on both sides (on this VM mostly the cross-core wake-up of a loopback write and \
         the reply's read), which a batch shares among its decisions; closed-loop callers bound \
         the batch, since a caller waits for its answer before asking again.",
    );
    report.table(&t);
    let groups = ratios
        .iter()
        .map(|(callers, _, _)| format!("{callers} callers"))
        .collect();
    let series = vec![
        BarSeries::new("plain", ratios.iter().map(|r| Some(r.1 / 1e3))),
        BarSeries::new("batched", ratios.iter().map(|r| Some(r.2 / 1e3))),
    ];
    let title = "Redis: GCRA decisions per second by callers, plain against batched";
    report.plot(
        "redis-gcra-by-callers",
        &BarPlot::new(
            title,
            "concurrent callers",
            "thousand decisions/s",
            groups,
            series,
        ),
    );
    ratios
}

/// What the hot-key runs measured, for the goals.
pub(super) struct Hot {
    /// Plain and pre-aggregated, far from the limit.
    pub(super) plain: Result<Run, ConfigError>,
    pub(super) pre: Result<Run, ConfigError>,
    /// Pre-aggregated at its limit: the run and what the limit allows.
    pub(super) admitted_pre: Option<(Run, f64)>,
    /// The lease pre-aggregation took.
    pub(super) lease: u32,
}

/// One hot key at 50 callers, plain against pre-aggregation (leases): far
/// from the limit, and at a limit that is reached (admitted against what
/// the limit allows).
pub(super) fn hot(report: &mut Report, bench: &Bench<'_>) -> Hot {
    report.progress("hot key: plain and pre-aggregated");
    let leases = PreAggregation {
        lease: 1024,
        hot_after: 100,
        max_age: Duration::from_millis(50),
        ..Default::default()
    };
    let huge = Quota::per_second(nz(100_000_000));
    let hot = |pre| {
        let limiter = bench.connect(Algorithm::Gcra, huge, "bench", false, pre);
        limiter.map(|l| bench.load(&[l], 50, bench.dur, true))
    };
    let (plain, pre) = (hot(None), hot(Some(leases)));
    report.progress("hot key at its limit: admitted requests");
    let limit = 100_000u32;
    let admitted = |pre: bool| -> Option<(Run, f64)> {
        // Two "instances" (limiters with their own leases), 25 callers
        // each, on a fresh prefix so the bucket starts full.
        let prefix = format!("adm{}0", u8::from(pre));
        let quota = Quota::per_second(nz(limit));
        let instance = |_| {
            bench
                .connect(
                    Algorithm::Gcra,
                    quota,
                    &prefix,
                    false,
                    pre.then_some(leases),
                )
                .ok()
        };
        let limiters = (0..2).map(instance).collect::<Option<Vec<_>>>()?;
        let r = bench.load(&limiters, 50, bench.dur, true);
        // burst + rate × elapsed
        let ideal = f64::from(limit) * (1.0 + r.secs);
        Some((r, ideal))
    };
    let (admitted_plain, admitted_pre) = (admitted(false), admitted(true));
    let mut t = Table::new("hot key, 50 callers | decisions/s | p50 µs | p99 µs | from leases");
    for (name, r) in [
        ("plain (GCRA)", &plain),
        ("pre-aggregated (lease 1024, max age 50 ms)", &pre),
    ] {
        match r {
            Ok(r) => {
                let leased = 100.0 * r.leased as f64 / r.decisions.max(1) as f64;
                let (rate, p50, p99) = (kps(r.rate()), r.p50_us, r.p99_us);
                t.row(format!(
                    "{name} | {rate} | {p50:.1} | {p99:.0} | {leased:.1}%"
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
    for (name, (r, ideal)) in [
        ("plain", &admitted_plain),
        ("pre-aggregated", &admitted_pre),
    ]
    .into_iter()
    .filter_map(|(n, r)| Some((n, r.as_ref()?)))
    {
        let extra = r.allowed as f64 - ideal;
        let (rate, allowed, allows) = (
            kps(r.rate()),
            thousands(r.allowed),
            thousands(*ideal as u64),
        );
        t.row(format!(
            "{name} | {rate} | {allowed} | {allows} | {extra:+.0} ({:+.2}%)",
            100.0 * extra / ideal
        ));
    }
    report.table(&t);
    Hot {
        plain,
        pre,
        admitted_pre,
        lease: leases.lease,
    }
}
