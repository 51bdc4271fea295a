//! The counters behind the `metrics` feature (documented in the crate
//! docs, section *Metrics*); without the feature every function here is
//! empty and inlined away. Handles are registered on first use.

#[cfg(feature = "metrics")]
use std::sync::OnceLock;

/// Outcomes of a layer's decisions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Ok,
    OverLimit,
    ShadowOverLimit,
    Error,
}

/// One limiter's counters, registered on first use.
#[derive(Debug, Default)]
pub(crate) struct Decisions {
    #[cfg(feature = "metrics")]
    counters: OnceLock<[metrics::Counter; 4]>,
}

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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Settled {
    Refund,
    Charge,
    Error,
}

/// One layer's settlement counters, registered on first use.
#[derive(Debug, Default)]
pub(crate) struct Settlements {
    #[cfg(feature = "metrics")]
    counters: OnceLock<[metrics::Counter; 3]>,
}

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
