//! One thread's timers: its map from tick to [`Bucket`], the small cache of
//! the buckets it used last, and every operation that moves a hold on a
//! bucket between them, the waiters and the sweeper.
//!
//! The manager (`manager/`) decides *which* tick a timer belongs to and
//! *when* to sweep; this module is the part where threads meet: the owner
//! enters and caches buckets, any thread may drop a registration (and so
//! unlink a bucket), the sweeper fires due buckets. All of it goes through
//! the `sync` shim, so the loom models in `loom_tests.rs` run this very code
//! (through `loom_model::Table`).
//!
//! A bucket is freed by whoever drops its last hold (see `bucket.rs`); a
//! bucket to free is returned to the caller, or freed here only after every
//! lock is released.

use crate::bucket::{Bucket, Release};
use crate::sync::{AtomicBool, AtomicPtr, AtomicU8, AtomicU64, Mutex, Ordering, Revocation};
use std::collections::BTreeMap;
use std::ptr::{self, NonNull};
use std::task::Waker;

/// Durations a thread remembers its current bucket for: a proxy arms a few
/// distinct timeouts (read, write, idle, connect) in turn.
pub(crate) const CACHE_ENTRIES: usize = 4;

/// A bucket pointer in a table. The table owns the `in_table` hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct BucketPtr(NonNull<Bucket>);

// SAFETY: a `Bucket` is `Sync` (all its state is behind a lock or atomic) and
// is freed only by whoever drops its last hold, so the pointer may be sent to
// and used from any thread while a hold is kept.
unsafe impl Send for BucketPtr {}

/// Allocates and frees buckets, counting the live ones (a statistic, not
/// part of the protocol: a std atomic even under loom). Under loom a freed
/// bucket is only marked and kept until the allocator goes, so a double
/// free or a use after free fails the model with a message.
#[derive(Debug, Default)]
pub(crate) struct Buckets {
    live: std::sync::atomic::AtomicI64,
    /// Boxed: a freed bucket must stay where its pointers point.
    #[cfg(loom)]
    #[allow(clippy::vec_box)]
    freed: std::sync::Mutex<Vec<Box<Bucket>>>,
}

#[cfg(loom)]
impl Drop for Buckets {
    fn drop(&mut self) {
        // Dropped here, inside the model's execution, like any loom object.
        self.freed.get_mut().unwrap().clear();
    }
}

impl Buckets {
    /// A new bucket for `tick`, entered in a table and, if `cached`, in its
    /// owner's cache; freed by [`Buckets::free`].
    fn alloc(&self, tick: u64, cached: bool) -> NonNull<Bucket> {
        self.live.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        NonNull::from(Box::leak(Box::new(Bucket::new(tick, cached))))
    }

    /// Free a bucket.
    ///
    /// # Safety
    ///
    /// `bucket` came from [`Buckets::alloc`] and its last hold was just
    /// dropped (a `Release::Free` decision), so nothing can reach it any more.
    pub(crate) unsafe fn free(&self, bucket: NonNull<Bucket>) {
        self.live.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        #[cfg(loom)]
        {
            // SAFETY: a freed bucket's memory is kept until `self` goes.
            let held = unsafe { bucket.as_ref() }.lock_is_held();
            assert!(!held, "a bucket freed while a thread holds its lock");
            // SAFETY: as above.
            let freed = &unsafe { bucket.as_ref() }.freed;
            let twice = freed.swap(true, std::sync::atomic::Ordering::SeqCst);
            assert!(!twice, "a bucket freed twice");
            // SAFETY: per the function's contract, and only once (above).
            self.freed
                .lock()
                .unwrap()
                .push(unsafe { Box::from_raw(bucket.as_ptr()) });
        }
        // SAFETY: per the function's contract.
        #[cfg(not(loom))]
        drop(unsafe { Box::from_raw(bucket.as_ptr()) });
    }

    /// Buckets allocated and not freed.
    pub(crate) fn live(&self) -> i64 {
        self.live.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// "For `duration`, the answer is `bucket` while the counter is in the
/// window": valid while `counter - start < span` (see the clock module).
///
/// Only the owning thread reads or writes an entry; the atomics are a safe
/// `Cell` that is `Sync` (relaxed loads and stores are plain moves). A
/// non-null `bucket` holds one `cached` hold on it.
#[derive(Debug, Default)]
struct CacheEntry {
    bucket: AtomicPtr<Bucket>,
    duration: AtomicU64,
    start: AtomicU64,
    span: AtomicU64,
}

/// One thread's timers.
#[derive(Debug, Default)]
pub(crate) struct ThreadTable {
    map: Mutex<BTreeMap<u64, BucketPtr>>,
    /// The buckets this thread used last, one per recent duration.
    cache: [CacheEntry; CACHE_ENTRIES],
    /// Next cache entry to replace (round robin), owner-only.
    cache_victim: AtomicU8,
    /// Owner-only memo of the tokio paused-clock check: `1 + due tick` of
    /// the last check that found no paused clock, 0 for none. "Paused" is
    /// never remembered: the next timer of this tick may run on another
    /// runtime, one without a time driver, where tokio's timer panics.
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) tokio_check: AtomicU64,
    fired: AtomicU64,
    cancelled: AtomicU64,
    /// Set in a forked child for tables of threads that did not survive.
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) abandoned: AtomicBool,
    /// Serial of the thread that owns the cache and the memo (see the
    /// manager). `thread_local` gives an exited thread's table to the next
    /// thread it starts, and a forked child's thread is a new owner too;
    /// neither may inherit the cache or the memo.
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) owner: AtomicU64,
}

/// Counters of one table, for metrics.
#[cfg_attr(loom, allow(dead_code))]
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct TableStats {
    pub(crate) fired: u64,
    pub(crate) cancelled: u64,
    pub(crate) waiters: u64,
}

impl ThreadTable {
    /// Owner only: the bucket cached for `duration_ns`, if the counter is
    /// still inside its window. The cache's hold keeps it alive, and only
    /// this thread releases that hold.
    #[inline]
    pub(crate) fn cached(&self, duration_ns: u64, counter: u64) -> Option<NonNull<Bucket>> {
        for entry in &self.cache {
            if entry.duration.load(Ordering::Relaxed) != duration_ns {
                continue;
            }
            let start = entry.start.load(Ordering::Relaxed);
            if counter.wrapping_sub(start) < entry.span.load(Ordering::Relaxed) {
                return NonNull::new(entry.bucket.load(Ordering::Relaxed));
            }
            return None;
        }
        None
    }

    /// Owner only: find or create the bucket of `tick` and point the cache
    /// entry of `duration_ns` (or a victim) at it, valid while the counter
    /// is less than `span` past `counter`. Returns the bucket (kept alive by
    /// the cache's hold until this thread moves the entry on), whether it
    /// was created (the caller tells the sweeper), and a bucket whose last
    /// hold the entry just dropped, to free with [`Buckets::free`].
    pub(crate) fn enter(
        &self,
        buckets: &Buckets,
        tick: u64,
        duration_ns: u64,
        counter: u64,
        span: u64,
    ) -> (NonNull<Bucket>, bool, Option<NonNull<Bucket>>) {
        let mut created = false;
        let mut to_free = None;
        let mut map = self.map.lock();
        let bucket = match map.get(&tick) {
            Some(b) => b.0,
            None => {
                created = true;
                let b = buckets.alloc(tick, false);
                map.insert(tick, BucketPtr(b));
                b
            }
        };
        let entry = match self
            .cache
            .iter()
            .find(|e| e.duration.load(Ordering::Relaxed) == duration_ns)
        {
            Some(entry) => entry,
            None => {
                let victim = self.cache_victim.load(Ordering::Relaxed);
                self.cache_victim
                    .store((victim + 1) % CACHE_ENTRIES as u8, Ordering::Relaxed);
                &self.cache[usize::from(victim)]
            }
        };
        let old = entry.bucket.load(Ordering::Relaxed);
        if old != bucket.as_ptr() {
            // SAFETY: the table's hold keeps `bucket` alive while we hold
            // the table lock.
            unsafe { bucket.as_ref() }.set_cached();
            entry.bucket.store(bucket.as_ptr(), Ordering::Relaxed);
            if let Some(old) = NonNull::new(old) {
                // SAFETY: `old` came out of the cache entry, whose hold kept
                // it alive; `map` is this table's lock.
                to_free = unsafe { self.drop_cache_hold(&mut map, old) };
            }
        }
        entry.duration.store(duration_ns, Ordering::Relaxed);
        entry.start.store(counter, Ordering::Relaxed);
        entry.span.store(span, Ordering::Relaxed);
        (bucket, created, to_free)
    }

    /// Owner only: forget every cache entry (the table changed owner).
    /// Returns the buckets whose last hold that was, to free with
    /// [`Buckets::free`].
    pub(crate) fn clear_cache(&self) -> Vec<NonNull<Bucket>> {
        let mut to_free = Vec::new();
        let mut map = self.map.lock();
        for entry in &self.cache {
            let old = entry.bucket.swap(ptr::null_mut(), Ordering::Relaxed);
            entry.duration.store(0, Ordering::Relaxed);
            entry.start.store(0, Ordering::Relaxed);
            entry.span.store(0, Ordering::Relaxed);
            if let Some(old) = NonNull::new(old) {
                // SAFETY: `old` came out of a cache entry, whose hold kept
                // it alive; `map` is this table's lock.
                to_free.extend(unsafe { self.drop_cache_hold(&mut map, old) });
            }
        }
        drop(map);
        self.cache_victim.store(0, Ordering::Relaxed);
        to_free
    }

    /// Give up the hold a cache entry had on `old` (just taken out of the
    /// entry): count the registrations cancelled on it, take it out of
    /// `map` when no timer waits on it any more, and return it when that
    /// was its last hold.
    ///
    /// # Safety
    /// `old` was held by one of this table's cache entries and that hold
    /// has not been given up yet; `map` is this table's locked map.
    unsafe fn drop_cache_hold(
        &self,
        map: &mut BTreeMap<u64, BucketPtr>,
        old: NonNull<Bucket>,
    ) -> Option<NonNull<Bucket>> {
        // SAFETY: the cache's hold kept `old` alive until now.
        let old_ref = unsafe { old.as_ref() };
        let old_tick = old_ref.tick;
        let (cancelled, free) = old_ref.uncache(|| {
            map.remove(&old_tick);
        });
        self.cancelled.fetch_add(cancelled, Ordering::Relaxed);
        free.then_some(old)
    }

    /// The sweeper, before [`fire_due`](Self::fire_due): add every bucket of
    /// a tick up to `due` to `revocation`, so that one barrier revokes the
    /// biases of all the buckets a sweep fires.
    ///
    /// # Safety
    /// `revocation` is dropped before anything else in the sweep: its
    /// buckets stay in their tables (and alive) until then, because
    /// releasing a table's hold needs the bucket's lock, and every thread
    /// that takes this map lock after us sees the bias cleared and waits
    /// for the spin lock `revocation` holds.
    pub(crate) unsafe fn revoke_due<'a>(&self, due: u64, revocation: &mut Revocation<'a>) {
        let map = self.map.lock();
        for (_, b) in map.range(..=due) {
            // SAFETY: per the function's contract.
            unsafe { &*b.0.as_ptr() }.revoke_into(revocation);
        }
    }

    /// The sweeper: fire every bucket of a tick up to `due`, adding their
    /// wakers to `wakers` (to wake once no lock is held: see
    /// [`Bucket::fire`]). Returns the earliest tick left (`u64::MAX`: none).
    pub(crate) fn fire_due(&self, buckets: &Buckets, due: u64, wakers: &mut Vec<Waker>) -> u64 {
        let mut earliest = u64::MAX;
        let mut fired = 0u64;
        let mut cancelled = 0u64;
        let mut to_free = Vec::new();
        let mut map = self.map.lock();
        while let Some(entry) = map.first_entry() {
            if *entry.key() > due {
                earliest = *entry.key();
                break;
            }
            let b = entry.remove();
            // SAFETY: the table's hold, now ours, keeps it alive.
            let (w, c, free) = unsafe { b.0.as_ref() }.fire();
            fired += w.len() as u64;
            cancelled += c;
            wakers.extend(w);
            if free {
                to_free.push(b.0);
            }
        }
        drop(map);
        self.fired.fetch_add(fired, Ordering::Relaxed);
        self.cancelled.fetch_add(cancelled, Ordering::Relaxed);
        for b in to_free {
            // SAFETY: that was the last hold.
            unsafe { buckets.free(b) };
        }
        earliest
    }

    /// Fired, cancelled and armed waiters, for metrics. Takes the table's
    /// lock, not the buckets' (see [`Bucket::counts`]).
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) fn stats(&self) -> TableStats {
        let map = self.map.lock();
        let mut s = TableStats {
            fired: self.fired.load(Ordering::Relaxed),
            cancelled: self.cancelled.load(Ordering::Relaxed),
            waiters: 0,
        };
        for b in map.values() {
            // SAFETY: the table's hold keeps it alive under the lock.
            let (armed, cancelled) = unsafe { b.0.as_ref() }.counts();
            s.waiters += armed;
            s.cancelled += cancelled;
        }
        let mut cached: Vec<*mut Bucket> = self
            .cache
            .iter()
            .map(|e| e.bucket.load(Ordering::Relaxed))
            .filter(|b| !b.is_null() && !map.values().any(|m| m.0.as_ptr() == *b))
            .collect();
        cached.sort_unstable();
        cached.dedup();
        for b in cached {
            // A cached bucket that already fired: only its pending
            // cancellation count matters. The cache's hold keeps it alive;
            // only the owner could release it, and that needs the table lock
            // we hold.
            // SAFETY: as just argued.
            let (_, cancelled) = unsafe { &*b }.counts();
            s.cancelled += cancelled;
        }
        s
    }

    /// The manager is being dropped and no timer is left (each keeps the
    /// manager alive): the table and its cache hold the only references.
    /// Returns the distinct buckets, each to be freed once.
    pub(crate) fn drain(&mut self) -> Vec<NonNull<Bucket>> {
        let mut all: Vec<*mut Bucket> = std::mem::take(self.map.get_mut())
            .into_values()
            .map(|b| b.0.as_ptr())
            .collect();
        all.extend(
            self.cache
                .iter()
                .map(|e| e.bucket.swap(ptr::null_mut(), Ordering::Relaxed)),
        );
        all.sort_unstable();
        all.dedup();
        all.into_iter().filter_map(NonNull::new).collect()
    }
}

/// A live registration: which bucket, which slot, and which table owns it.
#[derive(Debug)]
pub(crate) struct Armed {
    table: NonNull<ThreadTable>,
    bucket: NonNull<Bucket>,
    // `usize`, not `u32`: the whole field is written and read as one word,
    // so moving an `Armed` never stalls on a partial store.
    slot: usize,
}

// SAFETY: the pointers stay valid while the registration (a `live` hold on
// the bucket) exists, the table outlives every registration in it (the
// manager, which owns it, is kept alive by the timer that owns this
// `Armed`), and both types are `Sync`.
unsafe impl Send for Armed {}
// SAFETY: as above; `&Armed` gives no access beyond what `Sync` targets allow.
unsafe impl Sync for Armed {}

impl Armed {
    /// Subscribe `waker` to `bucket` of `table`; `None` if it already fired.
    ///
    /// # Safety
    /// The caller holds a hold on `bucket` (a cache entry's, which only this
    /// thread releases) for the duration of the call, and `table` outlives
    /// the returned registration.
    #[inline]
    pub(crate) unsafe fn register(
        table: &ThreadTable,
        bucket: NonNull<Bucket>,
        waker: &Waker,
    ) -> Option<Armed> {
        // SAFETY: per the function's contract.
        let slot = unsafe { bucket.as_ref() }.register(waker)?;
        Some(Armed {
            table: NonNull::from(table),
            bucket,
            slot,
        })
    }

    /// Re-poll: `true` once the tick has fired.
    #[inline]
    pub(crate) fn poll(&self, waker: &Waker) -> bool {
        // SAFETY: the registration holds a `live` hold on the bucket.
        unsafe { self.bucket.as_ref() }.poll_slot(self.slot, waker)
    }

    /// Whether the tick has fired, without the lock.
    #[cfg_attr(loom, allow(dead_code))]
    #[inline]
    pub(crate) fn fired(&self) -> bool {
        // SAFETY: the registration holds a `live` hold on the bucket.
        unsafe { self.bucket.as_ref() }.is_fired()
    }

    /// Drop the registration (cancelled, or done after its tick fired), on
    /// any thread; `buckets` is the table's allocator. Must not be called
    /// under the table's lock.
    #[inline]
    pub(crate) fn disarm(self, buckets: &Buckets) {
        drop(self.disarm_taking(buckets));
    }

    /// [`disarm`](Self::disarm), handing back the task's waker if the tick
    /// had not fired.
    #[inline]
    pub(crate) fn disarm_taking(self, buckets: &Buckets) -> Option<Waker> {
        // SAFETY: the registration holds a `live` hold on the bucket.
        let bucket = unsafe { self.bucket.as_ref() };
        let (release, waker) = bucket.cancel_taking(self.slot);
        match release {
            Release::Keep => {}
            // SAFETY: that was the last hold.
            Release::Free => unsafe { buckets.free(self.bucket) },
            Release::Unlink => self.unlink(buckets),
        }
        waker
    }

    /// The last registration of a bucket still in its table and not
    /// cached: take it out of the table unless the sweeper got there first.
    #[cold]
    fn unlink(self, buckets: &Buckets) {
        // SAFETY: see `Armed`'s `Send` argument.
        let table = unsafe { self.table.as_ref() };
        // SAFETY: our `live` hold is still counted until `finish_unlink`.
        let bucket = unsafe { self.bucket.as_ref() };
        let mut map = table.map.lock();
        let tick = bucket.tick;
        let (cancelled, free) = bucket.finish_unlink(|| {
            map.remove(&tick);
        });
        drop(map);
        table.cancelled.fetch_add(cancelled, Ordering::Relaxed);
        if free {
            // SAFETY: that was the last hold.
            unsafe { buckets.free(self.bucket) };
        }
    }
}
