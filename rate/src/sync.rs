//! The concurrency primitives weir-rate uses, in one place so that the loom
//! models (`cargo xtask loom`, built with `--cfg loom`) can swap in loom's
//! checked versions without touching the limiters.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, Ordering, fence};

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU64, Ordering, fence};

// Loom's `Arc` counts its clones in the model, so a clone racing a check of
// `strong_count` is explored too.
#[cfg(loom)]
pub(crate) use loom::sync::Arc;
#[cfg(not(loom))]
pub(crate) use std::sync::Arc;

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

/// A lock for critical sections of a few dozen nanoseconds: waiters spin,
/// then yield (they never park). Releasing it is a plain store, where
/// `parking_lot`'s mutex, which must wake parked waiters, pays a second
/// locked instruction; on the keyed limiter's path that was one of the two
/// atomic read-modify-writes of a check. Under loom its flag and cell are
/// loom's, so the models check the lock itself.
pub(crate) struct SpinLock<T> {
    locked: AtomicBool,
    value: UnsafeCell<T>,
}

#[cfg(not(loom))]
use std::{cell::UnsafeCell, sync::atomic::AtomicBool};

#[cfg(loom)]
use loom::{cell::UnsafeCell, sync::atomic::AtomicBool};

// SAFETY: the lock hands the value to one thread at a time.
unsafe impl<T: Send> Sync for SpinLock<T> {}

impl<T> SpinLock<T> {
    pub(crate) fn new(value: T) -> Self {
        Self {
            locked: AtomicBool::new(false),
            value: UnsafeCell::new(value),
        }
    }

    #[inline]
    pub(crate) fn lock(&self) -> SpinGuard<'_, T> {
        if self
            .locked
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            self.lock_contended();
        }
        SpinGuard {
            lock: self,
            _not_auto: std::marker::PhantomData,
            #[cfg(loom)]
            value: Some(self.value.get_mut()),
        }
    }

    #[cold]
    #[inline(never)]
    fn lock_contended(&self) {
        let mut backoff = weir_limits::sync::Backoff::new();
        loop {
            // Wait on plain loads, so the line stays shared until it frees.
            while self.locked.load(Ordering::Relaxed) {
                backoff.wait();
            }
            if self
                .locked
                .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return;
            }
        }
    }
}

/// Holds a [`SpinLock`]; releases it when dropped.
///
/// Not automatically `Send` or `Sync`: from `&SpinLock<T>` alone it would
/// be `Sync` whenever `T: Send`, and a shared guard hands out `&T`, which
/// other threads may hold only if `T: Sync` (as with `std`'s guards).
pub(crate) struct SpinGuard<'a, T> {
    lock: &'a SpinLock<T>,
    _not_auto: std::marker::PhantomData<*const ()>,
    /// Loom's record of this access, checked against every other one;
    /// ended before the release.
    #[cfg(loom)]
    value: Option<loom::cell::MutPtr<T>>,
}

// SAFETY: a shared guard only hands out `&T`, so sharing it between threads
// is sound exactly when `T: Sync`.
unsafe impl<T: Sync> Sync for SpinGuard<'_, T> {}

impl<T> std::ops::Deref for SpinGuard<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        #[cfg(not(loom))]
        // SAFETY: the guard holds the lock, so no other reference exists.
        return unsafe { &*self.lock.value.get() };
        #[cfg(loom)]
        // SAFETY: as above; loom checks it.
        return unsafe { self.loom_access().deref() };
    }
}

#[cfg(loom)]
impl<T> SpinGuard<'_, T> {
    fn loom_access(&self) -> &loom::cell::MutPtr<T> {
        self.value.as_ref().expect("a live guard holds its access")
    }
}

impl<T> std::ops::DerefMut for SpinGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        #[cfg(not(loom))]
        // SAFETY: the guard holds the lock, so no other reference exists.
        return unsafe { &mut *self.lock.value.get() };
        #[cfg(loom)]
        // SAFETY: as above; loom checks it.
        return unsafe { self.loom_access().deref() };
    }
}

impl<T> Drop for SpinGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        #[cfg(loom)]
        drop(self.value.take());
        self.lock.locked.store(false, Ordering::Release);
    }
}
