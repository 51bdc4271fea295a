//! The counters and the histogram behind the `metrics` feature (the table
//! is in the crate docs, section *Metrics*); without the feature every
//! function here is empty and inlined away. Handles are registered on first
//! use, labelled with the limiter's name and the store's.

use crate::answer::Source;
#[cfg(feature = "metrics")]
use std::sync::OnceLock;

/// One limiter's answers by source and its store-call times.
#[derive(Debug)]
pub(crate) struct AnswerMetrics {
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    limiter: String,
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    store: &'static str,
    #[cfg(feature = "metrics")]
    handles: OnceLock<Handles>,
}

#[cfg(feature = "metrics")]
#[derive(Debug)]
struct Handles {
    /// By [`Source::index`], then denied / allowed.
    decisions: Vec<[metrics::Counter; 2]>,
    call: metrics::Histogram,
}

impl AnswerMetrics {
    /// The metrics of the limiter `limiter` on the store `store`.
    pub(crate) fn new(limiter: String, store: &'static str) -> Self {
        Self {
            limiter,
            store,
            #[cfg(feature = "metrics")]
            handles: OnceLock::new(),
        }
    }

    #[cfg(feature = "metrics")]
    fn handles(&self) -> &Handles {
        self.handles.get_or_init(|| Handles {
            decisions: Source::ALL
                .iter()
                .map(|source| {
                    ["false", "true"].map(|allowed| {
                        metrics::counter!(
                            "weir_store_decisions_total",
                            "limiter" => self.limiter.clone(),
                            "store" => self.store,
                            "source" => source.label(),
                            "allowed" => allowed
                        )
                    })
                })
                .collect(),
            call: metrics::histogram!(
                "weir_store_call_seconds",
                "limiter" => self.limiter.clone(),
                "store" => self.store
            ),
        })
    }

    /// Count one decision from `source`.
    #[inline]
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    pub(crate) fn decided(&self, source: Source, allowed: bool) {
        #[cfg(feature = "metrics")]
        self.handles().decisions[source.index()][usize::from(allowed)].increment(1);
    }

    /// Record one store call that took `took`, answered or not.
    #[inline]
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    pub(crate) fn called(&self, took: std::time::Duration) {
        #[cfg(feature = "metrics")]
        self.handles().call.record(took.as_secs_f64());
    }
}
