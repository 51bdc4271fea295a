//! Instructions Redis executes per decision, for each algorithm's script,
//! counted by callgrind: the report's table alone, for working on the
//! scripts (timings on a shared VM cannot show a 5% change; these counts
//! can). Needs `valgrind` and `redis-server`.
//!
//! `cargo run --release -p weir-bench-suite --example redis_instructions`

use std::num::NonZeroU32;
use weir_bench_suite::redis::ALGORITHMS;
use weir_bench_suite::redis_cost::{instructions, instructions_table};
use weir_rate::Quota;

fn main() {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("no tokio runtime: {e}");
            std::process::exit(1);
        }
    };
    // Roomy enough that every decision is allowed, as in the report.
    let quota = Quota::per_second(NonZeroU32::new(1_000_000).unwrap_or(NonZeroU32::MIN));
    match instructions(&rt, &ALGORITHMS, quota) {
        Ok(rows) => print!("{}", instructions_table(&rows).plain()),
        Err(e) => {
            eprintln!("could not count: {e}");
            std::process::exit(1);
        }
    }
}
