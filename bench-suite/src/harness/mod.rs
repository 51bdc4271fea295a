//! The harness every measured area shares, so that every figure in the
//! report is made the same way: contenders interleaved over repetitions
//! with the order rotating, threads released together at a barrier,
//! min / median / max ([`contest`], [`spread`]), goals judged alike,
//! allocations counted ([`alloc`]), services interleaved in one load run
//! ([`slices`]), the report and its charts ([`report`], [`plot`]), the machine described ([`machine`]) and the workloads
//! generated once per run ([`workload`]).

pub mod alloc;
pub mod contest;
pub mod machine;
pub mod plot;
pub mod report;
pub mod slices;
pub mod spread;
pub mod workload;
