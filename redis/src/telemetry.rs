//! The counters and the histogram behind the `metrics` feature (the table
//! is in the crate docs, section *Metrics*); without the feature every
//! function here is empty and inlined away. Handles are registered on first
//! use.

#[cfg(feature = "metrics")]
use std::sync::OnceLock;

/// A Redis limiter's counters by source and its call-time histogram.
#[derive(Debug, Default)]
pub(crate) struct RedisOutcomes {
    #[cfg(feature = "metrics")]
    handles: OnceLock<RedisHandles>,
}

#[cfg(feature = "metrics")]
#[derive(Debug)]
struct RedisHandles {
    /// By [`crate::Source`] order, then denied / allowed.
    decisions: Vec<[metrics::Counter; 2]>,
    call: metrics::Histogram,
}

impl RedisOutcomes {
    #[cfg(feature = "metrics")]
    fn handles(&self, limiter: &str) -> &RedisHandles {
        use crate::Source;
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
    pub(crate) fn decided(&self, limiter: &str, source: crate::Source, allowed: bool) {
        #[cfg(feature = "metrics")]
        {
            use crate::Source;
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
