//! The concurrency primitives weir-rate uses: weir-primitives', which are
//! loom's under `--cfg loom` (`cargo xtask loom`), so the models check the
//! limiters and their locks together. The keyed limiter's shard lock is
//! the spin lock; the mutex guards the longer sections.

pub(crate) use weir_primitives::sync::atomic::{AtomicU64, Ordering, fence};
pub(crate) use weir_primitives::sync::{Mutex, SpinLock};
