//! The concurrency primitives weir-limits uses, in one place so that the loom
//! models (`cargo xtask loom`, built with `--cfg loom`) can swap in loom's
//! checked versions without touching the data structures. The backoff and
//! the per-thread tables are weir-primitives', which follow `--cfg loom`
//! themselves.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicIsize, AtomicU64, AtomicUsize, Ordering, fence};

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicIsize, AtomicU64, AtomicUsize, Ordering, fence};

pub(crate) use weir_primitives::local::ThreadLocal;
pub(crate) use weir_primitives::sync::{Backoff, Mutex, SpinLock};

#[cfg(not(loom))]
pub(crate) use parking_lot::RwLock;

/// parking_lot's `RwLock` surface over loom's, so the models can schedule
/// threads around the lock instead of blocking the one OS thread loom runs
/// them on.
#[cfg(loom)]
#[derive(Debug)]
pub(crate) struct RwLock<T>(loom::sync::RwLock<T>);

#[cfg(loom)]
impl<T> RwLock<T> {
    pub(crate) fn new(value: T) -> Self {
        Self(loom::sync::RwLock::new(value))
    }

    pub(crate) fn read(&self) -> loom::sync::RwLockReadGuard<'_, T> {
        // Like parking_lot, no poisoning: a panicking model fails anyway.
        self.0.read().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn write(&self) -> loom::sync::RwLockWriteGuard<'_, T> {
        self.0.write().unwrap_or_else(|e| e.into_inner())
    }
}
