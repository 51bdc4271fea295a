//! Every algorithm's plain path at 1 and 50 callers and batched path at
//! 50, against `redis-benchmark` on the same server, in interleaved rounds.

use super::{ALGORITHMS, Algorithm, Bench, Run, kps};
use crate::contest;
use crate::plot::{BarPlot, BarSeries};
use crate::redis_cost::redis_benchmark;
use crate::report::{Report, Table, thousands};
use weir_rate::Quota;
use weir_rate::redis::RedisLimiter;

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

/// A connected configuration: algorithm, path, batched, callers, limiter.
pub(super) type Config = (Algorithm, &'static str, bool, usize, RedisLimiter);

/// What the paths measured: each configuration and its best round, and
/// `redis-benchmark`'s unpipelined `INCR` at 50 clients.
pub(super) struct Paths {
    pub(super) configs: Vec<Config>,
    pub(super) best: Vec<Run>,
    pub(super) incr50: Option<f64>,
}

impl Paths {
    /// The mean of `f` over the algorithms at 50 callers, plain or batched.
    pub(super) fn at_50(&self, batched: bool, f: fn(&Run) -> f64) -> f64 {
        let runs = self
            .configs
            .iter()
            .zip(&self.best)
            .filter(|(c, _)| c.2 == batched && c.3 == 50);
        let xs: Vec<f64> = runs.map(|(_, r)| f(r)).collect();
        if xs.is_empty() {
            0.0
        } else {
            xs.iter().sum::<f64>() / xs.len() as f64
        }
    }
}

/// redis-benchmark's baselines and every configuration, over `roomy`.
pub(super) fn paths(report: &mut Report, bench: &Bench<'_>, roomy: Quota) -> Paths {
    let info = bench.server.cli(&["INFO", "server"]).unwrap_or_default();
    let version = info
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .unwrap_or("?");
    let (scale, port) = (report.scale(), bench.server.port());

    // 1. redis-benchmark on the same server, measured in every round,
    // interleaved with weir's runs (best of).
    let (n_plain, n_piped) = (
        scale.pick("50000", "1000000"),
        scale.pick("300000", "4000000"),
    );
    let sha = bench
        .server
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

    // 2. Every algorithm, plain at 1 and 50 callers, batched at 50.
    let paths = [
        ("plain", false, 1),
        ("plain", false, 50),
        ("batched", true, 50),
    ];
    let mut configs = Vec::new();
    for alg in ALGORITHMS {
        for (path, batched, callers) in paths {
            match bench.connect(alg, roomy, batched, None) {
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
                Some(bench.load(
                    std::slice::from_ref(limiter),
                    *callers,
                    bench.dur / rounds,
                    false,
                )),
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
    Paths {
        configs,
        best,
        incr50,
    }
}
