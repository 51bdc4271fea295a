//! pingora-limits' `estimator` module: the count-min [`Estimator`], taking
//! keys by value.

use std::hash::Hash;

/// A lock-free count-min sketch with pingora-limits' signatures, backed by
/// weir's [`Estimator`](crate::estimator::Estimator) (rows layout, plain updates,
/// random seed).
///
/// ```
/// use weir_limits::pingora::estimator::Estimator;
///
/// let estimator = Estimator::new(4, 1024);
/// assert_eq!(estimator.incr("a", 1), 1);
/// assert_eq!(estimator.incr("a", 2), 3);
/// estimator.decr("a", 1);
/// assert_eq!(estimator.get("a"), 2);
/// estimator.reset();
/// assert_eq!(estimator.get("a"), 0);
/// ```
///
/// # Differences from pingora
///
/// * Invalid dimensions panic in [`new`](Self::new) (see there), not at
///   the first use.
/// * A key is hashed once and its `hashes` counters derived from that one
///   hash (pingora hashes it once per row with separate seeds); estimates
///   have the same count-min guarantee.
#[derive(Debug)]
pub struct Estimator(crate::estimator::Estimator);

impl Estimator {
    /// A sketch of `hashes` rows of `slots` counters.
    ///
    /// # Panics
    ///
    /// If `hashes` or `slots` is zero, `hashes` is over 16, or
    /// `hashes × slots` is over 2³², with a message naming the problem.
    /// pingora-limits accepts these: with zero slots its first `incr`,
    /// `decr` or `get` panics on a remainder by zero, and with zero hashes
    /// every estimate is `isize::MAX`. Build a
    /// [`Shape`](crate::shape::Shape) with [`Shape::try_new`](crate::shape::Shape::try_new)
    /// and a [`weir_limits::Estimator`](crate::estimator::Estimator) from it to get a
    /// [`ConfigError`](crate::error::ConfigError) instead.
    ///
    /// ```should_panic
    /// use weir_limits::pingora::estimator::Estimator;
    ///
    /// let _ = Estimator::new(4, 0); // "invalid Estimator dimensions: ..."
    /// ```
    pub fn new(hashes: usize, slots: usize) -> Self {
        match crate::shape::Shape::try_new(hashes, slots, crate::shape::Layout::Rows) {
            Ok(shape) => Self(crate::estimator::Estimator::new(shape)),
            Err(e) => panic!("invalid Estimator dimensions: {e}"),
        }
    }

    /// Add `value` to `key`; returns the key's new estimate.
    ///
    /// Counters wrap on overflow, in debug and release builds alike, so an
    /// estimate past `isize::MAX` comes back negative (as pingora documents).
    pub fn incr<T: Hash>(&self, key: T, value: isize) -> isize {
        self.0.incr(&key, value)
    }

    /// Subtract `value` from `key`.
    pub fn decr<T: Hash>(&self, key: T, value: isize) {
        self.0.decr(&key, value)
    }

    /// The estimated count of `key`.
    pub fn get<T: Hash>(&self, key: T) -> isize {
        self.0.get(&key)
    }

    /// Zero every counter.
    pub fn reset(&self) {
        self.0.reset()
    }
}
