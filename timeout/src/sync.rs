//! The concurrency primitives the shared-timer protocol uses:
//! weir-primitives', which are loom's under `--cfg loom` (`cargo xtask
//! loom`), so the models check the protocol and its locks together.
//!
//! [`BiasedLock`] (a bucket's state) is weir-primitives' biased lock: the
//! worker thread that owns a bucket is almost always the only one to touch
//! it, and arms and cancels with plain stores; the sweeper, and a thread
//! cancelling a timer that moved to it, revoke the bias once.
//! [`Mutex`] (a thread's timer table, held for a whole sweep of it) is the
//! parking mutex every weir crate shares.

pub(crate) use weir_primitives::biased::{BiasedLock, Revocation};
pub(crate) use weir_primitives::sync::Mutex;
pub(crate) use weir_primitives::sync::atomic::{
    AtomicBool, AtomicPtr, AtomicU8, AtomicU64, Ordering,
};

/// The calling thread's id for a bucket's [`BiasedLock`].
pub(crate) use weir_primitives::biased::thread_id as bias_id;
