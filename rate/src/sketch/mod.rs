//! One GCRA limit per key in bounded memory: theoretical arrival times kept
//! in a count-min-style sketch.
//!
//! # Design
//!
//! Every key maps (through `weir_limits::sketch::Locator`, one hash) to
//! `hashes` cells of an array of `AtomicU64` timestamps. A key's TAT is
//! read as the **minimum** of its cells, and an allowed request raises
//! **every** cell of the key to at least the key's new TAT (`fetch_max`).
//! Each cell therefore stays at or above the TAT of every key that maps to
//! it, so the estimate of a key's TAT is never below its true TAT: a
//! colliding key can only make a key **stricter**, never looser. With unit
//! costs, a key is never allowed more than the exact keyed limiter would
//! allow it on the same requests (greedy GCRA admits the most requests of
//! any conforming admission, and the sketch's admissions conform); the
//! property test `sketch_never_allows_more_than_exact` checks it.
//!
//! Concurrent requests stay exact for the key itself: a request reads the
//! cells, raises every cell but its minimum one, and commits with a
//! compare-and-swap on the minimum cell (retrying if that cell moved).
//! Since every request of a key raises all of its cells before committing,
//! a request that commits later cannot have read a value below the earlier
//! commit's TAT; a failed attempt leaves its raises behind, which can only
//! make colliding keys stricter. The loom models check both cases.
//!
use crate::algorithms::{Gcra, Step, gcra_step};
use crate::cells::Cells;
use crate::check::{CheckKey, CheckKeyAsync, SettleKey, Settlement};
use crate::clock::MAX_AHEAD_NANOS;
use crate::clock::{Clock, MonotonicClock, Timestamp};
use crate::config::ConfigError;
use crate::decision::{CheckAtError, Decision, NeverAllowed, Receipt};
use crate::mode::Mode;
use crate::quota::Quota;
use crate::sync::{AtomicU64, Mutex, Ordering, fence};
use std::convert::Infallible;
use std::future::{Ready, ready};
use std::hash::Hash;
use std::num::NonZeroU64;
use std::sync::atomic::AtomicBool;
use weir_limits::ConfigError as ShapeError;
use weir_limits::sketch::{Location, Locator, MAX_HASHES};
pub use weir_limits::{Layout, Shape};

/// The GCRA parameters behind a sequence lock, so the hot path reads them
/// with plain loads and a reconfiguration is never seen half done.
struct Params {
    seq: AtomicU64,
    limit: AtomicU64,
    burst: AtomicU64,
    window: AtomicU64,
    interval: AtomicU64,
    tolerance: AtomicU64,
    writer: Mutex<()>,
}

impl Params {
    fn new(gcra: &Gcra) -> Self {
        let q = gcra.quota();
        Self {
            seq: AtomicU64::new(0),
            limit: AtomicU64::new(u64::from(q.limit())),
            burst: AtomicU64::new(u64::from(q.burst())),
            window: AtomicU64::new(q.window_nanos()),
            interval: AtomicU64::new(gcra.interval_nanos()),
            tolerance: AtomicU64::new(gcra.tolerance_nanos()),
            writer: Mutex::new(()),
        }
    }

    #[inline]
    fn read(&self) -> Gcra {
        loop {
            let before = self.seq.load(Ordering::Acquire);
            if before & 1 == 0 {
                let limit = self.limit.load(Ordering::Relaxed);
                let burst = self.burst.load(Ordering::Relaxed);
                let window = self.window.load(Ordering::Relaxed);
                let interval = self.interval.load(Ordering::Relaxed);
                let tolerance = self.tolerance.load(Ordering::Relaxed);
                fence(Ordering::Acquire);
                if self.seq.load(Ordering::Relaxed) == before {
                    // The values were written together from a valid quota.
                    let quota = Quota::from_raw(limit as u32, burst as u32, window);
                    return Gcra::from_parts(quota, interval, tolerance);
                }
            }
            spin();
        }
    }

    fn write(&self, gcra: &Gcra) {
        let _writer = self.writer.lock();
        let q = gcra.quota();
        self.seq.fetch_add(1, Ordering::Relaxed);
        fence(Ordering::Release);
        self.limit.store(u64::from(q.limit()), Ordering::Relaxed);
        self.burst.store(u64::from(q.burst()), Ordering::Relaxed);
        self.window.store(q.window_nanos(), Ordering::Relaxed);
        self.interval
            .store(gcra.interval_nanos(), Ordering::Relaxed);
        self.tolerance
            .store(gcra.tolerance_nanos(), Ordering::Relaxed);
        self.seq.fetch_add(1, Ordering::Release);
    }
}

#[inline]
fn spin() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::hint::spin_loop();
}

/// One GCRA limit per key in bounded memory: theoretical arrival times kept
/// in a count-min-style sketch. A key's time is the smallest of its cells
/// and an allowed request raises all of them, so a colliding key can only
/// make a key **stricter**, never looser: with unit costs a key is never
/// allowed more than the exact [`KeyedLimiter`](crate::KeyedLimiter) would
/// allow it on the same requests.
///
/// ```
/// use std::num::NonZeroU32;
/// use weir_rate::clock::ManualClock;
/// use weir_rate::{Quota, Shape, SketchLimiter};
///
/// let quota = Quota::per_second(NonZeroU32::new(2).unwrap());
/// let shape = Shape::rows::<4, 4096>().with_seed(7);
/// let limiter = SketchLimiter::with_clock(quota, shape, ManualClock::new());
/// assert_eq!(limiter.memory_bytes(), 4 * 4096 * 8);
/// assert!(limiter.check(&10u32).is_allowed());
/// assert!(limiter.check(&10u32).is_allowed());
/// assert!(!limiter.check(&10u32).is_allowed());
/// assert!(limiter.check(&11u32).is_allowed());
/// ```
///
/// # Trade-off against the exact [`KeyedLimiter`](crate::KeyedLimiter)
///
/// * Memory is fixed (`8 · hashes · slots` bytes) whatever the number of
///   keys; the keyed limiter's grows with the keys active within a window,
///   up to its capacity (beyond which it forgets keys into a sketch like
///   this one).
/// * Wrong denials: a key is over-limited when all of its cells are shared
///   with keys that spent recently. Each cell accumulates the spending of
///   every key hashed to it, so once the request rate landing on one cell
///   (about `total rate × hashes / cells` for uniform keys) approaches the
///   per-key rate, cells saturate and keys start being denied. Size the
///   sketch so that `slots` is well above `total rate / per-key rate`
///   (and above the number of keys active within one burst period); the
///   bench report shows the allowed fraction next to the exact limiter's.
/// * No refunds: lowering a shared cell could loosen another key. Forced
///   charges ([`charge`](Self::charge)) raise the key's cells like a
///   check; their receipts have no refund path here either.
/// * A caller-supplied time raises the cells of its key, and so can make
///   colliding keys stricter until the clock reaches it: a time more than
///   [`MAX_AHEAD`](crate::clock::MAX_AHEAD) past the clock is refused
///   ([`CheckAtError::AheadOfClock`]), so no check can hold a cell beyond
///   that (plus the key's burst); at the end of the clock's range it
///   would deny every key sharing the cell for good.
///
/// # Sizing
///
/// [`try_sized_for`](Self::try_sized_for) picks the shape from the expected load
/// ([`shape_for_load`](Self::shape_for_load) is the rule alone). A cell's TAT runs ahead of
/// the clock while the requests landing on it keep it "busy": with `R`
/// requests a second spread by the hash over `slots` cells per row and a
/// per-key rate `r`, a cell is busy a fraction `ρ ≤ R / (slots · r)` of the
/// time, and a request arriving independently of the others finds it busy
/// with that probability. A key within its quota is wrongly denied only if
/// **every** one of its `hashes` cells is busy with other keys' spending,
/// which, the rows being hashed independently, happens in about `ρ^hashes`
/// of its checks; a burst tolerance above one request only lowers that. So
/// for a target wrong-denial fraction `δ`: `slots = ⌈R / (r · δ^(1/hashes))⌉`,
/// with `hashes` (at most 4, since every allowed check
/// writes every row) chosen to need the least memory. Coordinated bursts
/// (many keys arriving in lockstep) are outside the bound. The bound is
/// conservative (`rate/tests/limiters/sizing.rs` checks it on a simulated load).
pub struct SketchLimiter<C = MonotonicClock> {
    locator: Locator,
    cells: Cells,
    params: Params,
    clock: C,
    /// A time up to which a caller's time is within
    /// [`MAX_AHEAD`](crate::clock::MAX_AHEAD) of the clock (a reading plus
    /// that), so `check_n_at` reads the clock only beyond it.
    trusted_until: AtomicU64,
    shadow: AtomicBool,
}

impl SketchLimiter<MonotonicClock> {
    /// A limiter over a sketch of `shape`, on the monotonic clock.
    pub fn new(quota: Quota, shape: Shape) -> Self {
        Self::with_clock(quota, shape, MonotonicClock::new())
    }

    /// A sketch sized for `requests_per_second` checks across all keys so
    /// that a key within its quota is wrongly denied in at most about
    /// `wrong_denials` of its checks (see [sizing](Self#sizing)
    /// for the rule and its assumptions).
    ///
    /// # Errors
    ///
    /// As [`shape_for_load`](Self::shape_for_load).
    ///
    /// ```
    /// use std::num::{NonZeroU32, NonZeroU64};
    /// use weir_rate::{Quota, SketchLimiter};
    ///
    /// // 1000 requests a second per key; 20 M a second in all; 0.1% wrong denials.
    /// let quota = Quota::per_second(NonZeroU32::new(1000).unwrap());
    /// let load = NonZeroU64::new(20_000_000).unwrap();
    /// let limiter = SketchLimiter::try_sized_for(quota, load, 0.001).unwrap();
    /// assert_eq!(limiter.memory_bytes(), 4 * 112_469 * 8);
    /// assert!(SketchLimiter::try_sized_for(quota, load, 1.5).is_err());
    /// ```
    pub fn try_sized_for(
        quota: Quota,
        requests_per_second: NonZeroU64,
        wrong_denials: f64,
    ) -> Result<Self, ConfigError> {
        let shape = Self::shape_for_load(quota, requests_per_second, wrong_denials)?;
        Ok(Self::new(quota, shape))
    }

    /// The most hashes [`shape_for_load`](Self::shape_for_load) chooses: every allowed check
    /// writes each of a key's cells, so more rows cost time on every check for
    /// a little less memory.
    const MAX_SIZED_HASHES: usize = 4;

    /// The rows-layout shape of a [`SketchLimiter`] enforcing `quota` under
    /// `requests_per_second` checks across all keys, so that a key within its
    /// quota is wrongly denied in at most about `wrong_denials` (in (0, 1)) of
    /// its checks: `slots = ⌈R / (r · δ^(1/hashes))⌉` with `hashes ≤ 4`
    /// chosen for the least memory (see [sizing](Self#sizing)).
    ///
    /// # Errors
    ///
    /// [`ConfigError::Sketch`] with weir-limits' `InvalidFraction` unless
    /// `wrong_denials` lies in (0, 1), or its `TooManyCells` when the sketch
    /// would need more than 2³² cells.
    ///
    /// ```
    /// use std::num::{NonZeroU32, NonZeroU64};
    /// use weir_rate::{Quota, SketchLimiter};
    ///
    /// let quota = Quota::per_second(NonZeroU32::new(10).unwrap());
    /// let load = NonZeroU64::new(10_000).unwrap();
    /// // ρ = 0.01^(1/4) ≈ 0.316 per cell, so ⌈1000 / 0.316⌉ slots per row.
    /// let shape = SketchLimiter::shape_for_load(quota, load, 0.01)?;
    /// assert_eq!((shape.hashes(), shape.slots()), (4, 3163));
    /// # Ok::<(), weir_rate::ConfigError>(())
    /// ```
    pub fn shape_for_load(
        quota: Quota,
        requests_per_second: NonZeroU64,
        wrong_denials: f64,
    ) -> Result<Shape, ConfigError> {
        if !(wrong_denials > 0.0 && wrong_denials < 1.0) {
            return Err(ShapeError::InvalidFraction(wrong_denials).into());
        }
        let per_key = 1e9 / quota.emission_interval_nanos().max(1) as f64;
        let cells_per_row = requests_per_second.get() as f64 / per_key;
        let slots_for = |hashes: usize| {
            (cells_per_row / wrong_denials.powf(1.0 / hashes as f64))
                .ceil()
                .max(1.0)
        };
        let hashes = (1..=Self::MAX_SIZED_HASHES)
            .min_by(|&a, &b| (a as f64 * slots_for(a)).total_cmp(&(b as f64 * slots_for(b))))
            .unwrap_or(1);
        let slots = slots_for(hashes);
        if slots * hashes as f64 > (u64::from(u32::MAX) + 1) as f64 {
            return Err(ShapeError::TooManyCells {
                requested: (slots * hashes as f64) as u128,
            }
            .into());
        }
        Ok(Shape::try_new(hashes, slots as usize, Layout::Rows)?)
    }
}

impl<C: Clock> SketchLimiter<C> {
    /// A limiter over a sketch of `shape`, reading `clock`.
    pub fn with_clock(quota: Quota, shape: Shape, clock: C) -> Self {
        let locator = Locator::new(shape);
        let cells = Cells::new(locator.cells());
        let trusted_until = AtomicU64::new(clock.now_nanos().saturating_add(MAX_AHEAD_NANOS));
        Self {
            locator,
            cells,
            params: Params::new(&Gcra::new(quota)),
            clock,
            trusted_until,
            shadow: AtomicBool::new(false),
        }
    }

    /// Bytes of cell memory (fixed for the limiter's life).
    pub fn memory_bytes(&self) -> usize {
        self.cells.len() * std::mem::size_of::<u64>()
    }

    /// Check one unit for `key`.
    #[inline]
    #[must_use = "a decision not looked at lets a denied request through"]
    pub fn check<K: Hash + ?Sized>(&self, key: &K) -> Decision {
        self.run(key, 1, Mode::Consume)
            .unwrap_or_else(|_| Decision::deny_ns(0, 0, 0, 0, u64::MAX))
    }

    /// Check `cost` units for `key`, spending them if allowed.
    ///
    /// # Errors
    ///
    /// [`NeverAllowed`] when `cost` exceeds what the limiter can ever allow
    /// at once (its max cost); a denial is an `Ok` decision.
    #[must_use = "a decision not looked at lets a denied request through"]
    pub fn check_n<K: Hash + ?Sized>(&self, key: &K, cost: u32) -> Result<Decision, NeverAllowed> {
        self.run(key, cost, Mode::Consume)
    }

    /// What [`check_n`](Self::check_n) would answer, without spending.
    ///
    /// # Errors
    ///
    /// [`NeverAllowed`] when `cost` exceeds what the limiter can ever allow
    /// at once (its max cost); a denial is an `Ok` decision.
    pub fn peek_n<K: Hash + ?Sized>(&self, key: &K, cost: u32) -> Result<Decision, NeverAllowed> {
        self.run(key, cost, Mode::Peek)
    }

    /// The time on this limiter's clock, for [`check_n_at`](Self::check_n_at).
    pub fn now(&self) -> Timestamp<C> {
        self.clock.now()
    }

    /// [`check_n`](Self::check_n) at a time read from this limiter's clock
    /// (e.g. once for a batch of requests). GCRA keeps no time of a key's
    /// last check: a time earlier than the key's recent requests is simply
    /// judged more strictly (their arrivals are still ahead of it). The
    /// clock is read only for a time well ahead of earlier readings.
    ///
    /// # Errors
    ///
    /// [`CheckAtError::NeverAllowed`] for a cost above the burst;
    /// [`CheckAtError::AheadOfClock`] for a time more than
    /// [`MAX_AHEAD`](crate::clock::MAX_AHEAD) past the clock. Neither
    /// changes any cell.
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use std::time::Duration;
    /// use weir_rate::{CheckAtError, Quota, SketchLimiter, Shape};
    ///
    /// let limiter = SketchLimiter::new(Quota::per_second(NonZeroU32::MIN), Shape::rows::<2, 64>());
    /// let now = limiter.now();
    /// assert!(matches!(limiter.check_n_at(&"a", 1, now + Duration::MAX), Err(CheckAtError::AheadOfClock { .. })));
    /// assert!(limiter.check_n_at(&"a", 1, now).unwrap().is_allowed());
    /// ```
    pub fn check_n_at<K: Hash + ?Sized>(
        &self,
        key: &K,
        cost: u32,
        now: Timestamp<C>,
    ) -> Result<Decision, CheckAtError> {
        let at = now.as_nanos();
        // Relaxed: the bound only decides whether to read the clock; any
        // value it ever held was a reading plus the horizon.
        if at > self.trusted_until.load(Ordering::Relaxed) {
            let reading = self.clock.now_nanos();
            CheckAtError::check_ahead(at, reading)?;
            self.trusted_until
                .fetch_max(reading.saturating_add(MAX_AHEAD_NANOS), Ordering::Relaxed);
        }
        Ok(self.run_at(&self.locator.locate(key), cost, Mode::Consume, at)?)
    }

    /// Spend `cost` units for `key` now, unconditionally: work already done
    /// (response bytes, tokens) is counted even past the limit. The key's
    /// arrival time becomes `max(TAT, now) + cost·T` as
    /// [`Algorithm::charge`](crate::Algorithm::charge) sets it, raising every
    /// cell of the key to at least that (saturating at the end of the
    /// clock's range), so colliding keys can only be held tighter, as with
    /// a check. Also in shadow mode.
    ///
    /// Tighter can mean for long: a charge far beyond the burst (a large
    /// response on a small quota) holds a key whose every cell it shares
    /// until the debt is paid, where a check holds it at most one window.
    /// Where clients choose both their keys and what they are charged (many
    /// keys, each charged a large cost), the share of honest keys held
    /// grows with the cells the debts cover: charge large costs through an
    /// exact [`KeyedLimiter`](crate::KeyedLimiter), or cap them.
    ///
    /// The sketch has no refunds (lowering a shared cell could loosen
    /// another key), so the returned [`Receipt`] only records the charge.
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use weir_rate::clock::ManualClock;
    /// use weir_rate::Shape;
    /// use weir_rate::{Quota, SketchLimiter};
    ///
    /// let limiter = SketchLimiter::with_clock(Quota::per_second(NonZeroU32::new(2).unwrap()), Shape::rows::<4, 4096>(), ManualClock::new());
    /// let receipt = limiter.charge(&"alice", 10);
    /// assert_eq!(receipt.cost(), 10);
    /// assert!(!limiter.check(&"alice").is_allowed());
    /// ```
    pub fn charge<K: Hash + ?Sized>(&self, key: &K, cost: u32) -> Receipt {
        self.charge_by(key, cost, &self.params.read())
    }

    /// [`charge`](Self::charge) at the rate of `gcra` rather than the
    /// limiter's own: a key's tier's.
    pub(crate) fn charge_by<K: Hash + ?Sized>(&self, key: &K, cost: u32, gcra: &Gcra) -> Receipt {
        let location = self.locator.locate(key);
        let now = self.clock.now_nanos();
        let debt = u128::from(cost) * u128::from(gcra.interval_nanos());
        loop {
            let mut seen = [0u64; MAX_HASHES];
            let (min, at) = self.cells.min(&location, &mut seen);
            let new = u64::try_from(u128::from(min.max(now)) + debt).unwrap_or(u64::MAX);
            // Committed on the minimum's cell, as a check's step is, so a
            // concurrent check or charge of the key is never lost.
            self.cells.raise(&location, new, &seen, Some(at));
            if new == min || self.cells.commit(at, min, new) {
                return Receipt::new(now, cost);
            }
            spin();
        }
    }

    /// Change the quota for every key. Stored TATs are kept: what was spent
    /// stays spent (as time), so no key gains a burst.
    pub fn set_limit(&self, quota: Quota) {
        self.params.write(&Gcra::new(quota));
    }

    /// The quota in force.
    pub fn quota(&self) -> Quota {
        self.params.read().quota()
    }

    /// Shadow (dry-run) mode, as for [`RateLimiter::set_shadow`](crate::RateLimiter::set_shadow).
    pub fn set_shadow(&self, shadow: bool) {
        self.shadow
            .store(shadow, std::sync::atomic::Ordering::Relaxed);
    }

    #[inline]
    fn run<K: Hash + ?Sized>(
        &self,
        key: &K,
        cost: u32,
        mode: Mode,
    ) -> Result<Decision, NeverAllowed> {
        // The clock is read after hashing: the counter read overlaps it.
        let location = self.locator.locate(key);
        self.run_at(&location, cost, mode, self.clock.now_nanos())
    }

    fn run_at(
        &self,
        location: &Location,
        cost: u32,
        mode: Mode,
        now: u64,
    ) -> Result<Decision, NeverAllowed> {
        self.run_by(location, cost, mode, now, &self.params.read())
    }

    /// [`run`](Self::run) by the rate of `gcra` rather than the limiter's
    /// own: a key's tier's. Keys of different rates may share cells: every
    /// cell stays at or above the arrival time of each key on it, whatever
    /// rate raised it, so a collision still only makes a key stricter.
    #[inline]
    pub(crate) fn run_with<K: Hash + ?Sized>(
        &self,
        key: &K,
        cost: u32,
        mode: Mode,
        gcra: &Gcra,
    ) -> Result<Decision, NeverAllowed> {
        let location = self.locator.locate(key);
        self.run_by(&location, cost, mode, self.clock.now_nanos(), gcra)
    }

    fn run_by(
        &self,
        location: &Location,
        cost: u32,
        mode: Mode,
        now: u64,
        gcra: &Gcra,
    ) -> Result<Decision, NeverAllowed> {
        NeverAllowed::check(cost, gcra.quota().burst())?;
        let step = self.step(gcra, location, cost, mode, now);
        let decision = gcra.decision(now, cost, &step);
        Ok(if self.shadow.load(std::sync::atomic::Ordering::Relaxed) {
            decision.shadowed()
        } else {
            decision
        })
    }

    /// Whether one unit for `key` may be spent now, spending it if so:
    /// [`check`](Self::check) for callers that need only the yes or no
    /// (no headers), without building a [`Decision`]. In shadow mode it
    /// always answers yes, as `check(key).is_allowed()` does.
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use weir_rate::{Quota, Shape, SketchLimiter};
    ///
    /// let quota = Quota::per_second(NonZeroU32::new(1).unwrap());
    /// let limiter = SketchLimiter::new(quota, Shape::rows::<4, 4096>());
    /// assert!(limiter.allows(&"alice"));
    /// assert!(!limiter.allows(&"alice"));
    /// ```
    #[inline]
    pub fn allows<K: Hash + ?Sized>(&self, key: &K) -> bool {
        let location = self.locator.locate(key);
        let now = self.clock.now_nanos();
        let gcra = self.params.read();
        let allowed = matches!(
            self.step(&gcra, &location, 1, Mode::Consume, now),
            Step::Allow(_)
        );
        allowed || self.shadow.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// One GCRA step for `key` over its cells (a cost within the burst),
    /// committed unless `mode` is [`Mode::Peek`].
    #[inline]
    fn step(&self, gcra: &Gcra, location: &Location, cost: u32, mode: Mode, now: u64) -> Step {
        loop {
            let mut seen = [0u64; MAX_HASHES];
            // The commit below targets the minimum's cell, one of the
            // key's own even when every cell is saturated at `u64::MAX`;
            // a cell of no interest to the key would fail the
            // compare-and-swap and retry forever.
            let (min, at) = self.cells.min(location, &mut seen);
            let step = gcra_step(
                min,
                now,
                cost,
                gcra.interval_nanos(),
                gcra.tolerance_nanos(),
            );
            let Step::Allow(new) = step else {
                return step;
            };
            if mode == Mode::Peek {
                return step;
            }
            self.cells.raise(location, new, &seen, Some(at));
            if self.cells.commit(at, min, new) {
                return step;
            }
            spin();
        }
    }
}

impl<C> std::fmt::Debug for SketchLimiter<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SketchLimiter")
            .field("cells", &self.cells.len())
            .finish_non_exhaustive()
    }
}

/// Charges raise the key's cells; refunds give nothing back (the sketch
/// has none).
impl<Q: Hash + ?Sized, C: Clock> CheckKey<Q> for SketchLimiter<C> {
    fn check_n(&self, key: &Q, cost: u32) -> Result<Decision, NeverAllowed> {
        self.check_n(key, cost)
    }

    fn charge(&self, key: &Q, cost: u32) -> Option<Receipt> {
        Some(self.charge(key, cost))
    }
}

impl<Q: ?Sized, C> CheckKeyAsync<Q> for SketchLimiter<C>
where
    Self: CheckKey<Q> + 'static,
{
    type Future = Ready<Result<Decision, NeverAllowed>>;

    fn check_n_async(&self, key: &Q, cost: u32) -> Self::Future {
        ready(self.check_n(key, cost))
    }
}

/// A sketch settles only upward: it has no refunds (lowering cells that
/// other keys share could loosen them), so a request that cost less than
/// it was admitted at keeps its admission, which is never looser.
impl<Q: Hash + ?Sized, C: Clock> SettleKey<Q> for SketchLimiter<C>
where
    Self: CheckKeyAsync<Q>,
{
    type Error = Infallible;
    type Settling = Ready<Result<(), Infallible>>;

    fn settle(&self, key: &Q, admitted: &Decision, from: u32, to: u32) -> Self::Settling {
        // Its decisions carry no receipt: a refund comes out as `Keep`.
        if let Settlement::Charge(more) = Settlement::of(admitted, from, to) {
            let _ = self.charge(key, more);
        }
        ready(Ok(()))
    }
}

#[cfg(feature = "wait")]
#[cfg_attr(docsrs, doc(cfg(feature = "wait")))]
impl<C: Clock> SketchLimiter<C> {
    /// Wait until `key` may spend `cost` units, then spend them (see the
    /// [`wait`](crate::wait) module).
    ///
    /// # Errors
    ///
    /// [`NeverAllowed`] at once for a cost the quota can never allow.
    pub async fn until_key_ready<K: Hash + ?Sized>(
        &self,
        key: &K,
        cost: u32,
        jitter: crate::wait::Jitter,
    ) -> Result<Decision, NeverAllowed> {
        crate::wait::until_allowed(|| std::future::ready(self.check_n(key, cost)), jitter).await
    }
}
