//! The shared-timer protocol's pieces as the loom models in
//! `loom_tests.rs` hold them: a bucket, a thread's table driven the way the
//! manager drives it, the sweeper's wake-up plan and the fork-pause
//! handshake. Thin adaptors over the real `bucket.rs`, `table.rs`,
//! `planner.rs` and `pause.rs`; built only for `cargo xtask loom`.

/// The sweeper's wake-up plan.
#[derive(Debug)]
pub struct Planner(crate::planner::Planner);

impl Planner {
    /// Nothing planned.
    pub fn new() -> Self {
        Self(crate::planner::Planner::new())
    }
    /// A bucket was entered: `true` if the sweeper must be unparked.
    pub fn lower(&self, tick: u64) -> bool {
        self.0.lower(tick)
    }
    /// The sweeper starts a scan.
    pub fn reset(&self) {
        self.0.reset()
    }
    /// The sweeper found `earliest`: returns when to wake.
    pub fn settle(&self, earliest: u64) -> u64 {
        self.0.settle(earliest)
    }
}

impl Default for Planner {
    fn default() -> Self {
        Self::new()
    }
}

/// A tick's shared timer.
#[derive(Debug)]
pub struct Bucket(crate::bucket::Bucket);

impl Bucket {
    /// A bucket in its table, not cached.
    pub fn new() -> Self {
        Self(crate::bucket::Bucket::new(1, false))
    }
    /// Subscribe; `None` if already fired.
    pub fn register(&self, waker: &std::task::Waker) -> Option<usize> {
        self.0.register(waker)
    }
    /// Re-poll: `true` if fired.
    pub fn poll_slot(&self, slot: usize, waker: &std::task::Waker) -> bool {
        self.0.poll_slot(slot, waker)
    }
    /// Fire; returns the wakers and whether to free.
    pub fn fire(&self) -> (Vec<std::task::Waker>, bool) {
        let (w, _, free) = self.0.fire();
        (w, free)
    }
}

impl Default for Bucket {
    fn default() -> Self {
        Self::new()
    }
}

/// One thread's timer table, driven the way the manager drives it: one
/// owner thread arms (through the cache when the tick is the cached
/// one), any thread cancels, a sweeper fires. Every bucket is allocated
/// and freed through the table's allocator, which under loom panics on
/// a double free; [`Table::live_buckets`] finds leaks.
#[derive(Debug, Default)]
pub struct Table {
    table: crate::table::ThreadTable,
    buckets: crate::table::Buckets,
}

/// The one duration the models arm (the cache is keyed by duration).
const DURATION: u64 = 1;

impl Table {
    /// An empty table (shared with its registrations, which keep it
    /// alive).
    pub fn new() -> std::sync::Arc<Self> {
        std::sync::Arc::new(Self::default())
    }

    /// Owner only: arm `waker` for `tick`, through the cached bucket if
    /// it is `tick`'s (as when the cache window is still open), else
    /// through the map, which moves the cache entry on. `None`: the
    /// tick already fired.
    pub fn arm(
        self: &std::sync::Arc<Self>,
        tick: u64,
        waker: &std::task::Waker,
    ) -> Option<Registration> {
        let cached = self
            .table
            .cached(DURATION, 0)
            // SAFETY: the cache's hold keeps the bucket alive, and only
            // this (the owner) thread releases it.
            .filter(|b| unsafe { b.as_ref() }.tick == tick);
        let bucket = match cached {
            Some(b) => b,
            None => {
                let (b, _, to_free) = self.table.enter(&self.buckets, tick, DURATION, 0, 1);
                if let Some(old) = to_free {
                    // SAFETY: that was the last hold.
                    unsafe { self.buckets.free(old) };
                }
                b
            }
        };
        // SAFETY: the cache's hold keeps the bucket alive; the
        // registration keeps the table alive.
        let armed = unsafe { crate::table::Armed::register(&self.table, bucket, waker) }?;
        Some(Registration {
            armed,
            table: self.clone(),
        })
    }

    /// Owner only: forget the cache (the table changed owner).
    pub fn clear_cache(&self) {
        for b in self.table.clear_cache() {
            // SAFETY: that was the last hold.
            unsafe { self.buckets.free(b) };
        }
    }

    /// The sweeper: revoke the biases of the due buckets with one barrier,
    /// then fire every tick up to `due`; returns the wakers to wake (the
    /// table lock is released) and the earliest tick left.
    pub fn fire_due(&self, due: u64) -> (Vec<std::task::Waker>, u64) {
        let mut revocation = crate::sync::Revocation::new();
        // SAFETY: dropped right below, before any bucket is fired.
        unsafe { self.table.revoke_due(due, &mut revocation) };
        drop(revocation);
        let mut wakers = Vec::new();
        let earliest = self.table.fire_due(&self.buckets, due, &mut wakers);
        (wakers, earliest)
    }

    /// [`fire_due`](Self::fire_due) without the sweep's shared
    /// revocation: each bucket's bias is revoked as it is fired, as a sweep
    /// does for a bucket whose spin lock another thread held when the
    /// revocation was gathered. (The models with a third thread spinning
    /// use it: loom's branch budget cannot hold three spinning threads.)
    pub fn fire_due_one_by_one(&self, due: u64) -> (Vec<std::task::Waker>, u64) {
        let mut wakers = Vec::new();
        let earliest = self.table.fire_due(&self.buckets, due, &mut wakers);
        (wakers, earliest)
    }

    /// Buckets allocated and not yet freed.
    pub fn live_buckets(&self) -> i64 {
        self.buckets.live()
    }
}

impl Drop for Table {
    fn drop(&mut self) {
        for b in self.table.drain() {
            // SAFETY: every registration kept the table alive, so none
            // is left; the table and cache held the last holds.
            unsafe { self.buckets.free(b) };
        }
    }
}

/// A waiter armed in a [`Table`].
#[derive(Debug)]
pub struct Registration {
    armed: crate::table::Armed,
    table: std::sync::Arc<Table>,
}

impl Registration {
    /// Re-poll: `true` once the tick has fired.
    pub fn poll(&self, waker: &std::task::Waker) -> bool {
        self.armed.poll(waker)
    }

    /// Drop the registration (cancel, or done after the fire), from any
    /// thread.
    pub fn cancel(self) {
        self.armed.disarm(&self.table.buckets);
    }
}

/// The fork-pause handshake between a pauser and the sweeper.
#[derive(Debug)]
pub struct PauseGate(crate::pause::PauseGate);

impl PauseGate {
    /// No sweeper yet, no request.
    pub fn new() -> Self {
        Self(crate::pause::PauseGate::new())
    }
    /// A sweeper was started.
    pub fn started(&self) {
        self.0.started()
    }
    /// Ask the sweeper of `pid` to stop.
    pub fn request(&self, pid: u32) {
        self.0.request(pid)
    }
    /// Whether the sweeper has stopped.
    pub fn acknowledged(&self) -> bool {
        self.0.acknowledged()
    }
    /// Withdraw the request.
    pub fn resume(&self) {
        self.0.resume()
    }
    /// The sweeper of `pid` is about to sweep: `false` means park.
    pub fn enter_sweep(&self, pid: u32) -> bool {
        self.0.enter_sweep(pid)
    }
    /// The sweeper parks with nothing armed.
    pub fn idle(&self) {
        self.0.idle()
    }
}

impl Default for PauseGate {
    fn default() -> Self {
        Self::new()
    }
}
