//! The concurrency primitives the limiters use, in one place so that the
//! loom models (`cargo xtask loom`, built with `--cfg loom`) swap in
//! loom's checked versions without touching the limiters.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU64, Ordering};

// Loom's `Arc` counts its clones in the model, so a clone racing a check of
// `strong_count` is explored too.
#[cfg(loom)]
pub(crate) use loom::sync::Arc;
#[cfg(not(loom))]
pub(crate) use std::sync::Arc;

pub(crate) use weir_primitives::sync::Mutex;
