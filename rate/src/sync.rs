//! The concurrency primitives weir-rate uses, in one place so that the loom
//! models (`cargo xtask loom`, built with `--cfg loom`) can swap in loom's
//! checked versions without touching the limiters.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, Ordering, fence};

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU64, Ordering, fence};

/// The keyed limiter's shard lock: weir-primitives' spin lock, whose flag
/// and cell are loom's under `--cfg loom`, so the models check the lock
/// itself. The mutex (parking_lot's, or loom's) guards the longer sections.
pub(crate) use weir_primitives::sync::{Mutex, SpinLock};
