//! The concurrency primitives the shared-timer protocol uses, in one place so
//! that the loom models (`cargo xtask loom`, built with `--cfg loom`) can swap
//! in loom's checked versions without touching the protocol itself.
//!
//! [`Lock`] (a bucket's state) is weir-primitives' spin lock, itself built on
//! loom's atomics and cell under loom, so the models check it too. Every
//! critical section it guards is a handful of instructions (push or take one
//! waker, flip a flag), and the owning worker is almost always the only
//! thread that touches it, so one uncontended compare-exchange to lock and a
//! plain release store to unlock beat a parking mutex, whose unlock is a
//! second read-modify-write. [`Mutex`] (a thread's timer table, held for a
//! whole sweep of it) is parking_lot's, and loom's under loom.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicPtr, AtomicU8, AtomicU64, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU8, AtomicU64, Ordering};

pub(crate) use weir_primitives::sync::SpinLock as Lock;

#[cfg(not(loom))]
pub(crate) use parking_lot::Mutex;

#[cfg(loom)]
mod checked {
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
pub(crate) use checked::Mutex;
