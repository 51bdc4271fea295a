//! The section's goals and what explains the figures behind them.

use super::hot::Hot;
use super::inside::Inside;
use super::paths::Paths;
use super::{Algorithm, Run, kps};
use crate::contest::Goal;
use crate::report::{Report, thousands};

/// The goals, judged on the figures the section measured.
pub(super) fn section(
    report: &mut Report,
    paths: &Paths,
    by_callers: &[(usize, f64, f64)],
    hot: &Hot,
    inside: &Inside,
) {
    let (instructions, gcra_ceiling) = (&inside.instructions, &inside.gcra_ceiling);
    // 7. Against the goals.
    let (p50m, b50m) = (paths.at_50(false, Run::rate), paths.at_50(true, Run::rate));
    let (plain_cpu, batched_cpu) = (
        paths.at_50(false, Run::server_us),
        paths.at_50(true, Run::server_us),
    );
    let mut lines = Vec::new();
    if let Some(i) = paths.incr50 {
        let goal = Goal::at_least("≥ 0.5×", 0.5);
        let (ratio, rate) = (p50m / i, kps(p50m));
        lines.push(format!(
            "* plain path at 50 callers (mean over the algorithms): {rate} = {ratio:.2}× unpipelined INCR (goal {}: {})",
            goal.name,
            goal.verdict(ratio)
        ));
    }
    let goal = Goal::at_least("≥ 4×", 4.0);
    let ratio = b50m / p50m.max(1e-9);
    lines.push(format!(
        "* batched path at 50 callers: {} = {ratio:.2}× the plain path (goal {}: {}); Redis CPU per decision {batched_cpu:.2} µs \
         against the plain path's {plain_cpu:.2} µs ({:.2}× less)",
        kps(b50m),
        goal.name,
        goal.verdict(ratio),
        plain_cpu / batched_cpu.max(1e-9)
    ));
    // Why batching gives what it gives: Redis's own work per decision, and
    // the most Redis can do with weir's script when the client costs
    // nothing, against the GCRA plain path measured above.
    let gcra_instr = instructions
        .as_ref()
        .ok()
        .and_then(|rows| rows.iter().find(|r| r.algorithm == Some(Algorithm::Gcra)));
    if let Some(counts) = gcra_instr.map(|r| &r.per_call) {
        let plain = counts
            .iter()
            .find(|c| c.decisions == 1)
            .map_or(0.0, |c| c.busy_key);
        let each = counts.iter().map(|c| {
            format!(
                "{} instructions at {} a call",
                thousands(c.busy_key.round() as u64),
                c.decisions
            )
        });
        let batched = counts.iter().filter(|c| c.decisions > 1);
        let less = batched.map(|c| {
            format!(
                "{:.1}× ({} a call)",
                plain / c.busy_key.max(1.0),
                c.decisions
            )
        });
        lines.push(format!(
            "* Redis's work per GCRA decision on a busy key (callgrind): {}; per decision a plain call asks {} \
             the instructions of a batched one",
            each.collect::<Vec<_>>().join(", "),
            less.collect::<Vec<_>>().join(" and ")
        ));
    }
    let gcra_plain50 = paths
        .configs
        .iter()
        .zip(&paths.best)
        .find(|(c, _)| c.0 == Algorithm::Gcra && !c.2 && c.3 == 50)
        .map(|(_, r)| r.rate());
    if let (Some(plain), false) = (gcra_plain50, gcra_ceiling.is_empty()) {
        let ceilings = gcra_ceiling.iter().map(|(n, r)| match r {
            Some(r) => format!("{} at {n} a call = {:.2}×", kps(*r), r / plain.max(1e-9)),
            None => format!("failed at {n} a call"),
        });
        lines.push(format!(
            "* Redis's ceiling with weir's GCRA script, the client out of the way (redis-benchmark, table above): {} \
             — the most batching can give over the plain GCRA path ({}) with a client that costs nothing. \
             50 closed-loop callers form calls of about 16 (table 'GCRA by callers'); a call of all 50 \
             leaves none to fill the next while it runs, and here the client shares Redis's two cores",
            ceilings.collect::<Vec<_>>().join(", "),
            kps(plain)
        ));
    }
    let by_callers = by_callers
        .iter()
        .map(|(callers, plain, batched)| format!("{:.2}× at {callers}", batched / plain.max(1e-9)));
    lines.push(format!(
        "* batched against plain by callers (GCRA, table above): {}",
        by_callers.collect::<Vec<_>>().join(", ")
    ));
    if let (Ok(p), Ok(h)) = (&hot.plain, &hot.pre) {
        let (goal, ratio) = (Goal::at_least("≥ 10×", 10.0), h.rate() / p.rate().max(1e-9));
        lines.push(format!(
            "* pre-aggregated hot key: {} = {ratio:.1}× the plain hot key (goal {}: {})",
            kps(h.rate()),
            goal.name,
            goal.verdict(ratio)
        ));
    }
    if let Some((r, ideal)) = &hot.admitted_pre {
        lines.push(format!(
            "* pre-aggregation admitted {} against {} allowed by the limit ({:+.2}%): every admitted unit was \
             counted in Redis (at most 2 × max_age earlier), so the excess over any window stays below \
             1.5 × instances × lease = {} units",
            thousands(r.allowed),
            thousands(*ideal as u64),
            100.0 * (r.allowed as f64 - ideal) / ideal,
            3 * hot.leases.lease
        ));
    }
    report.text(&lines.join("\n"));
}
