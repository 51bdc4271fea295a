//! [`StoreLimiter`]: a limit kept on a store, with everything a store
//! needs around it written once. A check goes: the max cost at the edge,
//! then a lease if the key is hot, then the store (through the batcher if
//! there is one) unless its cell is backing off after a failure, and
//! the failure policy when the store cannot answer.

use crate::answer::{Answer, Source};
use crate::backend::Backend;
use crate::batch::Batcher;
use crate::caller::Caller;
use crate::error::StoreError;
use crate::failure::{FailurePolicy, Fallback, closed};
use crate::health::{Change, Probe};
use crate::leases::{LeaseStore, Leases};
use crate::limit::Limit;
use std::fmt;
use std::future::{Future, ready};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::time::Instant;
use weir_primitives::sync::RwLock;
use weir_rate::wait::{Jitter, until_allowed};
use weir_rate::{
    CheckKeyAsync, Decision, NeverAllowed, Quota, Receipt, SettleKey, Settlement, Spending,
};

/// A rate limit kept on a store (Redis, Memcached, ... : `B`), so that
/// every instance of a service draws from one limit. Cheap to clone;
/// clones share the connection, the batching task and the leases.
///
/// It answers what the in-process limiters answer, with the same
/// [`Quota`] and [`Decision`], asynchronously: [`check`](Self::check),
/// cost-weighted [`check_n`](Self::check_n), [`charge`](Self::charge),
/// [`refund`](Self::refund), and the seam traits
/// [`CheckKeyAsync`] and [`SettleKey`] for a tower layer. Each store
/// crate names its limiter (`weir_redis::RedisLimiter` is
/// `StoreLimiter<Redis>`) and documents where the state lives.
///
/// Every check answers within the timeout (with leases, within three):
/// from the store, a lease, or the [`FailurePolicy`] (or a denial when
/// shed), never with a panic.
pub struct StoreLimiter<B: Backend> {
    pub(crate) inner: Arc<Inner<B>>,
}

impl<B: Backend> Clone for StoreLimiter<B> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

pub(crate) struct Inner<B: Backend> {
    pub(crate) caller: Arc<Caller<B>>,
    /// The limits in force ([`StoreLimiter::set_limits`] changes them).
    pub(crate) tuned: RwLock<Tuned>,
    /// The limiter's name in metrics and logs.
    pub(crate) name: String,
    /// The prefix of its store keys.
    pub(crate) prefix: String,
    pub(crate) policy: FailurePolicy,
    /// The in-process limiter a [`FailurePolicy::PerInstance`] stands
    /// for, kept so that a change of the limits reaches it too.
    pub(crate) fallback: Option<Fallback>,
    pub(crate) batcher: Option<Batcher<B::Key>>,
    pub(crate) leases: Option<Arc<Leases>>,
    /// Refunds waiting out a back-off ([`StoreLimiter::refund`]), at most
    /// [`WAITING_REFUNDS`].
    pub(crate) waiting_refunds: AtomicUsize,
}

/// What the limits are now, and what follows from them.
#[derive(Debug)]
pub(crate) struct Tuned {
    pub(crate) limits: Box<[Limit]>,
    /// The first limit's quota: what a denial of the failure policy (or a
    /// lease's answer) reports.
    pub(crate) quota: Quota,
    /// The largest cost every limit can allow at once.
    pub(crate) max_cost: u32,
    /// The longest window of the limits.
    pub(crate) longest_window: Option<Duration>,
}

impl Tuned {
    /// What follows from `limits` (at least one).
    pub(crate) fn new(limits: &[Limit]) -> Self {
        Self {
            limits: limits.into(),
            quota: limits[0].quota(),
            max_cost: limits.iter().map(Limit::max_cost).min().unwrap_or(0),
            longest_window: limits.iter().map(|l| l.quota().window()).max(),
        }
    }
}

impl<B: Backend> Inner<B> {
    fn quota(&self) -> Quota {
        self.tuned.read().quota
    }

    fn max_cost(&self) -> u32 {
        self.tuned.read().max_cost
    }

    fn longest_window(&self) -> Option<Duration> {
        self.tuned.read().longest_window
    }
}

/// The most refunds one limiter keeps waiting for the store after a
/// failure; one more fails at once (its units stay spent: tighter, never
/// looser). Each is a small future its caller holds.
const WAITING_REFUNDS: usize = 4096;

/// The longest a refund waits for the store to answer again.
const REFUND_PATIENCE: Duration = Duration::from_secs(30);

impl<B: Backend> fmt::Debug for StoreLimiter<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoreLimiter")
            .field("store", &B::NAME)
            .field("name", &self.inner.name)
            .field("limits", &self.inner.tuned.read().limits)
            .field("policy", &self.inner.policy)
            .finish_non_exhaustive()
    }
}

impl<B: Backend> StoreLimiter<B> {
    /// The store's backend (its keys, its connection).
    pub fn store(&self) -> &B {
        &self.inner.caller.backend
    }

    /// Every limit's quota, in the order the builder was given them.
    pub fn quotas(&self) -> Vec<Quota> {
        self.inner
            .tuned
            .read()
            .limits
            .iter()
            .map(Limit::quota)
            .collect()
    }

    /// The limiter's name: the `limiter` label of its metrics and the
    /// name its logs give (its key prefix unless the builder named it).
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The prefix of the limiter's store keys.
    pub fn prefix(&self) -> &str {
        &self.inner.prefix
    }

    /// Spend one unit for `key`. Always answers within the timeout (with
    /// leases, within three: a wait for a lease being fetched, a fetch of
    /// its own, then the plain call, each with a timeout of its own): from
    /// the store, a lease, or the failure policy (or a denial when shed).
    #[must_use = "a decision not looked at lets a denied request through"]
    pub async fn check(&self, key: &str) -> Decision {
        match self.check_verbose(key, 1).await {
            Ok(answer) => answer.decision,
            // A cost of one is never beyond the max cost (limit and burst
            // are at least one); deny rather than panic if that changes.
            Err(_) => closed(&self.inner.quota()),
        }
    }

    /// Spend `cost` units for `key`.
    ///
    /// # Errors
    ///
    /// [`NeverAllowed`] when `cost` exceeds what the limiter can ever allow
    /// at once (its max cost); a denial is an `Ok` decision.
    #[must_use = "a decision not looked at lets a denied request through"]
    pub async fn check_n(&self, key: &str, cost: u32) -> Result<Decision, NeverAllowed> {
        self.check_verbose(key, cost).await.map(|a| a.decision)
    }

    /// Like [`check_n`](Self::check_n), also telling who decided and why
    /// the failure policy did, if it did.
    ///
    /// # Errors
    ///
    /// [`NeverAllowed`] when `cost` exceeds what the limiter can ever allow
    /// at once (its max cost); a denial is an `Ok` decision.
    pub async fn check_verbose(&self, key: &str, cost: u32) -> Result<Answer, NeverAllowed> {
        NeverAllowed::check(cost, self.inner.max_cost())?;
        let mut answer = self.decide(key, cost).await;
        if matches!(answer.source, Source::Store | Source::Lease) {
            answer = self.reconcile(key, cost, answer).await;
        }
        self.inner
            .caller
            .metrics
            .decided(answer.source, answer.decision.is_allowed());
        Ok(answer)
    }

    /// What this instance's failure policy makes of an admission by the
    /// store (or a lease): the store's answer, counted against the local
    /// limiter too, so that a stall finds the fallback knowing what this
    /// instance let through rather than offering a fresh burst. For one
    /// window of the limits after the store last failed, the local limiter
    /// must allow the request as well: the store never saw what the
    /// fallback admitted meanwhile. So over any window an instance admits
    /// no more through the store and its fallback together than one limit,
    /// however often the store stalls.
    async fn reconcile(&self, key: &str, cost: u32, answer: Answer) -> Answer {
        let inner = &*self.inner;
        let Some(local) = inner.policy.local() else {
            return answer;
        };
        if cost == 0 || !answer.decision.is_allowed() {
            return answer;
        }
        let settling = inner.longest_window();
        let recent = settling.is_some_and(|window| inner.caller.health.failed_within(window));
        if answer.source == Source::Store && recent {
            match local.check_n(key, cost) {
                Ok(d) if !d.is_allowed() => {
                    // The store spent the units for a request refused here:
                    // given back, so that the other instances keep them (if
                    // the refund fails they stay spent: tighter, never
                    // looser).
                    let _ = self.refund(key, &answer.decision).await;
                    return Answer {
                        decision: d,
                        source: Source::Local,
                        error: None,
                    };
                }
                _ => return answer,
            }
        }
        let mut answer = answer;
        if let Some(decision) = shadowed(&answer.decision, local.charge(key, cost)) {
            answer.decision = decision;
        }
        answer
    }

    /// [`check_verbose`](Self::check_verbose) for a cost within the max cost.
    async fn decide(&self, key: &str, cost: u32) -> Answer {
        if let Some(leases) = &self.inner.leases
            && let Some(answer) = leases.check(self, key, cost).await
        {
            return answer;
        }
        match self.ask(key, cost).await {
            Ok(decision) => Answer {
                decision,
                source: Source::Store,
                error: None,
            },
            // Shed, whatever the failure policy: allowing the excess of a
            // flood would let it through unchecked.
            Err(e) if e.is_overload() => Answer {
                decision: closed(&self.inner.quota()),
                source: Source::Shed,
                error: Some(e),
            },
            Err(e) => {
                let inner = &*self.inner;
                let backoff = inner.caller.health.backoff();
                inner.policy.answer(key, cost, e, &inner.quota(), backoff)
            }
        }
    }

    /// Wait until `key` may spend `cost` units, then spend them: each
    /// denial (from the store, a lease or the failure policy) is slept off
    /// for its `Retry-After` plus `jitter` (see [`weir_rate::wait`]). A
    /// wait dropped while it sleeps spends nothing more than the checks it
    /// saw answered, which were all denials; one dropped while a check is
    /// on its way to the store may have spent that check's units (never
    /// more).
    ///
    /// # Errors
    ///
    /// [`NeverAllowed`] at once for a cost the quota can never allow.
    pub async fn until_ready(
        &self,
        key: &str,
        cost: u32,
        jitter: Jitter,
    ) -> Result<Decision, NeverAllowed> {
        until_allowed(|| self.check_n(key, cost), jitter).await
    }

    /// Ask the store only: no lease, no failure policy (the back-off after
    /// a failure still applies). For callers that handle errors themselves.
    ///
    /// # Errors
    ///
    /// Every [`StoreError`]: the store unreachable, slow or failing, a
    /// reply that cannot be read, this instance overloaded, or a cost the
    /// quota can never allow.
    pub async fn try_check_n(&self, key: &str, cost: u32) -> Result<Decision, StoreError> {
        NeverAllowed::check(cost, self.inner.max_cost()).map_err(StoreError::NeverAllowed)?;
        let decision = self.ask(key, cost).await?;
        if cost > 0
            && decision.is_allowed()
            && let Some(local) = self.inner.policy.local()
        {
            return Ok(shadowed(&decision, local.charge(key, cost)).unwrap_or(decision));
        }
        Ok(decision)
    }

    /// One decision from the store, through the batcher if there is one,
    /// honouring the back-off.
    pub(crate) async fn ask(&self, key: &str, cost: u32) -> Result<Decision, StoreError> {
        let caller = &*self.inner.caller;
        let placed = caller.backend.place(key);
        self.on_store(placed.cell, |deadline, asked| async move {
            match &self.inner.batcher {
                Some(b) => b.submit(placed, cost, deadline, asked).await,
                None => caller
                    .decide(std::slice::from_ref(&placed.key), &[cost], deadline)
                    .await
                    .and_then(|mut d| {
                        d.pop()
                            .unwrap_or_else(|| Err(StoreError::BadReply("no decision".to_owned())))
                    }),
            }
        })
        .await
    }

    /// A call to the store for back-off cell `cell` (`call` gets its
    /// deadline and the time it was asked, in ns since the health's
    /// epoch), or [`StoreError::BackingOff`] while the back-off after a
    /// failure there holds; records a failure, or the end of one.
    async fn on_store<T, F, Fut>(&self, cell: usize, call: F) -> Result<T, StoreError>
    where
        F: FnOnce(Instant, u64) -> Fut,
        Fut: Future<Output = Result<T, StoreError>>,
    {
        let caller = &*self.inner.caller;
        // One clock reading serves the back-off check and the deadline.
        let asked = Instant::now();
        let now = caller.health.nanos_at(asked);
        let probe: Option<Probe<'_>> = caller
            .health
            .admit(cell, now)
            .map_err(|()| StoreError::BackingOff)?;
        let deadline = caller.deadline(asked);
        let timed = CallTimer {
            caller,
            started: asked,
        };
        let result = call(deadline, now).await;
        match &result {
            Ok(_) => {
                if caller.health.succeeded(cell) == Change::Back {
                    self.log_back(cell);
                }
            }
            // This instance's own saturation says nothing about the store:
            // a probe that met it is handed on (by dropping it).
            Err(e) if e.is_overload() => return result,
            Err(e) => {
                if caller.health.failed(cell) == Change::Down {
                    self.log_down(cell, e);
                }
            }
        }
        if let Some(probe) = probe {
            probe.answered();
        }
        drop(timed);
        result
    }

    /// Whether the store is being skipped for `key` after a recent failure.
    pub fn is_backing_off(&self, key: &str) -> bool {
        let caller = &*self.inner.caller;
        caller.health.is_backing_off(caller.backend.place(key).cell)
    }

    /// Spend `cost` units for `key` unconditionally, for work already done
    /// (response bytes, tokens used), on every limit, as
    /// [`Algorithm::charge`](weir_rate::Algorithm::charge) does in process: a
    /// cost beyond the limit is a debt later checks wait out. While the
    /// store cannot answer, the charge goes to the failure policy's local
    /// limiter if it has one.
    ///
    /// # Errors
    ///
    /// The [`StoreError`] that kept the store from charging, when the
    /// failure policy has no local limiter to charge instead.
    pub async fn charge(&self, key: &str, cost: u32) -> Result<Receipt, StoreError> {
        let caller = &*self.inner.caller;
        let placed = caller.backend.place(key);
        let charged = self
            .on_store(placed.cell, |deadline, _| {
                caller.bounded(deadline, caller.backend.charge(&placed.key, cost))
            })
            .await;
        match charged {
            Ok(receipt) => {
                // Counted locally too, as the store's admissions are.
                let local = self.inner.policy.local();
                let shadow = local.and_then(|l| l.charge(key, cost));
                Ok(shadow.map_or(receipt, |s| receipt.counted_locally(s)))
            }
            Err(e) => {
                let local = self.inner.policy.local();
                local.and_then(|l| l.charge(key, cost)).ok_or(e)
            }
        }
    }

    /// Give back what `spent` (a [`Decision`] of `key` by this limiter, or
    /// the [`Receipt`] of a [`charge`](Self::charge)) still counts for, by
    /// the rules of [`Algorithm::refund`](weir_rate::Algorithm::refund) for
    /// each limit, against the store's clock. Nothing for a decision that
    /// spent nothing or carries no receipt (a denial, a peek, an answer
    /// from a lease, fail-open or shedding). Refund each spending at most
    /// once.
    ///
    /// A refund goes where the spending was counted: a receipt from the
    /// store to the store (and to the failure policy's local limiter,
    /// which counts the store's admissions too, once the store has given
    /// them back), one from the local limiter (a decision made while the
    /// store was down) to that limiter.
    ///
    /// A refund the back-off after a failure kept from the store (so it
    /// certainly never reached it) waits for the store to answer again and
    /// lands then, for up to the longest window of the limits or 30 s,
    /// with at most 4096 of one limiter's refunds waiting at once. One
    /// whose call timed out is not tried again: it may have landed, and
    /// trying again could give the units back twice.
    ///
    /// # Errors
    ///
    /// The [`StoreError`] that kept the store from refunding a receipt of
    /// its own ([`StoreError::BackingOff`] once a refund has waited as long
    /// as it may); nothing is then given back (never to the local limiter,
    /// which did not count it).
    pub async fn refund(
        &self,
        key: &str,
        spent: &(impl Spending + ?Sized),
    ) -> Result<(), StoreError> {
        let Some(receipt) = spent.receipt() else {
            return Ok(());
        };
        if !receipt.is_remote() {
            if let Some(local) = self.inner.policy.local() {
                local.refund(key, receipt);
            }
            return Ok(());
        }
        let caller = &*self.inner.caller;
        let placed = caller.backend.place(key);
        let refund = || {
            self.on_store(placed.cell, |deadline, _| {
                caller.bounded(deadline, caller.backend.refund(&placed.key, receipt))
            })
        };
        match refund().await {
            Ok(()) => {}
            // Skipped, so certainly never sent: wait for the store and
            // try again. (A call that timed out may have landed: trying it
            // again could give the units back twice.)
            Err(StoreError::BackingOff) => self.refund_when_back(placed.cell, refund).await?,
            Err(e) => return Err(e),
        }
        // The fallback counted these units too (it shadows the store):
        // given back there as well, or a stall would find them spent.
        if let (Some(shadow), Some(local)) = (receipt.fallback(), self.inner.policy.local()) {
            local.refund(key, shadow);
        }
        Ok(())
    }

    /// A refund the back-off skipped, tried again each time the back-off
    /// lets a call through, for up to the longest window of the limits
    /// (after which there is nothing left to give back) or
    /// [`REFUND_PATIENCE`]; one of at most [`WAITING_REFUNDS`].
    async fn refund_when_back<F, Fut>(&self, cell: usize, refund: F) -> Result<(), StoreError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<(), StoreError>>,
    {
        let inner = &*self.inner;
        let waiting = &inner.waiting_refunds;
        if waiting.fetch_add(1, Ordering::Relaxed) >= WAITING_REFUNDS {
            waiting.fetch_sub(1, Ordering::Relaxed);
            return Err(StoreError::BackingOff);
        }
        let _waiting = Waiting(waiting);
        let window = inner.longest_window();
        let patience = window.map_or(REFUND_PATIENCE, |w| w.min(REFUND_PATIENCE));
        let give_up = Instant::now() + patience;
        loop {
            let skipped = inner.caller.health.skipped_for(cell);
            // A little past the back-off's end, so another caller's probe
            // has usually answered by then; never a busy loop.
            let pause = skipped + inner.caller.health.backoff().min(Duration::from_millis(10));
            if Instant::now() + pause >= give_up {
                return Err(StoreError::BackingOff);
            }
            tokio::time::sleep(pause.max(Duration::from_millis(1))).await;
            match refund().await {
                Err(StoreError::BackingOff) => {}
                result => return result,
            }
        }
    }

    fn log_down(&self, cell: usize, error: &StoreError) {
        let inner = &*self.inner;
        if error.is_refusal() {
            tracing::error!(
                limiter = %inner.name,
                store = B::NAME,
                server = %inner.caller.backend.describe(cell),
                policy = ?inner.policy,
                error = %error,
                "store refused the limiter's calls (credentials or permissions): \
                 the failure policy decides until they are fixed"
            );
            return;
        }
        tracing::warn!(
            limiter = %inner.name,
            store = B::NAME,
            server = %inner.caller.backend.describe(cell),
            policy = ?inner.policy,
            error = %error,
            "store unreachable: the failure policy decides until it answers again"
        );
    }

    fn log_back(&self, cell: usize) {
        let inner = &*self.inner;
        tracing::info!(
            limiter = %inner.name,
            store = B::NAME,
            server = %inner.caller.backend.describe(cell),
            failed_calls = inner.caller.health.failures(),
            "store answering again: it decides again"
        );
    }
}

/// Records a store call's time when it ends, answered or dropped (feature
/// `metrics`).
struct CallTimer<'a, B: Backend> {
    caller: &'a Caller<B>,
    started: Instant,
}

impl<B: Backend> Drop for CallTimer<'_, B> {
    fn drop(&mut self) {
        self.caller.metrics.called(self.started.elapsed());
    }
}

/// A store-backed limiter decides for any key it can name: the key's
/// `Display` form becomes the store's key (inside the limiter's prefix),
/// so a tower layer can limit by IP address, user id or any other key.
impl<B: Backend, Q: fmt::Display + ?Sized> CheckKeyAsync<Q> for StoreLimiter<B> {
    type Future = Pin<Box<dyn Future<Output = Result<Decision, NeverAllowed>> + Send>>;

    fn check_n_async(&self, key: &Q, cost: u32) -> Self::Future {
        let limiter = self.clone();
        let key = key.to_string();
        Box::pin(async move { limiter.check_n(&key, cost).await })
    }
}

/// A store-backed limiter settles on the store, after a round trip,
/// against the store's clock: a refund of the surplus by its receipt, a
/// charge of the shortfall ([`StoreLimiter::refund`],
/// [`StoreLimiter::charge`]), for the key's `Display` form as its checks
/// use. While the store is down a charge goes to the failure policy's
/// local limiter if it has one; otherwise the settlement fails and the key
/// keeps what its check charged.
impl<B: Backend, Q: fmt::Display + ?Sized> SettleKey<Q> for StoreLimiter<B> {
    type Error = StoreError;
    type Settling = Pin<Box<dyn Future<Output = Result<(), Self::Error>> + Send>>;

    fn settle(&self, key: &Q, admitted: &Decision, from: u32, to: u32) -> Self::Settling {
        let settlement = Settlement::of(admitted, from, to);
        if settlement == Settlement::Keep {
            return Box::pin(ready(Ok(())));
        }
        let limiter = self.clone();
        let key = key.to_string();
        Box::pin(async move {
            match settlement {
                Settlement::Keep => Ok(()),
                Settlement::Refund(surplus) => limiter.refund(&key, &surplus).await,
                Settlement::Charge(more) => limiter.charge(&key, more).await.map(|_| ()),
            }
        })
    }
}

/// `decision` (an admission by the store) with the receipt of the same
/// units counted on the fallback, if it counted them.
fn shadowed(decision: &Decision, local: Option<Receipt>) -> Option<Decision> {
    let remote = decision.receipt()?;
    Some(
        decision
            .clone()
            .with_receipt(remote.counted_locally(local?)),
    )
}

/// One refund counted in [`Inner::waiting_refunds`] while it waits.
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Leases are taken from the store as one plain decision for their units.
impl<B: Backend> LeaseStore for StoreLimiter<B> {
    // Written out, not `async fn`: the future's `Send` is then stated here.
    // Inferred instead, proving it for a spawned check (whose future holds
    // a lease fetch, which holds this future) overflows the trait solver.
    #[allow(clippy::manual_async_fn)]
    fn take(&self, key: &str, units: u32) -> impl Future<Output = Option<Decision>> + Send {
        async move { self.ask(key, units).await.ok() }
    }
}
