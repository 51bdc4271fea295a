//! The concurrency primitives weir-hhh uses: weir-primitives', which are
//! loom's under `--cfg loom`, so the models check the classifier with them.

pub(crate) use weir_primitives::sync::atomic::{AtomicU64, Ordering};
