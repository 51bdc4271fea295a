//! The concurrency primitives the shared-timer protocol uses, in one place so
//! that the loom models (`cargo xtask loom`, built with `--cfg loom`) can swap
//! in loom's checked versions without touching the protocol itself.
//!
//! [`BiasedLock`] (a bucket's state) is weir-primitives' biased lock: the
//! worker thread that owns a bucket is almost always the only one to touch
//! it, and arms and cancels with plain stores; the sweeper, and a thread
//! cancelling a timer that moved to it, revoke the bias once. It is built on
//! loom's atomics and cell under loom, so the models check it too.
//! [`Mutex`] (a thread's timer table, held for a whole sweep of it) is
//! parking_lot's, and loom's under loom.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicPtr, AtomicU8, AtomicU64, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU8, AtomicU64, Ordering};

pub(crate) use weir_primitives::biased::{BiasedLock, Revocation};

/// The calling thread's id for a bucket's [`BiasedLock`].
pub(crate) use weir_primitives::biased::thread_id as bias_id;

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
