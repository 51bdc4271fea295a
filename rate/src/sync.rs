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

/// The keyed limiter's shard lock: a [`Mutex`] for short sections, backed
/// by loom's checked mutex under `--cfg loom`.
///
/// Outside loom it is a test-and-test-and-set spin lock whose unlock is a
/// plain release store: the keyed limiter holds a shard for one map lookup
/// and one decision, and `parking_lot`'s unlock (a second locked
/// compare-and-swap, so it can wake parked threads) was a measurable share
/// of a check. A waiter spins briefly, then yields its core, so a holder
/// preempted on an oversubscribed machine gets to run.
#[cfg(not(loom))]
#[derive(Debug, Default)]
pub(crate) struct ShardLock<T>(spin::SpinMutex<T>);

/// Under loom the shard lock is loom's checked mutex, as [`Mutex`] is.
#[cfg(loom)]
pub(crate) type ShardLock<T> = Mutex<T>;

#[cfg(not(loom))]
impl<T> ShardLock<T> {
    pub(crate) fn new(value: T) -> Self {
        Self(spin::SpinMutex::new(value))
    }

    #[inline]
    pub(crate) fn lock(&self) -> spin::SpinGuard<'_, T> {
        self.0.lock()
    }
}

#[cfg(not(loom))]
mod spin {
    use std::cell::UnsafeCell;
    use std::sync::atomic::{AtomicBool, Ordering};

    #[derive(Default)]
    pub(crate) struct SpinMutex<T> {
        locked: AtomicBool,
        value: UnsafeCell<T>,
    }

    // SAFETY: the value is only reached through a guard, and one guard at a
    // time exists (the `locked` flag's acquire/release hand-over), so the
    // lock gives `&mut T` to one thread at a time, as `std::sync::Mutex`.
    unsafe impl<T: Send> Sync for SpinMutex<T> {}

    impl<T: std::fmt::Debug> std::fmt::Debug for SpinMutex<T> {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("SpinMutex").finish_non_exhaustive()
        }
    }

    impl<T> SpinMutex<T> {
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
            }
        }

        #[cold]
        fn lock_contended(&self) {
            let mut spins = 0u32;
            loop {
                // Read-only while held, so waiters do not bounce the line.
                while self.locked.load(Ordering::Relaxed) {
                    if spins < 64 {
                        std::hint::spin_loop();
                        spins += 1;
                    } else {
                        std::thread::yield_now();
                    }
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

    /// Proof the lock is held; unlocks on drop. Not automatically `Sync`:
    /// a shared guard hands out `&T`, which other threads may hold only if
    /// `T: Sync` (a `&SpinMutex<T>` alone would be `Sync` for any `T: Send`).
    pub(crate) struct SpinGuard<'a, T> {
        lock: &'a SpinMutex<T>,
        _not_auto: std::marker::PhantomData<*const ()>,
    }

    // SAFETY: a shared guard only hands out `&T` (`Deref`), so sharing it
    // between threads is sound exactly when `T: Sync`.
    unsafe impl<T: Sync> Sync for SpinGuard<'_, T> {}

    impl<T> std::ops::Deref for SpinGuard<'_, T> {
        type Target = T;

        #[inline]
        fn deref(&self) -> &T {
            // SAFETY: this guard holds the lock (see `SpinMutex`'s `Sync`).
            unsafe { &*self.lock.value.get() }
        }
    }

    impl<T> std::ops::DerefMut for SpinGuard<'_, T> {
        #[inline]
        fn deref_mut(&mut self) -> &mut T {
            // SAFETY: this guard holds the lock, and `&mut self` makes this
            // the only reference through it.
            unsafe { &mut *self.lock.value.get() }
        }
    }

    impl<T> Drop for SpinGuard<'_, T> {
        #[inline]
        fn drop(&mut self) {
            self.locked_release();
        }
    }

    impl<T> SpinGuard<'_, T> {
        #[inline]
        fn locked_release(&self) {
            self.lock.locked.store(false, Ordering::Release);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::ShardLock;

    #[test]
    fn the_shard_lock_excludes() {
        // Non-atomic read-modify-writes under the lock: any overlap loses
        // an increment. More threads than cores exercise the yield path.
        let lock = ShardLock::new(0u64);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..50_000 {
                        let mut guard = lock.lock();
                        let seen = *guard;
                        std::hint::black_box(&seen);
                        *guard = seen + 1;
                    }
                });
            }
        });
        assert_eq!(*lock.lock(), 200_000);
    }
}
