//! The adaptive in-flight limiters: [`AdaptiveLimiter`] for one origin,
//! [`KeyedAdaptiveLimiter`](super::KeyedAdaptiveLimiter) for one learned
//! limit per key (in `keyed.rs`), and the [`AdaptiveGuard`] both hand out.
//!
//! A key's state is one atomic word (the limit in the high half, the
//! requests in flight in the low half) and the algorithm behind a lock.
//! Admission is one compare-and-swap on the word, so a limit and a count
//! are always read together; a finished request takes the lock, feeds the
//! algorithm and stores its new limit into the word while still holding
//! it, so limits are stored in the order the algorithm produced them.

use super::{Algorithm, Outcome, Sample};
use crate::clock::{Clock, MonotonicClock, Timestamp};
use crate::sync::{Arc, AtomicU64, Mutex, Ordering};
use std::fmt;
use std::time::Duration;

const IN_FLIGHT: u64 = 0xffff_ffff;

/// One key's shared state.
pub(super) struct Entry<A> {
    /// `limit << 32 | in_flight`.
    word: AtomicU64,
    /// The algorithm's no-load latency estimate in ns (0: none yet),
    /// stored with each limit, for readers that must not take the lock.
    no_load: AtomicU64,
    /// From when (ns) the limit changes with time alone
    /// ([`Algorithm::next_tick`]); `u64::MAX`: never, or claimed by the
    /// caller ticking it.
    tick_at: AtomicU64,
    algorithm: Mutex<A>,
}

impl<A: Algorithm> Entry<A> {
    pub(super) fn new(algorithm: A) -> Self {
        let limit = u64::from(algorithm.limit().max(1));
        Self {
            word: AtomicU64::new(limit << 32),
            no_load: AtomicU64::new(0),
            tick_at: AtomicU64::new(algorithm.next_tick().unwrap_or(u64::MAX)),
            algorithm: Mutex::new(algorithm),
        }
    }

    /// Counts one more request in flight if fewer than the limit are;
    /// returns the count including it.
    ///
    /// Relaxed: the word guards no other memory, and read-modify-writes
    /// of one location are totally ordered whatever the ordering, so two
    /// racers can never both take the last place.
    ///
    /// A refusal at or after the algorithm's next tick ticks it first (one
    /// caller does, the others are refused meanwhile), so that a limit
    /// pinned by a probe is released on time even when the requests in
    /// flight never finish.
    pub(super) fn enter<C>(&self, now: Timestamp<C>) -> Result<u32, Overloaded> {
        let mut word = self.word.load(Ordering::Relaxed);
        let mut ticked = false;
        loop {
            let (limit, in_flight) = ((word >> 32) as u32, word as u32);
            if in_flight >= limit {
                if !ticked && self.tick(now) {
                    ticked = true;
                    word = self.word.load(Ordering::Relaxed);
                    continue;
                }
                return Err(Overloaded { in_flight, limit });
            }
            match self.word.compare_exchange_weak(
                word,
                word + 1,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Ok(in_flight + 1),
                Err(now) => word = now,
            }
        }
    }

    fn leave(&self) {
        self.word.fetch_sub(1, Ordering::Relaxed);
    }

    /// Ticks the algorithm if its next tick has come by `now` and no one
    /// else claimed it; whether this call did.
    fn tick<C>(&self, now: Timestamp<C>) -> bool {
        let at = self.tick_at.load(Ordering::Relaxed);
        if now.as_nanos() < at
            || self
                .tick_at
                .compare_exchange(at, u64::MAX, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            return false;
        }
        let mut algorithm = self.algorithm.lock();
        algorithm.tick(now);
        self.publish(&algorithm);
        true
    }

    fn record<C>(&self, now: Timestamp<C>, sample: Sample) {
        let mut algorithm = self.algorithm.lock();
        algorithm.update(now, sample);
        self.publish(&algorithm);
    }

    /// Stores what the algorithm (locked by the caller) says now: its
    /// no-load latency, next tick and limit.
    fn publish(&self, algorithm: &A) {
        let tick_at = algorithm.next_tick().unwrap_or(u64::MAX);
        self.tick_at.store(tick_at, Ordering::Relaxed);
        if let Some(no_load) = algorithm.no_load() {
            let ns = u64::try_from(no_load.as_nanos()).unwrap_or(u64::MAX);
            self.no_load.store(ns.max(1), Ordering::Relaxed);
        }
        let limit = u64::from(algorithm.limit().max(1)) << 32;
        let mut word = self.word.load(Ordering::Relaxed);
        loop {
            let next = limit | (word & IN_FLIGHT);
            if next == word {
                break;
            }
            match self
                .word
                .compare_exchange_weak(word, next, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => break,
                Err(now) => word = now,
            }
        }
    }
}

impl<A> Entry<A> {
    pub(super) fn limit(&self) -> u32 {
        (self.word.load(Ordering::Relaxed) >> 32) as u32
    }

    pub(super) fn in_flight(&self) -> u32 {
        self.word.load(Ordering::Relaxed) as u32
    }

    pub(super) fn no_load(&self) -> Option<Duration> {
        match self.no_load.load(Ordering::Relaxed) {
            0 => None,
            ns => Some(Duration::from_nanos(ns)),
        }
    }
}

/// Refused: the key already has as many requests in flight as its limit.
///
/// ```
/// use std::num::NonZeroU32;
/// use weir_adaptive::{AdaptiveLimiter, Constant};
///
/// let limiter = AdaptiveLimiter::new(Constant::new(NonZeroU32::new(1).unwrap()));
/// let _held = limiter.try_acquire().unwrap();
/// let refused = limiter.try_acquire().unwrap_err();
/// assert_eq!((refused.in_flight, refused.limit), (1, 1));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Overloaded {
    /// Requests in flight when refused.
    pub in_flight: u32,
    /// The limit at that moment.
    pub limit: u32,
}

impl fmt::Display for Overloaded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} requests in flight, at the limit of {}",
            self.in_flight, self.limit
        )
    }
}

impl std::error::Error for Overloaded {}

/// One request admitted by an adaptive limiter. It counts in flight until
/// dropped, and reports its latency and outcome to the algorithm once:
/// when [`record`](Self::record)ed (or by [`success`](Self::success),
/// [`dropped`](Self::dropped), [`ignore`](Self::ignore)), else when dropped,
/// as [`Outcome::Dropped`]: a request abandoned without an answer (a
/// cancelled future, a panic, an early return) says the origin did not
/// answer in time. Where a client can cancel at will, release its
/// cancelled requests' guards with [`ignore`](Self::ignore), as the tower
/// layer does: counted as drops, one client's cancels would lower the
/// limit for everyone sharing it.
///
/// ```
/// use weir_adaptive::{AdaptiveLimiter, Vegas};
///
/// let origin = AdaptiveLimiter::new(Vegas::default());
/// let guard = origin.try_acquire().expect("under the limit");
/// assert_eq!(origin.in_flight(), 1);
/// // ... forward the request; on an answer:
/// guard.success();
/// assert_eq!(origin.in_flight(), 0);
/// ```
#[must_use = "dropping the guard at once reports a drop"]
pub struct AdaptiveGuard<A: Algorithm, C: Clock = MonotonicClock> {
    entry: Arc<Entry<A>>,
    clock: C,
    start: u64,
    in_flight: u32,
    recorded: bool,
}

impl<A: Algorithm, C: Clock> AdaptiveGuard<A, C> {
    /// Admit a request to `entry` started at `start`, if under its limit.
    pub(super) fn admit(entry: Arc<Entry<A>>, clock: C, start: u64) -> Result<Self, Overloaded> {
        let in_flight = entry.enter(Timestamp::<C>::from_nanos(start))?;
        Ok(Self {
            entry,
            clock,
            start,
            in_flight,
            recorded: false,
        })
    }

    /// Reports the request's latency (until now) and `outcome` to the
    /// algorithm, while it still counts in flight until the guard drops
    /// (a response whose body still streams). Only the first report
    /// counts.
    ///
    /// ```
    /// use weir_adaptive::{AdaptiveLimiter, Gradient2, Outcome};
    ///
    /// let origin = AdaptiveLimiter::new(Gradient2::default());
    /// let mut guard = origin.try_acquire().unwrap();
    /// guard.record(Outcome::Success); // the response head arrived
    /// assert_eq!(origin.in_flight(), 1, "the body still streams");
    /// drop(guard);
    /// assert_eq!(origin.in_flight(), 0);
    /// ```
    pub fn record(&mut self, outcome: Outcome) {
        if self.recorded {
            return;
        }
        self.recorded = true;
        let now = self.clock.now_nanos();
        let latency = Duration::from_nanos(now.saturating_sub(self.start));
        self.entry.record(
            Timestamp::<C>::from_nanos(now),
            Sample::new(latency, outcome, self.in_flight),
        );
    }

    /// The origin answered: report success and release.
    pub fn success(mut self) {
        self.record(Outcome::Success);
    }

    /// The origin refused, failed or timed out: report a drop and release.
    pub fn dropped(mut self) {
        self.record(Outcome::Dropped);
    }

    /// Release without teaching the algorithm anything (the request ended
    /// for reasons of its own).
    pub fn ignore(mut self) {
        self.record(Outcome::Ignored);
    }
}

impl<A: Algorithm, C: Clock> Drop for AdaptiveGuard<A, C> {
    fn drop(&mut self) {
        self.entry.leave();
        self.record(Outcome::Dropped);
    }
}

impl<A: Algorithm, C: Clock> fmt::Debug for AdaptiveGuard<A, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdaptiveGuard")
            .field("in_flight_at_start", &self.in_flight)
            .field("recorded", &self.recorded)
            .finish_non_exhaustive()
    }
}

/// An adaptive in-flight limit for one origin: admits a request while
/// fewer than the algorithm's limit are in flight. Clones share the state.
///
/// ```
/// use std::time::Duration;
/// use weir_adaptive::{AdaptiveLimiter, Aimd};
///
/// let origin = AdaptiveLimiter::new(Aimd::builder().timeout(Duration::from_secs(1)).build()?);
/// match origin.try_acquire() {
///     Ok(guard) => {
///         // call the origin, then:
///         guard.success();
///     }
///     Err(overloaded) => println!("503: {overloaded}"),
/// }
/// # Ok::<(), weir_adaptive::ConfigError>(())
/// ```
pub struct AdaptiveLimiter<A, C = MonotonicClock> {
    entry: Arc<Entry<A>>,
    clock: C,
}

impl<A: Algorithm> AdaptiveLimiter<A> {
    /// A limiter learning with `algorithm`, on the monotonic clock.
    pub fn new(algorithm: A) -> Self {
        Self::with_clock(algorithm, MonotonicClock::new())
    }
}

impl<A: Algorithm, C: Clock + Clone> AdaptiveLimiter<A, C> {
    /// A limiter learning with `algorithm`, timing requests on `clock`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir_adaptive::{AdaptiveLimiter, Aimd};
    /// use weir_adaptive::clock::ManualClock;
    ///
    /// let clock = ManualClock::new();
    /// let slow_is_a_drop = Aimd::builder()
    ///     .timeout(Duration::from_millis(20))
    ///     .probe_interval(None)
    ///     .build()
    ///     .unwrap();
    /// let origin = AdaptiveLimiter::with_clock(slow_is_a_drop, clock.clone());
    /// let before = origin.limit();
    /// for _ in 0..16 {
    ///     let guard = origin.try_acquire().unwrap();
    ///     clock.advance(Duration::from_millis(30)); // slower than the timeout, by this clock
    ///     guard.success();
    /// }
    /// assert!(origin.limit() < before);
    /// ```
    pub fn with_clock(algorithm: A, clock: C) -> Self {
        Self {
            entry: Arc::new(Entry::new(algorithm)),
            clock,
        }
    }

    /// Admits a request if fewer than the limit are in flight.
    ///
    /// # Errors
    ///
    /// [`Overloaded`] at the limit: answer 503 rather than queue.
    pub fn try_acquire(&self) -> Result<AdaptiveGuard<A, C>, Overloaded> {
        AdaptiveGuard::admit(
            Arc::clone(&self.entry),
            self.clock.clone(),
            self.clock.now_nanos(),
        )
    }
}

impl<A, C> AdaptiveLimiter<A, C> {
    /// The current limit.
    pub fn limit(&self) -> u32 {
        self.entry.limit()
    }

    /// Requests in flight.
    pub fn in_flight(&self) -> u32 {
        self.entry.in_flight()
    }

    /// The algorithm's estimate of the origin's latency at no load, once
    /// it has one (see [`Algorithm::no_load`]).
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir_adaptive::{AdaptiveLimiter, Gradient2};
    /// use weir_adaptive::clock::ManualClock;
    ///
    /// let clock = ManualClock::new();
    /// let origin = AdaptiveLimiter::with_clock(Gradient2::default(), clock.clone());
    /// assert_eq!(origin.no_load(), None);
    /// for _ in 0..40 {
    ///     let guard = origin.try_acquire().unwrap();
    ///     clock.advance(Duration::from_millis(5));
    ///     guard.success();
    /// }
    /// assert_eq!(origin.no_load(), Some(Duration::from_millis(5)));
    /// ```
    pub fn no_load(&self) -> Option<Duration> {
        self.entry.no_load()
    }
}

impl<A, C: Clone> Clone for AdaptiveLimiter<A, C> {
    fn clone(&self) -> Self {
        Self {
            entry: Arc::clone(&self.entry),
            clock: self.clock.clone(),
        }
    }
}

impl<A, C> fmt::Debug for AdaptiveLimiter<A, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdaptiveLimiter")
            .field("limit", &self.limit())
            .field("in_flight", &self.in_flight())
            .finish_non_exhaustive()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::KeyedAdaptiveLimiter;
    use crate::clock::ManualClock;
    use crate::{Aimd, Constant};
    use std::num::NonZeroU32;
    use std::num::NonZeroUsize;

    fn fixed(n: u32) -> Constant {
        Constant::new(NonZeroU32::new(n).unwrap())
    }

    fn cap(n: usize) -> NonZeroUsize {
        NonZeroUsize::new(n).unwrap()
    }

    /// Records every sample it is fed.
    #[derive(Clone, Default)]
    struct Recording(std::sync::Arc<std::sync::Mutex<Vec<Sample>>>);

    impl Algorithm for Recording {
        fn limit(&self) -> u32 {
            2
        }
        fn update<C>(&mut self, _now: Timestamp<C>, sample: Sample) {
            self.0.lock().unwrap().push(sample);
        }
    }

    #[test]
    fn a_guard_reports_latency_outcome_and_in_flight_once() {
        let clock = ManualClock::new();
        let seen = Recording::default();
        let limiter = AdaptiveLimiter::with_clock(seen.clone(), clock.clone());
        let first = limiter.try_acquire().unwrap();
        let mut second = limiter.try_acquire().unwrap();
        clock.advance(Duration::from_millis(7));
        second.record(Outcome::Success);
        second.record(Outcome::Dropped);
        clock.advance(Duration::from_millis(1));
        first.ignore();
        drop(second);
        let samples = seen.0.lock().unwrap().clone();
        assert_eq!(
            samples,
            [
                Sample::new(Duration::from_millis(7), Outcome::Success, 2),
                Sample::new(Duration::from_millis(8), Outcome::Ignored, 1),
            ]
        );
        assert_eq!(limiter.in_flight(), 0);
    }

    #[test]
    fn a_dropped_guard_counts_as_a_drop() {
        let seen = Recording::default();
        let limiter = AdaptiveLimiter::with_clock(seen.clone(), ManualClock::new());
        drop(limiter.try_acquire().unwrap());
        assert_eq!(seen.0.lock().unwrap()[0].outcome, Outcome::Dropped);
    }

    #[test]
    fn the_word_follows_the_algorithm() {
        let aimd = Aimd::builder()
            .window_samples(NonZeroU32::new(1).unwrap())
            .window(Duration::ZERO)
            .probe_interval(None)
            .build()
            .unwrap();
        let clock = ManualClock::new();
        let limiter = AdaptiveLimiter::with_clock(aimd, clock.clone());
        assert_eq!(limiter.limit(), 20);
        clock.advance(Duration::from_millis(1));
        limiter.try_acquire().unwrap().dropped();
        assert_eq!(limiter.limit(), 18);
    }

    #[test]
    fn a_full_table_forgets_the_least_recently_used_idle_key() {
        let clock = ManualClock::new();
        let keys = KeyedAdaptiveLimiter::with_clock(fixed(1), cap(2), clock.clone());
        keys.try_acquire(&1).unwrap().success();
        clock.advance(Duration::from_millis(1));
        keys.try_acquire(&2).unwrap().success();
        clock.advance(Duration::from_millis(1));
        keys.try_acquire(&3).unwrap().success();
        assert_eq!(keys.len(), 2);
        assert_eq!(keys.limit(&1), None, "the oldest went");
        assert_eq!(keys.limit(&2), Some(1));
        assert_eq!(keys.limit(&3), Some(1));
        assert_eq!(keys.overflowed(), 0);
    }

    #[test]
    fn keys_in_flight_are_never_evicted_and_newcomers_still_pass() {
        let keys = KeyedAdaptiveLimiter::with_clock(fixed(1), cap(2), ManualClock::new());
        let a = keys.try_acquire(&1).unwrap();
        let b = keys.try_acquire(&2).unwrap();
        let c = keys
            .try_acquire(&3)
            .expect("a new key passes on the overflow state");
        assert_eq!(keys.len(), 2);
        assert_eq!(keys.overflowed(), 1);
        assert!(keys.try_acquire(&1).is_err(), "key 1 kept its count");
        drop((a, b, c));
        assert_eq!((keys.in_flight(&1), keys.in_flight(&2)), (0, 0));
    }

    /// Keys that find every stored key busy are limited together, never
    /// not at all: a spray of new keys while the table is full of busy
    /// ones must not admit an unlimited number of requests.
    #[test]
    fn a_spray_of_keys_beyond_capacity_shares_one_limit() {
        let keys = KeyedAdaptiveLimiter::with_clock(fixed(1), cap(1), ManualClock::new());
        let _busy = keys.try_acquire(&0u32).unwrap();
        let admitted: Vec<_> = (1..=100u32)
            .filter_map(|k| keys.try_acquire(&k).ok())
            .collect();
        assert_eq!(admitted.len(), 1, "keys beyond capacity went unlimited");
        drop(admitted);
        assert!(
            keys.try_acquire(&500u32).is_ok(),
            "the shared place came back"
        );
    }

    #[test]
    fn many_keys_stay_within_capacity() {
        let keys = KeyedAdaptiveLimiter::with_clock(fixed(3), cap(100), ManualClock::new());
        for key in 0..10_000u32 {
            keys.try_acquire(&key).unwrap().success();
        }
        assert!(keys.len() <= 100, "{}", keys.len());
        assert_eq!(keys.max_keys(), 100);
        assert_eq!(keys.overflowed(), 0);
    }

    #[test]
    fn racing_threads_never_hold_more_than_the_limit() {
        use std::sync::atomic::{AtomicU32, Ordering::SeqCst};
        let limiter = AdaptiveLimiter::new(fixed(3));
        let held = std::sync::Arc::new(AtomicU32::new(0));
        std::thread::scope(|s| {
            for _ in 0..2 {
                let (limiter, held) = (limiter.clone(), std::sync::Arc::clone(&held));
                s.spawn(move || {
                    for _ in 0..20_000 {
                        let guards: Vec<_> =
                            (0..3).filter_map(|_| limiter.try_acquire().ok()).collect();
                        let now = held.fetch_add(guards.len() as u32, SeqCst) + guards.len() as u32;
                        assert!(now <= 3, "{now} in flight over a limit of 3");
                        held.fetch_sub(guards.len() as u32, SeqCst);
                        guards.into_iter().for_each(AdaptiveGuard::success);
                    }
                });
            }
        });
        assert_eq!(limiter.in_flight(), 0);
    }
}
