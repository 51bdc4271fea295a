//! The report's pend-once shape ([`weir_bench_suite::timeout::pend_once`])
//! alone, to profile (`perf record`, `perf stat -e task-clock`) when working
//! on weir-timeout's arm-and-cancel path.
//!
//! `cargo run --release -p weir-bench-suite --example pend_once -- [N] [bare|weir|tokio|pingora]`:
//! with a contender, runs only its loop of N (default 20 000 000) once;
//! without, three rounds of bare against weir.

use weir_bench_suite::timeout::{Contender, pend_once, runtime};

fn main() {
    let mut args = std::env::args().skip(1);
    let n: u64 = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(20_000_000);
    let only = args.next().and_then(|a| {
        Contender::ALL
            .into_iter()
            .find(|c| format!("{c:?}").eq_ignore_ascii_case(&a))
    });
    let rt = runtime();
    let ns_per_op = |contender| pend_once(&rt, contender, n).as_nanos() as f64 / n as f64;
    if let Some(contender) = only {
        return println!("{contender:?}: {:.1} ns", ns_per_op(contender));
    }
    for round in 0..3 {
        let (bare, weir) = (ns_per_op(Contender::Bare), ns_per_op(Contender::Weir));
        println!(
            "round {round}: bare {bare:.1} ns, weir {weir:.1} ns, overhead {:.1} ns",
            weir - bare
        );
    }
}
