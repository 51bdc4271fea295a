//! Loom models of the primitives (`cargo xtask loom`): the spin lock hands
//! its value to one thread at a time, and every access to it happens after
//! the previous holder's (loom's cell checks each access).
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;
use weir_primitives::local::ThreadLocal;
use weir_primitives::sync::SpinLock;

fn lock_as<T>(
    lock: &weir_primitives::biased::BiasedLock<T>,
    me: u64,
) -> weir_primitives::biased::BiasedGuard<'_, T> {
    // SAFETY: every thread of these models locks with an id of its own.
    unsafe { lock.lock(me) }
}

#[test]
fn the_spin_lock_excludes_and_orders_its_holders() {
    loom::model(|| {
        let lock = Arc::new(SpinLock::new(0u32));
        let other = {
            let lock = Arc::clone(&lock);
            thread::spawn(move || {
                let mut guard = lock.lock();
                let seen = *guard;
                *guard = seen + 1;
            })
        };
        {
            let mut guard = lock.lock();
            let seen = *guard;
            *guard = seen + 1;
        }
        other.join().unwrap();
        assert_eq!(*lock.lock(), 2);
    });
}

#[test]
fn each_thread_gets_its_own_value() {
    loom::model(|| {
        let values = Arc::new(ThreadLocal::new());
        let other = {
            let values = Arc::clone(&values);
            thread::spawn(move || *values.get_or(|| 2u8).unwrap())
        };
        assert_eq!(values.get_or(|| 1u8), Some(&1));
        assert_eq!(other.join().unwrap(), 2);
        let mut all: Vec<u8> = values.iter().copied().collect();
        all.sort_unstable();
        assert_eq!(all, [1, 2]);
    });
}

/// The owner on its fast path and a thread that revokes the bias hand the
/// value to each other: each increment happens after the other's (loom's
/// cell checks every access), whichever comes first.
#[test]
fn the_biased_lock_excludes_its_owner_and_a_revoker() {
    use weir_primitives::biased::BiasedLock;
    loom::model(|| {
        let lock = Arc::new(BiasedLock::new(0u32, 1));
        let revoker = {
            let lock = Arc::clone(&lock);
            thread::spawn(move || {
                let mut guard = lock_as(&lock, 2);
                let seen = *guard;
                *guard = seen + 1;
            })
        };
        for _ in 0..2 {
            let mut guard = lock_as(&lock, 1);
            let seen = *guard;
            *guard = seen + 1;
        }
        revoker.join().unwrap();
        assert!(!lock.is_biased());
        assert_eq!(*lock_as(&lock, 1), 3);
    });
}

/// Two locks revoked together, with one barrier, while each owner locks
/// its own: every access is ordered, and both biases end settled.
#[test]
fn a_revocation_excludes_every_owner_it_revokes() {
    use weir_primitives::biased::{BiasedLock, Revocation};
    loom::model(|| {
        let locks = Arc::new([BiasedLock::new(0u32, 1), BiasedLock::new(0u32, 2)]);
        let revoker = {
            let locks = Arc::clone(&locks);
            thread::spawn(move || {
                let mut revocation = Revocation::new();
                for lock in locks.iter() {
                    revocation.add(lock);
                }
                drop(revocation);
                for lock in locks.iter() {
                    let mut guard = lock_as(&lock, 3);
                    let seen = *guard;
                    *guard = seen + 1;
                }
            })
        };
        let mut guard = lock_as(&locks[0], 1);
        let seen = *guard;
        *guard = seen + 1;
        drop(guard);
        revoker.join().unwrap();
        assert!(locks.iter().all(|l| !l.is_biased()));
        assert_eq!(*lock_as(&locks[0], 1), 2);
        assert_eq!(*lock_as(&locks[1], 2), 1);
    });
}
