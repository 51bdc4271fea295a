//! Adaptive concurrency limits judged on a real backend under overload
//! (`cargo xtask bench --only adaptive`).
//!
//! The backend is an axum server on loopback whose requests each hold one
//! of `C` permits for a fixed service time, queueing first come first
//! served for a permit: its capacity is `C / service` requests per second,
//! and beyond `C` in flight latency grows with the queue. An open-loop
//! generator (Poisson arrivals, seeded, the same schedule for everyone)
//! offers three times that capacity; `C` is halved a third of the way
//! through and restored at two thirds. The limiter under test sits in the
//! server in front of the handler, as envoy's adaptive concurrency filter
//! does, and refuses with 503. Contenders run one after another on the
//! same schedule: no limit; weir's static `InflightLayer` at the true
//! capacity and at 4× it; `tower-acc`'s Gradient2 and Vegas (its queueing
//! `poll_ready` turned into 503s by tower's `LoadShed`); weir's AIMD, Vegas
//! and Gradient2 through `AdaptiveInflightLayer`.
//!
//! The server and the client run in one-worker tokio runtimes pinned to
//! separate cores, as in the HTTP section. The generator gives up on an
//! arrival while 512 of its requests are outstanding (only the unlimited
//! backend gets there), and on a request after 2 s.

mod contenders;
mod load;
mod overhead;
mod verdict;

use crate::plot::{LinePlot, Series};
use crate::report::{Report, Table};
use contenders::{CONTENDERS, Contender};
use load::{Phases, load, schedule};
use std::time::Duration;
use verdict::{goals, p99_timeline, quantile, served, verdict};

/// Requests the backend serves at once.
const CAPACITY: u32 = 32;
/// How long the backend takes per request.
const SERVICE: Duration = Duration::from_millis(50);
/// Offered load as a multiple of the capacity.
const OVERLOAD: f64 = 3.0;
/// The generator gives up on arrivals beyond this many outstanding ...
const OUTSTANDING: usize = 512;
/// ... and on a request after this long.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(2);
/// weir's default bounds (AIMD's are set to the same).
const MIN_LIMIT: u32 = 1;
const INITIAL_LIMIT: u32 = 20;
const MAX_LIMIT: u32 = 1000;

/// The backend's nominal capacity in requests per second at full `C`.
fn full_rate() -> f64 {
    f64::from(CAPACITY) / SERVICE.as_secs_f64()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn seconds(d: Option<Duration>) -> String {
    d.map_or_else(|| "never".into(), |d| format!("{:.1} s", d.as_secs_f64()))
}

/// The report's section.
pub fn run(report: &mut Report) {
    let scale = report.scale();
    let phases = Phases {
        each: scale.pick(Duration::from_secs(3), Duration::from_secs(4)),
        full: full_rate(),
    };
    let [halved, restored] = phases.changes();
    report.section("Adaptive concurrency limits (issue 30)");
    report.text(&format!(
        "A loopback axum backend serves {CAPACITY} requests at once, each for {} ms \
         (capacity {:.0}/s), queueing the rest first come first served. An open-loop \
         generator offers {OVERLOAD}× that (Poisson, one seeded schedule for every \
         contender); the backend's concurrency is halved after {} s and restored after {} s. \
         The limiter sits in the server in front of the handler and refuses with 503. \
         Every algorithm runs as shipped: weir's with its defaults (limits in \
         [{MIN_LIMIT}, {MAX_LIMIT}] from {INITIAL_LIMIT}; AIMD, which needs one, with a timeout of \
         1.5× the unloaded p99), tower-acc 0.1's with its own (Netflix's: Gradient2 in [20, 200], \
         Vegas in [1, 1000], both from 20), behind tower's `LoadShed` so that it refuses instead \
         of queueing. Server and client run in one-worker \
         tokio runtimes pinned to separate cores.",
        SERVICE.as_millis(),
        full_rate(),
        halved.as_secs(),
        restored.as_secs(),
    ));

    // The unloaded latency: 10 % of capacity, no limit.
    report.progress("measuring the unloaded latency");
    let calm = schedule(
        full_rate() * 0.1,
        scale.pick(Duration::from_secs(2), Duration::from_secs(3)),
        7,
    );
    let mut calm_latencies = served(
        &load(Contender::NoLimit, &calm, None, SERVICE).records,
        |_| true,
    );
    let (unloaded_p50, unloaded_p99) = (
        quantile(&mut calm_latencies, 0.5),
        quantile(&mut calm_latencies, 0.99),
    );
    let slo = unloaded_p99 * 2;

    let arrivals = schedule(full_rate() * OVERLOAD, phases.total(), 30);
    let (mut verdicts, mut services) = (Vec::new(), Vec::new());
    let mut csv = String::from("contender,series,t_s,value\n");
    let (mut limit_series, mut p99_series) = (Vec::new(), Vec::new());
    for contender in CONTENDERS {
        report.progress(&contender.name());
        let run = load(contender, &arrivals, Some(phases), unloaded_p99);
        verdicts.push(verdict(contender, &run, phases, slo));
        services.push(run.service);
        let p99 = p99_timeline(&run, phases.total());
        for &(t, l) in &run.limits {
            csv += &format!("{},limit,{t:.3},{l}\n", contender.name());
        }
        for (t, p99) in &p99 {
            csv += &format!("{},p99_ms,{t:.3},{p99:.2}\n", contender.name());
        }
        if contender != Contender::Static(4 * CAPACITY) {
            if !run.limits.is_empty() {
                let points = run.limits.iter().map(|&(t, l)| (t, f64::from(l))).collect();
                limit_series.push(Series::line(contender.name(), points));
            }
            if contender != Contender::NoLimit {
                p99_series.push(Series::line(contender.name(), p99));
            }
        }
    }

    let _ = std::fs::write(report.dir().join("adaptive-timeline.csv"), csv);
    services.sort();
    let service = services.get(services.len() / 2).copied().unwrap_or(SERVICE);
    report.text(&format!(
        "The backend held a permit {:.2} ms per request on average (the timer rounds {} ms up), \
         so its real capacity is {:.0}/s at full concurrency; goodput is judged against the \
         capacity measured in each contender's own run.",
        ms(service),
        SERVICE.as_millis(),
        f64::from(CAPACITY) / service.as_secs_f64(),
    ));
    report.text(&format!(
        "Unloaded latency (no limit, 10 % of capacity): p50 {:.1} ms, p99 {:.1} ms. \
         **SLO** = 2× the unloaded p99 = {:.1} ms. **Goodput** = responses within the SLO per \
         second as a share of the backend's capacity at the time (whole run, and *steady*: \
         leaving out the first second and the 2 s after each change). **Converged** = time \
         from the change until both the next 500 ms and the rest of the phase have goodput \
         ≥ 90 % of capacity and p99 of admitted requests within the SLO. Latencies are of admitted \
         (200) requests, as the client saw them.",
        ms(unloaded_p50),
        ms(unloaded_p99),
        ms(slo),
    ));
    let mut table = Table::new(
        "contender | goodput | goodput steady | p50 | p99 | p99 steady | refused | failed | converged after halving | after restoring",
    );
    for v in &verdicts {
        let [goodput, steady, refused, failed] = [v.goodput, v.goodput_steady, v.refused, v.failed]
            .map(|x| format!("{:.1} %", 100.0 * x));
        let [p50, p99, p99_steady] =
            [v.p50, v.p99, v.p99_steady].map(|d| format!("{:.1} ms", ms(d)));
        let [after_halving, after_restoring] = v.converged.map(seconds);
        table.cells([
            v.contender.name(),
            goodput,
            steady,
            p50,
            p99,
            p99_steady,
            refused,
            failed,
            after_halving,
            after_restoring,
        ]);
    }
    report.table(&table);
    goals(report, &verdicts, unloaded_p99);

    let steps = (0..)
        .map(|i| Duration::from_millis(50 * i))
        .take_while(|&t| t <= phases.total());
    let capacity = steps.map(|t| {
        (
            t.as_secs_f64(),
            phases.capacity(t) / phases.full * f64::from(CAPACITY),
        )
    });
    limit_series.insert(0, Series::dashed("backend concurrency", capacity.collect()));
    report.plot(
        "adaptive-limit",
        &LinePlot {
            title: "Concurrency limit over time (capacity halved, then restored)".into(),
            x_label: "time (s)".into(),
            y_label: "limit (requests in flight)".into(),
            series: limit_series,
            references: Vec::new(),
            y_max: Some(f64::from(3 * CAPACITY)),
        },
    );
    report.plot(
        "adaptive-p99",
        &LinePlot {
            title: "p99 latency of admitted requests per 250 ms".into(),
            x_label: "time (s)".into(),
            y_label: "p99 latency (ms)".into(),
            series: p99_series,
            references: vec![(ms(slo), "SLO".into())],
            y_max: Some((ms(slo) * 3.0).ceil()),
        },
    );

    overhead::overhead(report);
}
