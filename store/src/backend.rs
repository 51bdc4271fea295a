//! [`Backend`]: the seam between a store crate and everything here. A
//! store says how to connect, where a key goes (its name, which keys fail
//! together, which are decided together) and how to decide, charge and
//! refund; [`StoreLimiter`](crate::StoreLimiter)
//! adds the rest once for every store.

use crate::error::{ConfigError, StoreError};
use crate::limit::Limit;
use std::future::Future;
use std::time::Duration;
use weir_rate::{Decision, Receipt};

/// What a store-backed limiter asks of its store.
///
/// Every method but [`connect`](Self::connect) is called with a deadline
/// already running: the futures need no timeout of their own, and a
/// future dropped at its deadline must leave nothing behind but what the
/// store may still do with a request already sent.
///
/// ```
/// use std::future::{Future, ready};
/// use std::num::NonZeroU32;
/// use std::time::Duration;
/// use weir_rate::{Decision, Gcra, Quota, Receipt};
/// use weir_store::{Backend, ConfigError, Placement, Plan, StoreError, StoreLimiter};
///
/// /// A store that allows everything: a toy.
/// struct Yes;
///
/// impl Backend for Yes {
///     const NAME: &'static str = "yes";
///     type Target = ();
///     type Key = String;
///     async fn connect(_: (), _: &Plan) -> Result<(Self, bool), ConfigError> {
///         Ok((Yes, true))
///     }
///     fn place(&self, key: &str) -> Placement<String> {
///         Placement::alone(key.to_owned())
///     }
///     fn decide(&self, keys: &[String], _: &[u32]) -> impl Future<Output = Result<Vec<Result<Decision, StoreError>>, StoreError>> + Send {
///         let yes = Decision::allow(1, Duration::from_secs(1), 0, Duration::ZERO);
///         ready(Ok(vec![Ok(yes); keys.len()]))
///     }
///     fn charge(&self, _: &String, cost: u32) -> impl Future<Output = Result<Receipt, StoreError>> + Send {
///         ready(Ok(Receipt::remote(0, cost)))
///     }
///     fn refund(&self, _: &String, _: Receipt) -> impl Future<Output = Result<(), StoreError>> + Send {
///         ready(Ok(()))
///     }
/// }
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let limiter = StoreLimiter::<Yes>::builder(Gcra::new(Quota::per_second(NonZeroU32::MIN)))
///     .connect(())
///     .await
///     .unwrap();
/// assert!(limiter.check("k").await.is_allowed());
/// # });
/// ```
pub trait Backend: Send + Sync + Sized + 'static {
    /// The store's name in metrics and logs (`redis`, `memcached`).
    const NAME: &'static str;

    /// Where the store is and how to reach it (servers, credentials, TLS).
    type Target: Send;

    /// A key as the store names it ([`Placement::key`]).
    type Key: Clone + Ord + Send + Sync + 'static;

    /// Connect to `target` for the limits of `plan`. Returns the backend
    /// and whether the store answered; a store that does not answer (down,
    /// unreachable, slow) is no error: the limiter starts with its failure
    /// policy and probes the store after a back-off.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] when the target or the plan cannot work with this
    /// store, or the store refused the connection's credentials or
    /// certificates.
    fn connect(
        target: Self::Target,
        plan: &Plan,
    ) -> impl Future<Output = Result<(Self, bool), ConfigError>> + Send;

    /// Where `key` goes: its name on the store, its back-off cell and its
    /// batching group, worked out once per decision.
    fn place(&self, key: &str) -> Placement<Self::Key>;

    /// How many back-off cells the store's keys fall in (default 1): every
    /// [`Placement::cell`] is below it.
    fn cells(&self) -> usize {
        1
    }

    /// Where the keys of `cell` live, for the outage log.
    fn describe(&self, cell: usize) -> String {
        let _ = cell;
        Self::NAME.to_owned()
    }

    /// Decide `costs[i]` units of `keys[i]` for every `i`, in order, in as
    /// few round trips as the store allows: keys of one
    /// [`Placement::group`], equal keys adjacent, a repeated key decided
    /// after its earlier requests. Each limit of the plan is checked; an
    /// allowed decision of a non-zero cost carries a
    /// [`Receipt::remote`].
    ///
    /// The outer error fails the whole call (the store unreachable, slow or
    /// failing: the failure policy answers, and the cell backs off); an
    /// inner one is one decision's own outcome, such as
    /// [`StoreError::Contended`] for a key whose compare-and-swap kept
    /// losing.
    fn decide(
        &self,
        keys: &[Self::Key],
        costs: &[u32],
    ) -> impl Future<Output = Result<Vec<Result<Decision, StoreError>>, StoreError>> + Send;

    /// Spend `cost` units of `key` unconditionally (see
    /// [`Algorithm::charge`](weir_rate::Algorithm::charge)) on every limit.
    fn charge(
        &self,
        key: &Self::Key,
        cost: u32,
    ) -> impl Future<Output = Result<Receipt, StoreError>> + Send;

    /// Give back what `receipt` (of this store) still counts for on every
    /// limit (see [`Algorithm::refund`](weir_rate::Algorithm::refund)).
    fn refund(
        &self,
        key: &Self::Key,
        receipt: Receipt,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Decide by `limits` from now on, on the same keys: the limiter has
    /// checked that they are the plan's algorithms in the plan's order,
    /// with the same windows (see
    /// [`StoreLimiter::set_limits`](crate::StoreLimiter::set_limits)).
    /// Every later call decides by the new limits, none by a mix of old and
    /// new.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Unsupported`] by default: a store that does not say
    /// it can change its limits while serving cannot.
    fn retune(&self, limits: &[Limit]) -> Result<(), ConfigError> {
        let _ = limits;
        Err(ConfigError::Unsupported(
            "this store cannot change its limits while serving",
        ))
    }
}

/// Where a key goes on a store, as [`Backend::place`] works it out once
/// per decision.
///
/// ```
/// use weir_store::Placement;
///
/// // A store of one server: every key in cell 0, decided in group 0.
/// let placed = Placement::alone("weir:gcra:{alice}".to_owned());
/// assert_eq!((placed.cell, placed.group), (0, 0));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement<K> {
    /// The key as the store names it (with the limiter's prefix). Keys of
    /// a batch are sorted by it, so equal keys sit together.
    pub key: K,
    /// Its back-off cell (below [`Backend::cells`]): the keys of one cell
    /// fail together, one server's or one range of a Cluster's slots, so
    /// one dead server sends only its own keys to the failure policy.
    pub cell: usize,
    /// Which keys one call may decide together (one server, one Cluster
    /// slot): the batcher groups a batch by this.
    pub group: u64,
}

impl<K> Placement<K> {
    /// `key` on a store with one cell and one group, where every key fails
    /// together and any keys may be decided in one call.
    pub fn alone(key: K) -> Self {
        Self {
            key,
            cell: 0,
            group: 0,
        }
    }
}

/// What a store-backed limiter will ask of its store, as its builder
/// settled it: the limits, the key prefix, the timeout.
///
/// ```
/// use std::num::NonZeroU32;
/// use weir_rate::{Gcra, Quota};
/// use weir_store::Plan;
///
/// let plan = Plan::new(vec![weir_store::Limit::of(&Gcra::new(Quota::per_second(NonZeroU32::MIN)))]);
/// assert_eq!((plan.prefix(), plan.limits().len()), ("weir", 1));
/// ```
#[derive(Debug, Clone)]
pub struct Plan {
    pub(crate) limits: Vec<Limit>,
    pub(crate) prefix: String,
    pub(crate) timeout: Duration,
}

impl Plan {
    /// A plan for `limits` with the default prefix (`weir`) and timeout
    /// (100 ms).
    pub fn new(limits: Vec<Limit>) -> Self {
        Self {
            limits,
            prefix: "weir".to_owned(),
            timeout: Duration::from_millis(100),
        }
    }

    /// The limits, all-or-nothing when there are several.
    pub fn limits(&self) -> &[Limit] {
        &self.limits
    }

    /// The prefix every store key of the limiter starts with, so limiters
    /// on different prefixes never share a key.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// How long one call may take.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }
}
