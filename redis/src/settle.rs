//! Settling on Redis: forced charges and refunds by receipt, for every
//! limit of a key at once.

use super::scripts::Settle;
use super::{RedisLimitError, RedisLimiter};
use std::future::{Future, ready};
use std::pin::Pin;
use weir_rate::{Decision, Receipt, SettleKey, Settlement, Spending};

impl RedisLimiter {
    /// Spend `cost` units for `key` unconditionally, on every limit, for
    /// work already done (response bytes, LLM tokens): past the limit a
    /// charge is a debt that the key's later checks wait out, as
    /// [`Limiter::charge`](weir_rate::Limiter::charge) keeps it in process
    /// (the script computes the same, against the server's `TIME`). The
    /// receipt names the server's instant; [`refund`](Self::refund) takes
    /// it. Not batched, and never answered from a lease.
    ///
    /// While Redis cannot take it (an error, a timeout, the back-off
    /// after a failure), the charge goes to the failure policy's local
    /// limiter if it has one ([`FailurePolicy::PerInstance`](super::FailurePolicy::PerInstance), or a
    /// [`FailurePolicy::Local`](super::FailurePolicy::Local) that can charge,
    /// [`CheckKey::charge_key`](weir_rate::CheckKey::charge_key)), so the
    /// fallback that decides meanwhile counts the work; the receipt is
    /// then the local limiter's, and a refund of it goes there. A charge
    /// that timed out may have been counted by Redis as well: counted
    /// twice, never lost.
    ///
    /// # Errors
    ///
    /// Why Redis could not take the charge, when no local limiter took it
    /// either ([`FailurePolicy::Open`](super::FailurePolicy::Open), [`FailurePolicy::Closed`](super::FailurePolicy::Closed), a
    /// local limiter that cannot charge): then nothing counted it.
    ///
    /// ```no_run
    /// use std::num::NonZeroU32;
    /// use weir_redis::{RedisLimiter, Target};
    /// use weir_rate::{Quota, TokenBucket};
    ///
    /// # async fn demo() -> Result<(), weir_redis::RedisLimitError> {
    /// // 100 000 LLM tokens a minute per customer.
    /// let tokens = TokenBucket::new(Quota::per_minute(NonZeroU32::new(100_000).unwrap()));
    /// let limiter = RedisLimiter::builder(tokens)
    ///     .prefix("llm")
    ///     .connect(Target::server("redis://127.0.0.1:6379/"))
    ///     .await?;
    /// let admitted = limiter.check("customer-42").await;
    /// if admitted.is_allowed() {
    ///     let used = 3_500; // the completion's tokens, known once it is done
    ///     let receipt = limiter.charge("customer-42", used).await?;
    ///     # let reply_lost = true;
    ///     if reply_lost {
    ///         // Not delivered after all: give back what it still counts for.
    ///         limiter.refund("customer-42", &receipt).await?;
    ///     }
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn charge(&self, key: &str, cost: u32) -> Result<Receipt, RedisLimitError> {
        let base = self.base_key(key);
        let cell = self.cell_of(&base);
        let core = &self.inner.core;
        let settled = self
            .on_redis(cell, |deadline, _| {
                core.settle(&base, (Settle::Charge, cost, 0), deadline)
            })
            .await;
        match settled {
            Ok(now_us) => Ok(Receipt::remote(now_us.saturating_mul(1000), cost)),
            Err(e) => {
                let local = self.inner.policy.local();
                local.and_then(|l| l.charge_key(key, cost)).ok_or(e)
            }
        }
    }

    /// Give back what `spent` (a [`Decision`] of `key` by this limiter, or
    /// the [`Receipt`] of a [`charge`](Self::charge)) still counts for, by
    /// the rules of [`Limiter::refund`](weir_rate::Limiter::refund) for each
    /// limit, computed by the script against the server's `TIME` from the
    /// receipt's server instant. Nothing for a decision that spent nothing
    /// or carries no receipt (a denial, a peek, an answer from a lease,
    /// fail-open or shedding). Refund each spending at most once: two
    /// calls give back twice. (One call gives back once even if a cluster
    /// client sends it twice; see the [crate docs](crate) for the
    /// exceptions.)
    ///
    /// A refund goes where the spending was counted: a receipt from Redis
    /// to Redis, one from the failure policy's local limiter (a decision
    /// or charge it answered during an outage) to that limiter
    /// ([`CheckKey::refund_key`](weir_rate::CheckKey::refund_key)), whatever
    /// the state of Redis. (A single limit's default fallback is a
    /// [`SketchLimiter`](weir_rate::SketchLimiter), which has no refunds: its
    /// charges stay spent, which is never looser.)
    ///
    /// # Errors
    ///
    /// Why Redis could not take the refund of a Redis receipt (an error, a
    /// timeout, the back-off after a failure). Nothing was given back: the
    /// local fallback never counted that spending, and giving it back
    /// there would loosen it. A refund that timed out may still have been
    /// applied.
    pub async fn refund(
        &self,
        key: &str,
        spent: &(impl Spending + ?Sized),
    ) -> Result<(), RedisLimitError> {
        let Some(receipt) = spent.receipt() else {
            return Ok(());
        };
        if !receipt.is_remote() {
            if let Some(local) = self.inner.policy.local() {
                local.refund_key(key, receipt);
            }
            return Ok(());
        }
        let base = self.base_key(key);
        let cell = self.cell_of(&base);
        let core = &self.inner.core;
        let at_us = receipt.at_nanos() / 1000;
        self.on_redis(cell, |deadline, _| {
            core.settle(&base, (Settle::Refund, receipt.cost(), at_us), deadline)
        })
        .await
        .map(|_| ())
    }
}

/// The Redis limiter settles on Redis, after a round trip, against the
/// server's clock: a refund of the surplus by its receipt, a charge of the
/// shortfall ([`RedisLimiter::refund`], [`RedisLimiter::charge`]), for the
/// key's `Display` form as its checks use. While Redis is down a charge
/// goes to the failure policy's local limiter if it has one; otherwise the
/// settlement fails and the key keeps what its check charged.
impl<Q: std::fmt::Display + ?Sized> SettleKey<Q> for RedisLimiter {
    type Error = RedisLimitError;
    type Settling = Pin<Box<dyn Future<Output = Result<(), Self::Error>> + Send>>;

    fn settle_key(&self, key: &Q, admitted: &Decision, from: u32, to: u32) -> Self::Settling {
        let settlement = Settlement::of(admitted, from, to);
        if settlement == Settlement::Keep {
            return Box::pin(ready(Ok(())));
        }
        let limiter = self.clone();
        let key = key.to_string();
        Box::pin(async move {
            match settlement {
                Settlement::Keep => Ok(()),
                Settlement::Refund(surplus) => limiter.refund(&key, &surplus).await,
                Settlement::Charge(more) => limiter.charge(&key, more).await.map(|_| ()),
            }
        })
    }
}
