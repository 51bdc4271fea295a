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
//! same schedule. The generator gives up on an arrival while 512 of its
//! requests are outstanding (only the unlimited backend gets there), and
//! on a request after 2 s.
//!
//! Three more origins serve a mix (`origins`): cheap requests beside the
//! expensive ones, one client's bursts of instant 404s, and a cheap share
//! that shifts during the run.

mod contenders;
mod origins;

use crate::harness::contest::{self, Goal};
use crate::harness::plot::{LinePlot, Series};
use crate::harness::report::{Report, Table};
use crate::http::time_service;
use axum::body::Body;
use contenders::{CONTENDERS, Class, Contender, Kind, Phases, Record, Run, load, schedule};
use std::num::NonZeroUsize;
use std::time::Duration;
use weir_adaptive::{AdaptiveLimiter, Gradient2, KeyedAdaptiveLimiter};
use weir_tower::{AdaptiveInflightLayer, GlobalKey, InflightLayer};

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
/// weir's default bounds.
const MIN_LIMIT: u32 = 1;
const INITIAL_LIMIT: u32 = 20;
const MAX_LIMIT: u32 = 1000;
/// How much less work a cheap request is than an expensive one.
const CHEAPER: u32 = 50;

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

/// The `q`-quantile of `xs` (sorted in place); zero if empty.
fn quantile(xs: &mut [Duration], q: f64) -> Duration {
    xs.sort_unstable();
    contest::quantile(xs, q).unwrap_or_default()
}

/// Latencies of the admitted (200) expensive requests sent at times
/// `keep` accepts.
fn served(records: &[Record], keep: impl Fn(Duration) -> bool) -> Vec<Duration> {
    let served = records
        .iter()
        .filter(|r| r.kind == Kind::Served && r.class == Class::Expensive && keep(r.sent));
    served.map(|r| r.latency).collect()
}

/// What the report says about one contender: goodput (responses within
/// the SLO per second, as a share of the capacity) over the whole run and
/// outside the 2 s after each change (and the first second); latency of
/// admitted requests; shares refused (503) and failed (errors, timeouts,
/// given up); time from halving and from restoring until converged.
struct Verdict {
    contender: Contender,
    goodput: f64,
    goodput_steady: f64,
    p50: Duration,
    p99: Duration,
    p99_steady: Duration,
    refused: f64,
    failed: f64,
    /// After each change of the origin, in order.
    converged: Vec<Option<Duration>>,
}

/// From `change` to the first moment `u` (in 100 ms steps) such that the
/// 500 ms window from `u` (by send time) and the rest of the phase from `u`
/// each have goodput at least 90 % of the capacity and a p99 of admitted
/// requests within the SLO. (Asking it of every later window instead
/// would let one hiccup of a shared machine, long after the limiter has
/// settled, read as never converging.)
fn converged(
    records: &[Record],
    capacity: &dyn Fn(Duration) -> f64,
    change: Duration,
    until: Duration,
    slo: Duration,
) -> Option<Duration> {
    let (width, step) = (Duration::from_millis(500), Duration::from_millis(100));
    let ok = |from: Duration, to: Duration| {
        let mut served = served(records, |t| t >= from && t < to);
        let good = served.iter().filter(|&&l| l <= slo).count() as f64;
        good >= 0.9 * capacity(from) * (to - from).as_secs_f64()
            && quantile(&mut served, 0.99) <= slo
    };
    let starts = std::iter::successors(Some(change), |&from| Some(from + step));
    let mut starts = starts.take_while(|&from| from + width <= until);
    starts
        .find(|&from| ok(from, from + width) && ok(from, until))
        .map(|from| from - change)
}

/// The expensive requests per second the backend allows at `t` (its
/// capacity less what the cheap ones take), for a run whose expensive
/// requests held a permit `service` each and whose cheap share at `t` is
/// `cheap(t)`.
fn allowed(
    phases: Phases,
    service: Duration,
    cheap: &dyn Fn(Duration) -> f64,
) -> impl Fn(Duration) -> f64 {
    let full = f64::from(CAPACITY) / service.as_secs_f64().max(1e-9);
    move |t| {
        let c = cheap(t);
        let per_permit = (1.0 - c) + c / f64::from(CHEAPER);
        phases.capacity(t) / phases.full * full * (1.0 - c) / per_permit
    }
}

fn verdict(
    contender: Contender,
    run: &Run,
    phases: Phases,
    slo: Duration,
    origin: &origins::Origin,
) -> Verdict {
    let records = &run.records;
    let capacity = allowed(phases, run.service, &*origin.cheap);
    let total = records.len().max(1) as f64;
    let count = |kind| records.iter().filter(|r| r.kind == kind).count() as f64;
    let changes = origin.changes(phases);
    let settle = Duration::from_secs(2);
    // A steady stretch: past the first second and the 2 s after each change.
    let steady = |t: Duration| {
        t >= Duration::from_secs(1) && changes.iter().all(|&c| !(t >= c && t < c + settle))
    };
    // Expensive responses within the SLO over what the backend allows
    // (integrated in 10 ms steps) at the times `keep` accepts.
    let goodput = |keep: &dyn Fn(Duration) -> bool| {
        let good = served(records, keep).iter().filter(|&&l| l <= slo).count() as f64;
        let steps = (0..)
            .map(|i| Duration::from_millis(10 * i))
            .take_while(|&t| t < phases.total());
        good / steps
            .filter(|&t| keep(t))
            .map(|t| capacity(t) * 0.01)
            .sum::<f64>()
    };
    let mut latencies = served(records, |_| true);
    let ends = changes.iter().skip(1).copied().chain([phases.total()]);
    Verdict {
        contender,
        goodput: goodput(&|_| true),
        goodput_steady: goodput(&steady),
        p50: quantile(&mut latencies, 0.5),
        p99: quantile(&mut latencies, 0.99),
        p99_steady: quantile(&mut served(records, steady), 0.99),
        refused: count(Kind::Refused) / total,
        failed: (count(Kind::Failed) + count(Kind::GaveUp)) / total,
        converged: changes
            .iter()
            .zip(ends)
            .map(|(&change, until)| converged(records, &capacity, change, until, slo))
            .collect(),
    }
}

/// p99 latency of admitted requests per 250 ms (by send time), for the plot.
fn p99_timeline(run: &Run, total: Duration) -> Vec<(f64, f64)> {
    let bucket = Duration::from_millis(250);
    let starts = (0..).map(|i| bucket * i).take_while(|&from| from < total);
    let p99 = |from: Duration| {
        let mut served = served(&run.records, |t| t >= from && t < from + bucket);
        let mid = (from + bucket / 2).as_secs_f64();
        (!served.is_empty()).then(|| (mid, ms(quantile(&mut served, 0.99))))
    };
    starts.filter_map(p99).collect()
}

/// The report's section.
pub fn run(report: &mut Report) {
    let scale = report.scale();
    let phases = Phases {
        each: scale.pick(Duration::from_secs(3), Duration::from_secs(4)),
        full: full_rate(),
    };
    let [halved, restored] = phases.changes();
    report.section("Adaptive concurrency limits");
    report.text(&format!(
        "A loopback axum backend serves {CAPACITY} requests at once, each for {} ms \
         (capacity {:.0}/s), queueing the rest first come first served. An open-loop \
         generator offers {OVERLOAD}× that (Poisson, one seeded schedule for every \
         contender); the backend's concurrency is halved after {} s and restored after {} s. \
         The limiter sits in the server in front of the handler and refuses with 503. \
         Every algorithm runs as shipped: weir's with its defaults (limits in \
         [{MIN_LIMIT}, {MAX_LIMIT}] from {INITIAL_LIMIT}), tower-acc 0.1's with its own \
         (Netflix's: Gradient2 in [20, 200], Vegas in [1, 1000], both from 20), behind tower's \
         `LoadShed` so that it refuses instead of queueing. Server and client run in one-worker \
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
        |_| 0.0,
    );
    let mut calm = served(&load(Contender::NoLimit, &calm, None).records, |_| true);
    let (unloaded_p50, unloaded_p99) = (quantile(&mut calm, 0.5), quantile(&mut calm, 0.99));
    let slo = unloaded_p99 * 2;

    let uniform = origins::Origin::uniform();
    let arrivals = uniform.arrivals(phases);
    let (mut verdicts, mut services) = (Vec::new(), Vec::new());
    let mut csv = String::from("contender,series,t_s,value\n");
    let (mut limit_series, mut p99_series) = (Vec::new(), Vec::new());
    for contender in CONTENDERS {
        let name = contender.name();
        report.progress(&name);
        let run = load(contender, &arrivals, Some(phases));
        verdicts.push(verdict(contender, &run, phases, slo, &uniform));
        services.push(run.service);
        let p99 = p99_timeline(&run, phases.total());
        run.limits
            .iter()
            .for_each(|(t, l)| csv += &format!("{name},limit,{t:.3},{l}\n"));
        p99.iter()
            .for_each(|(t, p99)| csv += &format!("{name},p99_ms,{t:.3},{p99:.2}\n"));
        if contender != Contender::Static(4 * CAPACITY) {
            if !run.limits.is_empty() {
                let points = run.limits.iter().map(|&(t, l)| (t, f64::from(l))).collect();
                limit_series.push(Series::line(&name, points));
            }
            if contender != Contender::NoLimit {
                p99_series.push(Series::line(name, p99));
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
    report.table(&verdict_table(&verdicts));
    goals(report, &verdicts, unloaded_p99);
    limit_plot(report, "adaptive-limit", &uniform, phases, limit_series);
    let title = "p99 latency of admitted requests per 250 ms";
    let plot = LinePlot::new(title, "time (s)", "p99 latency (ms)", p99_series);
    let (references, y_max) = (vec![(ms(slo), "SLO".into())], Some((ms(slo) * 3.0).ceil()));
    report.plot(
        "adaptive-p99",
        &LinePlot {
            references,
            y_max,
            ..plot
        },
    );
    origins::run(report, phases, slo, unloaded_p99);
    overhead(report);
}

/// The verdicts as a table, one row per contender.
fn verdict_table(verdicts: &[Verdict]) -> Table {
    let mut table = Table::new(
        "contender | goodput | goodput steady | p50 | p99 | p99 steady | refused | failed | converged after each change",
    );
    for v in verdicts {
        let shares = [v.goodput, v.goodput_steady].map(|x| format!("{:.1} %", 100.0 * x));
        let latencies = [v.p50, v.p99, v.p99_steady].map(|d| format!("{:.1} ms", ms(d)));
        let failures = [v.refused, v.failed].map(|x| format!("{:.1} %", 100.0 * x));
        let converged: Vec<String> = v.converged.iter().map(|c| seconds(*c)).collect();
        let cells = shares
            .into_iter()
            .chain(latencies)
            .chain(failures)
            .chain([converged.join(" / ")]);
        table.cells(std::iter::once(v.contender.name()).chain(cells));
    }
    table
}

/// The limit over time of each contender, with the backend's concurrency.
fn limit_plot(
    report: &mut Report,
    file: &str,
    origin: &origins::Origin,
    phases: Phases,
    mut series: Vec<Series>,
) {
    let steps = (0..)
        .map(|i| Duration::from_millis(50 * i))
        .take_while(|&t| t <= phases.total());
    let capacity = steps.map(|t| {
        (
            t.as_secs_f64(),
            phases.capacity(t) / phases.full * f64::from(CAPACITY),
        )
    });
    series.insert(0, Series::dashed("backend concurrency", capacity.collect()));
    let title = format!("Concurrency limit over time: {}", origin.title);
    let plot = LinePlot::new(&title, "time (s)", "limit (requests in flight)", series);
    report.plot(
        file,
        &LinePlot {
            y_max: Some(f64::from(3 * CAPACITY)),
            ..plot
        },
    );
}

/// The goals, checked for each of weir's algorithms.
fn goals(report: &mut Report, verdicts: &[Verdict], unloaded_p99: Duration) {
    let acc = || {
        verdicts
            .iter()
            .filter(|v| matches!(v.contender, Contender::AccGradient2 | Contender::AccVegas))
    };
    let best_acc_goodput = acc().map(|v| v.goodput).fold(0.0, f64::max);
    let best_acc_p99 = acc().map(|v| v.p99).min().unwrap_or(Duration::MAX);
    let tuned = verdicts
        .iter()
        .find(|v| v.contender == Contender::Static(CAPACITY));
    let tuned = tuned.map_or(0.0, |v| v.goodput);
    let goals = [
        Goal::at_least("goodput ≥ 95 % (steady)", 0.95),
        Goal::at_most("p99 ≤ 2× unloaded (steady)", 2.0),
        Goal::at_most("converged ≤ 2 s (every change)", 2.0),
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
            .map(|c| c.map_or(f64::INFINITY, |c| c.as_secs_f64()));
        let converged = converged.fold(0.0, f64::max);
        let p99 = v.p99_steady.as_secs_f64() / unloaded_p99.as_secs_f64();
        let ahead = f64::from(u8::from(
            v.goodput > best_acc_goodput && v.p99 < best_acc_p99,
        ));
        let of_tuned = v.goodput / tuned.max(1e-9);
        let figures = [v.goodput_steady, p99, converged, ahead, of_tuned];
        let [goodput, p99_ok, converged, ahead, tuned] =
            std::array::from_fn(|i| goals[i].verdict(figures[i]));
        let each: Vec<String> = v.converged.iter().map(|c| seconds(*c)).collect();
        let (gap, lag) = (
            100.0 * (v.goodput - best_acc_goodput),
            ms(v.p99) - ms(best_acc_p99),
        );
        table.cells([
            v.contender.name(),
            format!("{goodput} ({:.1} %)", 100.0 * v.goodput_steady),
            format!("{p99_ok} ({p99:.2}×)"),
            format!("{converged} ({})", each.join(" / ")),
            format!("{ahead} ({gap:+.1} pt, {lag:+.1} ms)"),
            format!("{tuned} ({:.1} % of it)", 100.0 * of_tuned),
        ]);
    }
    report.text("The goals, for weir's algorithms (whole-run figures where not marked steady):");
    report.table(&table);
}

/// In-process cost per request of the layers around a service that answers
/// at once, in interleaved rounds.
fn overhead(report: &mut Report) {
    use tower::Layer;
    let requests = report.scale().pick(200_000, 1_000_000);
    let hello = tower::service_fn(|_: http::Request<Body>| {
        std::future::ready(Ok::<_, std::convert::Infallible>(http::Response::new(
            Body::empty(),
        )))
    });
    let acc = || {
        let limit = tower_acc::ConcurrencyLimitLayer::new(tower_acc::Gradient2::default());
        tower::ServiceBuilder::new()
            .layer(tower::load_shed::LoadShedLayer::new())
            .layer(limit)
            .service(hello)
    };
    let names = [
        "bare service",
        "InflightLayer (static)",
        "AdaptiveInflightLayer::shared (weir Gradient2)",
        "AdaptiveInflightLayer::new, one key (weir Gradient2)",
        "tower-acc Gradient2 + LoadShed",
    ];
    let request = || http::Request::new(Body::empty());
    let runs = contest::rotate(report, "in-process cost", names.len(), 5, |layer, _| {
        let limiter = || KeyedAdaptiveLimiter::new(Gradient2::default(), NonZeroUsize::MIN);
        match layer {
            0 => time_service(hello, requests, request),
            1 => time_service(
                InflightLayer::new(GlobalKey, CAPACITY).layer(hello),
                requests,
                request,
            ),
            2 => time_service(
                AdaptiveInflightLayer::shared(AdaptiveLimiter::new(Gradient2::default()))
                    .layer(hello),
                requests,
                request,
            ),
            3 => time_service(
                AdaptiveInflightLayer::new(GlobalKey, limiter()).layer(hello),
                requests,
                request,
            ),
            _ => time_service(acc(), requests, request),
        }
    });
    let spreads = contest::spreads(&runs, |x| *x);
    let bare = spreads[0].median;
    let mut table = Table::new(
        "layer | ns per request (min / median / max of 5) | over the bare service (median)",
    );
    for (name, spread) in names.iter().zip(&spreads) {
        table.row(format!(
            "{name} | {} | {:+.0} ns",
            spread.show(0),
            spread.median - bare
        ));
    }
    report.text(
        "In-process cost per request (no sockets): a service that answers at once, called \
         through each layer on a current-thread runtime, the service cloned for each request \
         as axum's router does; the adaptive layers also read the clock twice and feed the \
         algorithm once per request.",
    );
    report.table(&table);
    // Each repetition's ratio of the layers' costs over that repetition's
    // bare service, so the machine's drift between repetitions cancels.
    let acc = names.len() - 1;
    let ratios: Vec<f64> = (0..runs[0].len())
        .map(|r| (runs[2][r] - runs[0][r]) / (runs[acc][r] - runs[0][r]))
        .collect();
    let goal = Goal::at_most(
        "AdaptiveInflightLayer::shared costs ≤ tower-acc + LoadShed over the bare service",
        1.0,
    );
    let [spread, verdict] = goal.judge(&ratios);
    report.text(&format!(
        "Goal, {}: {spread} (min / median / max of the per-repetition ratios): {verdict}.",
        goal.name
    ));
}
