//! The concurrency primitives weir-limits uses, in one place so that the loom
//! models (`cargo xtask loom`, built with `--cfg loom`) can swap in loom's
//! checked versions without touching the data structures. Only [`Backoff`]
//! is public: the other weir crates wait through it too.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicIsize, AtomicU64, AtomicUsize, Ordering, fence};

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicIsize, AtomicU64, AtomicUsize, Ordering, fence};

#[cfg(not(loom))]
pub(crate) use parking_lot::RwLock;

/// parking_lot's `RwLock` surface over loom's, so the models can schedule
/// threads around the lock instead of blocking the one OS thread loom runs
/// them on.
#[cfg(loom)]
#[derive(Debug)]
pub(crate) struct RwLock<T>(loom::sync::RwLock<T>);

#[cfg(loom)]
impl<T> RwLock<T> {
    pub(crate) fn new(value: T) -> Self {
        Self(loom::sync::RwLock::new(value))
    }

    pub(crate) fn read(&self) -> loom::sync::RwLockReadGuard<'_, T> {
        // Like parking_lot, no poisoning: a panicking model fails anyway.
        self.0.read().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn write(&self) -> loom::sync::RwLockWriteGuard<'_, T> {
        self.0.write().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(not(loom))]
pub(crate) use fast_thread_local::ThreadLocal;

/// `thread_local::ThreadLocal` with a one-entry cache per OS thread of the
/// value it last handed out, so a thread that keeps using one table finds
/// it with a compare of a `#[thread_local]` word, not the crate's lookup
/// (a lazily-initialised thread id, a bucket load and a presence check).
///
/// A thread whose thread-locals are being torn down gets no value
/// ([`get_or`](ThreadLocal::get_or) returns `None`): the crate gives its
/// thread id, and with it the slot, to the next new thread once the
/// thread's own thread-locals are dropped, and a destructor that runs later
/// would otherwise keep writing a value a live thread now owns (or, on a
/// cache miss, make the crate touch its dropped id guard, which aborts).
/// A thread whose *first* use of any weir table comes from such a late
/// destructor, after the crate's guard was dropped on behalf of some other
/// user of the crate, still meets that abort: nothing tells it apart from
/// a thread that never had an id.
#[cfg(not(loom))]
mod fast_thread_local {
    use std::cell::Cell;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// Ids of live and dead `ThreadLocal`s; never reused, so a cache entry
    /// of a dropped one matches nothing. Zero marks an empty cache.
    static NEXT_ID: AtomicU64 = AtomicU64::new(1);

    std::thread_local! {
        static LAST: Cell<(u64, *const ())> = const { Cell::new((0, std::ptr::null())) };
        /// Whether this thread's teardown has reached [`TEARDOWN`]. No
        /// destructor, so it stays readable to the end of the thread.
        static EXITING: Cell<bool> = const { Cell::new(false) };
        static TEARDOWN: Teardown = const { Teardown };
    }

    /// Marks the thread as exiting when its thread-locals are dropped.
    /// Registered after the `thread_local` crate's own guard (see
    /// `get_or_slow`), and thread-local destructors run in reverse order of
    /// registration (std's own list and glibc's alike), so this runs while
    /// the thread id is still the thread's.
    struct Teardown;

    impl Drop for Teardown {
        fn drop(&mut self) {
            EXITING.set(true);
            LAST.set((0, std::ptr::null()));
        }
    }

    pub(crate) struct ThreadLocal<T: Send> {
        values: thread_local::ThreadLocal<T>,
        id: u64,
    }

    impl<T: Send> ThreadLocal<T> {
        pub(crate) fn new() -> Self {
            Self {
                values: thread_local::ThreadLocal::new(),
                id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            }
        }

        pub(crate) fn get(&self) -> Option<&T> {
            if EXITING.get() {
                return None;
            }
            self.values.get()
        }

        /// The calling thread's value, made by `create` on its first call;
        /// `None` once the thread's thread-locals are being torn down.
        #[inline]
        pub(crate) fn get_or<F: FnOnce() -> T>(&self, create: F) -> Option<&T> {
            let (id, value) = LAST.get();
            if id == self.id {
                // SAFETY: the entry was stored below by this thread from
                // `self.values.get_or`, whose values live in boxes that stay
                // put until `self` is dropped (nothing here takes `&mut`
                // of `values`), and `self` is borrowed for the result's
                // lifetime. Ids are unique, so no other instance matches.
                // `Teardown` empties the cache before the thread id (and so
                // the value) can pass to another thread.
                return Some(unsafe { &*value.cast::<T>() });
            }
            self.get_or_slow(create)
        }

        #[cold]
        #[inline(never)]
        fn get_or_slow<F: FnOnce() -> T>(&self, create: F) -> Option<&T> {
            if EXITING.get() {
                return None;
            }
            // First the crate's lookup, which registers its id guard on the
            // thread's first use; then ours, so that ours is dropped first.
            let value = self.values.get_or(create);
            if TEARDOWN.try_with(|_| ()).is_err() {
                // Dropped already (it set `EXITING`): only reachable from a
                // destructor that runs between ours and the crate's.
                return None;
            }
            LAST.set((self.id, std::ptr::from_ref(value).cast()));
            Some(value)
        }

        pub(crate) fn iter(&self) -> thread_local::Iter<'_, T>
        where
            T: Sync,
        {
            self.values.iter()
        }
    }
}

#[cfg(loom)]
pub(crate) use loom_thread_local::ThreadLocal;

/// `thread_local::ThreadLocal`'s surface for loom. That crate keys values
/// by OS thread, and loom runs every model thread on one OS thread, so
/// under loom all model threads would share one value; this one keys them
/// by loom's thread id instead.
#[cfg(loom)]
mod loom_thread_local {
    use loom::sync::atomic::{AtomicBool, Ordering};
    use loom::thread::ThreadId;
    use std::sync::OnceLock;

    pub(crate) struct ThreadLocal<T> {
        // Loom threads never run in parallel, so std's `OnceLock` cannot
        // block here; slots are never freed (models are short-lived).
        slots: [OnceLock<(ThreadId, T)>; loom::MAX_THREADS],
        // Publishes a filled slot to other threads (release/acquire, as
        // thread_local does), so loom checks that readers of a value
        // happen after its creation.
        published: [AtomicBool; loom::MAX_THREADS],
    }

    impl<T> ThreadLocal<T> {
        pub(crate) fn new() -> Self {
            Self {
                slots: std::array::from_fn(|_| OnceLock::new()),
                published: std::array::from_fn(|_| AtomicBool::new(false)),
            }
        }

        pub(crate) fn get(&self) -> Option<&T> {
            let me = loom::thread::current().id();
            // A thread's own slot needs no acquire: it filled it itself.
            self.slots
                .iter()
                .filter_map(OnceLock::get)
                .find_map(|(id, value)| (*id == me).then_some(value))
        }

        pub(crate) fn get_or<F: FnOnce() -> T>(&self, create: F) -> Option<&T> {
            if let Some(value) = self.get() {
                return Some(value);
            }
            let me = loom::thread::current().id();
            let mut fresh = Some((me, create()));
            for (slot, published) in self.slots.iter().zip(&self.published) {
                let (id, value) =
                    slot.get_or_init(|| fresh.take().expect("only an empty slot takes it"));
                if *id == me {
                    published.store(true, Ordering::Release);
                    return Some(value);
                }
            }
            panic!("more threads than loom models");
        }

        pub(crate) fn iter(&self) -> impl Iterator<Item = &T> {
            self.slots
                .iter()
                .zip(&self.published)
                .filter(|(_, published)| published.load(Ordering::Acquire))
                .filter_map(|(slot, _)| slot.get().map(|(_, value)| value))
        }
    }
}

/// Waiting for another thread to finish a short step (a window rotation,
/// a flush, a lock held for a few dozen nanoseconds): spin a few growing
/// rounds, then yield the core, in case the other thread was preempted.
/// Under `--cfg loom` every wait yields at once, so the model checker
/// schedules the thread being waited for. Public so that every weir crate
/// built on weir-limits waits the same way.
///
/// ```
/// use std::sync::atomic::{AtomicBool, Ordering};
/// use weir_limits::sync::Backoff;
///
/// let ready = AtomicBool::new(true);
/// let mut backoff = Backoff::new();
/// while !ready.load(Ordering::Acquire) {
///     backoff.wait();
/// }
/// ```
#[derive(Debug, Default)]
pub struct Backoff {
    // Under loom every wait yields; the rounds count nothing.
    #[cfg_attr(loom, allow(dead_code))]
    round: u32,
}

impl Backoff {
    /// Rounds of growing spins before waiting yields instead.
    #[cfg_attr(loom, allow(dead_code))]
    const SPIN_ROUNDS: u32 = 6;

    /// A fresh wait: the next [`wait`](Self::wait) spins briefly.
    pub fn new() -> Self {
        Self::default()
    }

    /// Wait a little longer than last time.
    #[inline]
    pub fn wait(&mut self) {
        #[cfg(loom)]
        loom::thread::yield_now();
        #[cfg(not(loom))]
        if self.round < Self::SPIN_ROUNDS {
            for _ in 0..(1u32 << self.round) {
                std::hint::spin_loop();
            }
            self.round += 1;
        } else {
            std::thread::yield_now();
        }
    }
}
