//! Memory under a key spray, counted by the global allocator: a bounded
//! keyed limiter never holds more than its capacity allows, and gives the
//! memory back once the keys are idle.
//!
//! `WEIR_SPRAY_KEYS` sets the number of one-shot keys (default 200 000);
//! run with `--release --nocapture` and 2 000 000 for the report's figures.
#![cfg(not(loom))]

use std::alloc::{GlobalAlloc, Layout, System};
use std::num::{NonZeroU32, NonZeroUsize};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use weir_rate::clock::{ManualClock, Timestamp};
use weir_rate::{Gcra, KeyedLimiter, Quota};

/// Counts live heap bytes and their peak.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(by: usize) {
    let live = LIVE.fetch_add(by, Ordering::Relaxed) + by;
    PEAK.fetch_max(live, Ordering::Relaxed);
}

// SAFETY: every call goes to the system allocator unchanged; the counters
// only observe sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
            grew(new_size);
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Heap bytes held now and at the peak since `reset_peak`, above `base`.
fn held(base: usize) -> (usize, usize) {
    let live = LIVE.load(Ordering::Relaxed);
    let peak = PEAK.load(Ordering::Relaxed);
    (live.saturating_sub(base), peak.saturating_sub(base))
}

fn reset_peak() -> usize {
    let live = LIVE.load(Ordering::Relaxed);
    PEAK.store(live, Ordering::Relaxed);
    live
}

/// One-shot keys on an hourly quota, a microsecond apart (no key turns idle
/// during the spray), with an honest key checked now and then; then two
/// hours pass and idle keys are evicted. Returns (peak, after the spray,
/// after idle) in bytes, and how many of the honest key's checks passed.
fn spray(
    limiter: &KeyedLimiter<u64, Gcra, ManualClock>,
    clock: &ManualClock,
    keys: u64,
) -> (usize, usize, usize, u32) {
    let base = reset_peak();
    let mut honest = 0;
    for key in 1..=keys {
        assert!(limiter.allows(&key), "a one-shot key's only check");
        if key % (keys / 10) == 0 {
            honest += u32::from(limiter.allows(&0));
        }
        clock.advance(Duration::from_micros(1));
    }
    let (after, peak) = held(base);
    clock.advance(Duration::from_secs(2 * 3600));
    limiter.evict_idle();
    let (idle, _) = held(base);
    (peak, after, idle, honest)
}

#[test]
fn a_key_spray_stays_within_the_capacity_bound() {
    let keys: u64 = std::env::var("WEIR_SPRAY_KEYS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200_000);
    let quota = Quota::per_hour(NonZeroU32::new(100).unwrap());
    let clock = ManualClock::new();
    // 64 shards of 224 keys: tables of 256 slots.
    let capacity = NonZeroUsize::new(64 * 224).unwrap();
    let bounded = KeyedLimiter::builder(Gcra::new(quota))
        .clock(clock.clone())
        .max_keys(capacity)
        .build();
    let (peak, after, idle, honest) = spray(&bounded, &clock, keys);
    // A table slot holds a key (8 bytes), a state (8) and a control byte;
    // one shard at a time may rebuild its table, and each keeps a spill
    // sketch of 2 bytes per key of capacity.
    let slots = 64 * 256;
    let bound = slots * 17 + 256 * 17 + 64 * (16 + 2 * 224) + 64 * 1024;
    println!(
        "{keys} one-shot keys, capacity {}: peak {peak} B, after the spray {after} B, after idle {idle} B (bound {bound} B)",
        bounded.max_keys()
    );
    assert!(peak <= bound, "peak {peak} B above the bound {bound} B");
    assert!(idle <= 64 * 1024, "{idle} B still held with no key live");
    assert_eq!(bounded.len(), 0);
    assert_eq!(honest, 10, "the honest key was refused");
    drop(bounded);

    // A replay ahead of a clock left standing: every key also keeps the
    // time it was judged at (its key and 8 bytes), at most capacity of them.
    let base = reset_peak();
    let standing = ManualClock::new();
    let replay = KeyedLimiter::builder(Gcra::new(quota))
        .clock(standing.clone())
        .max_keys(capacity)
        .build();
    for key in 1..=keys.min(50_000) {
        let at = Timestamp::from_nanos(key * 1000);
        assert!(replay.check_n_at(&key, 1, at).unwrap().is_allowed());
    }
    let (_, peak) = held(base);
    let bound = 2 * bound;
    println!("replayed ahead of the clock: peak {peak} B (bound {bound} B)");
    assert!(peak <= bound, "peak {peak} B above the bound {bound} B");
}
