//! The concurrency primitives the shared-timer protocol uses, in one place so
//! that the loom models (`cargo xtask loom`, built with `--cfg loom`) can swap
//! in loom's checked versions without touching the protocol itself.
//!
//! [`Lock`] is a test-and-test-and-set spin lock in normal builds. Every
//! critical section it guards is a handful of instructions (push or take one
//! waker, flip a flag), and the owning worker is almost always the only thread
//! that touches it, so one uncontended compare-exchange to lock and a plain
//! release store to unlock beat a parking mutex, whose unlock is a second
//! read-modify-write. Under loom it is loom's `Mutex`. [`Mutex`] (a
//! thread's timer table, held for a whole sweep of it) is parking_lot's,
//! and loom's under loom.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicPtr, AtomicU8, AtomicU64, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU8, AtomicU64, Ordering};

#[cfg(not(loom))]
pub(crate) use parking_lot::Mutex;

#[cfg(not(loom))]
mod spin {
    use std::cell::UnsafeCell;
    use std::marker::PhantomData;
    use std::ops::{Deref, DerefMut};
    use std::sync::atomic::{AtomicBool, Ordering};

    /// A spin lock for very short critical sections.
    #[derive(Debug, Default)]
    pub(crate) struct Lock<T> {
        locked: AtomicBool,
        value: UnsafeCell<T>,
    }

    // SAFETY: the value is only reached through a `LockGuard`, and at most one
    // guard exists at a time (the `locked` flag is taken with acquire ordering
    // and released with release ordering), so sharing the lock shares `T`
    // between threads one at a time, which needs `T: Send` only.
    unsafe impl<T: Send> Sync for Lock<T> {}
    // SAFETY: moving the lock moves the `T` it owns.
    unsafe impl<T: Send> Send for Lock<T> {}

    impl<T> Lock<T> {
        pub(crate) fn new(value: T) -> Self {
            Self {
                locked: AtomicBool::new(false),
                value: UnsafeCell::new(value),
            }
        }

        #[inline]
        pub(crate) fn lock(&self) -> LockGuard<'_, T> {
            if self
                .locked
                .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
            {
                self.lock_slow();
            }
            LockGuard {
                lock: self,
                _not_auto: PhantomData,
            }
        }

        #[cold]
        fn lock_slow(&self) {
            let mut round = 0u32;
            loop {
                while self.locked.load(Ordering::Relaxed) {
                    if round < 7 {
                        for _ in 0..(1u32 << round) {
                            std::hint::spin_loop();
                        }
                        round += 1;
                    } else {
                        // The holder was preempted: let it run.
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

    /// Proof that the lock is held; unlocks on drop.
    ///
    /// Neither `Send` (unlocking belongs to the locking thread, as with
    /// `std`'s guards) nor automatically `Sync`: sharing `&LockGuard` gives
    /// `&T` to other threads, which needs `T: Sync`, while `&Lock<T>` alone
    /// would make the guard `Sync` whenever `T: Send`.
    pub(crate) struct LockGuard<'a, T> {
        lock: &'a Lock<T>,
        _not_auto: PhantomData<*const ()>,
    }

    // SAFETY: a shared guard only hands out `&T` (`Deref`), so sharing it
    // between threads is sound exactly when `T: Sync`.
    unsafe impl<T: Sync> Sync for LockGuard<'_, T> {}

    impl<T> Deref for LockGuard<'_, T> {
        type Target = T;
        #[inline]
        fn deref(&self) -> &T {
            // SAFETY: the guard exists only while this thread holds the lock.
            unsafe { &*self.lock.value.get() }
        }
    }

    impl<T> DerefMut for LockGuard<'_, T> {
        #[inline]
        fn deref_mut(&mut self) -> &mut T {
            // SAFETY: the guard exists only while this thread holds the lock,
            // and `&mut self` makes this the only reference through it.
            unsafe { &mut *self.lock.value.get() }
        }
    }

    impl<T> Drop for LockGuard<'_, T> {
        #[inline]
        fn drop(&mut self) {
            self.lock.locked.store(false, Ordering::Release);
        }
    }
}

#[cfg(not(loom))]
pub(crate) use spin::Lock;

#[cfg(loom)]
mod checked {
    /// loom's mutex behind the same interface as the spin lock.
    #[derive(Debug)]
    pub(crate) struct Lock<T>(loom::sync::Mutex<T>);

    impl<T> Lock<T> {
        pub(crate) fn new(value: T) -> Self {
            Self(loom::sync::Mutex::new(value))
        }

        pub(crate) fn lock(&self) -> loom::sync::MutexGuard<'_, T> {
            self.0.lock().unwrap()
        }
    }

    /// loom's mutex behind parking_lot's interface.
    #[derive(Debug, Default)]
    pub(crate) struct Mutex<T>(loom::sync::Mutex<T>);

    impl<T> Mutex<T> {
        pub(crate) fn lock(&self) -> loom::sync::MutexGuard<'_, T> {
            self.0.lock().unwrap()
        }

        pub(crate) fn get_mut(&mut self) -> &mut T {
            self.0.get_mut().unwrap()
        }
    }
}

#[cfg(loom)]
pub(crate) use checked::{Lock, Mutex};
