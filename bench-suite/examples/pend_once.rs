//! A loop of timeouts around a future that pends once: the shape to profile
//! (`perf record` or `perf stat -e task-clock` this example) when working
//! on weir-timeout's arm-and-cancel path. It runs the report's own
//! pend-once shape ([`weir_bench_suite::timeout::pend_once`]).
//!
//! `cargo run --release -p weir-bench-suite --example pend_once -- [N] [bare|weir|tokio|pingora]`:
//! with a contender, runs only its loop of N (default 20 000 000) once;
//! without, three rounds of bare against weir.

use weir_bench_suite::timeout::{Contender, pend_once, runtime};

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(20_000_000);
    let only = match std::env::args().nth(2).as_deref() {
        Some("bare") => Some(Contender::Bare),
        Some("weir") => Some(Contender::Weir),
        Some("tokio") => Some(Contender::Tokio),
        Some("pingora") => Some(Contender::Pingora),
        _ => None,
    };
    let rt = runtime();
    let ns_per_op = |contender| pend_once(&rt, contender, n).as_nanos() as f64 / n as f64;
    if let Some(contender) = only {
        println!("{contender:?}: {:.1} ns", ns_per_op(contender));
        return;
    }
    for round in 0..3 {
        let bare = ns_per_op(Contender::Bare);
        let weir = ns_per_op(Contender::Weir);
        println!(
            "round {round}: bare {bare:.1} ns, weir {weir:.1} ns, overhead {:.1} ns",
            weir - bare
        );
    }
}
