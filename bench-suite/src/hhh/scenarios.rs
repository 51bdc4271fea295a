//! The paper's three scenarios replayed on a simulated clock.

use crate::harness::plot::{LinePlot, Series};
use crate::harness::report::{Report, Table, thousands};
use std::time::Instant;
use weir_hhh::Classifier;
use weir_hhh::random::SeededRandom;
use weir_limits::clock::ManualClock;

/// The paper's three scenarios, replayed on a simulated clock: a summary,
/// a table of seconds, a CSV of every second, and the paper's figures
/// (received against forwarded per second, one chart per stream, the
/// legitimate stream being far smaller than the flood).
pub(super) fn scenarios(report: &mut Report) {
    for (stem, title, limit, scenario) in weir_hhh::test_util::paper::all() {
        report.progress(stem);
        let rake = Classifier::builder(limit)
            .seed(7)
            .clock(ManualClock::new())
            .random(SeededRandom::new(7))
            .build()
            .expect("valid scenario configuration");
        let started = Instant::now();
        let outcome = weir_hhh::sim::run(&scenario, &rake);
        let elapsed = started.elapsed();
        let _ = std::fs::create_dir_all(report.dir());
        let _ = std::fs::write(report.dir().join(format!("{stem}.csv")), outcome.to_csv());
        let headers = outcome.streams.iter().flat_map(|s| {
            [
                format!("{} received", s.name),
                format!("{} forwarded", s.name),
            ]
        });
        let mut table = Table::with_headers(std::iter::once("second".to_owned()).chain(headers));
        let seconds = outcome.streams[0].received.len();
        let shown: Vec<usize> = if seconds <= 10 {
            (0..seconds).collect()
        } else {
            (0..5)
                .chain([10, 20, 30, 40, 50, seconds - 1])
                .filter(|&s| s < seconds)
                .collect()
        };
        for s in shown {
            let counts = outcome
                .streams
                .iter()
                .flat_map(|st| [thousands(st.received[s]), thousands(st.forwarded[s])]);
            table.cells(std::iter::once(s.to_string()).chain(counts));
        }
        let summary: Vec<String> = outcome
            .streams
            .iter()
            .map(|s| {
                format!(
                    "{}: {} received, {} forwarded ({:.1} pps after the first second), {} dropped (by level {:?})",
                    s.name,
                    thousands(s.received_total()),
                    thousands(s.forwarded_total()),
                    s.forwarded_rate_after(1),
                    thousands(s.dropped_total()),
                    s.dropped_at_level
                )
            })
            .collect();
        report.text(&format!(
            "**{title}.** {}. Simulated in {elapsed:.1?}; full per-second series in `{stem}.csv`.",
            summary.join("; ")
        ));
        report.table(&table);
        for st in &outcome.streams {
            let points = |counts: &[u64]| {
                counts
                    .iter()
                    .enumerate()
                    .map(|(s, &n)| (s as f64, n as f64))
                    .collect()
            };
            let series = vec![
                Series::line("received", points(&st.received)),
                Series::dashed("forwarded", points(&st.forwarded)),
            ];
            let plot = LinePlot::new(
                format!("{title}: {}", st.name),
                "time (s)",
                "packets per second",
                series,
            );
            report.plot(&format!("{stem}-{}", st.name.replace(' ', "-")), &plot);
        }
    }
}
