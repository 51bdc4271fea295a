//! [`Inflight`]: how many requests per key are in progress right now, with an
//! RAII guard that uncounts on drop — pingora's connection limit, where a
//! request to an origin that already has too many in flight is answered 503.
//!
//! # Design
//!
//! A plain-update [`Estimator`] behind an `Arc`, so guards are `'static` and
//! can travel across `.await` points and tasks. A guard keeps the key's hash
//! (not the key) and the value it added, so dropping it finds the counters
//! again without hashing or cloning the key.
//!
//! ## Admission under concurrency
//!
//! The estimate [`Inflight::incr`] returns is meant to be compared with a
//! limit, so it must count every racer that got in before. The minimum of
//! the values `fetch_add` returns row by row does not: two racers can add
//! to the rows in opposite orders and each take its minimum from a row the
//! other had not reached, so `k` racers at a limit of 1 could all read 1.
//! Instead `incr` adds to every row, issues a `SeqCst` fence, and then reads
//! the rows again. The fences of racing calls fall in one total order, and a
//! call whose fence comes later reads, in every row, the additions made
//! before every earlier fence. So the `i`-th racer to fence reads at least
//! `i` (plus what was already in flight): racers at limit `L` admit at most
//! `L` (the loom model `inflight_never_admits_two_racers_at_a_limit_of_one`
//! checks two at limit 1). Estimates can also be too high (another key
//! sharing every counter, or a refused racer not yet uncounted), so a limit
//! enforced with them can refuse early but never admits more than the
//! limit. The extra cost (a fence and one load per row) is paid here, not by
//! [`Estimator::incr`].

use crate::estimator::Estimator;
use crate::shape::Shape;
use crate::sketch::Location;
use crate::sync::{Ordering, fence};
use std::hash::Hash;
use std::sync::Arc;

/// Per-key in-flight counts with RAII guards.
///
/// ```
/// use weir_limits::Inflight;
///
/// let inflight = Inflight::new();
/// let (guard, now) = inflight.incr("origin-a", 1);
/// assert_eq!(now, 1);
/// assert_eq!(inflight.get("origin-a"), 1);
/// drop(guard);
/// assert_eq!(inflight.get("origin-a"), 0);
/// ```
#[derive(Clone, Debug)]
pub struct Inflight {
    estimator: Arc<Estimator>,
}

impl Inflight {
    /// The shape [`new`](Self::new) uses: 4 × 8192, rows layout, so two
    /// unrelated keys share all four counters with probability 2⁻⁵², the
    /// figure pingora quotes.
    pub const DEFAULT_SHAPE: Shape = Shape::rows::<4, 8192>();

    /// In-flight counting over a sketch of [`DEFAULT_SHAPE`](Self::DEFAULT_SHAPE).
    pub fn new() -> Self {
        Self::with_shape(Self::DEFAULT_SHAPE)
    }

    /// In-flight counting over a sketch of `shape` (plain updates: counts
    /// go down).
    ///
    /// ```
    /// use weir_limits::{Inflight, Shape};
    ///
    /// let inflight = Inflight::with_shape(Shape::rows::<3, 512>());
    /// let (_guard, n) = inflight.incr(&42u64, 2);
    /// assert_eq!(n, 2);
    /// ```
    pub fn with_shape(shape: Shape) -> Self {
        Self {
            estimator: Arc::new(Estimator::new(shape)),
        }
    }

    /// Count `value` more in flight for `key`; returns the guard that
    /// uncounts it on drop, and the new in-flight estimate.
    ///
    /// The estimate includes every racing `incr` that could have been
    /// admitted before this one (all rows are added to, then a `SeqCst`
    /// fence, then the rows are read again: of two racers the later to
    /// fence sees both), so
    /// `estimate > limit` is a sound refusal test under concurrency.
    ///
    /// Counts are modular (they wrap past `isize::MAX`, as the plain
    /// rule's do), so dropping the guards of even extreme values leaves
    /// exactly what was there before; the estimate returned for a positive
    /// `value` saturates at `isize::MAX` instead, so that a count pushed
    /// past the range (a weight a client chose) is refused, not read as
    /// negative and admitted. That rule assumes weights are non-negative
    /// (a negative one lowers every key sharing its counters) and catches
    /// one wrap: cap weights a client chooses well below `isize::MAX`.
    pub fn incr<K: Hash + ?Sized>(&self, key: &K, value: isize) -> (InflightGuard, isize) {
        let hash = self.estimator.locator().hash(key);
        let location = self.estimator.locator().locate_hash(hash);
        let now = reported(
            add_then_read(&self.estimator, &location, value),
            value,
            Some(value),
        );
        let guard = InflightGuard {
            estimator: Arc::clone(&self.estimator),
            hash,
            value,
        };
        (guard, now)
    }

    /// The in-flight estimate for `key`.
    pub fn get<K: Hash + ?Sized>(&self, key: &K) -> isize {
        self.estimator.get(key)
    }

    /// Bytes used by the counters.
    pub fn memory_bytes(&self) -> usize {
        self.estimator.memory_bytes()
    }
}

/// Add `value` to every row of `location`, then read the estimate back
/// after a `SeqCst` fence, so that of two racers the later to fence sees
/// both additions (see the module docs for why the `fetch_add` minimum is
/// not enough).
#[inline]
fn add_then_read(estimator: &Estimator, location: &Location, value: isize) -> isize {
    estimator.add_all(location, value);
    fence(Ordering::SeqCst);
    estimator.get_at(location)
}

/// The estimate to report after adding `added`, when the guard now holds
/// `held` (`None`: more than `isize::MAX`). Every row holds at least what a
/// live guard holds (the others' values are non-negative), so less means a
/// row wrapped: reported as `isize::MAX`, to be refused rather than read as
/// negative and admitted.
fn reported(estimate: isize, added: isize, held: Option<isize>) -> isize {
    match held {
        _ if added <= 0 => estimate,
        Some(held) if estimate >= held => estimate,
        _ => isize::MAX,
    }
}

impl Default for Inflight {
    fn default() -> Self {
        Self::new()
    }
}

/// Holds a key's in-flight count; decrements it when dropped.
///
/// ```
/// use weir_limits::Inflight;
///
/// let inflight = Inflight::new();
/// let (mut guard, _) = inflight.incr("k", 1);
/// assert_eq!(guard.incr(2), 3); // the request now weighs 3
/// assert_eq!(guard.get(), 3);
/// drop(guard);
/// assert_eq!(inflight.get("k"), 0);
/// ```
#[derive(Debug)]
#[must_use = "dropping the guard immediately uncounts the request"]
pub struct InflightGuard {
    estimator: Arc<Estimator>,
    hash: u64,
    value: isize,
}

impl InflightGuard {
    /// Add `value` more to this guard's key (released with the guard);
    /// returns the new estimate, ordered against racers like
    /// [`Inflight::incr`].
    pub fn incr(&mut self, value: isize) -> isize {
        let held = self.value.checked_add(value);
        self.value = self.value.wrapping_add(value);
        let location = self.estimator.locator().locate_hash(self.hash);
        reported(
            add_then_read(&self.estimator, &location, value),
            value,
            held,
        )
    }

    /// The current in-flight estimate of this guard's key.
    pub fn get(&self) -> isize {
        let location = self.estimator.locator().locate_hash(self.hash);
        self.estimator.get_at(&location)
    }
}

impl Drop for InflightGuard {
    fn drop(&mut self) {
        let location = self.estimator.locator().locate_hash(self.hash);
        self.estimator.add_all(&location, self.value.wrapping_neg());
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Counts past `isize::MAX` wrap, so dropping the guards still leaves
    /// exactly what was there; but a wrapped (negative) estimate would pass
    /// every `estimate > limit` test, so the estimate reported saturates.
    #[test]
    fn an_estimate_past_the_range_saturates_instead_of_admitting() {
        let inflight = Inflight::new();
        let (huge, _) = inflight.incr("k", isize::MAX);
        let (mut small, now) = inflight.incr("k", 2);
        assert_eq!(now, isize::MAX);
        assert_eq!(small.incr(1), isize::MAX);
        drop((huge, small));
        assert_eq!(inflight.get("k"), 0);
        let (mut one, _) = inflight.incr("k", 1);
        assert_eq!(one.incr(isize::MAX), isize::MAX, "a guard past the range");
        drop(one);
        assert_eq!(inflight.get("k"), 0);
    }

    #[test]
    fn guards_released_on_another_thread_still_uncount() {
        let inflight = Inflight::new();
        let guards: Vec<_> = (0..10).map(|_| inflight.incr("origin", 1).0).collect();
        assert_eq!(inflight.get("origin"), 10);
        std::thread::spawn(move || drop(guards)).join().unwrap();
        assert_eq!(inflight.get("origin"), 0);
    }

    proptest! {
        #[test]
        fn in_flight_equals_live_guards(ops in proptest::collection::vec((0u8..20, any::<bool>()), 0..200)) {
            let inflight = Inflight::new();
            let mut live: Vec<(u8, InflightGuard)> = Vec::new();
            for (key, open) in ops {
                if open || live.is_empty() {
                    live.push((key, inflight.incr(&key, 1).0));
                } else {
                    let i = key as usize % live.len();
                    drop(live.swap_remove(i));
                }
            }
            for key in 0u8..20 {
                let expected = live.iter().filter(|(k, _)| *k == key).count() as isize;
                // With 4 × 8192 counters, 20 keys never collide on all four.
                prop_assert_eq!(inflight.get(&key), expected);
            }
        }
    }
}
