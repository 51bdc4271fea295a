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
    let costs = match std::env::args().nth(1).as_deref() {
        None => Costs::One,
        Some("--each-cost") => Costs::Each,
        Some(other) => {
            eprintln!("unknown argument {other:?}: the only option is --each-cost");
            std::process::exit(2);
        }
    };
    match instructions(&rt, &ALGORITHMS, quota, costs) {
        Ok(rows) => print!("{}", instructions_table(&rows).plain()),
        Err(e) => {
            eprintln!("could not count: {e}");
            std::process::exit(1);
        }
    }
}
