//! One tick's shared timer.
//!
//! Every waiter whose deadline rounds up to the same tick on the same worker
//! thread subscribes to one [`Bucket`]. Subscribing stores the waiter's waker
//! in a slot of the bucket, so firing the tick is one pass over one vector and
//! cancelling empties one slot (dropping the waker, so a cancelled timer never
//! keeps its task alive): no per-waiter allocation, no per-waiter reference
//! count, no intrusive list to unlink.
//!
//! # Why one lock
//!
//! pingora's shared timer is a flag plus a `Notify`: a waiter checks the flag,
//! then arms the notification, and a tick fired between the two is missed.
//! Here the fired flag and the wakers live under the same lock, so
//! "check fired, store waker" and "set fired, take wakers" are each atomic
//! with respect to the other: either the sweeper sees the waker and wakes it,
//! or the waiter sees the flag and completes. The loom model in
//! `loom_tests.rs` checks exactly that. A separate atomic copy of the flag
//! lets an already-armed waiter that is re-polled see "fired" without taking
//! the lock.
//!
//! The lock is `weir_primitives::biased::BiasedLock`, biased towards the
//! thread that created the bucket (the owner of its table): arming and
//! cancelling on that thread, the common case, take it with plain stores,
//! where an uncontended compare-exchange would be the dearest instruction
//! on the path. The sweeper, and a thread cancelling a timer that a
//! work-stealing runtime moved to it, revoke the bias once per bucket with a
//! process-wide barrier; the counts metrics read are copied out under the
//! lock, so a metrics snapshot revokes nothing.
//!
//! # Lifetime without `Arc`
//!
//! A bucket is kept alive by three kinds of holder, all counted under its
//! lock: its entry in the owning thread's table (`in_table`), the entries of
//! that thread's small cache of "the bucket I used last for this duration"
//! (`cached`), and each live registration (`live`). When all are gone the
//! last one frees it. So a tick whose waiters were all cancelled is freed at
//! once (pingora keeps it until its deadline), memory is bounded by live
//! waiters plus a few cached buckets per thread, and the common path (same
//! bucket as last time, on the owning thread) touches no reference count.

use crate::sync::{AtomicBool, AtomicU64, BiasedLock, Ordering, Revocation, bias_id};
use std::task::Waker;

/// A tick's shared timer: the wakers of everyone waiting for that tick.
#[derive(Debug)]
pub(crate) struct Bucket {
    /// The tick this bucket fires at (ticks since the manager's origin).
    pub(crate) tick: u64,
    /// Copy of `State::fired`, readable without the lock.
    fired: AtomicBool,
    /// Copies of the armed waiters and `State::cancelled`, for metrics:
    /// stored (not added to) under the lock, read without it, so that a
    /// metrics snapshot neither waits for nor revokes the owner's bias.
    armed: AtomicU64,
    cancelled: AtomicU64,
    /// Biased towards the thread whose table the bucket is in: it arms and
    /// cancels with plain stores; the sweeper, and a thread cancelling a
    /// timer that moved to it, revoke the bias once (see
    /// `weir_primitives::biased`).
    state: BiasedLock<State>,
    /// Under loom a freed bucket is kept (see `table::Buckets::free`) and
    /// marked, so the models report a use after free instead of crashing.
    #[cfg(loom)]
    pub(crate) freed: std::sync::atomic::AtomicBool,
}

#[derive(Debug)]
struct State {
    fired: bool,
    /// Registrations that still hold this bucket (armed or already fired).
    live: usize,
    /// The owning thread's table still maps `tick` to this bucket.
    in_table: bool,
    /// Entries of the owning thread's cache that point at this bucket.
    cached: u8,
    /// One slot per waiter: the waker of an armed waiter, `None` when free.
    /// A free slot holds no waker: a cancelled timer must not keep its task
    /// (and that task's memory) alive until the tick fires.
    slots: Vec<Option<Waker>>,
    /// Indices of free slots, reused before the vector grows.
    free: Vec<u32>,
    /// Cancellations not yet added to the table's counter.
    cancelled: u64,
}

/// What the caller must do after dropping a hold on a bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// Others still hold the bucket.
    Keep,
    /// That was the last hold: free the bucket (it is no longer in any table).
    Free,
    /// The caller is the last registration of a bucket still in its table and
    /// not cached: take the table's lock and call [`Bucket::finish_unlink`].
    /// The caller's registration still counts until then.
    Unlink,
}

impl Bucket {
    /// A new bucket for `tick`, entered in its table and, if `cached`, in the
    /// owner's cache; biased towards the calling thread (the table's owner).
    pub(crate) fn new(tick: u64, cached: bool) -> Self {
        Self {
            tick,
            fired: AtomicBool::new(false),
            armed: AtomicU64::new(0),
            cancelled: AtomicU64::new(0),
            #[cfg(loom)]
            freed: std::sync::atomic::AtomicBool::new(false),
            state: BiasedLock::new(
                State {
                    fired: false,
                    live: 0,
                    in_table: true,
                    cached: u8::from(cached),
                    slots: Vec::new(),
                    free: Vec::new(),
                    cancelled: 0,
                },
                bias_id(),
            ),
        }
    }

    /// Subscribe a waiter. Returns its slot, or `None` if the tick has
    /// already fired (the deadline has passed: the waiter is elapsed and
    /// holds nothing).
    #[inline]
    pub(crate) fn register(&self, waker: &Waker) -> Option<usize> {
        if self.is_fired() {
            return None;
        }
        // Cloned before locking: a clone runs the waker's own code, which
        // may arm or cancel a timer of this very bucket (a lock is not
        // re-entrant). A clone that panics leaves nothing changed.
        let waker = waker.clone();
        let mut st = self.lock();
        if st.fired {
            drop(st);
            drop(waker);
            return None;
        }
        // Nothing is changed until the slot index is checked (it may
        // panic): an unwind leaves the state as it was, with no
        // registration counted that nobody holds.
        let slot = match st.free.pop() {
            Some(slot) => {
                let slot = slot as usize;
                st.slots[slot] = Some(waker);
                slot
            }
            None => {
                let slot = st.slots.len();
                assert!(slot < u32::MAX as usize, "fewer than 2^32 waiters per tick");
                st.slots.push(Some(waker));
                slot
            }
        };
        st.live += 1;
        self.publish(&st);
        Some(slot)
    }

    /// Copy the counts metrics read without the lock; the caller holds it.
    #[inline(always)]
    fn publish(&self, st: &State) {
        let armed = if st.fired {
            0
        } else {
            st.slots.len() - st.free.len()
        };
        self.armed.store(armed as u64, Ordering::Relaxed);
        self.cancelled.store(st.cancelled, Ordering::Relaxed);
    }

    #[inline(always)]
    fn lock(&self) -> impl std::ops::DerefMut<Target = State> + '_ {
        #[cfg(loom)]
        assert!(
            !self.freed.load(std::sync::atomic::Ordering::SeqCst),
            "a bucket used after it was freed"
        );
        // SAFETY: `bias_id` names the calling thread alone.
        unsafe { self.state.lock(bias_id()) }
    }

    /// Whether the tick has fired, without the lock. `Acquire` pairs with the
    /// sweeper's `Release` store so a waiter that sees `true` also sees
    /// everything the sweeper did before firing.
    #[inline]
    pub(crate) fn is_fired(&self) -> bool {
        self.fired.load(Ordering::Acquire)
    }

    /// Re-poll of an armed waiter: returns `true` if the tick fired,
    /// otherwise makes sure the stored waker is the current one.
    pub(crate) fn poll_slot(&self, slot: usize, waker: &Waker) -> bool {
        if self.is_fired() {
            return true;
        }
        let st = self.lock();
        if st.fired {
            return true;
        }
        if matches!(&st.slots[slot], Some(w) if w.will_wake(waker)) {
            return false;
        }
        drop(st);
        // A new waker: cloned outside the lock (see `register`).
        let new = waker.clone();
        let mut st = self.lock();
        if st.fired {
            drop(st);
            drop(new);
            return true;
        }
        let old = st.slots[slot].replace(new);
        drop(st);
        drop(old);
        false
    }

    /// [`cancel_taking`](Self::cancel_taking), dropping the waker.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn cancel(&self, slot: usize) -> Release {
        self.cancel_taking(slot).0
    }

    /// Drop a registration; returns what else the caller must do, and the
    /// slot's waker if the tick had not fired (for a timer re-armed for the
    /// same task). The waker comes out after the lock is released, and the
    /// caller must drop it outside any lock, its table's too: it may be the
    /// last reference to a task whose other timers take these locks again.
    #[inline]
    pub(crate) fn cancel_taking(&self, slot: usize) -> (Release, Option<Waker>) {
        let mut st = self.lock();
        let mut waker = None;
        let release = 'decide: {
            if !st.fired {
                waker = st.slots[slot].take();
                // Slots are created below `u32::MAX` (see `register`).
                st.free.push(slot as u32);
                st.cancelled += 1;
                if st.live == 1 && st.in_table && st.cached == 0 {
                    break 'decide Release::Unlink;
                }
            }
            st.live -= 1;
            st.release_decision()
        };
        self.publish(&st);
        drop(st);
        (release, waker)
    }

    /// Second half of [`Release::Unlink`]; the caller holds the table lock
    /// and `remove` takes this bucket out of the table. Returns the number
    /// of cancellations to add to the table's counter and whether to free.
    pub(crate) fn finish_unlink(&self, remove: impl FnOnce()) -> (u64, bool) {
        let mut st = self.lock();
        st.live -= 1;
        if st.live == 0 && st.in_table && st.cached == 0 && !st.fired {
            remove();
            st.in_table = false;
        }
        let cancelled = std::mem::take(&mut st.cancelled);
        self.publish(&st);
        (cancelled, st.release_decision() == Release::Free)
    }

    /// One more entry of the owner's cache points here.
    pub(crate) fn set_cached(&self) {
        self.lock().cached += 1;
    }

    /// One entry of the owner's cache moves on; the caller holds the table lock and
    /// `remove` takes this bucket out of the table. Returns the number of
    /// cancellations to add to the table's counter and whether to free.
    pub(crate) fn uncache(&self, remove: impl FnOnce()) -> (u64, bool) {
        let mut st = self.lock();
        st.cached -= 1;
        if st.live == 0 && st.in_table && st.cached == 0 && !st.fired {
            remove();
            st.in_table = false;
        }
        let cancelled = std::mem::take(&mut st.cancelled);
        self.publish(&st);
        (cancelled, st.release_decision() == Release::Free)
    }

    /// Fire the tick: the caller (the sweeper) has removed the bucket from
    /// its table. Returns the wakers to wake, the cancellations to add to the
    /// table's counter, and whether to free. The wakers must be woken and
    /// dropped after the table lock is released: dropping the last reference
    /// to a task drops its timers, whose disarm may take that lock.
    pub(crate) fn fire(&self) -> (Vec<Waker>, u64, bool) {
        let mut st = self.lock();
        st.fired = true;
        self.fired.store(true, Ordering::Release);
        st.in_table = false;
        st.free = Vec::new();
        let slots = std::mem::take(&mut st.slots);
        let cancelled = std::mem::take(&mut st.cancelled);
        let free = st.release_decision() == Release::Free;
        self.publish(&st);
        drop(st);
        let wakers = slots.into_iter().flatten().collect();
        (wakers, cancelled, free)
    }

    /// Clear this bucket's bias as part of `revocation` (the sweeper, about
    /// to fire it: one barrier for all the buckets of a sweep).
    pub(crate) fn revoke_into<'a>(&'a self, revocation: &mut Revocation<'a>) {
        revocation.add(&self.state);
    }

    /// Whether any thread holds this bucket's lock, or a revocation its spin
    /// lock: a bucket must not be freed then (the loom models check it).
    #[cfg(loom)]
    pub(crate) fn lock_is_held(&self) -> bool {
        self.state.is_held()
    }

    /// (armed waiters, pending cancellations), for metrics: read without
    /// the lock, as last stored under it.
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) fn counts(&self) -> (u64, u64) {
        (
            self.armed.load(Ordering::Relaxed),
            self.cancelled.load(Ordering::Relaxed),
        )
    }

    /// (live registrations, armed waiters, pending cancellations), under
    /// the lock.
    #[cfg(all(test, not(loom)))]
    fn stats(&self) -> (usize, u64, u64) {
        let live = self.lock().live;
        let (armed, cancelled) = self.counts();
        (live, armed, cancelled)
    }
}

impl State {
    fn release_decision(&self) -> Release {
        if self.live == 0 && !self.in_table && self.cached == 0 {
            Release::Free
        } else {
            Release::Keep
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Register,
        Cancel(usize),
        Fire,
        Uncache,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => Just(Op::Register),
            4 => (0usize..16).prop_map(Op::Cancel),
            1 => Just(Op::Fire),
            1 => Just(Op::Uncache),
        ]
    }

    /// The holders a bucket should be counting.
    #[derive(Debug)]
    struct Model {
        live: Vec<usize>,
        in_table: bool,
        cached: bool,
        fired: bool,
        frees: usize,
    }

    impl Model {
        fn holds(&self) -> bool {
            !self.live.is_empty() || self.in_table || self.cached
        }
        fn freed(&mut self, free: bool) {
            if free {
                assert!(!self.holds(), "freed while held: {self:?}");
                self.frees += 1;
            }
        }
    }

    fn cancel(b: &Bucket, m: &mut Model, i: usize) {
        let slot = m.live.remove(i);
        match b.cancel(slot) {
            Release::Keep => {}
            Release::Free => m.freed(true),
            Release::Unlink => {
                // The table lock is ours: the bucket may leave the table.
                let free = b.finish_unlink(|| m.in_table = false).1;
                m.freed(free);
            }
        }
    }

    fn panicking_clone(_: *const ()) -> std::task::RawWaker {
        panic!("clone failed");
    }
    fn nop(_: *const ()) {}
    static PANICKING: std::task::RawWakerVTable =
        std::task::RawWakerVTable::new(panicking_clone, nop, nop, nop);

    /// A waker whose clone panics leaves no registration behind: the bucket
    /// is still freed by its last real hold.
    #[test]
    fn a_panicking_waker_clone_counts_no_registration() {
        // SAFETY: the vtable's functions ignore the data pointer.
        let bad =
            unsafe { Waker::from_raw(std::task::RawWaker::new(std::ptr::null(), &PANICKING)) };
        let b = Bucket::new(1, false);
        // New slot.
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| b.register(&bad)));
        assert!(r.is_err());
        assert_eq!(b.stats(), (0, 0, 0));
        // A free slot to reuse.
        let slot = b.register(Waker::noop()).unwrap();
        assert_eq!(b.cancel(slot), Release::Unlink);
        assert!(b.finish_unlink(|| {}).1, "freed by its last hold");
        let b = Bucket::new(1, true);
        let slot = b.register(Waker::noop()).unwrap();
        assert_eq!(b.cancel(slot), Release::Keep);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| b.register(&bad)));
        assert!(r.is_err());
        assert_eq!(b.stats(), (0, 0, 1));
        // The slot is still free and reusable.
        assert_eq!(b.register(Waker::noop()), Some(slot));
        assert_eq!(b.cancel(slot), Release::Keep);
        let (wakers, _, free) = b.fire();
        assert!(wakers.is_empty());
        // Only the cache's hold is left.
        assert!(!free);
        assert!(b.uncache(|| {}).1, "freed by its last hold");
    }

    std::thread_local! {
        static REENTER: std::cell::Cell<*const Bucket> = const { std::cell::Cell::new(std::ptr::null()) };
    }

    fn reentrant_clone(data: *const ()) -> std::task::RawWaker {
        let bucket = REENTER.with(|b| b.replace(std::ptr::null()));
        if !bucket.is_null() {
            // SAFETY: the test keeps the bucket alive while it registers.
            let bucket = unsafe { &*bucket };
            assert!(
                !bucket.state.is_held(),
                "the waker was cloned inside the bucket's lock"
            );
            assert!(bucket.register(Waker::noop()).is_some());
        }
        std::task::RawWaker::new(data, &REENTRANT)
    }
    static REENTRANT: std::task::RawWakerVTable =
        std::task::RawWakerVTable::new(reentrant_clone, nop, nop, nop);

    /// A waker's clone runs the waker's own code, which may arm a timer of
    /// the same tick: it must not run inside the bucket's lock (a spin lock
    /// deadlocks there; the owner's fast path would hand out the state
    /// twice).
    #[test]
    fn a_waker_whose_clone_arms_the_same_bucket() {
        // SAFETY: the vtable's functions ignore the data pointer.
        let waker =
            unsafe { Waker::from_raw(std::task::RawWaker::new(std::ptr::null(), &REENTRANT)) };
        let b = Bucket::new(1, false);
        REENTER.with(|r| r.set(&b));
        let slot = b.register(&waker).unwrap();
        assert_eq!(b.stats(), (2, 2, 0));
        REENTER.with(|r| r.set(&b));
        assert!(!b.poll_slot(slot, Waker::noop()), "a new waker, not fired");
        REENTER.with(|r| r.set(&b));
        assert!(!b.poll_slot(slot, &waker));
        assert_eq!(b.stats(), (3, 3, 0));
        let (wakers, _, _) = b.fire();
        assert_eq!(wakers.len(), 3);
    }

    proptest! {
        /// Whatever the order of arming, cancelling, firing and cache
        /// moves, the bucket is freed exactly once, after its last holder,
        /// and a tick that fired wakes exactly its armed waiters.
        #[test]
        fn freed_once_after_the_last_hold(cached in any::<bool>(), ops in proptest::collection::vec(op(), 0..40)) {
            let b = Bucket::new(1, cached);
            let mut m = Model { live: Vec::new(), in_table: true, cached, fired: false, frees: 0 };
            for op in ops {
                if m.frees > 0 {
                    break;
                }
                match op {
                    Op::Register => match b.register(Waker::noop()) {
                        Some(slot) => {
                            prop_assert!(!m.fired);
                            prop_assert!(!m.live.contains(&slot));
                            m.live.push(slot);
                        }
                        None => prop_assert!(m.fired),
                    },
                    Op::Cancel(i) if !m.live.is_empty() => {
                        let i = i % m.live.len();
                        cancel(&b, &mut m, i);
                    }
                    Op::Cancel(_) => {}
                    Op::Fire if m.in_table => {
                        m.in_table = false;
                        m.fired = true;
                        let (wakers, _, free) = b.fire();
                        prop_assert_eq!(wakers.len(), m.live.len());
                        m.freed(free);
                    }
                    Op::Fire => {}
                    Op::Uncache if m.cached => {
                        m.cached = false;
                        let free = b.uncache(|| m.in_table = false).1;
                        m.freed(free);
                    }
                    Op::Uncache => {}
                }
                let (live, armed, _) = b.stats();
                if m.frees == 0 {
                    prop_assert_eq!(live, m.live.len());
                    prop_assert_eq!(armed, if m.fired { 0 } else { m.live.len() as u64 });
                }
            }
            // Release whatever is left: waiters, the cache, then the sweeper.
            while m.frees == 0 && !m.live.is_empty() {
                cancel(&b, &mut m, 0);
            }
            if m.frees == 0 && m.cached {
                m.cached = false;
                let free = b.uncache(|| m.in_table = false).1;
                m.freed(free);
            }
            if m.frees == 0 && m.in_table {
                m.in_table = false;
                let (_, _, free) = b.fire();
                m.freed(free);
            }
            prop_assert_eq!(m.frees, 1);
        }
    }
}
