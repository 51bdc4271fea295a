//! The state a [`RedisLimiter`](super::RedisLimiter) and its clones share,
//! and the guards of one call: the back-off probe and the call timer.

use super::algorithm::Script;
use super::call::Core;
use super::{FailurePolicy, RedisLimiter, batch, hot};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use weir_primitives::time::duration_to_nanos;
use weir_rate::Quota;

pub(super) struct Inner {
    pub(super) core: Arc<Core>,
    /// The limits: one, or an all-of set.
    pub(super) limits: Box<[Script]>,
    /// The first limit's quota: what a denial of the failure policy (or a
    /// lease's answer) reports.
    pub(super) quota: Quota,
    /// The largest cost every limit can allow at once.
    pub(super) max_cost: u32,
    /// The limiter's name in metrics: `<prefix>:<alg>:`, or for an all-of
    /// set `<prefix>:all:`.
    pub(super) prefix: String,
    /// A key's Redis key base is this, the key, then `}`.
    pub(super) key_head: String,
    pub(super) policy: FailurePolicy,
    pub(super) backoff: Duration,
    /// Per back-off cell: nanoseconds since the core's `epoch` until which
    /// Redis is skipped; 0 = healthy.
    pub(super) down_until: Box<[AtomicU64]>,
    pub(super) batcher: Option<batch::Batcher>,
    pub(super) hot: Option<hot::Hot>,
    /// Decisions by source and call times (feature `metrics`).
    pub(super) outcomes: crate::telemetry::RedisOutcomes,
}

impl Inner {
    /// Nanoseconds since the core's `epoch` (saturating: ~584 years).
    pub(super) fn now_nanos(&self) -> u64 {
        self.core.nanos_at(Instant::now())
    }

    /// The back-off in nanoseconds (saturating, so any `Duration` works).
    pub(super) fn backoff_nanos(&self) -> u64 {
        duration_to_nanos(self.backoff)
    }
}

/// The claim of the one caller that probes Redis once a back-off is over.
/// A probe that ends without an answer from Redis (its caller's future
/// dropped mid-call, or this instance too busy to send it) is handed on:
/// the cell goes back to its expired back-off, so the next caller probes at
/// once instead of Redis being skipped, and the failure policy answering,
/// for one more back-off.
pub(super) struct Probe<'a> {
    pub(super) cell: &'a AtomicU64,
    /// What the claim stored: skip Redis until then.
    pub(super) claimed: u64,
    /// The back-off the claim replaced (over, and never 0).
    pub(super) expired: u64,
}

impl Probe<'_> {
    /// Redis answered (or failed): the caller has recorded it.
    pub(super) fn answered(self) {
        std::mem::forget(self);
    }
}

impl Drop for Probe<'_> {
    fn drop(&mut self) {
        // Only if nothing has been recorded since the claim.
        let _ = self.cell.compare_exchange(
            self.claimed,
            self.expired,
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }
}

/// Records a script call's time when it ends, answered or dropped
/// (feature `metrics`).
pub(super) struct CallTimer<'a> {
    pub(super) limiter: &'a RedisLimiter,
    pub(super) started: Instant,
}

impl Drop for CallTimer<'_> {
    fn drop(&mut self) {
        let inner = &self.limiter.inner;
        inner.outcomes.called(&inner.prefix, self.started.elapsed());
    }
}
