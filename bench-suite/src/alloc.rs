//! A counting global allocator: the report's memory figures (peak bytes,
//! allocation count, total bytes allocated), the same three the pingora blog
//! took from dhat, at the cost of three relaxed atomic adds per allocation.
//!
//! The report binary installs [`CountingAllocator`] as its global allocator;
//! [`measure`] brackets a piece of work and returns what it allocated.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

static CURRENT: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);
static ALLOCATED: AtomicUsize = AtomicUsize::new(0);

/// The system allocator, counting as it goes.
#[derive(Debug, Default)]
pub struct CountingAllocator;

// SAFETY: every method forwards to `System` with the caller's arguments
// unchanged; the counters have no effect on the memory returned.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's (valid) layout.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            record_alloc(layout.size());
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's (valid) layout.
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() {
            record_alloc(layout.size());
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller guarantees `ptr` came from this allocator with `layout`.
        unsafe { System.dealloc(ptr, layout) };
        CURRENT.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller upholds `realloc`'s contract, which we forward.
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            CURRENT.fetch_sub(layout.size(), Ordering::Relaxed);
            record_alloc(new_size);
        }
        new
    }
}

fn record_alloc(size: usize) {
    let now = CURRENT.fetch_add(size, Ordering::Relaxed) + size;
    PEAK.fetch_max(now, Ordering::Relaxed);
    ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    ALLOCATED.fetch_add(size, Ordering::Relaxed);
}

/// What a piece of work allocated, dhat-style.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AllocStats {
    /// Highest number of live heap bytes during the work, above what was
    /// live when it started.
    pub peak_bytes: usize,
    /// Number of allocations (and reallocations) made.
    pub allocations: usize,
    /// Bytes requested over all allocations.
    pub total_bytes: usize,
}

/// Run `work` and report its allocations. Only meaningful in a binary whose
/// global allocator is [`CountingAllocator`]; concurrent allocations by other
/// threads are counted too.
pub fn measure<R>(work: impl FnOnce() -> R) -> (R, AllocStats) {
    let base = CURRENT.load(Ordering::SeqCst);
    PEAK.store(base, Ordering::SeqCst);
    let allocations = ALLOCATIONS.load(Ordering::SeqCst);
    let allocated = ALLOCATED.load(Ordering::SeqCst);
    let result = work();
    let stats = AllocStats {
        peak_bytes: PEAK.load(Ordering::SeqCst).saturating_sub(base),
        allocations: ALLOCATIONS.load(Ordering::SeqCst) - allocations,
        total_bytes: ALLOCATED.load(Ordering::SeqCst) - allocated,
    };
    (result, stats)
}
