//! [`Caller`]: the part of a store-backed limiter that calls the store,
//! shared with the batching task: the backend, the timeout, the health of
//! each cell, and the call-time metrics.

use crate::backend::Backend;
use crate::error::StoreError;
use crate::health::Health;
use crate::telemetry::AnswerMetrics;
use std::time::Duration;
use tokio::time::Instant;
use weir_rate::Decision;

pub(crate) struct Caller<B: Backend> {
    pub(crate) backend: B,
    pub(crate) timeout: Duration,
    pub(crate) health: Health,
    pub(crate) metrics: AnswerMetrics,
}

impl<B: Backend> Caller<B> {
    /// The deadline of a call asked at `now`: the timeout later (a timeout
    /// too long to represent never comes).
    pub(crate) fn deadline(&self, now: Instant) -> Instant {
        now.checked_add(self.timeout)
            .unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 24 * 3600))
    }

    /// How long a call may go unanswered before it counts as slow, a
    /// failure for the back-off: half a timeout. A queued caller with less
    /// than that left is not sent after such a failure either.
    pub(crate) fn slow(&self) -> Duration {
        self.timeout / 2
    }

    /// The error of a caller (on `cell`, asked at `asked` ns) whose deadline
    /// passed before the store answered it, its call not being slow itself:
    /// a timeout if a call for its cell failed meanwhile (it waited behind a
    /// failing store), otherwise [`StoreError::Overloaded`] (it waited
    /// behind this instance's own load).
    pub(crate) fn late(&self, cell: usize, asked: u64) -> StoreError {
        if self.health.failed_since(cell, asked) {
            StoreError::Timeout(self.timeout)
        } else {
            StoreError::Overloaded
        }
    }

    /// One call deciding `keys[i]` at `costs[i]`, given up at `deadline`.
    pub(crate) async fn decide(
        &self,
        keys: &[B::Key],
        costs: &[u32],
        deadline: Instant,
    ) -> Result<Vec<Result<Decision, StoreError>>, StoreError> {
        self.bounded(deadline, self.backend.decide(keys, costs))
            .await
    }

    /// `call`, given up at `deadline` with a timeout.
    pub(crate) async fn bounded<T>(
        &self,
        deadline: Instant,
        call: impl std::future::Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        tokio::time::timeout_at(deadline, call)
            .await
            .unwrap_or(Err(StoreError::Timeout(self.timeout)))
    }
}
