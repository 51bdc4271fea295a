//! A lock biased towards one thread: its owner locks and unlocks with plain
//! stores; any other thread first revokes the bias, once, at the price of a
//! process-wide memory barrier, and from then on everyone takes an ordinary
//! spin lock.
//!
//! For state that one thread touches millions of times and others touch
//! rarely: a timer tick's waiters, armed and cancelled by the worker thread
//! that owns the tick, fired once by the sweeper. An uncontended
//! compare-exchange still costs a locked instruction, the dearest step of
//! arming or cancelling a timer; the owner's path here has none.
//!
//! # Why it excludes
//!
//! The owner announces itself (`inside = true`), then reads `owner`; a
//! revoker clears `owner`, then reads `inside`. That is Dekker's handshake,
//! which needs a full barrier between each side's store and load. The owner
//! pays only a compiler barrier; the revoker pays for both with
//! `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)`, which makes every
//! running thread of the process execute a full barrier (and a thread that
//! is not running passed one when it was switched out). Wherever the
//! owner's barrier falls, either the owner reads the cleared `owner` and
//! takes the spin lock instead, or the revoker reads `inside == true` and
//! waits for the owner's release store, which hands it the value.
//!
//! Where `membarrier` is missing (not Linux, an old kernel, a seccomp
//! filter), [`BiasedLock::new`] makes a lock without bias: the spin lock
//! alone. Under `--cfg loom` both barriers are read-modify-writes of one
//! atomic, which loom models exactly and which give the same guarantee.

#[cfg(loom)]
use loom::{
    cell::UnsafeCell,
    sync::atomic::{AtomicBool, AtomicU64, Ordering},
};
#[cfg(not(loom))]
use std::{
    cell::UnsafeCell,
    sync::atomic::{AtomicBool, AtomicU64, Ordering},
};

use crate::sync::{Backoff, SpinGuard, SpinLock};
use std::fmt;
use std::marker::PhantomData;

/// A lock whose owner, a thread named by a caller-chosen non-zero id, takes
/// it without a read-modify-write; see the [module docs](self).
///
/// ```
/// use weir_primitives::biased::BiasedLock;
///
/// let lock = BiasedLock::new(0u32, 7);
/// *lock.lock(7) += 1; // the owner: plain stores
/// *lock.lock(8) += 1; // another thread: revokes the bias, once
/// assert!(!lock.is_biased());
/// assert_eq!(*lock.lock(7), 2);
/// ```
pub struct BiasedLock<T> {
    /// The id allowed the fast path; 0 when there is none (revoked, or
    /// never biased).
    owner: AtomicU64,
    /// The owner is in, or entering, a fast-path critical section.
    inside: AtomicBool,
    /// Taken by everyone but the biased owner.
    slow: SpinLock<()>,
    value: UnsafeCell<T>,
    /// The barriers' stand-in under loom (see the module docs).
    #[cfg(loom)]
    barrier: loom::sync::atomic::AtomicUsize,
}

// SAFETY: the value is reached only through a guard, and at most one guard
// exists at a time (the module docs argue the exclusion; each hand-over is
// a release store read by an acquire load), so sharing the lock hands `T`
// from thread to thread, which needs `T: Send` only.
unsafe impl<T: Send> Sync for BiasedLock<T> {}

impl<T> BiasedLock<T> {
    /// A lock holding `value`, biased towards the thread that calls itself
    /// `owner` (0: no bias) when this process can revoke a bias (see
    /// [`biasing_available`]).
    pub fn new(value: T, owner: u64) -> Self {
        let owner = if owner != 0 && biasing_available() {
            owner
        } else {
            0
        };
        Self {
            owner: AtomicU64::new(owner),
            inside: AtomicBool::new(false),
            slow: SpinLock::new(()),
            value: UnsafeCell::new(value),
            #[cfg(loom)]
            barrier: loom::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// Whether the owner still has its fast path.
    pub fn is_biased(&self) -> bool {
        self.owner.load(Ordering::Relaxed) != 0
    }

    /// Take the lock as the thread calling itself `me`: without a
    /// read-modify-write when `me` is the owner and the bias stands;
    /// otherwise the spin lock, after revoking the bias if it stands.
    ///
    /// Two threads must never lock with the same `me`.
    #[inline]
    pub fn lock(&self, me: u64) -> BiasedGuard<'_, T> {
        if me != 0 && self.owner.load(Ordering::Relaxed) == me {
            self.inside.store(true, Ordering::Relaxed);
            self.light_barrier();
            if self.owner.load(Ordering::Relaxed) == me {
                return self.guard(None);
            }
            // Revoked meanwhile: step out, so the revoker can go on.
            self.inside.store(false, Ordering::Release);
        }
        self.lock_slow()
    }

    #[cold]
    #[inline(never)]
    fn lock_slow(&self) -> BiasedGuard<'_, T> {
        let slow = self.slow.lock();
        if self.owner.load(Ordering::Relaxed) != 0 {
            self.owner.store(0, Ordering::Relaxed);
            self.heavy_barrier();
            let mut backoff = Backoff::new();
            // Acquire: the owner's last critical section happens before ours.
            while self.inside.load(Ordering::Acquire) {
                backoff.wait();
            }
        }
        self.guard(Some(slow))
    }

    #[inline(always)]
    fn guard<'a>(&'a self, slow: Option<SpinGuard<'a, ()>>) -> BiasedGuard<'a, T> {
        BiasedGuard {
            lock: self,
            slow,
            _not_auto: PhantomData,
            #[cfg(loom)]
            access: Some(self.value.get_mut()),
        }
    }

    #[inline(always)]
    fn light_barrier(&self) {
        #[cfg(not(loom))]
        std::sync::atomic::compiler_fence(Ordering::SeqCst);
        #[cfg(loom)]
        self.barrier.fetch_add(1, Ordering::AcqRel);
    }

    fn heavy_barrier(&self) {
        #[cfg(not(loom))]
        membarrier::run();
        #[cfg(loom)]
        self.barrier.fetch_add(1, Ordering::AcqRel);
    }
}

/// Whether a bias can be revoked in this process: `membarrier`'s private
/// expedited command is available and this process registered for it
/// (once, on the first call; registration is kept by forked children).
/// Always `true` under loom, whose barriers are modelled.
pub fn biasing_available() -> bool {
    #[cfg(loom)]
    return true;
    #[cfg(not(loom))]
    membarrier::available()
}

#[cfg(not(loom))]
mod membarrier {
    use std::sync::OnceLock;

    #[cfg(target_os = "linux")]
    const PRIVATE_EXPEDITED: libc::c_int = 1 << 3;
    #[cfg(target_os = "linux")]
    const REGISTER_PRIVATE_EXPEDITED: libc::c_int = 1 << 4;

    #[cfg(target_os = "linux")]
    fn call(cmd: libc::c_int) -> bool {
        // SAFETY: `membarrier` takes a command and two integer arguments and
        // touches no memory of ours.
        unsafe { libc::syscall(libc::SYS_membarrier, cmd, 0, 0) == 0 }
    }

    pub(super) fn available() -> bool {
        static REGISTERED: OnceLock<bool> = OnceLock::new();
        #[cfg(target_os = "linux")]
        return *REGISTERED.get_or_init(|| call(REGISTER_PRIVATE_EXPEDITED));
        #[cfg(not(target_os = "linux"))]
        return *REGISTERED.get_or_init(|| false);
    }

    /// A full barrier on every running thread of the process. Only called
    /// for a lock that was biased, so after a successful registration,
    /// which only `exec` undoes (and with it this process's memory).
    pub(super) fn run() {
        #[cfg(target_os = "linux")]
        if !call(PRIVATE_EXPEDITED) {
            // No way left to exclude the owner: stopping is the only safe
            // outcome, and the kernel documents no failure here.
            std::process::abort();
        }
    }
}

/// Does not lock: a `Debug` of a structure must not wait for a holder.
impl<T> fmt::Debug for BiasedLock<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BiasedLock")
            .field("biased", &self.is_biased())
            .finish_non_exhaustive()
    }
}

/// Holds a [`BiasedLock`]; releases it when dropped. Not `Send`: releasing
/// belongs to the locking thread.
pub struct BiasedGuard<'a, T> {
    lock: &'a BiasedLock<T>,
    /// The spin lock's guard, or `None` on the owner's fast path.
    slow: Option<SpinGuard<'a, ()>>,
    _not_auto: PhantomData<*const ()>,
    #[cfg(loom)]
    access: Option<loom::cell::MutPtr<T>>,
}

// SAFETY: a shared guard only hands out `&T`.
unsafe impl<T: Sync> Sync for BiasedGuard<'_, T> {}

impl<T> std::ops::Deref for BiasedGuard<'_, T> {
    type Target = T;

    #[inline]
    fn deref(&self) -> &T {
        #[cfg(not(loom))]
        // SAFETY: the guard holds the lock, so no other reference exists.
        return unsafe { &*self.lock.value.get() };
        #[cfg(loom)]
        // SAFETY: as above; loom checks it.
        return unsafe { self.access.as_ref().expect("live guard").deref() };
    }
}

impl<T> std::ops::DerefMut for BiasedGuard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        #[cfg(not(loom))]
        // SAFETY: the guard holds the lock, and `&mut self` makes this the
        // only reference through it.
        return unsafe { &mut *self.lock.value.get() };
        #[cfg(loom)]
        // SAFETY: as above; loom checks it.
        return unsafe { self.access.as_ref().expect("live guard").deref() };
    }
}

impl<T> Drop for BiasedGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        #[cfg(loom)]
        drop(self.access.take());
        if self.slow.is_none() {
            self.lock.inside.store(false, Ordering::Release);
        }
    }
}

impl<T: fmt::Debug> fmt::Debug for BiasedGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn this_machine_can_revoke_a_bias() {
        // CI and the development machines run Linux ≥ 4.14; elsewhere the
        // lock is a spin lock and the other tests still hold.
        if cfg!(target_os = "linux") {
            assert!(biasing_available());
        }
    }

    #[test]
    fn the_owner_keeps_its_bias_until_another_thread_locks() {
        let lock = BiasedLock::new(0u32, 3);
        assert_eq!(lock.is_biased(), biasing_available());
        for _ in 0..10 {
            *lock.lock(3) += 1;
        }
        assert_eq!(lock.is_biased(), biasing_available());
        *lock.lock(4) += 1;
        assert!(!lock.is_biased());
        *lock.lock(3) += 1;
        assert_eq!(*lock.lock(0), 12);
    }

    #[test]
    fn no_owner_means_no_bias() {
        let lock = BiasedLock::new((), 0);
        assert!(!lock.is_biased());
        drop(lock.lock(0));
    }

    /// The owner on its fast path and other threads revoking meet on one
    /// counter: no increment is lost.
    #[test]
    fn the_owner_and_revokers_exclude_each_other() {
        for _ in 0..20 {
            let lock = Arc::new(BiasedLock::new(0u64, 1));
            let threads: Vec<_> = (1..=3u64)
                .map(|me| {
                    let lock = Arc::clone(&lock);
                    std::thread::spawn(move || {
                        for _ in 0..20_000 {
                            let mut guard = lock.lock(me);
                            let seen = *guard;
                            std::hint::black_box(());
                            *guard = seen + 1;
                        }
                    })
                })
                .collect();
            for t in threads {
                t.join().unwrap();
            }
            assert_eq!(*lock.lock(1), 60_000);
        }
    }
}
