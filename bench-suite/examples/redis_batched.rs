//! The report's Redis load shape, one path alone, with what a profile
//! needs beside it: decisions per second, Redis's and this process's CPU
//! per decision, and decisions per script call (from `INFO
//! commandstats`). Run it under `perf record` when working on the batched
//! path.
//!
//! `cargo run --release -p weir-bench-suite --example redis_batched -- [plain|batched] [callers] [secs]`

use std::num::NonZeroU32;
use std::time::Duration;
use weir_bench_suite::redis::load;
use weir_rate::Gcra;
use weir_rate::Quota;
use weir_rate::redis::{Batching, FailurePolicy, RedisLimiter, Target};
use weir_test_support::redis_server::RedisServer;

fn main() {
    let mut args = std::env::args().skip(1);
    let batched = match args.next().as_deref() {
        None | Some("batched") => true,
        Some("plain") => false,
        Some(other) => {
            eprintln!("unknown path {other:?}: plain or batched");
            std::process::exit(2);
        }
    };
    let callers: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(50);
    let secs: f64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(5.0);
    let server = RedisServer::start().expect("a private redis-server");
    let workers: usize = std::env::var("WORKERS")
        .ok()
        .and_then(|w| w.parse().ok())
        .unwrap_or(2usize)
        .max(1);
    if std::env::var_os("PIN").is_some() {
        if let Some(pid) = server.pid() {
            let _ = std::process::Command::new("taskset")
                .args(["-p", "-c", "1", &pid.to_string()])
                .output();
        }
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .on_thread_start(|| {
            if std::env::var_os("PIN").is_some() {
                weir_bench_suite::machine::pin_to_cpu(0);
            }
        })
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let quota = Quota::per_second(NonZeroU32::new(1_000_000).unwrap_or(NonZeroU32::MIN));
    let mut builder = RedisLimiter::builder(Gcra::new(quota))
        .timeout(Duration::from_secs(1))
        .on_failure(FailurePolicy::Closed);
    if batched {
        let mut batching = Batching::default();
        if let Some(n) = std::env::var("INFLIGHT").ok().and_then(|n| n.parse().ok()) {
            batching.max_in_flight = n;
        }
        builder = builder.batching(batching);
    }
    let limiter = rt
        .block_on(builder.connect(Target::server(server.url())))
        .expect("connected");
    for round in 0..3 {
        let _ = server.cli(&["CONFIG", "RESETSTAT"]);
        let run = rt.block_on(load(
            std::slice::from_ref(&limiter),
            callers,
            Duration::from_secs_f64(secs),
            false,
            server.pid(),
        ));
        let stats = server.command_stats("evalsha").unwrap_or_default();
        let (calls, usec) = (stats.calls, stats.usec);
        let n = run.decisions.max(1) as f64;
        println!(
            "round {round}: {:.1} k/s, p50 {:.0} µs, Redis CPU {:.2} µs/decision \
             (in scripts {:.2}), client CPU {:.2} µs/decision, {:.1} decisions per call, failed {}",
            run.rate() / 1000.0,
            run.p50_us,
            run.server_us(),
            usec / n,
            run.client_us(),
            n / calls.max(1) as f64,
            run.failed
        );
    }
}
