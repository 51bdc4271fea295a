//! Per-thread values: [`ThreadLocal`], `thread_local::ThreadLocal` with a
//! small per-thread cache of the values it handed out last, so a thread
//! that keeps using one table finds it with one compare of a thread-local
//! word instead of the crate's lookup (a lazily initialised thread id, a
//! bucket load and a presence check).
//!
//! A thread whose thread-locals are being torn down gets no value
//! ([`ThreadLocal::get_or`] returns `None`): the crate gives its thread id,
//! and with it the slot, to the next new thread once the thread's own
//! thread-locals are dropped, and a destructor that runs later would
//! otherwise keep writing a value a live thread now owns (or, on a cache
//! miss, make the crate touch its dropped id guard, which aborts). A thread
//! whose *first* use of any weir table comes from such a late destructor,
//! after the crate's guard was dropped on behalf of some other user of the
//! crate, still meets that abort: nothing tells it apart from a thread that
//! never had an id.
//!
//! Under `--cfg loom` the type keys values by loom's thread id instead (the
//! crate keys them by OS thread, and loom runs every model thread on one).

#[cfg(not(loom))]
pub use fast::ThreadLocal;
#[cfg(loom)]
pub use model::ThreadLocal;

#[cfg(not(loom))]
mod fast {
    use std::cell::Cell;
    use std::fmt;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// Ids of live and dead `ThreadLocal`s; never reused, so a cache entry
    /// of a dropped one matches nothing. Zero marks an empty entry.
    static NEXT_ID: AtomicU64 = AtomicU64::new(1);

    /// Cache entries per thread, indexed by id: instances used in turn on
    /// one thread (a limiter's tables and a timer manager's) keep their
    /// entries unless their ids collide modulo this.
    const ENTRIES: usize = 4;

    std::thread_local! {
        static LAST: [Cell<(u64, *const ())>; ENTRIES] =
            const { [const { Cell::new((0, std::ptr::null())) }; ENTRIES] };
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
            LAST.with(|last| {
                for entry in last {
                    entry.set((0, std::ptr::null()));
                }
            });
        }
    }

    /// A value per thread, made on the thread's first
    /// [`get_or`](Self::get_or); see the [module docs](super).
    ///
    /// ```
    /// use weir_primitives::local::ThreadLocal;
    ///
    /// let per_thread = ThreadLocal::new();
    /// assert_eq!(per_thread.get_or(|| 7), Some(&7));
    /// assert_eq!(per_thread.get_or(|| 8), Some(&7));
    /// std::thread::scope(|s| {
    ///     s.spawn(|| assert_eq!(per_thread.get_or(|| 9), Some(&9)));
    /// });
    /// let mut all: Vec<i32> = per_thread.iter().copied().collect();
    /// all.sort();
    /// assert_eq!(all, [7, 9]);
    /// ```
    pub struct ThreadLocal<T: Send> {
        values: thread_local::ThreadLocal<OwnLines<T>>,
        id: u64,
    }

    /// A thread's value on cache lines of its own (two, for the adjacent
    /// line the prefetcher pairs with it). `thread_local` keeps the values
    /// of a bucket of thread ids side by side, so without it two threads'
    /// values can share a line, and a value written on every use (a
    /// `RefCell`'s borrow count, a counter) moves that line between their
    /// cores on every use, by where the allocator happened to put the bucket.
    /// The price is memory: see [`ThreadLocal::BYTES_PER_THREAD`].
    #[repr(align(128))]
    struct OwnLines<T>(T);

    impl<T: Send> ThreadLocal<T> {
        /// What one thread's value occupies in the table, beyond what it
        /// owns on the heap: the value padded to whole 128-byte blocks and
        /// `thread_local`'s flag beside it, padded alike (256 bytes for a
        /// value of up to 128). Tables are allocated a bucket of thread ids
        /// at a time, so a thread with the n-th id may allocate room for
        /// about n values at once.
        pub const BYTES_PER_THREAD: usize =
            std::mem::align_of::<OwnLines<T>>() + std::mem::size_of::<OwnLines<T>>();

        /// No value for any thread yet.
        pub fn new() -> Self {
            Self {
                values: thread_local::ThreadLocal::new(),
                id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            }
        }

        /// The calling thread's value, if it made one; `None` once the
        /// thread's thread-locals are being torn down.
        pub fn get(&self) -> Option<&T> {
            if EXITING.get() {
                return None;
            }
            self.values.get().map(|v| &v.0)
        }

        /// The calling thread's value, made by `create` on its first call;
        /// `None` once the thread's thread-locals are being torn down.
        #[inline]
        pub fn get_or<F: FnOnce() -> T>(&self, create: F) -> Option<&T> {
            let (id, value) = LAST.with(|last| last[self.slot()].get());
            if id == self.id {
                // SAFETY: the entry was stored below by this thread from
                // `self.values.get_or`, whose values live in boxes that stay
                // put until `self` is dropped (nothing here takes `&mut` of
                // `values` while `&self` is borrowed), and `self` is
                // borrowed for the result's lifetime. Ids are unique, so no
                // other instance matches. `Teardown` empties the cache before
                // the thread id (and so the value) can pass to another thread.
                return Some(unsafe { &*value.cast::<T>() });
            }
            self.get_or_slow(create)
        }

        #[inline(always)]
        fn slot(&self) -> usize {
            // The remainder is below `ENTRIES`, so it fits any `usize`.
            (self.id % ENTRIES as u64) as usize
        }

        #[cold]
        #[inline(never)]
        fn get_or_slow<F: FnOnce() -> T>(&self, create: F) -> Option<&T> {
            if EXITING.get() {
                return None;
            }
            // First the crate's lookup, which registers its id guard on the
            // thread's first use; then ours, so that ours is dropped first.
            let value = &self.values.get_or(|| OwnLines(create())).0;
            if TEARDOWN.try_with(|_| ()).is_err() {
                // Dropped already (it set `EXITING`): only reachable from a
                // destructor that runs between ours and the crate's.
                return None;
            }
            let slot = self.slot();
            LAST.with(|last| last[slot].set((self.id, std::ptr::from_ref(value).cast())));
            Some(value)
        }

        /// Every thread's value (the caller synchronises with their writers).
        pub fn iter(&self) -> impl Iterator<Item = &T>
        where
            T: Sync,
        {
            self.values.iter().map(|v| &v.0)
        }

        /// Every thread's value, mutably: no thread can be using them.
        pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut T> {
            self.values.iter_mut().map(|v| &mut v.0)
        }
    }

    impl<T: Send> Default for ThreadLocal<T> {
        fn default() -> Self {
            Self::new()
        }
    }

    impl<T: Send + fmt::Debug> fmt::Debug for ThreadLocal<T> {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.debug_struct("ThreadLocal")
                .field("id", &self.id)
                .finish_non_exhaustive()
        }
    }
}

#[cfg(loom)]
mod model {
    use loom::sync::atomic::{AtomicBool, Ordering};
    use loom::thread::ThreadId;
    use std::sync::OnceLock;

    /// `thread_local::ThreadLocal`'s surface for loom, keyed by loom's
    /// thread id.
    pub struct ThreadLocal<T> {
        // Loom threads never run in parallel, so std's `OnceLock` cannot
        // block here; slots are never freed (models are short-lived).
        slots: [OnceLock<(ThreadId, T)>; loom::MAX_THREADS],
        // Publishes a filled slot to other threads (release/acquire, as
        // thread_local does), so loom checks that readers of a value
        // happen after its creation.
        published: [AtomicBool; loom::MAX_THREADS],
    }

    impl<T> ThreadLocal<T> {
        /// What one thread's value occupies (the model keeps it unpadded).
        pub const BYTES_PER_THREAD: usize = std::mem::size_of::<T>();

        /// No value for any thread yet.
        pub fn new() -> Self {
            Self {
                slots: std::array::from_fn(|_| OnceLock::new()),
                published: std::array::from_fn(|_| AtomicBool::new(false)),
            }
        }

        /// The calling model thread's value, if it made one.
        pub fn get(&self) -> Option<&T> {
            let me = loom::thread::current().id();
            // A thread's own slot needs no acquire: it filled it itself.
            self.slots
                .iter()
                .filter_map(OnceLock::get)
                .find_map(|(id, value)| (*id == me).then_some(value))
        }

        /// The calling model thread's value, made by `create` on its first call.
        pub fn get_or<F: FnOnce() -> T>(&self, create: F) -> Option<&T> {
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

        /// Every model thread's published value.
        pub fn iter(&self) -> impl Iterator<Item = &T> {
            self.slots
                .iter()
                .zip(&self.published)
                .filter(|(_, published)| published.load(Ordering::Acquire))
                .filter_map(|(slot, _)| slot.get().map(|(_, value)| value))
        }
    }

    impl<T> Default for ThreadLocal<T> {
        fn default() -> Self {
            Self::new()
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::ThreadLocal;

    /// Values written on every use must not share a line across threads,
    /// wherever the allocator puts them (see `OwnLines`).
    #[test]
    fn each_thread_value_has_cache_lines_of_its_own() {
        let per_thread = ThreadLocal::new();
        let addresses: Vec<usize> = std::thread::scope(|s| {
            let threads: Vec<_> = (0..4)
                .map(|_| {
                    s.spawn(|| std::ptr::from_ref(per_thread.get_or(|| 0u8).unwrap()) as usize)
                })
                .collect();
            threads.into_iter().map(|t| t.join().unwrap()).collect()
        });
        for a in &addresses {
            assert_eq!(a % 128, 0, "a value at {a:#x} shares its lines");
        }
    }

    #[test]
    fn a_value_of_up_to_a_block_takes_two_blocks() {
        assert_eq!(ThreadLocal::<u8>::BYTES_PER_THREAD, 256);
        assert_eq!(ThreadLocal::<[u8; 128]>::BYTES_PER_THREAD, 256);
        assert_eq!(ThreadLocal::<[u8; 129]>::BYTES_PER_THREAD, 384);
    }

    #[test]
    fn instances_used_in_turn_keep_their_values() {
        let tables: Vec<ThreadLocal<usize>> = (0..9).map(|_| ThreadLocal::new()).collect();
        for round in 0..3 {
            for (i, table) in tables.iter().enumerate() {
                assert_eq!(table.get_or(|| i), Some(&i), "round {round}");
            }
        }
    }

    #[test]
    fn a_dropped_instance_is_never_found_in_the_cache() {
        let first = ThreadLocal::new();
        assert_eq!(first.get_or(|| 1u64), Some(&1));
        drop(first);
        // A new instance may land at the same address; its id differs.
        let second = ThreadLocal::new();
        assert_eq!(second.get_or(|| 2u64), Some(&2));
    }

    #[test]
    fn a_value_made_in_a_late_destructor_is_refused() {
        struct Late(&'static ThreadLocal<u8>);
        impl Drop for Late {
            fn drop(&mut self) {
                // Runs after `Teardown` (registered later, dropped first).
                assert_eq!(self.0.get_or(|| 1), None);
                assert_eq!(self.0.get(), None);
            }
        }
        std::thread_local! {
            static LATE: std::cell::RefCell<Option<Late>> = const { std::cell::RefCell::new(None) };
        }
        let table: &'static ThreadLocal<u8> = Box::leak(Box::new(ThreadLocal::new()));
        std::thread::spawn(move || {
            // Registered before the table's first use, so dropped after
            // the table's teardown marker.
            LATE.with(|l| *l.borrow_mut() = Some(Late(table)));
            assert_eq!(table.get_or(|| 3), Some(&3));
        })
        .join()
        .unwrap();
    }
}
