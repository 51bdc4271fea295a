//! The concurrency primitives weir-hhh uses, in one place so that the loom
//! models (built with `--cfg loom`) can swap in loom's checked versions.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, Ordering};

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU64, Ordering};
