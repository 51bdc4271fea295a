//! A counting global allocator: the report's memory figures (peak bytes,
//! allocation count, total bytes allocated), the same three the pingora blog
//! took from dhat.
//!
//! The report binary installs [`CountingAllocator`] as its global allocator;
//! [`measure`] brackets a piece of work and returns what it allocated.
//! Counting is switched on only inside [`measure`]: its shared atomic
//! counters would otherwise bounce between cores on every allocation of
//! every section, and the HTTP and Redis load runs, which allocate per
//! request on two threads at once, would measure the counter as much as
//! the code.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicIsize, AtomicUsize, Ordering};

static COUNTING: AtomicBool = AtomicBool::new(false);
/// Live bytes allocated minus freed since counting started; negative when
/// the work frees memory that was live before it began.
static CURRENT: AtomicIsize = AtomicIsize::new(0);
static PEAK: AtomicIsize = AtomicIsize::new(0);
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
        record_alloc(unsafe { System.alloc(layout) }, layout.size())
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's (valid) layout.
        record_alloc(unsafe { System.alloc_zeroed(layout) }, layout.size())
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller guarantees `ptr` came from this allocator with `layout`.
        unsafe { System.dealloc(ptr, layout) };
        record_free(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller upholds `realloc`'s contract, which we forward.
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            record_free(layout.size());
        }
        record_alloc(new, new_size)
    }
}

fn bytes(size: usize) -> isize {
    isize::try_from(size).unwrap_or(isize::MAX)
}

fn record_free(size: usize) {
    if COUNTING.load(Ordering::Relaxed) {
        CURRENT.fetch_sub(bytes(size), Ordering::Relaxed);
    }
}

/// Counts an allocation of `size` at `ptr` unless it failed; returns `ptr`.
fn record_alloc(ptr: *mut u8, size: usize) -> *mut u8 {
    if !ptr.is_null() && COUNTING.load(Ordering::Relaxed) {
        let now = CURRENT.fetch_add(bytes(size), Ordering::Relaxed) + bytes(size);
        PEAK.fetch_max(now, Ordering::Relaxed);
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        ALLOCATED.fetch_add(size, Ordering::Relaxed);
    }
    ptr
}

/// What a piece of work allocated, dhat-style.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AllocStats {
    /// Highest net growth of the live heap during the work: bytes it
    /// allocated minus bytes it freed, at the worst moment.
    pub peak_bytes: usize,
    /// Number of allocations (and reallocations) made.
    pub allocations: usize,
    /// Bytes requested over all allocations.
    pub total_bytes: usize,
    /// Net growth of the live heap when the work ended: what it still
    /// holds (negative when it freed memory that was live before).
    pub live_bytes: isize,
}

/// Run `work` and report its allocations. Only meaningful in a binary whose
/// global allocator is [`CountingAllocator`]; concurrent allocations by other
/// threads are counted too, and calls must not overlap (the report runs
/// them one at a time).
pub fn measure<R>(work: impl FnOnce() -> R) -> (R, AllocStats) {
    CURRENT.store(0, Ordering::SeqCst);
    PEAK.store(0, Ordering::SeqCst);
    let allocations = ALLOCATIONS.load(Ordering::SeqCst);
    let allocated = ALLOCATED.load(Ordering::SeqCst);
    COUNTING.store(true, Ordering::SeqCst);
    let result = work();
    COUNTING.store(false, Ordering::SeqCst);
    let stats = AllocStats {
        peak_bytes: usize::try_from(PEAK.load(Ordering::SeqCst)).unwrap_or(0),
        allocations: ALLOCATIONS.load(Ordering::SeqCst) - allocations,
        total_bytes: ALLOCATED.load(Ordering::SeqCst) - allocated,
        live_bytes: CURRENT.load(Ordering::SeqCst),
    };
    (result, stats)
}
