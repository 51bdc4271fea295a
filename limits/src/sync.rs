//! The concurrency primitives weir-limits uses: weir-primitives', which
//! are loom's under `--cfg loom` (`cargo xtask loom`), so the data
//! structures name one set of types and the models check them all.

pub(crate) use weir_primitives::local::ThreadLocal;
pub(crate) use weir_primitives::sync::atomic::{
    AtomicIsize, AtomicU64, AtomicUsize, Ordering, fence,
};
pub(crate) use weir_primitives::sync::{Backoff, Mutex, RwLock, SpinLock};
