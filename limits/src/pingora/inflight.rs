//! pingora-limits' `inflight` module: [`Inflight`] and its drop [`Guard`].

use parking_lot::Mutex;
use std::hash::Hash;

/// Per-key counts of what is in progress right now, with pingora-limits'
/// signatures, backed by weir's [`Inflight`](crate::inflight::Inflight) (4 × 8192
/// counters, as pingora).
///
/// ```
/// use weir_limits::pingora::inflight::Inflight;
///
/// let inflight = Inflight::new();
/// let (guard, n) = inflight.incr("origin", 1);
/// assert_eq!(n, 1);
/// drop(guard);
/// let (_guard, n) = inflight.incr("origin", 1);
/// assert_eq!(n, 1);
/// ```
#[derive(Debug, Default)]
pub struct Inflight(crate::inflight::Inflight);

impl Inflight {
    /// Empty in-flight counts.
    pub fn new() -> Self {
        Self(crate::inflight::Inflight::new())
    }

    /// Count `value` more in flight for `key`; returns the guard that
    /// uncounts it when dropped, and the key's new estimate.
    pub fn incr<T: Hash>(&self, key: T, value: isize) -> (Guard, isize) {
        let (inner, estimate) = self.0.incr(&key, value);
        let guard = Guard {
            inner: Mutex::new(inner),
            step: value,
        };
        (guard, estimate)
    }
}

/// Returned by [`Inflight::incr`]; uncounts its key when dropped.
///
/// ```
/// use weir_limits::pingora::inflight::Inflight;
///
/// let inflight = Inflight::new();
/// let (a, _) = inflight.incr("k", 1);
/// let (b, _) = inflight.incr("k", 2);
/// assert_eq!(a.get(), 3);
/// drop(a);
/// assert_eq!(b.get(), 2);
/// ```
///
/// # Differences from pingora
///
/// [`incr`](Self::incr) adds the guard's value once more and dropping the
/// guard takes back *everything* it added. pingora's guard subtracts its
/// value only once, so each `Guard::incr` there leaves the key counted for
/// good.
pub struct Guard {
    // `incr` takes `&self` in pingora's signature while weir's guard grows
    // through `&mut`; the lock is taken only by `incr` and `get`, never on
    // the create/drop path.
    inner: Mutex<crate::inflight::InflightGuard>,
    step: isize,
}

impl Guard {
    /// Add the value this guard was created with once more to its key;
    /// returns the key's new estimate. Released when the guard drops.
    ///
    /// ```
    /// use weir_limits::pingora::inflight::Inflight;
    ///
    /// let inflight = Inflight::new();
    /// let (guard, _) = inflight.incr("k", 2);
    /// assert_eq!(guard.incr(), 4);
    /// drop(guard);
    /// assert_eq!(inflight.incr("k", 1).1, 1);
    /// ```
    pub fn incr(&self) -> isize {
        self.inner.lock().incr(self.step)
    }

    /// The current estimate of this guard's key.
    pub fn get(&self) -> isize {
        self.inner.lock().get()
    }
}

impl std::fmt::Debug for Guard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guard")
            .field("value", &self.step)
            .finish_non_exhaustive()
    }
}
