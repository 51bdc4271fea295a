//! weir-rate in the report: the Criteo accuracy comparison reproduced and
//! extended to every algorithm, and the keyed-limiter benchmark against
//! `governor` (1 M uniformly drawn keys, one and two threads, memory beside
//! speed).

mod accuracy;
mod benchmark;
mod spray;

pub use benchmark::{
    Contender, GovernorUpkeep, KeyedContender, Lean, SIZED_FOR, WRONG_DENIALS, bench_quota,
    contenders, sized_sketch,
};

use crate::harness::report::Report;
use crate::harness::workload;

/// The whole weir-rate section of the report.
pub fn run(report: &mut Report) {
    accuracy::accuracy(report);
    benchmark::benchmark(report);
    spray::spray(report);
}

/// Scale-independent helper for the criterion bench: a stream of keys.
pub fn keys(len: usize) -> Vec<u32> {
    workload::uniform(len, 7000)
}
