//! GCRA plain and batched by the number of callers: how many decisions a
//! script call carries, and what that does to each side's CPU.

use super::{Algorithm, Bench, kps};
use crate::plot::{BarPlot, BarSeries};
use crate::report::{Report, Table};
use weir_rate::Quota;

/// Plain and batched GCRA at 50, 200 and 800 callers: rate, decisions
/// per script call and CPU per decision on each side.
fn by_callers(bench: &Bench<'_>, quota: Quota) -> (Table, Vec<(usize, f64, f64)>) {
    let mut t = Table::new(
        "path | callers | decisions/s | p50 µs | decisions per script call | Redis CPU per decision | client CPU per decision",
    );
    let mut ratios = Vec::new();
    for callers in [50, 200, 800] {
        let mut rates = [0.0f64; 2];
        for (path, batched) in [("plain", false), ("batched", true)] {
            let Ok(limiter) = bench.connect(Algorithm::Gcra, quota, batched, None) else {
                continue;
            };
            let calls = || bench.server.command_stats("evalsha").map(|s| s.calls).ok();
            let before = calls();
            let r = bench.load(std::slice::from_ref(&limiter), callers, bench.dur, false);
            let per_call = calls().zip(before).map(|(after, before)| {
                r.decisions as f64 / after.saturating_sub(before).max(1) as f64
            });
            let per_call = per_call.map_or_else(|| "—".into(), |n| format!("{n:.1}"));
            let (rate, server_us, client_us) = (kps(r.rate()), r.server_us(), r.client_us());
            t.row(format!("{path} | {callers} | {rate} | {:.0} | {per_call} | {server_us:.2} µs | {client_us:.2} µs", r.p50_us));
            rates[usize::from(batched)] = r.rate();
        }
        if rates.iter().all(|&r| r > 0.0) {
            ratios.push((callers, rates[0], rates[1]));
        }
    }
    (t, ratios)
}

/// The section's part by callers, over `roomy`: (callers, plain rate,
/// batched rate) where both ran.
pub(super) fn section(
    report: &mut Report,
    bench: &Bench<'_>,
    roomy: Quota,
) -> Vec<(usize, f64, f64)> {
    // 2b. What a batch carries, by the number of callers.
    report.progress("GCRA by callers: decisions per script call");
    let (by_callers, by_callers_rates) = by_callers(bench, roomy);
    report.text(
        "GCRA by the number of concurrent callers (one run each): decisions per script call \
         (`INFO commandstats`), and the CPU each side spends per decision. A script call has a \
         fixed cost on both sides (on this VM mostly the cross-core wake-up of a loopback write and \
         the reply's read), which a batch shares among its decisions; closed-loop callers bound \
         the batch, since a caller waits for its answer before asking again.",
    );
    report.table(&by_callers);
    report.plot(
        "redis-gcra-by-callers",
        &BarPlot {
            title: "Redis: GCRA decisions per second by callers, plain against batched".into(),
            x_label: "concurrent callers".into(),
            y_label: "thousand decisions/s".into(),
            groups: by_callers_rates
                .iter()
                .map(|(callers, _, _)| format!("{callers} callers"))
                .collect(),
            series: vec![
                BarSeries::new("plain", by_callers_rates.iter().map(|r| Some(r.1 / 1e3))),
                BarSeries::new("batched", by_callers_rates.iter().map(|r| Some(r.2 / 1e3))),
            ],
            values: true,
            ..BarPlot::default()
        },
    );
    by_callers_rates
}
