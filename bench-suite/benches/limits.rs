//! Criterion micro-benchmarks for weir-limits (filled in with the estimator).
fn main() {}
