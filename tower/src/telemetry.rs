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

    /// Count one `outcome` of a decision that names its own policy (a
    /// key's tier), under that name: the handle is looked up each time, as
    /// the names are the limiter's.
    #[inline]
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    pub(crate) fn count_as(&self, policy: &str, outcome: Outcome) {
        #[cfg(feature = "metrics")]
        {
            let name = ["ok", "over_limit", "shadow_over_limit", "error"][outcome as usize];
            metrics::counter!(
                "weir_rate_decisions_total",
                "limiter" => policy.to_owned(),
                "outcome" => name
            )
            .increment(1);
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

/// An adaptive layer's counters and, for a shared limit, its gauges,
/// registered on first use.
#[derive(Debug, Default)]
pub(crate) struct Admissions {
    #[cfg(feature = "metrics")]
    handles: OnceLock<AdmissionHandles>,
}

#[cfg(feature = "metrics")]
#[derive(Debug)]
struct AdmissionHandles {
    admitted: metrics::Counter,
    rejected: metrics::Counter,
    limit: metrics::Gauge,
    in_flight: metrics::Gauge,
    no_load: metrics::Gauge,
}

/// What a shared limit stood at when a request was decided.
#[derive(Debug, Clone, Copy)]
#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
pub(crate) struct Standing {
    pub(crate) limit: u32,
    pub(crate) in_flight: u32,
    pub(crate) no_load: Option<std::time::Duration>,
}

impl Admissions {
    /// Count one request of the layer named `limiter`, admitted or not,
    /// and set the gauges of a shared limit from `standing`.
    #[inline]
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    pub(crate) fn count(&self, limiter: &str, admitted: bool, standing: Option<Standing>) {
        #[cfg(feature = "metrics")]
        {
            let h = self.handles.get_or_init(|| {
                let label = limiter.to_owned();
                AdmissionHandles {
                    admitted: metrics::counter!("weir_adaptive_requests_total", "limiter" => label.clone(), "outcome" => "admitted"),
                    rejected: metrics::counter!("weir_adaptive_requests_total", "limiter" => label.clone(), "outcome" => "rejected"),
                    limit: metrics::gauge!("weir_adaptive_limit", "limiter" => label.clone()),
                    in_flight: metrics::gauge!("weir_adaptive_in_flight", "limiter" => label.clone()),
                    no_load: metrics::gauge!("weir_adaptive_no_load_seconds", "limiter" => label),
                }
            });
            if admitted {
                h.admitted.increment(1);
            } else {
                h.rejected.increment(1);
            }
            if let Some(standing) = standing {
                h.limit.set(f64::from(standing.limit));
                h.in_flight.set(f64::from(standing.in_flight));
                if let Some(no_load) = standing.no_load {
                    h.no_load.set(no_load.as_secs_f64());
                }
            }
        }
    }
}
