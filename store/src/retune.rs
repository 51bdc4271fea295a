//! Changing a store limiter's limits while it serves
//! ([`StoreLimiter::set_limits`]): what may change, and the order in which
//! the store, the failure policy's fallback and the leases take the new
//! limits.
//!
//! What a key has spent is kept by the store under keys named by the
//! algorithm (and, for a window, by its length), so a change keeps the
//! algorithms, their order and the windows' lengths: the new limits then
//! read the same state, and no key is handed a fresh quota. A rate (GCRA,
//! token bucket) may change its rate and burst; a window its limit.

use crate::backend::Backend;
use crate::error::ConfigError;
use crate::limit::{Kind, Limit, StoreAlgorithm};
use crate::limiter::{StoreLimiter, Tuned};

impl<B: Backend> StoreLimiter<B> {
    /// Change the limit of a limiter of one limit while it serves; see
    /// [`set_limits`](Self::set_limits).
    ///
    /// ```
    /// use weir_rate::{Gcra, Quota, nonzero};
    /// use weir_store::StoreLimiter;
    /// use weir_store::memory::{MemoryBackend, MemoryStore};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let limiter = StoreLimiter::<MemoryBackend>::builder(Gcra::new(Quota::per_minute(nonzero!(10))))
    ///     .connect(MemoryStore::new())
    ///     .await?;
    /// for _ in 0..10 {
    ///     assert!(limiter.check("alice").await.is_allowed());
    /// }
    /// // Lowered to 5 a minute: alice has spent her minute, so she waits.
    /// limiter.set_limit(Gcra::new(Quota::per_minute(nonzero!(5))))?;
    /// assert!(!limiter.check("alice").await.is_allowed());
    /// # Ok::<(), weir_store::ConfigError>(())
    /// # }).unwrap();
    /// ```
    ///
    /// # Errors
    ///
    /// As [`set_limits`](Self::set_limits).
    pub fn set_limit(&self, algorithm: impl StoreAlgorithm) -> Result<(), ConfigError> {
        self.set_limits(&[Limit::of(&algorithm)])
    }

    /// Change the limits while the limiter serves: the same algorithms in
    /// the same order (all-or-nothing sets included), each with a new
    /// quota. What every key has spent carries over as the in-process
    /// limiters' `set_limit` carries it: a window keeps its count, a rate
    /// (GCRA, token bucket) its stored time, which the new rate reads; no
    /// key is ever given a fresh quota. A rate may change its rate and
    /// burst; a window (fixed, sliding) its limit, not its length (a
    /// window of another length counts on another grid, from zero).
    ///
    /// Every decision made after this returns is made by the new limits,
    /// and every decision by one set of limits only, old or new, never a
    /// mix of an all-of set's parts. The failure policy's per-instance
    /// fallback takes the new limits too (a [`FailurePolicy::Local`]
    /// limiter of your own is yours to change); a lease a hot key took
    /// before is spent until it expires.
    ///
    /// [`FailurePolicy::Local`]: crate::FailurePolicy::Local
    ///
    /// # Errors
    ///
    /// [`ConfigError::Invalid`] for limits of other algorithms, in another
    /// order or number, or with windows of other lengths, and for a
    /// sliding window whose counters do not fit its quota;
    /// [`ConfigError::Unsupported`] from a store that cannot change its
    /// limits while serving. On an error nothing changes.
    pub fn set_limits(&self, limits: &[Limit]) -> Result<(), ConfigError> {
        let inner = &*self.inner;
        // One change at a time: the store, the fallback and the leases
        // take the same limits.
        let mut tuned = inner.tuned.write();
        same_layout(&tuned.limits, limits)?;
        if limits.iter().any(|l| l.local().is_none()) {
            return Err(ConfigError::Invalid(
                "a sliding window whose counters do not fit its quota",
            ));
        }
        inner.caller.backend.retune(limits)?;
        if let Some(fallback) = &inner.fallback {
            fallback.set_limits(limits)?;
        }
        *tuned = Tuned::new(limits);
        if let Some(leases) = &inner.leases {
            leases.set_limits(tuned.quota, tuned.max_cost);
        }
        Ok(())
    }
}

/// Whether `new` reads the state `old` kept: the same algorithms in the
/// same order, windows of the same lengths and counters.
pub(crate) fn same_layout(old: &[Limit], new: &[Limit]) -> Result<(), ConfigError> {
    if old.len() != new.len() {
        return Err(ConfigError::Invalid(
            "new limits must be as many as the limiter's",
        ));
    }
    for (old, new) in old.iter().zip(new) {
        let same = match (old.kind(), new.kind()) {
            (Kind::Gcra { .. }, Kind::Gcra { .. }) | (Kind::TokenBucket, Kind::TokenBucket) => true,
            (Kind::FixedWindow, Kind::FixedWindow) => old.quota().window() == new.quota().window(),
            (Kind::SlidingWindow { counters: a, .. }, Kind::SlidingWindow { counters: b, .. }) => {
                a == b && old.quota().window() == new.quota().window()
            }
            _ => false,
        };
        if !same {
            return Err(ConfigError::Invalid(
                "new limits must keep the algorithms, their order and the windows' lengths",
            ));
        }
    }
    Ok(())
}
