//! Local pre-aggregation of hot keys through leases.

use crate::answer::{Answer, Source};
use crate::error::ConfigError;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::{Notify, oneshot};
use tokio::time::Instant;
use weir_primitives::sync::RwLock;
use weir_primitives::time::duration_to_nanos;
use weir_rate::{Decision, Quota};

/// Answer hot keys locally from leases taken from the store in blocks.
///
/// A key becomes *hot* on an instance once it sees `hot_after` checks
/// within one second there. A hot key that was far from its limit at the
/// last store answer (at least `2 × lease` units left) gets a *lease*: one
/// ordinary decision spends `lease` units at once, and the next checks
/// on this instance are answered from the lease without a round trip, until
/// it is used up or `max_age` has passed. Near the limit, or while a lease
/// is being fetched, checks take the plain path (one store call each).
///
/// # Error bounds
///
/// * **No unit is admitted that the store did not count.** Every unit
///   answered from a lease was spent on the store when the lease was taken.
/// * **Shift in time.** The next lease is fetched in the background once
///   half of the current one is used, and the unused rest stays valid with
///   it, so an instance holds fewer than `1.5 × lease` counted-but-unused
///   units, each admitted at most `2 × max_age` after the store counted it.
///   Over any interval of length `d` an instance therefore admits at most
///   what the limit allows over `d + 2 × max_age`; with `n` instances the
///   excess over the limit in any window is below `1.5 × n × lease` units
///   (the bench suite measures it as "extra admitted").
/// * **Waste.** Units of a lease that expires unused are lost (an
///   under-admission of fewer than `1.5 × lease` per instance per expiry).
/// * **Remaining.** A decision from a lease reports the `remaining` of the
///   last store answer plus the lease's unused units: an estimate, stale by
///   at most `max_age`; its reset is the last store answer's, counted down.
/// * **Cancellation.** A lease is fetched on a task of its own, so a check
///   dropped while it waits for one (its client gone, a `timeout` around
///   it) leaves the fetch to finish: the lease is kept, the dropped
///   check's units go back to it, and the checks waiting for it are woken.
///
/// ```
/// use std::time::Duration;
/// use weir_store::PreAggregation;
///
/// let hot = PreAggregation { lease: 32, max_age: Duration::from_millis(50), ..Default::default() };
/// assert_eq!(hot.hot_after, PreAggregation::default().hot_after);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PreAggregation {
    /// Units taken from the store per lease (at least 2).
    pub lease: u32,
    /// Checks per second on this instance that make a key hot (at least 1).
    pub hot_after: u32,
    /// How long an unused lease may be spent (non-zero; any length,
    /// `Duration::MAX` included, saturates to "until used up").
    pub max_age: Duration,
    /// Most keys tracked for hotness on this instance.
    pub max_keys: usize,
}

impl Default for PreAggregation {
    fn default() -> Self {
        Self {
            lease: 64,
            hot_after: 100,
            max_age: Duration::from_millis(100),
            max_keys: 10_000,
        }
    }
}

impl PreAggregation {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if self.lease < 2 || self.hot_after == 0 || self.max_age.is_zero() || self.max_keys == 0 {
            return Err(ConfigError::Invalid(
                "pre-aggregation needs lease >= 2, hot_after >= 1, a non-zero max_age and max_keys",
            ));
        }
        Ok(())
    }
}

#[derive(Default)]
struct Entry {
    /// The second (since the epoch) `hits` counts in.
    second: u64,
    hits: u32,
    /// Units left in the lease, and when it expires (ns since the epoch).
    left: u32,
    expires: u64,
    /// The last store answer's remaining units, and when it came.
    remaining: Option<(u64, u64)>,
    /// When the last store answer's reset comes (ns since the epoch), so
    /// an answer from the lease reports the time left until then, not
    /// the time left when store answered.
    reset_at: u64,
    /// The limit and window of the last store answer (of an all-of
    /// limiter, the binding limit's; the window in nanoseconds), which
    /// answers from the lease report.
    policy: Option<(u32, Duration)>,
    fetching: bool,
    /// Bumped and notified when a fetch finishes.
    generation: u64,
    notify: Arc<Notify>,
}

/// What a lease answers with: the last store answer's remaining units
/// and the lease's unused ones, the time until the store answer's reset,
/// and its limit and window.
#[derive(Clone, Copy)]
struct Granted {
    remaining: u64,
    left: u32,
    reset_ns: u64,
    policy: Option<(u32, Duration)>,
}

enum Step {
    Answer(Answer, bool),
    Wait(Arc<Notify>, u64),
    Fetch,
    Plain,
}

/// What the leases need of the limiter they serve: one decision from the
/// store, asked for a lease's units (no lease, no failure policy). The
/// store-backed limiter implements it in its own module; a fetch holds a
/// clone, so that it finishes when its caller is gone.
pub(crate) trait LeaseStore: Clone + Send + Sync + 'static {
    /// The store's decision on `units` units of `key`; `None` if the store
    /// could not answer.
    fn take(&self, key: &str, units: u32) -> impl Future<Output = Option<Decision>> + Send;
}

pub(crate) struct Leases {
    cfg: PreAggregation,
    /// What a lease's answer reports when the store has not said, and the
    /// largest cost every limit can allow at once (no lease is larger):
    /// the limits' now.
    tuned: RwLock<(Quota, u32)>,
    /// How long a check waits for a lease being fetched.
    timeout: Duration,
    map: Mutex<HashMap<String, Entry>>,
    epoch: Instant,
    /// The second (since `epoch`) of the last sweep of a full map.
    swept: AtomicU64,
    /// Sweeps of a full map so far.
    sweeps: AtomicU64,
}

impl Leases {
    /// Leases for a limiter of `quota`, `max_cost` and calls of `timeout`.
    pub(crate) fn new(cfg: PreAggregation, quota: Quota, max_cost: u32, timeout: Duration) -> Self {
        Self {
            cfg,
            tuned: RwLock::new((quota, max_cost)),
            timeout,
            map: Mutex::new(HashMap::new()),
            epoch: Instant::now(),
            swept: AtomicU64::new(u64::MAX),
            sweeps: AtomicU64::new(0),
        }
    }

    /// Nanoseconds since `epoch`, saturating.
    fn now(&self) -> u64 {
        duration_to_nanos(self.epoch.elapsed())
    }

    /// Take leases by `quota` and `max_cost` from now on. A lease granted
    /// before is spent until it expires (at most its `max_age`).
    pub(crate) fn set_limits(&self, quota: Quota, max_cost: u32) {
        *self.tuned.write() = (quota, max_cost);
    }

    fn lease_decision(&self, granted: Granted) -> Answer {
        let q = self.tuned.read().0;
        let (limit, window) = granted.policy.unwrap_or((q.limit(), q.window()));
        let r = u32::try_from(granted.remaining.saturating_add(u64::from(granted.left)))
            .unwrap_or(u32::MAX);
        Answer {
            decision: Decision::allow(limit, window, r, Duration::from_nanos(granted.reset_ns)),
            source: Source::Lease,
            error: None,
        }
    }

    /// Answer from a lease, or take one; `None` sends the check down the
    /// plain path.
    pub(crate) async fn check<S: LeaseStore>(
        self: &Arc<Self>,
        store: &S,
        key: &str,
        cost: u32,
    ) -> Option<Answer> {
        let max_age = duration_to_nanos(self.cfg.max_age);
        let lease = self.cfg.lease.min(self.tuned.read().1).max(cost);
        // At most: find the lease empty with a fetch in flight, wait for
        // it, answer from the new lease.
        for round in 0..2 {
            let now = self.now();
            let step = {
                let mut map = self.map.lock();
                if !map.contains_key(key) {
                    if !self.make_room(&mut map, now) {
                        return None;
                    }
                    map.insert(key.to_owned(), Entry::default());
                }
                let e = map.get_mut(key)?;
                let sec = now / 1_000_000_000;
                if e.second != sec {
                    e.second = sec;
                    e.hits = 0;
                }
                if round == 0 {
                    e.hits = e.hits.saturating_add(1);
                }
                let near_limit = match e.remaining {
                    Some((r, at)) => r < 2 * u64::from(lease) && now < at.saturating_add(max_age),
                    None => false,
                };
                if e.left >= cost && now < e.expires {
                    e.left -= cost;
                    let rem = e.remaining.map_or(0, |r| r.0);
                    // Fetch the next lease in the background while half of
                    // this one is left, so callers rarely wait.
                    let prefetch = e.left < lease / 2 && !e.fetching && !near_limit;
                    if prefetch {
                        e.fetching = true;
                    }
                    let granted = Granted {
                        remaining: rem,
                        left: e.left,
                        reset_ns: e.reset_at.saturating_sub(now),
                        policy: e.policy,
                    };
                    Step::Answer(self.lease_decision(granted), prefetch)
                } else if e.fetching && round == 0 && !near_limit && e.hits >= self.cfg.hot_after {
                    Step::Wait(e.notify.clone(), e.generation)
                } else if e.hits < self.cfg.hot_after || e.fetching || near_limit {
                    Step::Plain
                } else {
                    e.fetching = true;
                    e.left = 0;
                    Step::Fetch
                }
            };
            match step {
                Step::Plain => return None,
                Step::Answer(outcome, prefetch) => {
                    if prefetch {
                        self.prefetch(store, key, lease);
                    }
                    return Some(outcome);
                }
                Step::Fetch => {
                    let fetch = Fetch::new(self, store, key, lease);
                    let granted = match tokio::runtime::Handle::try_current() {
                        // On a task of its own, so that it finishes even
                        // when this caller is dropped: the lease is kept,
                        // and the caller's units go back to it.
                        Ok(rt) => {
                            let (tx, rx) = oneshot::channel();
                            let (leases, key) = (Arc::clone(self), key.to_owned());
                            rt.spawn(async move {
                                if let Err(Some(_)) = tx.send(fetch.run(cost).await) {
                                    leases.give_back(&key, cost);
                                }
                            });
                            rx.await.ok().flatten()
                        }
                        Err(_) => fetch.run(cost).await,
                    };
                    return granted.map(|granted| self.lease_decision(granted));
                }
                Step::Wait(notify, generation) => {
                    let woken = notify.notified();
                    tokio::pin!(woken);
                    woken.as_mut().enable();
                    let finished = self
                        .map
                        .lock()
                        .get(key)
                        .is_none_or(|e| e.generation != generation);
                    if !finished {
                        let _ = tokio::time::timeout(self.timeout, woken).await;
                    }
                }
            }
        }
        None
    }

    /// Whether a new key fits in `map` at `now` (ns since `epoch`),
    /// dropping stale entries from a full map. Entries only become stale
    /// as seconds pass, so a full map is swept at most once a second: a
    /// spray of new keys costs each check O(1), not a pass over `max_keys`
    /// entries under the lock. Until the next sweep a new key takes the
    /// plain path.
    fn make_room(&self, map: &mut HashMap<String, Entry>, now: u64) -> bool {
        if map.len() < self.cfg.max_keys {
            return true;
        }
        let sec = now / 1_000_000_000;
        if self.swept.swap(sec, Ordering::Relaxed) == sec {
            return false;
        }
        self.sweeps.fetch_add(1, Ordering::Relaxed);
        // A lease with units left is worth keeping until it expires; one
        // used up is not, however long it could have lived.
        map.retain(|_, e| e.fetching || (e.left > 0 && e.expires > now) || e.second + 1 >= sec);
        map.len() < self.cfg.max_keys
    }

    /// Fetch the next lease for `key` on a background task.
    fn prefetch<S: LeaseStore>(self: &Arc<Self>, store: &S, key: &str, lease: u32) {
        let fetch = Fetch::new(self, store, key, lease);
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(fetch.run(0));
        }
        // Otherwise dropping the fetch clears the key's flag.
    }

    /// Return `units` taken from `key`'s lease by a caller that left
    /// before its answer.
    fn give_back(&self, key: &str, units: u32) {
        let now = self.now();
        if let Some(e) = self.map.lock().get_mut(key)
            && now < e.expires
        {
            e.left = e.left.saturating_add(units);
        }
    }

    /// Record a lease fetch: on success `lease - taken` more units, valid
    /// for `max_age`. Returns what was granted.
    fn finish(
        &self,
        key: &str,
        result: Option<Decision>,
        lease: u32,
        taken: u32,
    ) -> Option<Granted> {
        let now = self.now();
        let mut map = self.map.lock();
        let e = map.get_mut(key)?;
        e.fetching = false;
        e.generation = e.generation.wrapping_add(1);
        // Waiters registered (and checked `generation`) under this lock,
        // so none misses the wake-up.
        e.notify.notify_waiters();
        let d = result?;
        let remaining = u64::from(d.remaining());
        e.remaining = Some((remaining, now));
        let reset = duration_to_nanos(d.reset_after());
        e.reset_at = now.saturating_add(reset);
        e.policy = Some((d.limit(), d.window()));
        if !d.is_allowed() {
            return None;
        }
        // Units left of a lease that expired while this one was fetched
        // are dropped, not carried into the new lease's lifetime.
        if now >= e.expires {
            e.left = 0;
        }
        e.left = e.left.saturating_add(lease - taken);
        e.expires = now.saturating_add(duration_to_nanos(self.cfg.max_age));
        Some(Granted {
            remaining,
            left: e.left,
            reset_ns: reset,
            policy: e.policy,
        })
    }
}

/// A lease fetch under way for one key. However it ends — with the store's
/// answer, or dropped unfinished (its caller gone, its task cancelled, the
/// runtime shutting down) — it clears the key's `fetching` flag and wakes
/// the checks waiting for it: a key is never left waiting for a fetch that
/// nobody will finish, which would send it down the plain path for good.
struct Fetch<S: LeaseStore> {
    leases: Arc<Leases>,
    store: S,
    key: String,
    lease: u32,
    done: bool,
}

impl<S: LeaseStore> Fetch<S> {
    fn new(leases: &Arc<Leases>, store: &S, key: &str, lease: u32) -> Self {
        Self {
            leases: Arc::clone(leases),
            store: store.clone(),
            key: key.to_owned(),
            lease,
            done: false,
        }
    }

    /// Take the lease from the store, `taken` of it for the caller; what
    /// was granted, if it was.
    async fn run(mut self, taken: u32) -> Option<Granted> {
        let result = self.store.take(&self.key, self.lease).await;
        self.done = true;
        self.leases.finish(&self.key, result, self.lease, taken)
    }
}

impl<S: LeaseStore> Drop for Fetch<S> {
    fn drop(&mut self) {
        if !self.done {
            self.leases.finish(&self.key, None, self.lease, 0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leases(cfg: PreAggregation) -> Leases {
        let quota = Quota::per_second(std::num::NonZeroU32::new(1000).unwrap());
        Leases::new(cfg, quota, 1000, Duration::from_millis(100))
    }

    /// A spray of new keys against a full map of keys seen this second
    /// sweeps it once, not once per new key (each sweep visits every
    /// entry under the one lock all checks share).
    #[test]
    fn a_key_spray_sweeps_a_full_map_once_a_second() {
        let hot = leases(PreAggregation {
            max_keys: 1000,
            ..PreAggregation::default()
        });
        let mut map = HashMap::new();
        let now = 5_000_000_000;
        for i in 0..1000 {
            let entry = Entry {
                second: now / 1_000_000_000,
                hits: 1,
                ..Entry::default()
            };
            map.insert(format!("live{i}"), entry);
        }
        let admitted = (0..10_000)
            .filter(|i| hot.make_room(&mut map, now + i * 10_000))
            .count();
        assert_eq!(admitted, 0, "a full map of live keys admitted new ones");
        assert_eq!(hot.sweeps.load(Ordering::Relaxed), 1);
        // A second later the same keys are stale: one sweep frees them.
        assert!(hot.make_room(&mut map, now + 2_000_000_000));
        assert_eq!(hot.sweeps.load(Ordering::Relaxed), 2);
        assert!(map.is_empty());
    }

    /// Units left of a lease that expired while the next was being fetched
    /// are not carried into the new lease's lifetime (they were counted by
    /// the store longer than `max_age` ago). Written first, the 5 stale units
    /// were granted with the new 10.
    #[test]
    fn a_new_lease_drops_the_units_of_an_expired_one() {
        let hot = leases(PreAggregation::default());
        hot.map.lock().insert(
            "k".to_owned(),
            Entry {
                left: 5,
                expires: 1,
                fetching: true,
                ..Entry::default()
            },
        );
        std::thread::sleep(Duration::from_millis(1));
        let second = Duration::from_secs(1);
        let allowed = Decision::allow(100, second, 50, second);
        let granted = hot.finish("k", Some(allowed), 10, 0).unwrap();
        assert_eq!(granted.left, 10);
    }

    /// A lease used up is nothing to keep, however long it may live: keys
    /// made hot once by an attacker must not hold the map forever under a
    /// long `max_age`.
    #[test]
    fn used_up_leases_are_swept_whatever_their_age() {
        let hot = leases(PreAggregation {
            max_keys: 100,
            max_age: Duration::MAX,
            ..PreAggregation::default()
        });
        let mut map = HashMap::new();
        for i in 0..100 {
            let entry = Entry {
                second: 0,
                hits: 1000,
                left: 0,
                expires: u64::MAX,
                ..Entry::default()
            };
            map.insert(format!("once-hot{i}"), entry);
        }
        assert!(hot.make_room(&mut map, 10_000_000_000));
        assert!(map.is_empty(), "{} used-up leases kept", map.len());
    }
}
