//! The origins the limits are judged on: requests of one cost, and three
//! whose requests differ in cost (cheap ones beside the expensive, one
//! client's bursts of instant 404s, a cheap share that shifts during the
//! run). Each is offered three times its capacity, halved and restored.

use super::contenders::{Arrival, Contender, Phases, load, schedule, with_bursts};
use super::{CAPACITY, CHEAPER, OVERLOAD, goals, limit_plot, verdict, verdict_table};
use crate::harness::plot::Series;
use crate::harness::report::Report;
use std::time::Duration;

/// A share of requests that are cheap, as a function of the time.
type CheapShare = Box<dyn Fn(Duration) -> f64>;

/// One origin: its traffic's mix over time and its hostile share.
pub(super) struct Origin {
    /// Its name in headings and file names.
    pub(super) name: &'static str,
    /// What the plot says it is.
    pub(super) title: &'static str,
    /// The share of honest requests that are cheap at a time.
    pub(super) cheap: CheapShare,
    /// The share of all requests that are one client's instant 404s.
    hostile: f64,
    /// When the cheap share changes, as fractions of a phase.
    shifts: Vec<f64>,
    /// The arrivals' seed.
    seed: u64,
}

/// The cheap share of the mixed origin.
const MIXED: f64 = 0.3;
/// The hostile client's share of all requests, and its burst length.
const HOSTILE: f64 = 0.1;
const BURST: u32 = 40;
/// The shifting origin's cheap share at its height.
const SHIFTED: f64 = 0.5;

impl Origin {
    /// Every request costs the same.
    pub(super) fn uniform() -> Self {
        Self {
            name: "uniform",
            title: "requests of one cost",
            cheap: Box::new(|_| 0.0),
            hostile: 0.0,
            shifts: Vec::new(),
            seed: 30,
        }
    }

    fn mixed() -> Self {
        Self {
            name: "mixed",
            title: "30 % of requests 50× cheaper",
            cheap: Box::new(|_| MIXED),
            hostile: 0.0,
            shifts: Vec::new(),
            seed: 31,
        }
    }

    fn hostile() -> Self {
        Self {
            name: "hostile",
            title: "one client sends 10 % of requests as bursts of instant 404s",
            cheap: Box::new(|_| 0.0),
            hostile: HOSTILE,
            shifts: Vec::new(),
            seed: 32,
        }
    }

    fn shifting(phases: Phases) -> Self {
        let each = phases.each;
        Self {
            name: "shifting",
            title: "the cheap share goes 0 → 50 % → 0",
            cheap: Box::new(move |t| {
                if t >= each / 2 && t < each * 5 / 2 {
                    SHIFTED
                } else {
                    0.0
                }
            }),
            hostile: 0.0,
            shifts: vec![0.5, 2.5],
            seed: 33,
        }
    }

    /// The requests offered: honest ones at three times the capacity at
    /// full concurrency (counting a cheap request as its share of work),
    /// and the hostile client's bursts.
    pub(super) fn arrivals(&self, phases: Phases) -> Vec<Arrival> {
        let cheap = (self.cheap)(Duration::ZERO);
        let work = (1.0 - cheap) + cheap / f64::from(CHEAPER);
        let rate = phases.full * OVERLOAD / work;
        let honest = schedule(rate, phases.total(), self.seed, &*self.cheap);
        if self.hostile > 0.0 {
            with_bursts(honest, self.hostile, BURST)
        } else {
            honest
        }
    }

    /// When the backend's capacity or the mix changes, in order.
    pub(super) fn changes(&self, phases: Phases) -> Vec<Duration> {
        let mut changes: Vec<Duration> = phases.changes().to_vec();
        changes.extend(self.shifts.iter().map(|&f| phases.each.mul_f64(f)));
        changes.sort();
        changes
    }
}

/// The contenders on the mixed origins: weir's defaults, tower-acc's, and
/// a static limit at the backend's concurrency.
const CONTENDERS: [Contender; 6] = [
    Contender::Static(CAPACITY),
    Contender::AccGradient2,
    Contender::AccVegas,
    Contender::Aimd,
    Contender::Vegas,
    Contender::Gradient2,
];

/// The mixed origins' part of the section.
pub(super) fn run(report: &mut Report, phases: Phases, slo: Duration, unloaded_p99: Duration) {
    report.text(&format!(
        "**Origins whose requests differ in cost.** The same backend and overload, three more \
         ways: *mixed*, where {:.0} % of requests (`/cheap`) hold a permit {CHEAPER}× shorter; \
         *hostile*, where one client sends {:.0} % of all requests as bursts of {BURST} requests \
         for a missing path, 1 ms apart, answered 404 at once without a permit (a layer counts a \
         404 as a success); and *shifting*, where the cheap share is {:.0} % from half the first \
         phase to half the last. The capacity is halved and restored as above. Goodput counts \
         the expensive requests within the SLO, as a share of what the backend allows with the \
         mix of the moment (its concurrency less what the cheap requests take); the latency \
         columns are of expensive requests. weir's limits are one limit shared by every \
         client, as the review that found the hostile case had it.",
        100.0 * MIXED,
        100.0 * HOSTILE,
        100.0 * SHIFTED,
    ));
    for origin in [Origin::mixed(), Origin::hostile(), Origin::shifting(phases)] {
        let arrivals = origin.arrivals(phases);
        let (mut verdicts, mut limits) = (Vec::new(), Vec::new());
        for contender in CONTENDERS {
            let name = contender.name();
            report.progress(&format!("{}: {name}", origin.name));
            let run = load(contender, &arrivals, Some(phases));
            verdicts.push(verdict(contender, &run, phases, slo, &origin));
            let points = run.limits.iter().map(|&(t, l)| (t, f64::from(l))).collect();
            limits.push(Series::line(&name, points));
        }
        report.text(&format!("*{}* origin ({}):", origin.name, origin.title));
        report.table(&verdict_table(&verdicts));
        goals(report, &verdicts, unloaded_p99);
        limit_plot(
            report,
            &format!("adaptive-limit-{}", origin.name),
            &origin,
            phases,
            limits,
        );
    }
}
