//! weir's benchmark suite: the report harness behind `cargo xtask bench`
//! (binary `weir-report`) and the criterion micro-benchmarks
//! (`cargo bench -p weir-bench-suite`).
//!
//! Every comparison runs weir and its competitors in the same process, on the
//! same pre-generated input, so that the ratios are meaningful on a noisy
//! machine. Each area has one module that both the report and criterion use.

// Not published: its callers are weir's own tests and tools, and a
// failing fixture or harness step names itself in its error.
#![allow(clippy::missing_errors_doc, clippy::missing_panics_doc)]

// How every area measures: contenders interleaved, spreads, goals, the
// report and its charts, memory counting, the machine's description.
pub mod harness;

// The measured areas, one module each, used by the report and criterion.
pub mod adaptive;
pub mod hhh;
#[cfg(feature = "bpf")]
pub mod hhh_loopback;
pub mod http;
pub mod limits;
pub mod memcached;
pub mod pingora;
pub mod rate;
pub mod redis;
pub mod stalls;
pub mod timeout;

/// The README's quick-start snippets, compiled and run as doc tests so the
/// product page cannot drift from the API (this crate depends on every
/// published one).
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
mod readme {}
