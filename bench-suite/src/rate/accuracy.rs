//! The Criteo comparison: every approximation's count against the exact
//! sliding window, and every algorithm enforcing the same limit.

use crate::harness::plot::{LinePlot, Series};
use crate::harness::report::{Report, Table, share, thousands};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::collections::VecDeque;
use std::num::NonZeroU32;
use std::time::Duration;
use weir_rate::{
    Algorithm, FixedWindow, Gcra, Mode, Quota, SlidingLog, SlidingWindow, TokenBucket,
};

/// The Criteo post's limit: 100 calls per minute.
const LIMIT: u32 = 100;
const WINDOW: Duration = Duration::from_secs(60);
/// Counter counts compared (N = 2 is Cloudflare's two-window approximation;
/// N = 5 is the post's "five 15 s windows").
const COUNTERS: [u32; 5] = [2, 4, 5, 15, 60];

const SEC: u64 = 1_000_000_000;

/// Random traffic around the limit: Poisson arrivals whose rate changes
/// every 5 s, drawn log-uniformly between ¼ and 4 times the limit's rate,
/// so that the limit binds about half of the time. Sorted times in ns.
fn traffic(duration: Duration, seed: u64) -> Vec<u64> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let base = f64::from(LIMIT) / WINDOW.as_secs_f64();
    let (mut times, mut t, mut segment_end, mut rate) = (Vec::new(), 0.0f64, 0.0f64, base);
    while t < duration.as_secs_f64() {
        if t >= segment_end {
            segment_end += 5.0;
            rate = base * 2f64.powf(rng.random_range(-2.0..2.0));
        }
        t += -rng.random_range(f64::MIN_POSITIVE..1.0f64).ln() / rate;
        times.push((t * SEC as f64) as u64);
    }
    times.pop(); // the arrival past the end
    times
}

/// The exact count of a set of timestamps in the window ending now.
#[derive(Default)]
struct Exact(VecDeque<u64>);

impl Exact {
    /// Count in `(now − window, now]`.
    fn count(&mut self, now: u64) -> u64 {
        while self
            .0
            .front()
            .is_some_and(|&t| t + WINDOW.as_nanos() as u64 <= now)
        {
            self.0.pop_front();
        }
        self.0.len() as u64
    }
}

/// An approximation counting all traffic (every request counted, no limit
/// applied): its estimate before each request. `None` is the fixed window,
/// `Some(n)` the sliding-window counter of `n` counters.
fn estimator(counters: Option<u32>) -> Box<dyn FnMut(u64) -> f64> {
    let unlimited = Quota::try_new(u32::MAX, WINDOW).expect("valid");
    fn counting<L: Algorithm + 'static>(
        l: L,
        estimate: fn(&L, &L::State, u64) -> f64,
    ) -> Box<dyn FnMut(u64) -> f64> {
        let mut state = l.new_state(0);
        Box::new(move |t| {
            let e = estimate(&l, &state, t);
            let _ = l.check(&mut state, t, 1, Mode::Consume);
            e
        })
    }
    match counters {
        None => counting(FixedWindow::new(unlimited), FixedWindow::estimate),
        Some(n) => counting(
            SlidingWindow::try_new(unlimited, n).expect("valid counters"),
            SlidingWindow::estimate,
        ),
    }
}

/// Criteo's graphs as numbers: each approximation's estimate before a
/// request against the exact sliding-window count, as (mean |error| as a
/// fraction of the limit, max over, max under, wrongly allowed, wrongly
/// denied); a decision is wrong when the two sides of `count + 1 ≤ limit`
/// differ.
fn counting(times: &[u64], mut estimate: Box<dyn FnMut(u64) -> f64>) -> (f64, f64, f64, u64, u64) {
    let (mut exact, mut sum, mut over, mut under, mut allowed, mut denied) =
        (Exact::default(), 0.0, 0.0f64, 0.0f64, 0, 0);
    let limit = f64::from(LIMIT);
    for &t in times {
        let (truth, est) = (exact.count(t) as f64, estimate(t));
        let err = est - truth;
        (sum, over, under) = (sum + err.abs(), over.max(err), under.max(-err));
        match (est + 1.0 <= limit, truth + 1.0 <= limit) {
            (true, false) => allowed += 1,
            (false, true) => denied += 1,
            _ => {}
        }
        exact.0.push_back(t);
    }
    (
        sum / times.len().max(1) as f64 / limit,
        over,
        under,
        allowed,
        denied,
    )
}

/// Each algorithm gating the same traffic, judged against the exact
/// sliding window over the requests *it* allowed: (allowed, wrongly
/// allowed, wrongly denied, most allowed in any window-long interval ending
/// at a request, mean |(limit − remaining) − exact count| before each
/// request as a fraction of the limit: how far the limiter's own view of
/// what it spent is from the truth).
fn enforcement<L: Algorithm>(limiter: &L, times: &[u64]) -> (u64, u64, u64, u64, f64) {
    let (mut state, mut exact, mut error) = (limiter.new_state(0), Exact::default(), 0.0);
    let (mut allowed, mut wrongly_allowed, mut wrongly_denied, mut most) = (0, 0, 0, 0);
    for &t in times {
        let before = exact.count(t);
        let room = before < u64::from(LIMIT);
        if let Ok(view) = limiter.check(&mut state, t, 0, Mode::Peek) {
            error += (f64::from(LIMIT) - f64::from(view.remaining()) - before as f64).abs();
        }
        if limiter
            .check(&mut state, t, 1, Mode::Consume)
            .is_ok_and(|d| d.is_allowed())
        {
            (allowed, most) = (allowed + 1, most.max(before + 1));
            wrongly_allowed += u64::from(!room);
            exact.0.push_back(t);
        } else {
            wrongly_denied += u64::from(room);
        }
    }
    (
        allowed,
        wrongly_allowed,
        wrongly_denied,
        most,
        error / times.len().max(1) as f64 / f64::from(LIMIT),
    )
}

/// The accuracy part of the report.
pub(super) fn accuracy(report: &mut Report) {
    let hours = report.scale().pick(6u64, 48);
    let times = traffic(Duration::from_secs(hours * 3600), 4);
    report.section("weir-rate: the Criteo comparison (accuracy)");
    report.text(&format!(
        "{} requests over {hours} simulated hours against {LIMIT} calls per {}s; Poisson arrivals whose rate is redrawn every 5 s \
         log-uniformly between ¼× and 4× the limit (seed 4). N-counter rows split the window into N − 1 sub-windows \
         (N = 2 is Cloudflare's approximation; N = 5 is the post's five 15 s windows). \
         The traffic is built to sit near the limit all the time, where approximations err most; Cloudflare's 0.003 % wrong decisions \
         were measured on real traffic, where most clients are far below their limit.",
        thousands(times.len() as u64),
        WINDOW.as_secs()
    ));
    plot_counts(report, &times);
    let pct = |n: u64| share(n, times.len() as u64, 3);
    report.text("**Counting all traffic** (the post's graphs): estimate before each request against the exact sliding count; a decision is wrong when `count + 1 ≤ limit` differs.");
    let mut table = Table::new(
        "counter | mean |error| (% of limit) | max over | max under | wrongly allowed | wrongly denied",
    );
    let sliding = COUNTERS.map(|n| match n {
        2 => (
            "sliding-window counter N = 2 (Cloudflare)".to_owned(),
            Some(n),
        ),
        _ => (format!("sliding-window counter N = {n}"), Some(n)),
    });
    for (name, counters) in [("fixed window".to_owned(), None)]
        .into_iter()
        .chain(sliding)
    {
        let (mean, over, under, allowed, denied) = counting(&times, estimator(counters));
        table.cells([
            name,
            format!("{:.3} %", mean * 100.0),
            format!("{over:.1}"),
            format!("{under:.1}"),
            pct(allowed),
            pct(denied),
        ]);
    }
    report.table(&table);

    report.text("**Enforcing the limit**: each algorithm gates the traffic; its decisions are judged against the exact sliding window over the requests it allowed itself, \
         and its own view of what has been spent (limit − remaining, from a zero-cost peek before each request) against that exact count. Token bucket and GCRA get burst = limit (the same 100 at once), so by design they can pass up to burst + limit in a window.");
    let mut table = Table::new(
        "algorithm | allowed | wrongly allowed | wrongly denied | max in any window (× limit) | mean |spent − exact| (% of limit)",
    );
    let q = Quota::try_new(LIMIT, WINDOW).expect("the Criteo quota is valid");
    let mut rows = vec![
        (
            "sliding log (exact)".to_owned(),
            enforcement(&SlidingLog::new(q), &times),
        ),
        (
            "fixed window".to_owned(),
            enforcement(&FixedWindow::new(q), &times),
        ),
    ];
    for n in COUNTERS {
        let sw = SlidingWindow::try_new(q, n).expect("valid counters");
        rows.push((
            format!("sliding-window counter N = {n}"),
            enforcement(&sw, &times),
        ));
    }
    rows.push((
        "token bucket".into(),
        enforcement(&TokenBucket::new(q), &times),
    ));
    rows.push(("GCRA".into(), enforcement(&Gcra::new(q), &times)));
    let tenth = q.allow_burst(NonZeroU32::new(LIMIT / 10).expect("non-zero"));
    rows.push((
        format!("GCRA, burst {}", LIMIT / 10),
        enforcement(&Gcra::new(tenth), &times),
    ));
    for (name, (allowed, wrongly_allowed, wrongly_denied, most, mean)) in rows {
        let most = most as f64 / f64::from(LIMIT);
        let (a, wa, wd) = (pct(allowed), pct(wrongly_allowed), pct(wrongly_denied));
        table.cells([
            name,
            a,
            wa,
            wd,
            format!("{most:.2}"),
            format!("{:.2} %", mean * 100.0),
        ]);
    }
    report.table(&table);
}

/// The post's graphs: over the first minutes of the same traffic, the
/// exact sliding count (grey) against each approximation's estimate.
fn plot_counts(report: &mut Report, times: &[u64]) {
    let shown: Vec<u64> = times
        .iter()
        .copied()
        .take_while(|&t| t < 6 * 60 * SEC)
        .collect();
    // One point per request thins out to about one a second for the file.
    let step = (shown.len() / 720).max(1);
    let series = |mut estimate: Box<dyn FnMut(u64) -> f64>| {
        let points = shown
            .iter()
            .enumerate()
            .map(|(i, &t)| (i, t as f64 / SEC as f64, estimate(t)));
        points
            .filter(|(i, _, _)| i % step == 0)
            .map(|(_, t, e)| (t, e))
            .collect::<Vec<_>>()
    };
    let mut exact = Exact::default();
    let perfect = series(Box::new(move |t| {
        let count = exact.count(t) as f64;
        exact.0.push_back(t);
        count
    }));
    for (file, title, label, counters) in [
        (
            "criteo-fixed-window",
            "Fixed window against the perfect sliding window",
            "fixed window",
            None,
        ),
        (
            "criteo-two-windows",
            "Two-window approximation (Cloudflare) against the perfect sliding window",
            "2 counters",
            Some(2),
        ),
        (
            "criteo-five-windows",
            "Five 15 s windows against the perfect sliding window",
            "5 counters",
            Some(5),
        ),
    ] {
        let series = vec![
            Series::line("perfect sliding window", perfect.clone()),
            Series::dashed(label, series(estimator(counters))),
        ];
        let plot = LinePlot::new(
            title,
            "time (s)",
            &format!("calls in the last {} s", WINDOW.as_secs()),
            series,
        );
        let references = vec![(f64::from(LIMIT), format!("limit {LIMIT}"))];
        report.plot(file, &LinePlot { references, ..plot });
    }
}
