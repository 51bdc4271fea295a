//! The concurrency primitives weir-limits uses, in one place so that the loom
//! models (`cargo xtask loom`, built with `--cfg loom`) can swap in loom's
//! checked versions without touching the data structures.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicIsize, AtomicU64, AtomicUsize, Ordering, fence};

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicIsize, AtomicU64, AtomicUsize, Ordering, fence};

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

/// Back off while another thread finishes a short critical step (a window
/// rotation). Under loom this yields so the model checker can schedule the
/// thread we are waiting for.
#[inline]
pub(crate) fn spin_wait(round: &mut u32) {
    #[cfg(loom)]
    {
        let _ = round;
        loom::thread::yield_now();
    }
    #[cfg(not(loom))]
    {
        if *round < 6 {
            for _ in 0..(1u32 << *round) {
                std::hint::spin_loop();
            }
            *round += 1;
        } else {
            std::thread::yield_now();
        }
    }
}
