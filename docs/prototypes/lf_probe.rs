//! Not built: the lock-free keyed table prototype that `docs/algorithms.md`
//! ("A lock-free keyed table that keeps its keys") measured, kept so the
//! figures there can be reproduced. Copy it to `bench-suite/examples/` and
//! run `cargo run --release -p weir-bench-suite --example lf_probe --
//! <zipf|uniform|flood> <threads> <repetitions>`. It frees a replaced table
//! two rebuilds later, which is unsafe in general: a measurement, not a design.
//!
//! A lock-free keyed GCRA table (keys kept, lock-free probe and insert,
//! rebuild under a shard lock) against governor and today's `KeyedLimiter`,
//! in one binary, interleaved.
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, Ordering::*};
use std::sync::Mutex;
use weir_bench_suite::workload::{self, run_streams};
use weir_rate::clock::{Clock, MonotonicClock};
use weir_rate::{Gcra, KeyedLimiter, Quota};

const T: u64 = 1_000_000;
const TAU: u64 = 999 * T;
const EMPTY: u64 = 0;
const RESERVED: u64 = 1;
const FROZEN: u64 = 2;
const TOP: u64 = 1 << 63;
const MOVED: u64 = u64::MAX;
const MAXP: usize = 16;

struct Slot { tag: AtomicU64, key: AtomicU32, word: AtomicU64 }
struct Table { slots: Box<[Slot]>, mask: usize }
impl Table {
    fn new(n: usize) -> *mut Table {
        let slots = (0..n).map(|_| Slot { tag: AtomicU64::new(0), key: AtomicU32::new(0), word: AtomicU64::new(0) }).collect();
        Box::into_raw(Box::new(Table { slots, mask: n - 1 }))
    }
}
#[repr(align(128))]
struct Shard { table: AtomicPtr<Table>, lock: Mutex<Vec<usize>> }
struct Lf { shards: Box<[Shard]>, hasher: ahash::RandomState, clock: MonotonicClock }

enum Step { Done(bool), Retry }

impl Lf {
    fn new() -> Self {
        let shards = (0..64).map(|_| Shard { table: AtomicPtr::new(Table::new(64)), lock: Mutex::new(Vec::new()) }).collect();
        Lf { shards, hasher: ahash::RandomState::new(), clock: MonotonicClock::new() }
    }
    #[inline]
    fn allows(&self, key: u32) -> bool {
        let h = self.hasher.hash_one(key);
        let now = self.clock.now_nanos();
        let shard = &self.shards[(h >> 32) as usize & 63];
        let tag = h | TOP;
        loop {
            let t = unsafe { &*shard.table.load(Acquire) };
            match Self::in_table(t, h, tag, key, now) {
                Step::Done(b) => return b,
                Step::Retry => self.rebuild(shard, t, now),
            }
        }
    }
    #[inline]
    fn in_table(t: &Table, h: u64, tag: u64, key: u32, now: u64) -> Step {
        let mut i = h as usize & t.mask;
        for _ in 0..MAXP {
            let s = &t.slots[i];
            let mut seen = s.tag.load(Acquire);
            if seen == EMPTY {
                match s.tag.compare_exchange(EMPTY, RESERVED, Acquire, Acquire) {
                    Ok(_) => {
                        s.key.store(key, Relaxed);
                        s.word.store(now + T, Relaxed);
                        s.tag.store(tag, Release);
                        return Step::Done(true);
                    }
                    Err(x) => seen = x,
                }
            }
            while seen == RESERVED { std::hint::spin_loop(); seen = s.tag.load(Acquire); }
            if seen == FROZEN { return Step::Retry; }
            if seen == tag && s.key.load(Relaxed) == key {
                let mut tat = s.word.load(Acquire);
                loop {
                    if tat == MOVED { return Step::Retry; }
                    if tat.saturating_sub(TAU) > now { return Step::Done(false); }
                    let new = tat.max(now) + T;
                    match s.word.compare_exchange_weak(tat, new, AcqRel, Acquire) {
                        Ok(_) => return Step::Done(true),
                        Err(x) => tat = x,
                    }
                }
            }
            i = (i + 1) & t.mask;
        }
        Step::Retry
    }
    #[cold]
    fn rebuild(&self, shard: &Shard, t: &Table, now: u64) {
        let mut retired = shard.lock.lock().unwrap();
        if !std::ptr::eq(shard.table.load(Acquire), t) { return; }
        let mut live = Vec::new(); let mut removed = 0usize;
        for s in t.slots.iter() {
            let mut tag = s.tag.load(Acquire);
            loop {
                if tag == EMPTY {
                    match s.tag.compare_exchange(EMPTY, FROZEN, AcqRel, Acquire) { Ok(_) => break, Err(x) => tag = x }
                } else if tag == RESERVED { std::hint::spin_loop(); tag = s.tag.load(Acquire); }
                else { break }
            }
            if tag >= TOP {
                let w = s.word.swap(MOVED, AcqRel);
                if w > now { live.push((tag, s.key.load(Relaxed), w)); } else { removed += 1; }
            }
        }
        let mut n = (live.len() * 4).next_power_of_two().max(256);
        if removed == 0 && n <= t.slots.len() { n = t.slots.len() * 2; }
        let nt = Table::new(n);
        let ntr = unsafe { &*nt };
        for (tag, key, w) in live {
            let mut i = tag as usize & ntr.mask;
            while ntr.slots[i].tag.load(Relaxed) != EMPTY { i = (i + 1) & ntr.mask; }
            let s = &ntr.slots[i];
            s.key.store(key, Relaxed); s.word.store(w, Relaxed); s.tag.store(tag, Relaxed);
        }
        shard.table.store(nt, Release);
        // prototype only: frees a table two rebuilds later (not safe in general)
        retired.push(t as *const Table as usize);
        if retired.len() > 2 { let old = retired.remove(0); drop(unsafe { Box::from_raw(old as *mut Table) }); }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let dist = args.get(1).map(String::as_str).unwrap_or("zipf");
    let threads: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(1);
    let reps: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(3);
    let total = 20_000_000usize;
    let streams: Vec<Vec<u32>> = (0..threads)
        .map(|i| match dist {
            "zipf" => workload::zipf(total / threads, 1.1, 7100 + i as u64),
            "flood" => vec![42u32; total / threads],
            _ => workload::uniform(total / threads, 7000 + i as u64),
        })
        .collect();
    let per = (total / threads) as f64;
    let quota = Quota::per_second(NonZeroU32::new(1000).unwrap());
    for _ in 0..reps {
        let g = governor::RateLimiter::keyed(governor::Quota::per_second(NonZeroU32::new(1000).unwrap()));
        let (t, ga) = run_streams(&streams, |k| g.check_key(&k).is_ok());
        let gns = t.as_secs_f64() * 1e9 / per;
        drop(g);
        let w: KeyedLimiter<u32, Gcra> = KeyedLimiter::new(Gcra::new(quota));
        let (t, wa) = run_streams(&streams, |k| w.allows(&k));
        let wns = t.as_secs_f64() * 1e9 / per;
        drop(w);
        let lf = Lf::new();
        let (t, la) = run_streams(&streams, |k| lf.allows(k));
        let lns = t.as_secs_f64() * 1e9 / per;
        println!("{dist} {threads}t: governor {gns:.1} ({ga})  weir {wns:.1} ({:.2}x, {wa})  lockfree {lns:.1} ({:.2}x, {la})", gns / wns, gns / lns);
    }
}
