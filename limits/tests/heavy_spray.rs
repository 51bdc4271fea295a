//! `HeavyHitters` under key spraying: millions of keys seen once each must
//! not grow its memory past its bound, nor push out an honest heavy key.
//!
//! Memory is measured by a counting global allocator (this test binary
//! only): live heap bytes, and their peak, over the spray.

use std::alloc::{GlobalAlloc, Layout, System};
use std::num::NonZeroU64;
use std::sync::atomic::{AtomicUsize, Ordering};
use weir_limits::HeavyHitters;

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(bytes: usize) {
    let live = LIVE.fetch_add(bytes, Ordering::Relaxed) + bytes;
    PEAK.fetch_max(live, Ordering::Relaxed);
}

// SAFETY: every call is forwarded to the system allocator unchanged; the
// counters only observe sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        grew(layout.size());
        // SAFETY: the caller's contract is passed on as is.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        grew(new_size);
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const SPRAYED: u64 = 2_000_000;
/// One event in a hundred is the honest heavy key's.
const HONEST_EVERY: u64 = 100;
const HONEST: u64 = u64::MAX;

#[test]
fn a_spray_of_two_million_one_shot_keys_stays_within_capacity() {
    let heavy = HeavyHitters::new(NonZeroU64::new(100).unwrap());
    let before = LIVE.load(Ordering::Relaxed);
    let built = heavy.memory_bytes();
    PEAK.store(before, Ordering::Relaxed);
    let mut honest = 0;
    for key in 0..SPRAYED {
        heavy.record(&key, 1);
        if key % HONEST_EVERY == 0 {
            heavy.record(&HONEST, 1);
            honest += 1;
        }
    }
    let grown = LIVE.load(Ordering::Relaxed) - before;
    let peak = PEAK.load(Ordering::Relaxed) - before;
    println!(
        "{SPRAYED} one-shot keys: {} admitted, memory_bytes {built} -> {}, heap +{grown} B (peak +{peak} B)",
        heavy.admitted(),
        heavy.memory_bytes(),
    );
    let capacity = HeavyHitters::<u64>::DEFAULT_CAPACITY.get();
    assert!(
        heavy.admitted() <= capacity,
        "{} keys admitted",
        heavy.admitted()
    );
    assert!(peak < 1 << 20, "the heap grew by {peak} bytes at its peak");
    // The honest key (1% of the traffic) is still counted, never below
    // its truth.
    let count = heavy
        .get(&HONEST)
        .expect("the honest heavy key was pushed out");
    assert!(count.total() >= honest, "{count:?} < {honest}");
}
