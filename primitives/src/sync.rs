//! Waiting for another thread: a spin lock for critical sections of a few
//! instructions, the backoff every weir crate waits with, a parking
//! [`Mutex`] for longer ones and an [`RwLock`] for tables mostly read.
//!
//! All of them are written against loom's types under `--cfg loom` (`cargo
//! xtask loom` builds every crate with it), so the loom models of the
//! crates above check the lock itself, and a wait yields to the model
//! checker. [`atomic`] and [`Arc`] are the one switch between std's and
//! loom's: each crate's own `sync` module re-exports what it uses from
//! here, so no crate writes `cfg(loom)` for them.

#[cfg(loom)]
use loom::{
    cell::UnsafeCell,
    sync::atomic::{AtomicBool, Ordering},
};
#[cfg(not(loom))]
use std::{
    cell::UnsafeCell,
    sync::atomic::{AtomicBool, Ordering},
};

use std::fmt;
use std::marker::PhantomData;

/// std's atomics, or loom's under `--cfg loom`.
pub mod atomic {
    #[cfg(loom)]
    pub use loom::sync::atomic::{
        AtomicBool, AtomicI64, AtomicIsize, AtomicPtr, AtomicU8, AtomicU32, AtomicU64, AtomicUsize,
        Ordering, fence,
    };
    #[cfg(not(loom))]
    pub use std::sync::atomic::{
        AtomicBool, AtomicI64, AtomicIsize, AtomicPtr, AtomicU8, AtomicU32, AtomicU64, AtomicUsize,
        Ordering, fence,
    };
}

/// std's `Arc`, or loom's under `--cfg loom`, which counts clones in the
/// model so a clone racing a check of `strong_count` is explored too.
#[cfg(loom)]
pub use loom::sync::Arc;
#[cfg(not(loom))]
pub use std::sync::Arc;

/// parking_lot's reader-writer lock (no poisoning), or loom's behind the
/// same surface under `--cfg loom`, so the models schedule threads around
/// the lock instead of blocking the one OS thread loom runs them on.
///
/// ```
/// use weir_primitives::sync::RwLock;
///
/// let table = RwLock::new(vec![1]);
/// table.write().push(2);
/// assert_eq!(table.read().len(), 2);
/// ```
#[derive(Debug, Default)]
pub struct RwLock<T>(
    #[cfg(not(loom))] parking_lot::RwLock<T>,
    #[cfg(loom)] loom::sync::RwLock<T>,
);

#[cfg(not(loom))]
impl<T> RwLock<T> {
    /// A lock holding `value`.
    pub fn new(value: T) -> Self {
        Self(parking_lot::RwLock::new(value))
    }

    /// Shared access: waits while a writer holds the lock.
    #[inline]
    pub fn read(&self) -> parking_lot::RwLockReadGuard<'_, T> {
        self.0.read()
    }

    /// Exclusive access: waits for every reader and writer.
    #[inline]
    pub fn write(&self) -> parking_lot::RwLockWriteGuard<'_, T> {
        self.0.write()
    }
}

#[cfg(loom)]
impl<T> RwLock<T> {
    /// A lock holding `value`.
    pub fn new(value: T) -> Self {
        Self(loom::sync::RwLock::new(value))
    }

    /// Shared access: waits while a writer holds the lock.
    pub fn read(&self) -> loom::sync::RwLockReadGuard<'_, T> {
        self.0
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Exclusive access: waits for every reader and writer.
    pub fn write(&self) -> loom::sync::RwLockWriteGuard<'_, T> {
        self.0
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// A parking mutex with parking_lot's guard-returning `lock` (no
/// poisoning), backed by loom's checked mutex under `--cfg loom`: for
/// critical sections too long to spin through (an algorithm's update, a
/// sweep of a table).
///
/// ```
/// use weir_primitives::sync::Mutex;
///
/// let m = Mutex::new(vec![1]);
/// m.lock().push(2);
/// assert_eq!(*m.lock(), [1, 2]);
/// ```
#[derive(Debug, Default)]
pub struct Mutex<T>(
    #[cfg(not(loom))] parking_lot::Mutex<T>,
    #[cfg(loom)] loom::sync::Mutex<T>,
);

#[cfg(not(loom))]
impl<T> Mutex<T> {
    /// A mutex holding `value`.
    pub fn new(value: T) -> Self {
        Self(parking_lot::Mutex::new(value))
    }

    /// Waits for the lock (parking) and returns its guard.
    #[inline]
    pub fn lock(&self) -> parking_lot::MutexGuard<'_, T> {
        self.0.lock()
    }

    /// The value, through a unique borrow: no locking needed.
    pub fn get_mut(&mut self) -> &mut T {
        self.0.get_mut()
    }
}

#[cfg(loom)]
impl<T> Mutex<T> {
    /// A mutex holding `value`.
    pub fn new(value: T) -> Self {
        Self(loom::sync::Mutex::new(value))
    }

    /// Waits for the lock and returns its guard.
    pub fn lock(&self) -> loom::sync::MutexGuard<'_, T> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The value, through a unique borrow: no locking needed.
    pub fn get_mut(&mut self) -> &mut T {
        self.0
            .get_mut()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// A lock for critical sections of a few dozen nanoseconds: waiters spin,
/// then yield (they never park).
///
/// Locking is one compare-exchange when the lock is free and releasing it a
/// plain store, where a parking mutex, which must wake parked waiters, pays
/// a second locked instruction to release. Under loom its flag and cell are
/// loom's, so the models check the lock itself.
///
/// ```
/// use weir_primitives::sync::SpinLock;
///
/// let lock = SpinLock::new(1);
/// *lock.lock() += 1;
/// assert_eq!(*lock.lock(), 2);
/// ```
pub struct SpinLock<T> {
    locked: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: the value is reached only through a `SpinGuard`, and at most one
// guard exists at a time (the flag is taken with acquire ordering and
// released with release ordering), so sharing the lock hands `T` from one
// thread to the next, which needs `T: Send` only.
unsafe impl<T: Send> Sync for SpinLock<T> {}

impl<T> SpinLock<T> {
    /// An unlocked lock holding `value`.
    pub fn new(value: T) -> Self {
        Self {
            locked: AtomicBool::new(false),
            value: UnsafeCell::new(value),
        }
    }

    /// Take the lock, waiting with a [`Backoff`] while another thread holds it.
    #[inline]
    pub fn lock(&self) -> SpinGuard<'_, T> {
        self.lock_noting_wait().0
    }

    /// [`lock`](Self::lock), also telling whether the lock was held by
    /// another thread when asked for (so callers can see contention).
    ///
    /// ```
    /// use weir_primitives::sync::SpinLock;
    ///
    /// let lock = SpinLock::new(());
    /// let (_guard, waited) = lock.lock_noting_wait();
    /// assert!(!waited);
    /// ```
    #[inline]
    pub fn lock_noting_wait(&self) -> (SpinGuard<'_, T>, bool) {
        // Strong, so that `waited` means the lock was held: a weak one may
        // fail spuriously where compare-and-swap is load-linked.
        let waited = self
            .locked
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err();
        if waited {
            self.lock_contended();
        }
        (self.guard(), waited)
    }

    /// Whether some thread holds the lock now (a snapshot, for assertions).
    ///
    /// ```
    /// use weir_primitives::sync::SpinLock;
    ///
    /// let lock = SpinLock::new(());
    /// let guard = lock.lock();
    /// assert!(lock.is_locked());
    /// drop(guard);
    /// assert!(!lock.is_locked());
    /// ```
    pub fn is_locked(&self) -> bool {
        self.locked.load(Ordering::Relaxed)
    }

    /// The lock if it is free now, without waiting.
    ///
    /// ```
    /// use weir_primitives::sync::SpinLock;
    ///
    /// let lock = SpinLock::new(());
    /// let held = lock.try_lock();
    /// assert!(held.is_some() && lock.try_lock().is_none());
    /// ```
    #[inline]
    pub fn try_lock(&self) -> Option<SpinGuard<'_, T>> {
        self.locked
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
            .then(|| self.guard())
    }

    /// The guard of a lock just taken.
    #[inline(always)]
    fn guard(&self) -> SpinGuard<'_, T> {
        SpinGuard {
            lock: self,
            // SAFETY: the flag was just taken, and is released only after
            // the guard ends this access.
            held: unsafe { Held::new(&self.value) },
            _not_auto: PhantomData,
        }
    }

    #[cold]
    #[inline(never)]
    fn lock_contended(&self) {
        let mut backoff = Backoff::new();
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

impl<T: Default> Default for SpinLock<T> {
    fn default() -> Self {
        Self::new(T::default())
    }
}

/// Does not lock: a `Debug` of a structure must not wait for (or deadlock
/// with) a holder.
impl<T> fmt::Debug for SpinLock<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SpinLock")
            .field("locked", &self.locked.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// Holds a [`SpinLock`]; releases it when dropped.
///
/// Not automatically `Send` or `Sync`: from `&SpinLock<T>` alone it would be
/// `Sync` whenever `T: Send`, and a shared guard hands out `&T`, which other
/// threads may hold only if `T: Sync` (as with `std`'s guards); and releasing
/// belongs to the locking thread.
pub struct SpinGuard<'a, T> {
    lock: &'a SpinLock<T>,
    held: Held<'a, T>,
    _not_auto: PhantomData<*const ()>,
}

// SAFETY: a shared guard only hands out `&T`, so sharing it between threads
// is sound exactly when `T: Sync`.
unsafe impl<T: Sync> Sync for SpinGuard<'_, T> {}

impl<T> std::ops::Deref for SpinGuard<'_, T> {
    type Target = T;

    #[inline]
    fn deref(&self) -> &T {
        self.held.get()
    }
}

impl<T> std::ops::DerefMut for SpinGuard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        self.held.get_mut()
    }
}

impl<T> Drop for SpinGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        self.held.end();
        self.lock.locked.store(false, Ordering::Release);
    }
}

/// A locked value as its guard reaches it: the one place a lock's cell is
/// dereferenced, and under loom, loom's record of the access, checked
/// against every other one and ended ([`end`](Self::end)) before the lock
/// is released.
pub(crate) struct Held<'a, T> {
    #[cfg_attr(loom, allow(dead_code))]
    cell: &'a UnsafeCell<T>,
    #[cfg(loom)]
    access: Option<loom::cell::MutPtr<T>>,
}

impl<'a, T> Held<'a, T> {
    /// # Safety
    ///
    /// The caller holds the lock that guards `cell`, and makes no other
    /// `Held` of it, until this one is ended or dropped.
    #[inline(always)]
    pub(crate) unsafe fn new(cell: &'a UnsafeCell<T>) -> Self {
        Self {
            cell,
            #[cfg(loom)]
            access: Some(cell.get_mut()),
        }
    }

    #[inline(always)]
    pub(crate) fn get(&self) -> &T {
        #[cfg(not(loom))]
        // SAFETY: per `new`, no other reference to the value exists.
        return unsafe { &*self.cell.get() };
        #[cfg(loom)]
        // SAFETY: as above; loom checks it.
        return unsafe { self.live().deref() };
    }

    #[inline(always)]
    pub(crate) fn get_mut(&mut self) -> &mut T {
        #[cfg(not(loom))]
        // SAFETY: per `new`, and `&mut self` makes this the only
        // reference through it.
        return unsafe { &mut *self.cell.get() };
        #[cfg(loom)]
        // SAFETY: as above; loom checks it.
        return unsafe { self.live().deref() };
    }

    /// End the access, before the lock is released.
    #[inline(always)]
    pub(crate) fn end(&mut self) {
        #[cfg(loom)]
        drop(self.access.take());
    }

    #[cfg(loom)]
    fn live(&self) -> &loom::cell::MutPtr<T> {
        self.access.as_ref().expect("a live guard holds its access")
    }
}

impl<T: fmt::Debug> fmt::Debug for SpinGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

/// Waiting for another thread to finish a short step (a window rotation, a
/// flush, a lock held for a few dozen nanoseconds): spin a few growing
/// rounds, then yield the core, in case the other thread was preempted.
/// Under `--cfg loom` every wait yields at once, so the model checker
/// schedules the thread being waited for.
///
/// ```
/// use std::sync::atomic::{AtomicBool, Ordering};
/// use weir_primitives::sync::Backoff;
///
/// let ready = AtomicBool::new(true);
/// let mut backoff = Backoff::new();
/// while !ready.load(Ordering::Acquire) {
///     backoff.wait();
/// }
/// ```
#[derive(Debug, Default)]
pub struct Backoff {
    // Under loom every wait yields; the rounds count nothing.
    #[cfg_attr(loom, allow(dead_code))]
    round: u32,
}

impl Backoff {
    /// Rounds of growing spins (1, 2, 4, ... 32 pauses) before waiting
    /// yields instead.
    #[cfg_attr(loom, allow(dead_code))]
    const SPIN_ROUNDS: u32 = 6;

    /// A fresh wait: the next [`wait`](Self::wait) spins briefly.
    pub fn new() -> Self {
        Self::default()
    }

    /// Wait a little longer than last time.
    #[inline]
    pub fn wait(&mut self) {
        #[cfg(loom)]
        loom::thread::yield_now();
        #[cfg(not(loom))]
        if self.round < Self::SPIN_ROUNDS {
            for _ in 0..(1u32 << self.round) {
                std::hint::spin_loop();
            }
            self.round += 1;
        } else {
            std::thread::yield_now();
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn the_lock_excludes_other_threads() {
        let lock = Arc::new(SpinLock::new(0u64));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let lock = Arc::clone(&lock);
                std::thread::spawn(move || {
                    for _ in 0..10_000 {
                        // A read and a write apart: lost updates without
                        // mutual exclusion.
                        let mut guard = lock.lock();
                        let seen = *guard;
                        std::hint::spin_loop();
                        *guard = seen + 1;
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(*lock.lock(), 40_000);
    }

    #[test]
    fn debug_does_not_wait_for_the_holder() {
        let lock = SpinLock::new(5);
        let guard = lock.lock();
        assert_eq!(format!("{lock:?}"), "SpinLock { locked: true, .. }");
        assert_eq!(format!("{guard:?}"), "5");
    }

    #[test]
    fn backoff_spins_then_yields() {
        let mut backoff = Backoff::new();
        for _ in 0..Backoff::SPIN_ROUNDS + 3 {
            backoff.wait();
        }
        assert_eq!(backoff.round, Backoff::SPIN_ROUNDS);
    }
}
