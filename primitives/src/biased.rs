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
//! alone. A filter that denies it only after this process registered
//! leaves no safe way to revoke a bias: the revoker stops the process with
//! a message rather than let two threads in. Under `--cfg loom` both barriers are read-modify-writes of one
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

use crate::sync::{Backoff, Held, SpinGuard, SpinLock};
use std::fmt;
use std::marker::PhantomData;

/// A lock whose owner, a thread named by a caller-chosen non-zero id, takes
/// it without a read-modify-write; see the [module docs](self).
///
/// ```
/// use weir_primitives::biased::BiasedLock;
///
/// let lock = BiasedLock::new(0u32, 7);
/// // SAFETY: no other thread calls itself 7 or 8.
/// unsafe {
///     *lock.lock(7) += 1; // the owner: plain stores
///     *lock.lock(8) += 1; // another thread: revokes the bias, once
///     assert!(!lock.is_biased());
///     assert_eq!(*lock.lock(7), 2);
/// }
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

    /// Whether some thread holds the lock now, on either path, or a
    /// revocation holds its spin lock (a snapshot, for assertions).
    ///
    /// ```
    /// use weir_primitives::biased::{BiasedLock, thread_id};
    ///
    /// let lock = BiasedLock::new((), thread_id());
    /// // SAFETY: `thread_id` names this thread alone.
    /// let guard = unsafe { lock.lock(thread_id()) };
    /// assert!(lock.is_held());
    /// drop(guard);
    /// assert!(!lock.is_held());
    /// ```
    pub fn is_held(&self) -> bool {
        self.slow.is_locked() || self.inside.load(Ordering::Relaxed)
    }

    /// Whether the owner still has its fast path.
    pub fn is_biased(&self) -> bool {
        self.owner.load(Ordering::Relaxed) != 0
    }

    /// Take the lock as the thread calling itself `me`: without a
    /// read-modify-write when `me` is the owner and the bias stands;
    /// otherwise the spin lock, after revoking the bias if it stands.
    ///
    /// # Safety
    ///
    /// No two threads lock with the same non-zero `me` while either may
    /// still be holding the guard: the owner's fast path excludes revokers,
    /// not another thread that calls itself the owner. Locking with 0 is
    /// always sound.
    #[inline]
    pub unsafe fn lock(&self, me: u64) -> BiasedGuard<'_, T> {
        let owner = self.owner.load(Ordering::Relaxed);
        if owner == 0 {
            // No bias, or a settled revocation: a revoker holds the spin
            // lock from clearing the owner until the owner has stepped out.
            return self.guard(Some(self.slow.lock()));
        }
        if owner == me {
            self.inside.store(true, Ordering::Relaxed);
            self.light_barrier();
            if self.owner.load(Ordering::Relaxed) == me {
                return self.guard(None);
            }
            // Revoked meanwhile: step out, so the revoker can go on.
            self.inside.store(false, Ordering::Release);
        }
        self.revoke_and_lock()
    }

    #[cold]
    #[inline(never)]
    fn revoke_and_lock(&self) -> BiasedGuard<'_, T> {
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
            // SAFETY: the caller just took the lock, on either path; it is
            // released only after the guard ends this access.
            held: unsafe { Held::new(&self.value) },
            _not_auto: PhantomData,
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

/// The calling thread's id for biased locks: never 0 or reused within the
/// process, so two live threads never share one; 0 (no fast path) where
/// thread-local storage is no longer available.
///
/// ```
/// use weir_primitives::biased::thread_id;
///
/// let mine = thread_id();
/// assert_eq!(thread_id(), mine);
/// assert_ne!(std::thread::spawn(thread_id).join().unwrap(), mine);
/// ```
#[cfg(not(loom))]
#[inline]
pub fn thread_id() -> u64 {
    use std::cell::Cell;
    use std::sync::atomic::AtomicU64 as StdAtomicU64;
    static NEXT: StdAtomicU64 = StdAtomicU64::new(1);
    std::thread_local! {
        // `const` and without `Drop`: readable in other thread-local
        // destructors too.
        static ID: Cell<u64> = const { Cell::new(0) };
    }
    ID.try_with(|id| {
        if id.get() == 0 {
            id.set(NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        }
        id.get()
    })
    .unwrap_or(0)
}

/// Under loom, each model thread's own id.
#[cfg(loom)]
pub fn thread_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    loom::thread_local! {
        static ID: u64 = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    ID.with(|id| *id)
}

/// Revokes the biases of several locks with one barrier: [`add`](Self::add)
/// each, then drop the revocation (one barrier, then a wait for each owner
/// to step out). Until then each added lock's spin lock is held, so no
/// thread takes it on the slow path while its bias is cleared but not yet
/// settled; its owner may still be on its fast path, and is waited for.
/// So the thread that adds a lock must not lock it before the drop, and a
/// revocation must be dropped, not forgotten: either would leave that spin
/// lock held for good.
///
/// ```
/// use weir_primitives::biased::{BiasedLock, Revocation};
///
/// let locks = [BiasedLock::new(1, 7), BiasedLock::new(2, 8)];
/// let mut revocation = Revocation::new();
/// for lock in &locks {
///     revocation.add(lock);
/// }
/// drop(revocation);
/// assert!(locks.iter().all(|l| !l.is_biased()));
/// ```
#[derive(Default)]
pub struct Revocation<'a> {
    cleared: Vec<Cleared<'a>>,
}

/// A lock whose bias was cleared: its spin lock and its owner's flag.
struct Cleared<'a> {
    _slow: SpinGuard<'a, ()>,
    inside: &'a AtomicBool,
    #[cfg(loom)]
    barrier: &'a loom::sync::atomic::AtomicUsize,
}

impl<'a> Revocation<'a> {
    /// Nothing to revoke yet ([`Revocation`] has an example).
    pub fn new() -> Self {
        Self::default()
    }

    /// Clear `lock`'s bias, if it has one and its spin lock is free; that
    /// spin lock is then held until the revocation is dropped. A lock whose
    /// spin lock another thread holds is left alone: that thread is
    /// revoking it, or it was revoked already. Never waits, so it may be
    /// called under other locks.
    pub fn add<T>(&mut self, lock: &'a BiasedLock<T>) {
        if !lock.is_biased() {
            return;
        }
        let Some(slow) = lock.slow.try_lock() else {
            return;
        };
        // Another revoker may have settled it before we got the spin lock.
        if lock.owner.load(Ordering::Relaxed) == 0 {
            return;
        }
        lock.owner.store(0, Ordering::Relaxed);
        self.cleared.push(Cleared {
            _slow: slow,
            inside: &lock.inside,
            #[cfg(loom)]
            barrier: &lock.barrier,
        });
    }
}

impl Drop for Revocation<'_> {
    /// One barrier for every added lock, then each owner's fast path is
    /// waited out and the spin locks are released: the biases are settled.
    fn drop(&mut self) {
        if self.cleared.is_empty() {
            return;
        }
        #[cfg(not(loom))]
        membarrier::run();
        for cleared in self.cleared.drain(..) {
            #[cfg(loom)]
            cleared.barrier.fetch_add(1, Ordering::AcqRel);
            let mut backoff = Backoff::new();
            while cleared.inside.load(Ordering::Acquire) {
                backoff.wait();
            }
        }
    }
}

impl fmt::Debug for Revocation<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Revocation")
            .field("locks", &self.cleared.len())
            .finish()
    }
}

/// Whether a bias can be revoked in this process: `membarrier`'s private
/// expedited command is available and this process registered for it
/// (once, on the first call; registration is kept by forked children).
/// Always `true` under loom, whose barriers are modelled.
///
/// ```
/// use weir_primitives::biased::{BiasedLock, biasing_available};
///
/// // A lock made where no bias can be revoked is an ordinary spin lock.
/// assert_eq!(BiasedLock::new((), 1).is_biased(), biasing_available());
/// ```
pub fn biasing_available() -> bool {
    #[cfg(loom)]
    return true;
    #[cfg(not(loom))]
    membarrier::available()
}

#[cfg(not(loom))]
mod membarrier {
    #[cfg(target_os = "linux")]
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

    #[cfg(target_os = "linux")]
    pub(super) fn available() -> bool {
        static REGISTERED: OnceLock<bool> = OnceLock::new();
        *REGISTERED.get_or_init(|| call(REGISTER_PRIVATE_EXPEDITED))
    }

    #[cfg(not(target_os = "linux"))]
    pub(super) fn available() -> bool {
        false
    }

    /// A full barrier on every running thread of the process. Only called
    /// for a lock that was biased, so after a successful registration,
    /// which only `exec` undoes (and with it this process's memory). The
    /// kernel may still fail it for want of memory (`ENOMEM`, retried), and
    /// a seccomp filter installed after registration may deny it: then no
    /// bias can be revoked safely, and the process stops with a message
    /// rather than let two threads into one lock.
    pub(super) fn run() {
        #[cfg(target_os = "linux")]
        for attempt in 0.. {
            if call(PRIVATE_EXPEDITED) {
                return;
            }
            let error = std::io::Error::last_os_error();
            let transient = matches!(
                error.raw_os_error(),
                Some(libc::ENOMEM | libc::EINTR | libc::EAGAIN)
            );
            if transient && attempt < 1000 {
                std::thread::sleep(std::time::Duration::from_micros(100));
                continue;
            }
            eprintln!(
                "weir: membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) failed after \
                 registering for it ({error}); a lock's bias cannot be revoked safely. \
                 Allow membarrier in the process's seccomp filter."
            );
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
    held: Held<'a, T>,
    _not_auto: PhantomData<*const ()>,
}

// SAFETY: a shared guard only hands out `&T`.
unsafe impl<T: Sync> Sync for BiasedGuard<'_, T> {}

impl<T> std::ops::Deref for BiasedGuard<'_, T> {
    type Target = T;

    #[inline]
    fn deref(&self) -> &T {
        self.held.get()
    }
}

impl<T> std::ops::DerefMut for BiasedGuard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        self.held.get_mut()
    }
}

impl<T> Drop for BiasedGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        self.held.end();
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

    fn lock_as<T>(lock: &BiasedLock<T>, me: u64) -> BiasedGuard<'_, T> {
        // SAFETY: every thread of these tests locks with an id of its own.
        unsafe { lock.lock(me) }
    }

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
            *lock_as(&lock, 3) += 1;
        }
        assert_eq!(lock.is_biased(), biasing_available());
        *lock_as(&lock, 4) += 1;
        assert!(!lock.is_biased());
        *lock_as(&lock, 3) += 1;
        assert_eq!(*lock_as(&lock, 0), 12);
    }

    #[test]
    fn a_revocation_settles_every_lock_it_was_given() {
        let locks: Vec<_> = (1..=3u64)
            .map(|owner| BiasedLock::new(0u32, owner))
            .collect();
        {
            let mut revocation = Revocation::new();
            for lock in &locks {
                revocation.add(lock);
            }
            // Added twice by two revocations: the second finds it settled.
            let mut again = Revocation::new();
            drop(revocation);
            again.add(&locks[0]);
        }
        for (lock, owner) in locks.iter().zip(1..) {
            assert!(!lock.is_biased());
            *lock_as(lock, owner) += 1;
            assert_eq!(*lock_as(lock, 0), 1);
        }
    }

    #[test]
    fn no_owner_means_no_bias() {
        let lock = BiasedLock::new((), 0);
        assert!(!lock.is_biased());
        drop(lock_as(&lock, 0));
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
                            let mut guard = lock_as(&lock, me);
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
            assert_eq!(*lock_as(&lock, 0), 60_000);
        }
    }
}
