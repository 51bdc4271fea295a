//! The concurrency primitives weir-rate uses, in one place so that the loom
//! models (`cargo xtask loom`, built with `--cfg loom`) can swap in loom's
//! checked versions without touching the limiters.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, Ordering, fence};

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU64, Ordering, fence};

/// A mutex with parking_lot's guard-returning `lock` (no poisoning), backed
/// by loom's checked mutex under `--cfg loom`.
#[derive(Debug, Default)]
pub(crate) struct Mutex<T>(
    #[cfg(not(loom))] parking_lot::Mutex<T>,
    #[cfg(loom)] loom::sync::Mutex<T>,
);

#[cfg(not(loom))]
impl<T> Mutex<T> {
    pub(crate) fn new(value: T) -> Self {
        Self(parking_lot::Mutex::new(value))
    }

    #[inline]
    pub(crate) fn lock(&self) -> parking_lot::MutexGuard<'_, T> {
        self.0.lock()
    }
}

#[cfg(loom)]
impl<T> Mutex<T> {
    pub(crate) fn new(value: T) -> Self {
        Self(loom::sync::Mutex::new(value))
    }

    pub(crate) fn lock(&self) -> loom::sync::MutexGuard<'_, T> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
