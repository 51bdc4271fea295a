//! Publishing counts through the [`metrics`](https://docs.rs/metrics)
//! facade (feature `metrics`).
//!
//! Nothing here runs per packet. The classifier counts in its per-thread
//! counters (a plain load and store on a line only that thread writes) and
//! the kernel filter in its per-CPU map; [`Classifier::publish_metrics`]
//! and [`KernelFilter::publish_metrics`] sum them and set the facade's
//! counters to the totals (`absolute`, which recorders keep as a running
//! maximum), once per call. Handles are looked up on every call, so the
//! recorder in force at the call is the one that counts.
//!
//! [`Classifier::publish_metrics`]: crate::Classifier::publish_metrics
//! [`KernelFilter::publish_metrics`]: crate::kernel::KernelFilter::publish_metrics

use crate::lattice::{GENERALISATIONS, LEVELS};

/// `level` label values.
const LEVEL: [&str; LEVELS] = ["0", "1", "2", "3", "4"];

/// `generalisation` label values: each generalisation as it displays, in
/// [`Generalisation::ALL`](crate::lattice::Generalisation::ALL) order (a unit test
/// checks they agree).
const GENERALISATION: [&str; GENERALISATIONS] = [
    "src:sport -> dst:dport",
    "src/subnet:sport -> dst:dport",
    "src:* -> dst:dport",
    "src:sport -> dst:*",
    "*:sport -> dst:dport",
    "src/subnet:* -> dst:dport",
    "src/subnet:sport -> dst:*",
    "src:* -> dst:*",
    "*:* -> dst:dport",
    "*:sport -> dst:*",
    "src/subnet:* -> dst:*",
    "*:* -> dst:*",
];

/// `outcome` label values of the parse counters, in
/// `verdict::ParseOutcome` order.
const PARSED: [&str; 3] = ["attributed", "ports_unknown", "unattributable"];

/// `outcome` label values of limited packets: passed, dropped.
const LIMITED: [&str; 2] = ["passed", "dropped"];

/// What a classifier publishes, summed over its threads.
#[derive(Debug, Default)]
pub(crate) struct ClassifierCounts {
    pub(crate) unlimited: u64,
    /// Limited packets by generalisation: passed, dropped.
    pub(crate) by_generalisation: [[u64; 2]; GENERALISATIONS],
    /// `classify_packet`'s parse outcomes, in [`PARSED`] order.
    pub(crate) parsed: [u64; 3],
}

/// Publish `counts` as the metrics of the classifier named `name`.
pub(crate) fn publish_classifier(name: &str, counts: &ClassifierCounts) {
    let classifier = || ("classifier", name.to_owned());
    metrics::counter!("weir_hhh_unlimited_packets_total", &[classifier()])
        .absolute(counts.unlimited);
    for (g, by_outcome) in counts.by_generalisation.iter().enumerate() {
        let level = LEVEL[usize::from(crate::lattice::Generalisation::ALL[g].level())];
        for (outcome, &n) in LIMITED.iter().zip(by_outcome) {
            metrics::counter!(
                "weir_hhh_limited_packets_total",
                "classifier" => name.to_owned(),
                "level" => level,
                "generalisation" => GENERALISATION[g],
                "outcome" => *outcome
            )
            .absolute(n);
        }
    }
    for (outcome, &n) in PARSED.iter().zip(&counts.parsed) {
        metrics::counter!(
            "weir_hhh_parsed_packets_total",
            "classifier" => name.to_owned(),
            "outcome" => *outcome
        )
        .absolute(n);
    }
}

/// What a kernel filter publishes, read from its per-CPU map.
#[cfg(feature = "bpf")]
#[derive(Debug, Default)]
pub(crate) struct KernelCounts {
    pub(crate) unlimited: u64,
    /// Limited packets by level: passed, dropped.
    pub(crate) by_level: [[u64; 2]; LEVELS],
    /// Classified packets whose ports were unknown.
    pub(crate) ports_unknown: u64,
    /// Packets passed unclassified.
    pub(crate) unparsed: u64,
}

/// Publish `counts` as the metrics of the kernel filter named `name`.
#[cfg(feature = "bpf")]
pub(crate) fn publish_kernel(name: &str, counts: &KernelCounts) {
    metrics::counter!("weir_hhh_kernel_unlimited_packets_total", "filter" => name.to_owned())
        .absolute(counts.unlimited);
    for (l, by_outcome) in counts.by_level.iter().enumerate() {
        for (outcome, &n) in LIMITED.iter().zip(by_outcome) {
            metrics::counter!(
                "weir_hhh_kernel_limited_packets_total",
                "filter" => name.to_owned(),
                "level" => LEVEL[l],
                "outcome" => *outcome
            )
            .absolute(n);
        }
    }
    let total = counts.unlimited + counts.by_level.iter().flatten().sum::<u64>();
    // `ports_unknown` is counted before the verdict: read mid-packet, the
    // difference can only be low for a moment, never high.
    let attributed = total.saturating_sub(counts.ports_unknown);
    let parsed = [attributed, counts.ports_unknown, counts.unparsed];
    for (outcome, n) in PARSED.iter().zip(parsed) {
        metrics::counter!(
            "weir_hhh_kernel_parsed_packets_total",
            "filter" => name.to_owned(),
            "outcome" => *outcome
        )
        .absolute(n);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn generalisation_labels_are_their_display() {
        for (g, label) in crate::lattice::Generalisation::ALL
            .iter()
            .zip(GENERALISATION)
        {
            assert_eq!(g.to_string(), label);
        }
    }
}
