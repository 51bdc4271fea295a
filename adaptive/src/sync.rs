//! The concurrency primitives the limiters use: weir-primitives', which
//! are loom's under `--cfg loom` (`cargo xtask loom`), so the models check
//! the limiters with them. The `Arc` is loom's there too, so a clone
//! racing a check of `strong_count` is explored.

pub(crate) use weir_primitives::sync::atomic::{AtomicU64, Ordering};
pub(crate) use weir_primitives::sync::{Arc, Mutex};
