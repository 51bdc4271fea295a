//! Instructions Redis executes per decision, for each algorithm's script,
//! counted by callgrind: the report's table alone, for working on the
//! scripts (timings on a shared VM cannot show a 5% change; these counts
//! can). Needs `valgrind` and `redis-server`.
//!
//! `cargo run --release -p weir-bench-suite --example redis_instructions [-- --each-cost]`
//!
//! `--each-cost` sends one cost per decision, as unequal costs travel and
//! as every call did before equal costs travelled as one (f54e359 and
//! earlier). To compare an older script with today's, count both:
//!
//! ```sh
//! cargo run --release -p weir-bench-suite --example redis_instructions -- --each-cost
//! git checkout f54e359 -- rate/src/redis/scripts.rs
//! cargo run --release -p weir-bench-suite --example redis_instructions -- --each-cost
//! git checkout HEAD -- rate/src/redis/scripts.rs
//! ```

use std::num::NonZeroU32;
use weir_bench_suite::redis::ALGORITHMS;
use weir_bench_suite::redis::cost::{Costs, instructions, instructions_table};
use weir_rate::Quota;

fn main() {
    let costs = match std::env::args().nth(1).as_deref() {
        None => Costs::One,
        Some("--each-cost") => Costs::Each,
        Some(other) => exit(
            &format!("unknown argument {other:?}: the only option is --each-cost"),
            2,
        ),
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build();
    let rt = rt.unwrap_or_else(|e| exit(&format!("no tokio runtime: {e}"), 1));
    // Roomy enough that every decision is allowed, as in the report.
    let quota = Quota::per_second(NonZeroU32::new(1_000_000).unwrap_or(NonZeroU32::MIN));
    match instructions(&rt, &ALGORITHMS, quota, costs) {
        Ok(rows) => print!("{}", instructions_table(&rows).plain()),
        Err(e) => exit(&format!("could not count: {e}"), 1),
    }
}

fn exit(message: &str, code: i32) -> ! {
    eprintln!("{message}");
    std::process::exit(code)
}
