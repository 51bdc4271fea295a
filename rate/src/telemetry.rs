//! What weir-rate reports through the [`metrics`](https://docs.rs/metrics)
//! facade, behind the `metrics` feature; without it every function here is
//! empty and inlined away.
//!
//! | metric | kind | labels |
//! |---|---|---|
//! | `weir_rate_decisions_total` | counter | `limiter` (the layer's policy name), `outcome`: `ok`, `over_limit`, `shadow_over_limit`, `error` (no key, or a cost never allowed) |
//! | `weir_rate_settlements_total` | counter | `limiter` (the layer's policy name), `outcome`: `refund`, `charge`, `error` (the settlement failed: the key keeps what its check charged) |
//! | `weir_rate_redis_decisions_total` | counter | `limiter` (the key prefix), `source`: `redis`, `lease`, `fail_open`, `fail_closed`, `local`, `shed`; `allowed`: `true`/`false` |
//! | `weir_rate_redis_call_seconds` | histogram | `limiter`: time of each script call, answered or not |
//!
//! The outcomes are envoy's rate-limit filter's (`failure_mode_allowed`
//! is a Redis decision from `fail_open` or `local` that allowed). Handles
//! are registered on first use, so install the recorder (an exporter)
//! before the first request.

#[cfg(feature = "metrics")]
use std::sync::OnceLock;

/// Outcomes of a layer's decisions.
#[cfg(feature = "tower")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Ok,
    OverLimit,
    ShadowOverLimit,
    Error,
}

/// One limiter's counters, registered on first use.
#[cfg(feature = "tower")]
#[derive(Debug, Default)]
pub(crate) struct Decisions {
    #[cfg(feature = "metrics")]
    counters: OnceLock<[metrics::Counter; 4]>,
}

#[cfg(feature = "tower")]
impl Decisions {
    /// Count one `outcome` of the limiter named `limiter`.
    #[inline]
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    pub(crate) fn count(&self, limiter: &str, outcome: Outcome) {
        #[cfg(feature = "metrics")]
        {
            let counters = self.counters.get_or_init(|| {
                ["ok", "over_limit", "shadow_over_limit", "error"].map(|o| {
                    metrics::counter!(
                        "weir_rate_decisions_total",
                        "limiter" => limiter.to_owned(),
                        "outcome" => o
                    )
                })
            });
            counters[outcome as usize].increment(1);
        }
    }
}

/// What became of a settlement that had something to do.
#[cfg(feature = "tower")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Settled {
    Refund,
    Charge,
    Error,
}

/// One layer's settlement counters, registered on first use.
#[cfg(feature = "tower")]
#[derive(Debug, Default)]
pub(crate) struct Settlements {
    #[cfg(feature = "metrics")]
    counters: OnceLock<[metrics::Counter; 3]>,
}

#[cfg(feature = "tower")]
impl Settlements {
    /// Count one settlement of the limiter named `limiter`.
    #[inline]
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    pub(crate) fn count(&self, limiter: &str, settled: Settled) {
        #[cfg(feature = "metrics")]
        {
            let counters = self.counters.get_or_init(|| {
                ["refund", "charge", "error"].map(|o| {
                    metrics::counter!(
                        "weir_rate_settlements_total",
                        "limiter" => limiter.to_owned(),
                        "outcome" => o
                    )
                })
            });
            counters[settled as usize].increment(1);
        }
    }
}

/// A Redis limiter's counters by source and its call-time histogram.
#[cfg(feature = "redis")]
#[derive(Debug, Default)]
pub(crate) struct RedisOutcomes {
    #[cfg(feature = "metrics")]
    handles: OnceLock<RedisHandles>,
}

#[cfg(all(feature = "redis", feature = "metrics"))]
#[derive(Debug)]
struct RedisHandles {
    /// By [`crate::redis::Source`] order, then denied / allowed.
    decisions: Vec<[metrics::Counter; 2]>,
    call: metrics::Histogram,
}

#[cfg(feature = "redis")]
impl RedisOutcomes {
    #[cfg(feature = "metrics")]
    fn handles(&self, limiter: &str) -> &RedisHandles {
        use crate::redis::Source;
        self.handles.get_or_init(|| {
            let sources = [
                (Source::Redis, "redis"),
                (Source::Lease, "lease"),
                (Source::FailOpen, "fail_open"),
                (Source::FailClosed, "fail_closed"),
                (Source::Local, "local"),
                (Source::Shed, "shed"),
            ];
            RedisHandles {
                decisions: sources
                    .iter()
                    .map(|&(_, name)| {
                        ["false", "true"].map(|allowed| {
                            metrics::counter!(
                                "weir_rate_redis_decisions_total",
                                "limiter" => limiter.to_owned(),
                                "source" => name,
                                "allowed" => allowed
                            )
                        })
                    })
                    .collect(),
                call: metrics::histogram!("weir_rate_redis_call_seconds", "limiter" => limiter.to_owned()),
            }
        })
    }

    /// Count one decision of the limiter `limiter` from `source`.
    #[inline]
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    pub(crate) fn decided(&self, limiter: &str, source: crate::redis::Source, allowed: bool) {
        #[cfg(feature = "metrics")]
        {
            use crate::redis::Source;
            let i = match source {
                Source::Redis => 0,
                Source::Lease => 1,
                Source::FailOpen => 2,
                Source::FailClosed => 3,
                Source::Local => 4,
                Source::Shed => 5,
            };
            self.handles(limiter).decisions[i][usize::from(allowed)].increment(1);
        }
    }

    /// Record one script call that took `took`.
    #[inline]
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    pub(crate) fn called(&self, limiter: &str, took: std::time::Duration) {
        #[cfg(feature = "metrics")]
        self.handles(limiter).call.record(took.as_secs_f64());
    }
}
