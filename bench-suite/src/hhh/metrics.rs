//! The cost of weir-hhh's `metrics` feature: the parse count on the
//! packet path, and publishing per scrape.

use super::{Timing, time_packets, unlimited};
use crate::harness::contest;
use crate::harness::report::{Report, Table};
use std::hint::black_box;
use std::time::Instant;
use weir_hhh::random::RandomSource;
use weir_hhh::{Classifier, FourTuple};
use weir_limits::Layout;
use weir_limits::clock::ManualClock;

/// ns per packet of the same raw packets through `FourTuple::attribute`
/// and `classify` (`classify_packet` without the feature) and through
/// `classify_packet` (which with it also counts the parse outcome),
/// alternating pass by pass, `rounds` passes each; on-CPU time where the
/// platform reports it.
fn parse_count_cost_ns<R: RandomSource>(
    rake: &Classifier<ManualClock, R>,
    packets: &[Vec<u8>],
    rounds: usize,
) -> (f64, f64) {
    let (mut uncounted, mut counted) = (0.0, 0.0);
    let ns = |t: Timing| t.1.unwrap_or(t.0);
    for _ in 0..rounds {
        uncounted += ns(time_packets(packets, 1, |p, _| {
            _ = black_box(FourTuple::attribute(p).map(|a| rake.classify(&a.tuple)))
        }));
        counted += ns(time_packets(packets, 1, |p, _| {
            _ = black_box(rake.classify_packet(p))
        }));
    }
    let rounds = rounds.max(1) as f64;
    (uncounted / rounds, counted / rounds)
}

/// ns per `Classifier::publish_metrics` call into a Prometheus recorder
/// for this thread (the feature's other cost, paid per scrape), and per
/// `stats()` call (the sums it publishes beside), `calls` each.
fn publish_cost_ns<R: RandomSource>(rake: &Classifier<ManualClock, R>, calls: u32) -> (f64, f64) {
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let per_call = |f: &dyn Fn()| {
        let started = Instant::now();
        (0..calls).for_each(|_| f());
        started.elapsed().as_nanos() as f64 / f64::from(calls)
    };
    metrics::with_local_recorder(&recorder, || {
        rake.publish_metrics("bench");
        (
            per_call(&|| _ = black_box(rake.stats())),
            per_call(&|| _ = black_box(rake.publish_metrics("bench"))),
        )
    })
}

/// The `metrics` feature's part of the section: `classify_packet` with and
/// without its parse count, paired, and the cost of publishing.
pub(super) fn metrics_cost(report: &mut Report, packets: &[Vec<u8>], rounds: usize) {
    let rake = unlimited(Layout::Rows, 2, 1024);
    parse_count_cost_ns(&rake, packets, 1); // warm up
    let runs = contest::rotate(report, "metrics cost", 1, 5, |_, _| {
        (
            parse_count_cost_ns(&rake, packets, rounds),
            publish_cost_ns(&rake, 2_000),
        )
    });
    type Run = ((f64, f64), (f64, f64));
    let spread = |f: fn(&Run) -> f64, d: usize| {
        contest::spreads(&runs, f)[0].show_each(|x| format!("{x:.d$}"))
    };
    let mut t = Table::new("weir-hhh `metrics`, rows 2 x 1024, IPv4 | min / median / max of 5");
    for (name, cell) in [
        (
            "attribute + classify (`classify_packet` without the feature), ns/packet on CPU",
            spread(|r| r.0.0, 1),
        ),
        (
            "`classify_packet` counting its parse outcome, ns/packet on CPU",
            spread(|r| r.0.1, 1),
        ),
        (
            "cost of the parse count (paired difference), ns/packet",
            spread(|r| r.0.1 - r.0.0, 1),
        ),
        ("`stats()`, µs per call", spread(|r| r.1.0 / 1e3, 2)),
        (
            "`publish_metrics()` into a Prometheus recorder (28 series), µs per call",
            spread(|r| r.1.1 / 1e3, 2),
        ),
    ] {
        t.cells([name.to_owned(), cell]);
    }
    report.text(
        "weir-hhh's `metrics` feature publishes on demand (`Classifier::publish_metrics`, e.g. once \
         per scrape) from the per-thread counters the classifier keeps anyway. On the packet path it \
         adds one per-thread count to `classify_packet` (the parse outcome) and one to a limited \
         packet's cold path (its generalisation); `classify` of a tuple is unchanged. Below, the same \
         raw packets through `classify_packet` and through the attribute-then-classify it is without \
         the feature, alternated pass by pass (on-CPU time), and the cost of one publish. The two \
         paths are compiled separately, so a difference of a nanosecond or two either way is code \
         layout, not the count:",
    );
    report.table(&t);
}
