//! What the report judges per contender: goodput, latency of admitted
//! requests, refusals, convergence after each change, and the issue's
//! goals for weir's algorithms.

use super::contenders::Contender;
use super::load::{Kind, Phases, Record, Run};
use super::{CAPACITY, ms, seconds};
use crate::contest::{self, Goal};
use crate::report::{Report, Table};
use std::time::Duration;

/// The `q`-quantile of `xs` (sorted in place); zero if empty.
pub(super) fn quantile(xs: &mut [Duration], q: f64) -> Duration {
    xs.sort_unstable();
    contest::quantile(xs, q).unwrap_or_default()
}

/// Latencies of the admitted (200) requests sent at times `keep` accepts.
pub(super) fn served(records: &[Record], keep: impl Fn(Duration) -> bool) -> Vec<Duration> {
    records
        .iter()
        .filter(|r| r.kind == Kind::Served && keep(r.sent))
        .map(|r| r.latency)
        .collect()
}

/// What the report says about one contender: goodput (responses within
/// the SLO per second, as a share of the capacity) over the whole run and
/// outside the 2 s after each change (and the first second); latency of
/// admitted requests; shares refused (503) and failed (errors, timeouts,
/// given up); time from halving and from restoring until converged.
#[derive(Debug, Clone)]
pub(super) struct Verdict {
    pub(super) contender: Contender,
    pub(super) goodput: f64,
    pub(super) goodput_steady: f64,
    pub(super) p50: Duration,
    pub(super) p99: Duration,
    pub(super) p99_steady: Duration,
    pub(super) refused: f64,
    pub(super) failed: f64,
    pub(super) converged: [Option<Duration>; 2],
}

/// From `change` to the first moment `u` (in 100 ms steps) such that the
/// 500 ms window from `u` (by send time) and the rest of the phase from `u`
/// each have goodput at least 90 % of the capacity and a p99 of admitted
/// requests within the SLO. (Asking it of every later window instead
/// would let one hiccup of a shared machine, long after the limiter has
/// settled, read as never converging.)
pub(super) fn converged(
    records: &[Record],
    phases: Phases,
    change: Duration,
    until: Duration,
    slo: Duration,
) -> Option<Duration> {
    let (width, step) = (Duration::from_millis(500), Duration::from_millis(100));
    let ok = |from: Duration, to: Duration| {
        let mut served = served(records, |t| t >= from && t < to);
        let good = served.iter().filter(|&&l| l <= slo).count() as f64;
        good >= 0.9 * phases.capacity(from) * (to - from).as_secs_f64()
            && quantile(&mut served, 0.99) <= slo
    };
    let mut from = change;
    while from + width <= until {
        if ok(from, from + width) && ok(from, until) {
            return Some(from - change);
        }
        from += step;
    }
    None
}

pub(super) fn verdict(contender: Contender, run: &Run, phases: Phases, slo: Duration) -> Verdict {
    let records = &run.records;
    let phases = Phases {
        full: f64::from(CAPACITY) / run.service.as_secs_f64().max(1e-9),
        ..phases
    };
    let total = records.len().max(1) as f64;
    let count = |kind| records.iter().filter(|r| r.kind == kind).count() as f64;
    let [halved, restored] = phases.changes();
    let settle = Duration::from_secs(2);
    // A steady stretch: past the first second and the 2 s after each change.
    let steady = |t: Duration| {
        t >= Duration::from_secs(1)
            && phases
                .changes()
                .iter()
                .all(|&c| !(t >= c && t < c + settle))
    };
    // Responses within the SLO over the capacity offered (integrated in
    // 10 ms steps) at the times `keep` accepts.
    let goodput = |keep: &dyn Fn(Duration) -> bool| {
        let good = served(records, keep).iter().filter(|&&l| l <= slo).count() as f64;
        let steps = (0..)
            .map(|i| Duration::from_millis(10 * i))
            .take_while(|&t| t < phases.total());
        good / steps
            .filter(|&t| keep(t))
            .map(|t| phases.capacity(t) * 0.01)
            .sum::<f64>()
    };
    let mut latencies = served(records, |_| true);
    Verdict {
        contender,
        goodput: goodput(&|_| true),
        goodput_steady: goodput(&steady),
        p50: quantile(&mut latencies, 0.5),
        p99: quantile(&mut latencies, 0.99),
        p99_steady: quantile(&mut served(records, steady), 0.99),
        refused: count(Kind::Refused) / total,
        failed: (count(Kind::Failed) + count(Kind::GaveUp)) / total,
        converged: [
            converged(records, phases, halved, restored, slo),
            converged(records, phases, restored, phases.total(), slo),
        ],
    }
}

/// p99 latency of admitted requests per 250 ms (by send time), for the plot.
pub(super) fn p99_timeline(run: &Run, total: Duration) -> Vec<(f64, f64)> {
    let bucket = Duration::from_millis(250);
    let starts = (0..).map(|i| bucket * i).take_while(|&from| from < total);
    let p99 = |from: Duration| {
        let mut served = served(&run.records, |t| t >= from && t < from + bucket);
        (!served.is_empty()).then(|| {
            (
                (from + bucket / 2).as_secs_f64(),
                ms(quantile(&mut served, 0.99)),
            )
        })
    };
    starts.filter_map(p99).collect()
}

/// The goals, checked for each of weir's algorithms.
pub(super) fn goals(report: &mut Report, verdicts: &[Verdict], unloaded_p99: Duration) {
    let acc = || {
        verdicts
            .iter()
            .filter(|v| matches!(v.contender, Contender::AccGradient2 | Contender::AccVegas))
    };
    let best_acc_goodput = acc().map(|v| v.goodput).fold(0.0, f64::max);
    let best_acc_p99 = acc().map(|v| v.p99).min().unwrap_or(Duration::MAX);
    let tuned = verdicts
        .iter()
        .find(|v| v.contender == Contender::Static(CAPACITY))
        .map_or(0.0, |v| v.goodput);
    let goals = [
        Goal::at_least("goodput ≥ 95 % (steady)", 0.95),
        Goal::at_most("p99 ≤ 2× unloaded (steady)", 2.0),
        Goal::at_most("converged ≤ 2 s (both changes)", 2.0),
        Goal::at_least("goodput and p99 ahead of tower-acc's best", 1.0),
        Goal::at_least("goodput within 5 % of static = capacity", 0.95),
    ];
    let mut table =
        Table::with_headers(std::iter::once("algorithm").chain(goals.iter().map(|g| g.name)));
    let weir = verdicts.iter().filter(|v| {
        matches!(
            v.contender,
            Contender::Aimd | Contender::Vegas | Contender::Gradient2
        )
    });
    for v in weir {
        let converged = v
            .converged
            .iter()
            .map(|c| c.map_or(f64::INFINITY, |c| c.as_secs_f64()))
            .fold(0.0, f64::max);
        let p99 = v.p99_steady.as_secs_f64() / unloaded_p99.as_secs_f64();
        let ahead = f64::from(u8::from(
            v.goodput > best_acc_goodput && v.p99 < best_acc_p99,
        ));
        let of_tuned = v.goodput / tuned.max(1e-9);
        let figures = [v.goodput_steady, p99, converged, ahead, of_tuned];
        let [goodput, p99_ok, converged, ahead, tuned] =
            std::array::from_fn(|i| goals[i].verdict(figures[i]));
        let [halved, restored] = v.converged.map(seconds);
        let (gap, lag) = (
            100.0 * (v.goodput - best_acc_goodput),
            ms(v.p99) - ms(best_acc_p99),
        );
        table.cells([
            v.contender.name(),
            format!("{goodput} ({:.1} %)", 100.0 * v.goodput_steady),
            format!("{p99_ok} ({p99:.2}×)"),
            format!("{converged} ({halved} / {restored})"),
            format!("{ahead} ({gap:+.1} pt, {lag:+.1} ms)"),
            format!("{tuned} ({:.1} % of it)", 100.0 * of_tuned),
        ]);
    }
    report.text(
        "The issue's goals, for weir's algorithms (whole-run figures where not marked steady):",
    );
    report.table(&table);
}
