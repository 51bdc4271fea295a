//! weir-rate in the report: the Criteo accuracy comparison reproduced and
//! extended to every algorithm, and the keyed-limiter benchmark against
//! `governor` (1 M uniformly drawn keys, one and two threads, memory beside
//! speed).

use crate::alloc::{self, AllocStats};
use crate::contest::{self, Goal, Spread};
use crate::plot::{BarPlot, BarSeries, LinePlot, Series};
use crate::report::{Report, Table, thousands};
use crate::workload;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::collections::VecDeque;
use std::num::NonZeroU32;
use std::time::{Duration, Instant};
use weir_limits::clock::{Clock, ManualClock, MonotonicClock, StdClock, Timestamp};
use weir_rate::{
    FixedWindow, Gcra, KeyedLimiter, Limiter, Mode, Quota, SketchLimiter, SlidingLog,
    SlidingWindow, TokenBucket,
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
    fn counting<L: Limiter + 'static>(
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
fn enforcement<L: Limiter>(limiter: &L, times: &[u64]) -> (u64, u64, u64, u64, f64) {
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
fn accuracy(report: &mut Report) {
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
    let pct = |n: u64| {
        format!(
            "{} ({:.3} %)",
            thousands(n),
            n as f64 * 100.0 / times.len().max(1) as f64
        )
    };
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
        let plot = LinePlot {
            title: title.into(),
            x_label: "time (s)".into(),
            y_label: format!("calls in the last {} s", WINDOW.as_secs()),
            series: vec![
                Series::line("perfect sliding window", perfect.clone()),
                Series::dashed(label, series(estimator(counters))),
            ],
            references: vec![(f64::from(LIMIT), format!("limit {LIMIT}"))],
            y_max: None,
        };
        report.plot(file, &plot);
    }
}

/// A keyed limiter checked by `u32` key in the benchmark.
pub trait KeyedContender: Sync {
    /// Check one unit for `key`; true when allowed.
    fn check(&self, key: u32) -> bool;
}

impl<C: Clock> KeyedContender for KeyedLimiter<u32, Gcra, C> {
    #[inline]
    fn check(&self, key: u32) -> bool {
        KeyedLimiter::check(self, &key).is_allowed()
    }
}

impl<C: Clock> KeyedContender for SketchLimiter<C> {
    #[inline]
    fn check(&self, key: u32) -> bool {
        SketchLimiter::check(self, &key).is_allowed()
    }
}

/// A weir limiter checked through its lean `allows` (yes or no, no
/// `Decision`): the job governor's `check_key` does.
pub struct Lean<L>(pub L);

impl<C: Clock> KeyedContender for Lean<KeyedLimiter<u32, Gcra, C>> {
    #[inline]
    fn check(&self, key: u32) -> bool {
        self.0.allows(&key)
    }
}

impl<C: Clock> KeyedContender for Lean<SketchLimiter<C>> {
    #[inline]
    fn check(&self, key: u32) -> bool {
        self.0.allows(&key)
    }
}

impl KeyedContender for governor::DefaultKeyedRateLimiter<u32> {
    #[inline]
    fn check(&self, key: u32) -> bool {
        self.check_key(&key).is_ok()
    }
}

/// governor's keyed limiter on its upkeep clock (quanta's `recent()`).
pub type GovernorUpkeep = governor::RateLimiter<
    u32,
    governor::state::keyed::DefaultKeyedStateStore<u32>,
    governor::clock::QuantaUpkeepClock,
    governor::middleware::NoOpMiddleware<governor::clock::QuantaInstant>,
>;

impl KeyedContender for GovernorUpkeep {
    #[inline]
    fn check(&self, key: u32) -> bool {
        self.check_key(&key).is_ok()
    }
}

/// The per-key quota of the benchmark: GCRA at 1000 per second with the
/// default burst (the limit), as a new user of either crate would write it.
pub fn bench_quota() -> Quota {
    Quota::per_second(NonZeroU32::new(1000).expect("non-zero"))
}

/// The load the sketch is sized for: 40 M checks a second in all, about
/// what two threads of this machine push through it.
pub const SIZED_FOR: u64 = 40_000_000;

/// The wrong-denial target the sketch is sized for (0.1%).
pub const WRONG_DENIALS: f64 = 0.001;

/// One contender of the keyed benchmark.
pub struct Contender {
    /// Name in the tables.
    pub name: &'static str,
    /// Builds a fresh limiter and checks every key of each stream on its own
    /// thread (barrier-started), calling the limiter directly; returns the
    /// slowest thread's time and the number allowed.
    pub time: fn(&[Vec<u32>]) -> (Duration, u64),
    /// Builds a fresh limiter.
    pub build: fn() -> Box<dyn KeyedContender>,
}

macro_rules! contender {
    ($name:expr, $build:expr) => {
        Contender {
            name: $name,
            time: |streams| time_limiter(($build)(), streams),
            build: || Box::new(($build)()),
        }
    };
}

fn time_limiter<L: KeyedContender>(limiter: L, streams: &[Vec<u32>]) -> (Duration, u64) {
    let limiter = std::hint::black_box(limiter);
    contest::run_streams(streams, |key| limiter.check(key))
}

fn governor_quota() -> governor::Quota {
    let q = bench_quota();
    governor::Quota::per_second(NonZeroU32::new(q.limit()).expect("non-zero"))
        .allow_burst(NonZeroU32::new(q.burst()).expect("non-zero"))
}

fn governor_keyed() -> governor::DefaultKeyedRateLimiter<u32> {
    governor::RateLimiter::keyed(governor_quota())
}

/// governor on an upkeep clock refreshed as often as weir's
/// [`RecentClock`](weir_rate::clock::RecentClock).
fn governor_upkeep() -> GovernorUpkeep {
    let clock =
        governor::clock::QuantaUpkeepClock::from_interval(weir_rate::clock::RecentClock::INTERVAL)
            .expect("an upkeep thread");
    governor::RateLimiter::dashmap_with_clock(governor_quota(), clock)
}

/// The sketch as its own sizing rule sizes it for [`SIZED_FOR`] checks a
/// second at [`WRONG_DENIALS`].
pub fn sized_sketch() -> SketchLimiter {
    SketchLimiter::try_sized_for(
        bench_quota(),
        std::num::NonZeroU64::new(SIZED_FOR).expect("non-zero"),
        WRONG_DENIALS,
    )
    .expect("a valid sizing")
}

/// weir's keyed limiters and governor's.
pub fn contenders() -> Vec<Contender> {
    vec![
        contender!(GOVERNOR, governor_keyed),
        contender!(EXACT, || Lean(exact())),
        contender!(SKETCH, || Lean(sized_sketch())),
        contender!("weir KeyedLimiter, check (full Decision)", exact),
        contender!("weir SketchLimiter, check (full Decision)", sized_sketch),
        contender!(GOVERNOR_UPKEEP, governor_upkeep),
        contender!(EXACT_RECENT, || Lean(KeyedLimiter::with_clock(
            Gcra::new(bench_quota()),
            weir_rate::clock::RecentClock::new()
        ))),
    ]
}

/// governor on the cheaper clock it offers, against weir on its own.
const GOVERNOR_UPKEEP: &str = "governor keyed on QuantaUpkeepClock (1 ms)";
/// weir's exact limiter on its cheaper clock.
const EXACT_RECENT: &str = "weir KeyedLimiter<Gcra> on RecentClock, allows";

/// The anchor every ratio is taken against.
const GOVERNOR: &str = "governor keyed (DashMap, GCRA)";
/// weir's exact limiter on the lean path, judged against the goal.
const EXACT: &str = "weir KeyedLimiter<Gcra> (exact), allows";
/// weir's sketch on the lean path, judged against the goal.
const SKETCH: &str = "weir SketchLimiter (sized by its rule), allows";

fn exact() -> KeyedLimiter<u32, Gcra> {
    KeyedLimiter::new(Gcra::new(bench_quota()))
}

/// The key distributions of the benchmark.
const DISTRIBUTIONS: [&str; 2] = ["uniform", "Zipf 1.1"];

/// The benchmark part of the report.
fn benchmark(report: &mut Report) {
    let scale = report.scale();
    let total: usize = scale.pick(4_000_000, 20_000_000);
    let repetitions: usize = scale.pick(3, 5);
    report.section("weir-rate: keyed limiters against governor");
    let q = bench_quota();
    let shape = weir_rate::SketchLimiter::shape_for_load(
        q,
        std::num::NonZeroU64::new(SIZED_FOR).expect("non-zero"),
        WRONG_DENIALS,
    )
    .expect("a valid sizing");
    let (hashes, slots) = (shape.hashes(), shape.slots());
    report.text(&format!(
        "{} checks over {} `u32` keys drawn uniformly or from Zipf (s = 1.1), pre-generated; per-key quota {} per second, burst {} (GCRA), \
         both crates on their default clocks. The sketch is sized by `SketchLimiter::try_sized_for` for {} M checks a second at {}% wrong denials: \
         {hashes} × {slots} cells ({} KiB). Each figure is the median (min–max) of {repetitions} repetitions; within one the contenders \
         run back to back (order rotating), each on a fresh limiter, threads barrier-started; ratios pair a repetition with governor's. \
         Memory is the peak heap growth of the first 1-thread run; 'allowed' is what each let through in it. \
         weir's rows marked `allows` answer yes or no, as governor's `check_key` does; the `check` rows build the full `Decision` \
         (remaining, reset and retry times for headers). The goals are judged on the `allows` rows.",
        thousands(total as u64),
        thousands(u64::from(workload::KEYS)),
        q.limit(),
        q.burst(),
        SIZED_FOR / 1_000_000,
        WRONG_DENIALS * 100.0,
        hashes * slots * 8 / 1024,
    ));
    let contenders = contenders();
    let n = contenders.len();
    let position = |name: &str| {
        contenders
            .iter()
            .position(|c| c.name == name)
            .expect("a contender of this benchmark")
    };
    let (anchor, exact, sketch) = (position(GOVERNOR), position(EXACT), position(SKETCH));
    let (upkeep, exact_recent) = (position(GOVERNOR_UPKEEP), position(EXACT_RECENT));
    let mut table = Table::new(
        "keys | limiter | 1 thread ns/check | 2 threads ns/check | × governor (1 thread) | × governor (2 threads) | peak bytes | allowed (1 thread)",
    );
    let mut goals = Table::new("goal | keys | this run: median (min–max) | verdict");
    let mut recent = Table::new(
        "keys | threads | weir exact on RecentClock × governor on QuantaUpkeepClock | weir exact on RecentClock × governor on its default clock",
    );
    // ns per check for the chart: [contender][distribution × threads].
    let mut chart: Vec<Vec<Option<Spread>>> = vec![Vec::new(); n];
    let mut groups = Vec::new();
    for (d, distribution) in DISTRIBUTIONS.iter().enumerate() {
        let mut first = vec![(AllocStats::default(), 0u64); n];
        let streams = |threads: usize| -> Vec<Vec<u32>> {
            let seed = |i: usize| 7000 + 100 * d as u64 + i as u64;
            let keys = |i| {
                if d == 0 {
                    workload::uniform(total / threads, seed(i))
                } else {
                    workload::zipf(total / threads, 1.1, seed(i))
                }
            };
            (0..threads).map(keys).collect()
        };
        let one_thread = streams(1);
        // ns per check per thread, [threads − 1][contender][repetition].
        let ns: Vec<Vec<Vec<f64>>> = [one_thread.clone(), streams(2)]
            .iter()
            .enumerate()
            .map(|(t, streams)| {
                let what = format!("{distribution}, {} thread(s)", t + 1);
                contest::rotate(report, &what, n, repetitions, |c, r| {
                    let time = || (contenders[c].time)(streams);
                    let (elapsed, _) = if t == 0 && r == 0 {
                        let (result, stats) = alloc::measure(time);
                        first[c] = (stats, result.1);
                        result
                    } else {
                        time()
                    };
                    elapsed.as_nanos() as f64 * (t + 1) as f64 / total as f64
                })
            })
            .collect();
        // Each repetition of `c` paired with the same repetition of `over`.
        let ratio =
            |over: usize, c: usize, t: usize| Spread::of(&contest::paired(&ns[t][over], &ns[t][c]));
        for (t, ns_t) in ns.iter().enumerate() {
            groups.push(format!(
                "{distribution}, {} thread{}",
                t + 1,
                if t == 0 { "" } else { "s" }
            ));
            for (c, bars) in chart.iter_mut().enumerate() {
                bars.push(Some(Spread::of(&ns_t[c])));
            }
            let (upkeep, default) = (
                ratio(upkeep, exact_recent, t).show(2),
                ratio(anchor, exact_recent, t).show(2),
            );
            recent.row(format!("{distribution} | {} | {upkeep} | {default}", t + 1));
        }
        for (c, contender) in contenders.iter().enumerate() {
            let (memory, allowed) = first[c];
            let [one, two] = [0, 1].map(|t| Spread::of(&ns[t][c]).show(1));
            let [x1, x2] = [0, 1].map(|t| ratio(anchor, c, t).show(2));
            let (peak, allowed) = (thousands(memory.peak_bytes as u64), thousands(allowed));
            let share = first[c].1 as f64 * 100.0 / total as f64;
            table.row(format!("{distribution} | {} | {one} | {two} | {x1} | {x2} | {peak} | {allowed} ({share:.2}%)", contender.name));
        }
        for (goal, c) in [
            (Goal::at_least("KeyedLimiter ≥ 3× governor", 3.0), exact),
            (Goal::at_least("SketchLimiter ≥ 5× governor", 5.0), sketch),
        ] {
            for t in 0..2 {
                let s = ratio(anchor, c, t);
                goals.row(format!(
                    "{}, {} thread(s) | {distribution} | {} | {}",
                    goal.name,
                    t + 1,
                    s.show(2),
                    goal.verdict_spread(&s)
                ));
            }
        }
        // Allowed shares from the timed runs are not comparable: a slower
        // limiter spends more real time, so its over-quota keys earn more.
        // Compare on the 1-thread stream with the same timestamps for both.
        let (by_exact, by_sketch) = allowed_on_a_timed_stream(&one_thread[0]);
        let [by_exact, by_sketch] = [by_exact, by_sketch].map(|a| a as f64 * 100.0 / total as f64);
        let gap = Goal::at_most(
            "SketchLimiter allows within 0.1 pp of the exact limiter (same timed stream)",
            0.1,
        );
        let verdict = gap.verdict((by_exact - by_sketch).abs());
        let figure = format!(
            "exact {by_exact:.3}%, sketch {by_sketch:.3}%: {:+.3} pp",
            by_exact - by_sketch
        );
        goals.row(format!(
            "{} | {distribution} | {figure} | {verdict}",
            gap.name
        ));
    }
    report.table(&table);
    let series = contenders
        .iter()
        .zip(chart)
        .map(|(c, bars)| BarSeries::new(c.name, bars));
    report.plot(
        "rate-keyed-ns-per-check",
        &BarPlot {
            title: "weir-rate: ns per check by key distribution and thread count, keyed limiters against governor (median, min–max)".into(),
            x_label: "keys, threads checking at once".into(),
            y_label: "ns/check per thread".into(),
            groups,
            series: series.collect(),
            ..BarPlot::default()
        },
    );
    report.text("Goals (issue 14), judged on this run:");
    report.table(&goals);
    report.text(
        "Both crates also offer a clock that reads a time a background thread refreshes (here every millisecond) \
         instead of the time-stamp counter: weir's `RecentClock` (opt-in, at most about a millisecond stale) and governor's \
         `QuantaUpkeepClock`. The goals above are judged on the default clocks; on the cheaper clocks, paired per repetition:",
    );
    report.table(&recent);
    let reads = scale.pick(2_000_000u32, 10_000_000);
    let per_read = |clock: &dyn Clock| {
        let start = Instant::now();
        let sink = (0..reads).fold(0u64, |sink, _| sink.wrapping_add(clock.now_nanos()));
        std::hint::black_box(sink);
        start.elapsed().as_nanos() as f64 / f64::from(reads)
    };
    let monotonic = per_read(&MonotonicClock::new());
    let std_clock = per_read(&StdClock::new());
    let recent_clock = per_read(&weir_rate::clock::RecentClock::new());
    report.text(&format!(
        "One clock read on this machine: weir's default `MonotonicClock` (time-stamp counter, as governor's quanta clock) {monotonic:.1} ns, \
         `StdClock` (`Instant::now()`) {std_clock:.1} ns, `RecentClock` {recent_clock:.1} ns."
    ));
    report.text(
        "The exact KeyedLimiter forgets keys whose state has expired (after burst/rate); governor keeps every key until \
         `retain_recent()` is called. With two threads the machine's two cores are shared with nothing else only when the \
         machine is otherwise idle.",
    );
}

/// The checks of `keys` the exact limiter and the sized sketch allow when
/// the checks arrive at half the sketch's sizing load ([`SIZED_FOR`] / 2,
/// one thread's share), each at its own timestamp, the same for both.
fn allowed_on_a_timed_stream(keys: &[u32]) -> (u64, u64) {
    let q = bench_quota();
    let exact = KeyedLimiter::with_clock(Gcra::new(q), ManualClock::new());
    let shape = weir_rate::SketchLimiter::shape_for_load(
        q,
        std::num::NonZeroU64::new(SIZED_FOR).expect("non-zero"),
        WRONG_DENIALS,
    )
    .expect("a valid sizing");
    let sketch = SketchLimiter::with_clock(q, shape, ManualClock::new());
    let step = 2_000_000_000 / SIZED_FOR;
    let (mut by_exact, mut by_sketch) = (0, 0);
    for (i, key) in keys.iter().enumerate() {
        let now = Timestamp::from_nanos(i as u64 * step);
        by_exact += u64::from(exact.check_n_at(key, 1, now).is_ok_and(|d| d.is_allowed()));
        by_sketch += u64::from(sketch.check_n_at(key, 1, now).is_ok_and(|d| d.is_allowed()));
    }
    (by_exact, by_sketch)
}

/// The whole weir-rate section of the report.
pub fn run(report: &mut Report) {
    accuracy(report);
    benchmark(report);
    spray(report);
}

/// Keys still sending after the spray, checked once more two hours later.
const LIVE_AFTER_SPRAY: u64 = 50;

/// One spray of `keys` one-shot keys on an hourly quota, on manual clocks
/// (1 µs between checks), then two hours of quiet, the idle keys forgotten
/// (weir: `evict_idle`; governor: `retain_recent` and `shrink_to_fit`) and
/// [`LIVE_AFTER_SPRAY`] keys checked again. Returns the nanoseconds per
/// sprayed check and the heap: peak growth, and what is still held (the
/// limiter is held until measured: what it keeps is the figure).
fn spray_once(weir: bool, keys: u64) -> (f64, AllocStats) {
    let per_hour = NonZeroU32::new(100).expect("non-zero");
    let two_hours = Duration::from_secs(2 * 3600);
    let spray = |advance: &dyn Fn(Duration), check: &dyn Fn(u64)| {
        let start = Instant::now();
        for key in 0..keys {
            advance(Duration::from_micros(1));
            check(key);
        }
        start.elapsed().as_nanos() as f64 / keys as f64
    };
    let ((ns, _weir, _governor), stats) = alloc::measure(|| {
        if weir {
            let clock = ManualClock::new();
            let limiter = KeyedLimiter::<u64, _, _>::with_clock(
                Gcra::new(Quota::per_hour(per_hour)),
                clock.clone(),
            );
            let ns = spray(&|d| clock.advance(d), &|key| {
                std::hint::black_box(limiter.allows(&key));
            });
            clock.advance(two_hours);
            limiter.evict_idle();
            (0..LIVE_AFTER_SPRAY).for_each(|key| {
                std::hint::black_box(limiter.allows(&key));
            });
            (ns, Some(limiter), None)
        } else {
            let clock = governor::clock::FakeRelativeClock::default();
            let limiter = governor::RateLimiter::dashmap_with_clock(
                governor::Quota::per_hour(per_hour),
                clock.clone(),
            );
            let ns = spray(&|d| clock.advance(d), &|key| {
                std::hint::black_box(limiter.check_key(&key).is_ok());
            });
            clock.advance(two_hours);
            limiter.retain_recent();
            limiter.shrink_to_fit();
            (0..LIVE_AFTER_SPRAY).for_each(|key| {
                std::hint::black_box(limiter.check_key(&key).is_ok());
            });
            (ns, None, Some(limiter))
        }
    });
    (ns, stats)
}

/// The key-spray table: memory and throughput under millions of one-shot
/// keys, weir's capped exact limiter (default capacity) against governor.
fn spray(report: &mut Report) {
    let keys: u64 = report.scale().pick(1_000_000, 10_000_000);
    report.section("Keyed limiting under a key spray");
    report.text(&format!(
        "{} one-shot `u64` keys, each checked once on an hourly quota (100 per hour), 1 µs apart on manual clocks; then two hours \
         of quiet, the idle keys forgotten (weir `evict_idle`; governor `retain_recent` + `shrink_to_fit`) and {LIVE_AFTER_SPRAY} keys \
         checked again. weir's `KeyedLimiter` has its default capacity ({} keys; a key it forgets spills into a small sketch, so it \
         is never judged looser); governor's keyed limiter grows with the keys. Heap from the counting allocator; three repetitions \
         alternating the two, min / median / max.",
        thousands(keys),
        thousands(KeyedLimiter::<u64, Gcra>::DEFAULT_CAPACITY.get() as u64),
    ));
    let runs = contest::rotate(report, "key spray", 2, 3, |i, _| spray_once(i == 0, keys));
    let mb = |b: f64| {
        if b.abs() >= 1e6 {
            format!("{:.1} MB", b / 1e6)
        } else {
            format!("{:.0} KB", b / 1e3)
        }
    };
    let mut table =
        Table::new("limiter | ns per sprayed check | peak heap growth | held two hours later");
    for (i, name) in [
        "weir KeyedLimiter<Gcra> (default capacity)",
        "governor keyed (DashMap, GCRA)",
    ]
    .into_iter()
    .enumerate()
    {
        let spread = |f: fn(&(f64, AllocStats)) -> f64| {
            Spread::of(&runs[i].iter().map(f).collect::<Vec<_>>())
        };
        let (ns, peak) = (
            spread(|r| r.0).show_each(|x| format!("{x:.0}")),
            spread(|r| r.1.peak_bytes as f64).show_each(mb),
        );
        table.row(format!(
            "{name} | {ns} | {peak} | {}",
            spread(|r| r.1.live_bytes as f64).show_each(mb)
        ));
    }
    let ns = |i: usize| runs[i].iter().map(|r| r.0).collect::<Vec<_>>();
    let ratio = Spread::of(&contest::paired(&ns(1), &ns(0))).show_each(|x| format!("{x:.2}×"));
    table.cells([
        "governor ÷ weir, per repetition".to_owned(),
        ratio,
        String::new(),
        String::new(),
    ]);
    report.table(&table);
}

/// Scale-independent helper for the criterion bench: a stream of keys.
pub fn keys(len: usize) -> Vec<u32> {
    workload::uniform(len, 7000)
}
