//! A store kept in this process's memory, with faults on demand: what a
//! test of code built on [`StoreLimiter`](crate::StoreLimiter) runs
//! against when it must not need a server (feature `test-util`).
//!
//! [`MemoryStore`] is the store itself: one value shared by every limiter
//! connected to it (each one an instance of a service), which the test
//! keeps to break it — [`fail`](MemoryStore::fail),
//! [`refuse`](MemoryStore::refuse), [`stall`](MemoryStore::stall), slow it
//! down ([`set_latency`](MemoryStore::set_latency)), one cell or all —
//! and to read what reached it ([`calls`](MemoryStore::calls),
//! [`decisions`](MemoryStore::decisions),
//! [`largest_call`](MemoryStore::largest_call)). [`MemoryBackend`] is the
//! [`Backend`] a limiter gets when it connects to it.
//!
//! Decisions are weir-rate's own algorithms, all-or-nothing over the
//! plan's limits, so the store decides as Redis does. Its clock is tokio's
//! ([`tokio::time::Instant`]): under a paused runtime
//! (`#[tokio::test(start_paused = true)]`) a test moves every clock of the
//! limiter and the store together, and no timing depends on the machine.

use crate::backend::{Backend, Placement, Plan};
use crate::error::{ConfigError, StoreError};
use crate::limit::{Limit, LocalLimit};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::fmt;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;
use weir_primitives::sync::RwLock;
use weir_primitives::time::duration_to_nanos;
use weir_rate::{Algorithm, AllOf, Decision, Mode, Receipt};

/// A store in this process's memory that tests can break, shared by every
/// limiter connected to it (clones share it too).
///
/// Its keys fall in [`cells`](Self::with_cells) the way a cluster's fall
/// on servers: the keys of one cell are decided together and fail
/// together. It remembers every key it has seen: it is for tests, not for
/// serving.
///
/// ```
/// use weir_rate::{nonzero, Gcra, Quota};
/// use weir_store::{FailurePolicy, Source, StoreLimiter};
/// use weir_store::memory::{MemoryBackend, MemoryStore};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), weir_store::ConfigError> {
/// let store = MemoryStore::new();
/// let limiter = StoreLimiter::<MemoryBackend>::builder(Gcra::new(Quota::per_second(nonzero!(5))))
///     .on_failure(FailurePolicy::Closed)
///     .connect(store.clone())
///     .await?;
/// assert_eq!(limiter.check_verbose("alice", 1).await.unwrap().source, Source::Store);
///
/// store.fail(); // every call fails from now on
/// let answer = limiter.check_verbose("alice", 1).await.unwrap();
/// assert_eq!(answer.source, Source::FailClosed);
/// assert!(!answer.decision.is_allowed());
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct MemoryStore {
    shared: Arc<Shared>,
}

struct Shared {
    /// The origin of the store's clock.
    epoch: Instant,
    /// Every key's state, by its store name.
    keys: Mutex<HashMap<String, KeyState>>,
    /// Each cell's fault; watched by calls stalled on it.
    faults: watch::Sender<Vec<Fault>>,
    latency: Mutex<Duration>,
    calls: AtomicU64,
    decisions: AtomicU64,
    largest_call: AtomicUsize,
}

/// The state of one key: one per limit of the plan that made it.
type KeyState = <AllOf<LocalLimit> as Algorithm>::State;

/// What a cell does with the calls it gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// Answers.
    None,
    /// Fails every call ([`StoreError::Store`]).
    Fail,
    /// Refuses every call ([`StoreError::Refused`]), as a store whose
    /// credentials were revoked does.
    Refuse,
    /// Holds every call until the cell is healed or given another fault.
    Stall,
}

impl MemoryStore {
    /// An empty store of one cell, answering every call at once.
    pub fn new() -> Self {
        Self::with_cells(NonZeroUsize::MIN)
    }

    /// An empty store whose keys fall in `cells` cells, as on the servers
    /// of a cluster: a fault can be given to one cell alone.
    ///
    /// ```
    /// use std::num::NonZeroUsize;
    /// use weir_store::memory::MemoryStore;
    ///
    /// let store = MemoryStore::with_cells(NonZeroUsize::new(3).unwrap());
    /// assert_eq!(store.cells(), 3);
    /// ```
    pub fn with_cells(cells: NonZeroUsize) -> Self {
        let (faults, _) = watch::channel(vec![Fault::None; cells.get()]);
        Self {
            shared: Arc::new(Shared {
                epoch: Instant::now(),
                keys: Mutex::new(HashMap::new()),
                faults,
                latency: Mutex::new(Duration::ZERO),
                calls: AtomicU64::new(0),
                decisions: AtomicU64::new(0),
                largest_call: AtomicUsize::new(0),
            }),
        }
    }

    /// How many cells the keys fall in.
    pub fn cells(&self) -> usize {
        self.shared.faults.borrow().len()
    }

    /// Every call fails from now on, as against a server that is down,
    /// until [`heal`](Self::heal).
    pub fn fail(&self) {
        self.set_all(Fault::Fail);
    }

    /// Every call is refused from now on, as by a store whose ACL no
    /// longer lets the limiter in, until [`heal`](Self::heal).
    pub fn refuse(&self) {
        self.set_all(Fault::Refuse);
    }

    /// Every call is held from now on, unanswered, until the store is
    /// healed or given another fault: a server that stopped answering
    /// without closing its connections.
    pub fn stall(&self) {
        self.set_all(Fault::Stall);
    }

    /// Every cell answers again (calls held by a stall go on).
    pub fn heal(&self) {
        self.set_all(Fault::None);
    }

    /// Only `cell` fails, until it is healed (see [`fail`](Self::fail)).
    ///
    /// # Panics
    ///
    /// If `cell` is not below [`cells`](Self::cells).
    pub fn fail_cell(&self, cell: usize) {
        self.set(cell, Fault::Fail);
    }

    /// Only `cell` stalls, until it is healed (see [`stall`](Self::stall)).
    ///
    /// # Panics
    ///
    /// If `cell` is not below [`cells`](Self::cells).
    pub fn stall_cell(&self, cell: usize) {
        self.set(cell, Fault::Stall);
    }

    /// `cell` answers again.
    ///
    /// # Panics
    ///
    /// If `cell` is not below [`cells`](Self::cells).
    pub fn heal_cell(&self, cell: usize) {
        self.set(cell, Fault::None);
    }

    /// Every answer takes `latency` (on tokio's clock) to come back, from
    /// the next call on. The store decides when a call arrives, so a
    /// caller that gave up on a slow reply was counted all the same, as on
    /// a real store.
    pub fn set_latency(&self, latency: Duration) {
        *self.shared.latency.lock() = latency;
    }

    /// How many calls reached the store (decisions, charges and refunds;
    /// a call held by a stall counts when it arrives).
    pub fn calls(&self) -> u64 {
        self.shared.calls.load(Ordering::Relaxed)
    }

    /// How many decisions the store made, allowed or not.
    pub fn decisions(&self) -> u64 {
        self.shared.decisions.load(Ordering::Relaxed)
    }

    /// The most decisions one call asked for.
    pub fn largest_call(&self) -> usize {
        self.shared.largest_call.load(Ordering::Relaxed)
    }

    /// How many keys the store holds state for.
    pub fn keys(&self) -> usize {
        self.shared.keys.lock().len()
    }

    fn set_all(&self, fault: Fault) {
        self.shared.faults.send_modify(|cells| cells.fill(fault));
    }

    fn set(&self, cell: usize, fault: Fault) {
        self.shared.faults.send_modify(|cells| cells[cell] = fault);
    }

    /// The store's clock now.
    fn now_ns(&self) -> u64 {
        duration_to_nanos(self.shared.epoch.elapsed())
    }

    /// A call arriving at `cell`: waits out a stall, then answers with
    /// the cell's fault, if any.
    async fn enter(&self, cell: usize, decisions: usize) -> Result<(), StoreError> {
        self.shared.calls.fetch_add(1, Ordering::Relaxed);
        self.shared
            .largest_call
            .fetch_max(decisions, Ordering::Relaxed);
        let mut faults = self.shared.faults.subscribe();
        // The sender lives in `self`, so the wait ends only by a change.
        let _ = faults.wait_for(|cells| cells[cell] != Fault::Stall).await;
        match self.shared.faults.borrow()[cell] {
            Fault::Fail => Err(StoreError::store(Broken("the memory store is failing"))),
            Fault::Refuse => Err(StoreError::refused(Broken(
                "the memory store refuses the limiter",
            ))),
            Fault::None | Fault::Stall => Ok(()),
        }
    }

    /// The reply's way back: what was decided stays decided, however late
    /// the reply, as on a real store whose answers are slow.
    async fn reply<T>(&self, answer: T) -> T {
        let latency = *self.shared.latency.lock();
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        answer
    }

    /// The cell of a store key: a hash of its name, as a cluster places
    /// keys by theirs.
    fn cell_of_name(&self, name: &str) -> usize {
        // FNV-1a: stable across runs and platforms, so a test can rely on
        // where a key falls.
        let hash = name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        // The remainder is below the cell count, a usize.
        (hash % self.cells() as u64) as usize
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryStore")
            .field("cells", &self.cells())
            .field("keys", &self.keys())
            .field("calls", &self.calls())
            .finish_non_exhaustive()
    }
}

/// The error a broken [`MemoryStore`] answers with.
#[derive(Debug)]
struct Broken(&'static str);

impl fmt::Display for Broken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for Broken {}

/// The [`Backend`] of a limiter connected to a [`MemoryStore`]: the
/// store, and the limits of the limiter's plan.
///
/// ```
/// use weir_rate::{nonzero, FixedWindow, Quota};
/// use weir_store::StoreLimiter;
/// use weir_store::memory::{MemoryBackend, MemoryStore};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), weir_store::ConfigError> {
/// let store = MemoryStore::new();
/// let limiter = StoreLimiter::<MemoryBackend>::builder(FixedWindow::new(Quota::per_minute(nonzero!(2))))
///     .connect(store.clone())
///     .await?;
/// assert!(limiter.check("bob").await.is_allowed());
/// assert!(limiter.check("bob").await.is_allowed());
/// assert!(!limiter.check("bob").await.is_allowed());
/// assert_eq!(limiter.store().store().decisions(), 3);
/// # Ok(())
/// # }
/// ```
pub struct MemoryBackend {
    store: MemoryStore,
    /// The limits now: a call decides by one snapshot of them.
    limits: RwLock<Arc<AllOf<LocalLimit>>>,
    /// Every key of the limiter starts `<prefix>:`.
    prefix: String,
}

impl MemoryBackend {
    /// The store this limiter is connected to.
    pub fn store(&self) -> &MemoryStore {
        &self.store
    }

    /// The cell `key` (as the limiter's callers name it) falls in, so a
    /// test can break the cell of the keys it means to.
    pub fn cell_of(&self, key: &str) -> usize {
        self.store.cell_of_name(&self.name(key))
    }

    fn name(&self, key: &str) -> String {
        format!("{}:{key}", self.prefix)
    }

    /// The limits now.
    fn limits(&self) -> Arc<AllOf<LocalLimit>> {
        Arc::clone(&self.limits.read())
    }

    /// Runs `spend` on `name`'s state under `limits` (made fresh for a
    /// key not seen yet).
    fn with_state<T>(
        &self,
        limits: &AllOf<LocalLimit>,
        name: &str,
        spend: impl FnOnce(&mut KeyState, u64) -> T,
    ) -> T {
        let now = self.store.now_ns();
        let mut keys = self.store.shared.keys.lock();
        let state = keys
            .entry(name.to_owned())
            .or_insert_with(|| limits.new_state(now));
        spend(state, now)
    }
}

impl fmt::Debug for MemoryBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryBackend")
            .field("store", &self.store)
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

/// A store's receipt for what the in-process algorithm spent.
fn on_store(spent: Receipt) -> Receipt {
    Receipt::remote(spent.at_nanos(), spent.cost())
}

impl Backend for MemoryBackend {
    const NAME: &'static str = "memory";
    type Target = MemoryStore;
    type Key = String;

    async fn connect(store: MemoryStore, plan: &Plan) -> Result<(Self, bool), ConfigError> {
        let limits = plan
            .limits()
            .iter()
            .map(|limit| limit.local())
            .collect::<Option<Vec<_>>>()
            .ok_or(ConfigError::Invalid(
                "a sliding window whose counters do not fit its quota",
            ))?;
        let reachable = !store.shared.faults.borrow().contains(&Fault::Fail);
        let backend = Self {
            store,
            limits: RwLock::new(Arc::new(AllOf::new(limits))),
            prefix: plan.prefix().to_owned(),
        };
        Ok((backend, reachable))
    }

    fn place(&self, key: &str) -> Placement<String> {
        let name = self.name(key);
        let cell = self.store.cell_of_name(&name);
        Placement {
            key: name,
            cell,
            group: cell as u64,
        }
    }

    fn cells(&self) -> usize {
        self.store.cells()
    }

    fn describe(&self, cell: usize) -> String {
        format!("memory store, cell {cell}")
    }

    async fn decide(
        &self,
        keys: &[String],
        costs: &[u32],
    ) -> Result<Vec<Result<Decision, StoreError>>, StoreError> {
        let Some(first) = keys.first() else {
            return Ok(Vec::new());
        };
        let cell = self.store.cell_of_name(first);
        self.store.enter(cell, keys.len()).await?;
        // As a cluster answers CROSSSLOT: one call reaches one cell.
        if keys
            .iter()
            .any(|name| self.store.cell_of_name(name) != cell)
        {
            return Err(StoreError::BadReply(
                "one call asked for keys of several cells".to_owned(),
            ));
        }
        let limits = self.limits();
        let decided = keys
            .iter()
            .zip(costs)
            .map(|(name, &cost)| {
                self.with_state(&limits, name, |state, now| {
                    match limits.check(state, now, cost, Mode::Consume) {
                        Ok(decision) => Ok(match decision.receipt() {
                            Some(spent) => decision.with_receipt(on_store(spent)),
                            None => decision,
                        }),
                        Err(never) => Err(StoreError::NeverAllowed(never)),
                    }
                })
            })
            .collect::<Vec<_>>();
        self.store
            .shared
            .decisions
            .fetch_add(decided.len() as u64, Ordering::Relaxed);
        Ok(self.store.reply(decided).await)
    }

    async fn charge(&self, key: &String, cost: u32) -> Result<Receipt, StoreError> {
        self.store.enter(self.store.cell_of_name(key), 1).await?;
        let limits = self.limits();
        let spent = self.with_state(&limits, key, |state, now| limits.charge(state, now, cost));
        Ok(self.store.reply(on_store(spent)).await)
    }

    async fn refund(&self, key: &String, receipt: Receipt) -> Result<(), StoreError> {
        self.store.enter(self.store.cell_of_name(key), 1).await?;
        let limits = self.limits();
        self.with_state(&limits, key, |state, now| {
            limits.refund(state, now, receipt)
        });
        self.store.reply(Ok(())).await
    }

    /// Each key's state follows the limits by position, as in process.
    fn retune(&self, limits: &[Limit]) -> Result<(), ConfigError> {
        let locals = limits
            .iter()
            .map(Limit::local)
            .collect::<Option<Vec<_>>>()
            .ok_or(ConfigError::Invalid(
                "a sliding window whose counters do not fit its quota",
            ))?;
        *self.limits.write() = Arc::new(AllOf::new(locals));
        Ok(())
    }
}
