//! weir-rate in the report: the Criteo accuracy comparison reproduced and
//! extended to every algorithm, and the keyed-limiter benchmark against
//! `governor` (1 M uniformly drawn keys, one and two threads, memory beside
//! speed).

use crate::alloc::{self, AllocStats};
use crate::plot::{BarPlot, BarSeries};
use crate::report::{Report, Spread, Table, thousands};
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
pub const LIMIT: u32 = 100;
/// The Criteo post's window.
pub const WINDOW: Duration = Duration::from_secs(60);
/// Counter counts compared (N = 2 is Cloudflare's two-window approximation;
/// N = 5 is the post's "five 15 s windows").
pub const COUNTERS: [u32; 5] = [2, 4, 5, 15, 60];

const SEC: u64 = 1_000_000_000;

/// Random traffic around the limit: Poisson arrivals whose rate changes
/// every 5 s, drawn log-uniformly between ¼ and 4 times the limit's rate,
/// so that the limit binds about half of the time. Sorted times in ns.
pub fn traffic(duration: Duration, seed: u64) -> Vec<u64> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let base = f64::from(LIMIT) / WINDOW.as_secs_f64();
    let end = duration.as_secs_f64();
    let mut times = Vec::new();
    let mut t = 0.0f64;
    let mut segment_end = 0.0f64;
    let mut rate = base;
    while t < end {
        if t >= segment_end {
            segment_end += 5.0;
            rate = base * 2f64.powf(rng.random_range(-2.0..2.0));
        }
        let u: f64 = rng.random_range(f64::MIN_POSITIVE..1.0);
        t += -u.ln() / rate;
        if t < end {
            times.push((t * SEC as f64) as u64);
        }
    }
    times
}

/// The exact count of a set of timestamps in the window ending now.
struct Exact {
    log: VecDeque<u64>,
    window: u64,
}

impl Exact {
    fn new() -> Self {
        Self {
            log: VecDeque::new(),
            window: WINDOW.as_nanos() as u64,
        }
    }

    /// Count in `(now − window, now]`.
    fn count(&mut self, now: u64) -> u64 {
        while self.log.front().is_some_and(|&t| t + self.window <= now) {
            self.log.pop_front();
        }
        self.log.len() as u64
    }

    fn push(&mut self, now: u64) {
        self.log.push_back(now);
    }
}

/// One row of the counting table.
#[derive(Debug, Default, Clone)]
pub struct CountingError {
    /// Mean |estimate − exact| as a fraction of the limit.
    pub mean_abs: f64,
    /// Largest overestimate in requests.
    pub max_over: f64,
    /// Largest underestimate in requests.
    pub max_under: f64,
    /// Requests the estimate let through although the exact count was at the limit.
    pub wrongly_allowed: u64,
    /// Requests the estimate stopped although the exact count had room.
    pub wrongly_denied: u64,
}

/// Criteo's graphs as numbers: every request is counted (the raw traffic),
/// and each approximation's estimate before the request is compared with
/// the exact sliding-window count; a decision is wrong when the two sides
/// of `count + 1 ≤ limit` differ.
pub fn counting(times: &[u64], estimate: &mut dyn FnMut(u64) -> f64) -> CountingError {
    let mut exact = Exact::new();
    let mut e = CountingError::default();
    let mut sum = 0.0;
    for &t in times {
        let truth = exact.count(t) as f64;
        let est = estimate(t);
        let err = est - truth;
        sum += err.abs();
        e.max_over = e.max_over.max(err);
        e.max_under = e.max_under.max(-err);
        let limit = f64::from(LIMIT);
        match (est + 1.0 <= limit, truth + 1.0 <= limit) {
            (true, false) => e.wrongly_allowed += 1,
            (false, true) => e.wrongly_denied += 1,
            _ => {}
        }
        exact.push(t);
    }
    e.mean_abs = sum / times.len().max(1) as f64 / f64::from(LIMIT);
    e
}

/// One row of the enforcement table.
#[derive(Debug, Default, Clone)]
pub struct Enforcement {
    /// Requests allowed.
    pub allowed: u64,
    /// Allowed although the window before already held `limit` allowed requests.
    pub wrongly_allowed: u64,
    /// Denied although the window before had room.
    pub wrongly_denied: u64,
    /// Most allowed requests in any window-long interval ending at a request.
    pub max_in_window: u64,
    /// Mean |(limit − remaining) − exact count| before each request, as a
    /// fraction of the limit: how far the limiter's own view of what has
    /// been spent is from the exact sliding window of what it allowed.
    pub mean_abs: f64,
}

/// Each algorithm gating the same traffic: its decisions are judged
/// against the exact sliding window over the requests *it* allowed.
pub fn enforcement<L: Limiter>(limiter: &L, times: &[u64]) -> Enforcement {
    let mut state = limiter.new_state(0);
    let mut exact = Exact::new();
    let mut e = Enforcement::default();
    let mut error = 0.0;
    for &t in times {
        let before = exact.count(t);
        let room = before < u64::from(LIMIT);
        if let Ok(view) = limiter.check(&mut state, t, 0, Mode::Peek) {
            let spent = f64::from(LIMIT) - f64::from(view.remaining());
            error += (spent - before as f64).abs();
        }
        let allowed = limiter
            .check(&mut state, t, 1, Mode::Consume)
            .is_ok_and(|d| d.is_allowed());
        if allowed {
            e.allowed += 1;
            exact.push(t);
            e.max_in_window = e.max_in_window.max(before + 1);
            if !room {
                e.wrongly_allowed += 1;
            }
        } else if room {
            e.wrongly_denied += 1;
        }
    }
    e.mean_abs = error / times.len().max(1) as f64 / f64::from(LIMIT);
    e
}

fn quota() -> Quota {
    Quota::try_new(LIMIT, WINDOW).expect("the Criteo quota is valid")
}

fn pct(n: u64, of: usize) -> String {
    format!(
        "{} ({:.3} %)",
        thousands(n),
        n as f64 * 100.0 / of.max(1) as f64
    )
}

/// The accuracy part of the report.
pub fn accuracy(report: &mut Report) {
    let scale = report.scale();
    let hours = scale.pick(6u64, 48);
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
    report.text("**Counting all traffic** (the post's graphs): estimate before each request against the exact sliding count; a decision is wrong when `count + 1 ≤ limit` differs.");
    let mut table = Table::new([
        "counter",
        "mean |error| (% of limit)",
        "max over",
        "max under",
        "wrongly allowed",
        "wrongly denied",
    ]);
    let mut rows: Vec<(String, CountingError)> = Vec::new();
    rows.push(("fixed window".into(), count_all_fixed(&times)));
    for n in COUNTERS {
        rows.push((
            if n == 2 {
                "sliding-window counter N = 2 (Cloudflare)".to_string()
            } else {
                format!("sliding-window counter N = {n}")
            },
            count_all_sliding(&times, n),
        ));
    }
    for (name, e) in &rows {
        table.row([
            name.clone(),
            format!("{:.3} %", e.mean_abs * 100.0),
            format!("{:.1}", e.max_over),
            format!("{:.1}", e.max_under),
            pct(e.wrongly_allowed, times.len()),
            pct(e.wrongly_denied, times.len()),
        ]);
    }
    report.table(&table);

    report.text("**Enforcing the limit**: each algorithm gates the traffic; its decisions are judged against the exact sliding window over the requests it allowed itself, \
         and its own view of what has been spent (limit − remaining, from a zero-cost peek before each request) against that exact count. Token bucket and GCRA get burst = limit (the same 100 at once), so by design they can pass up to burst + limit in a window.");
    let mut table = Table::new([
        "algorithm",
        "allowed",
        "wrongly allowed",
        "wrongly denied",
        "max in any window (× limit)",
        "mean |spent − exact| (% of limit)",
    ]);
    let q = quota();
    let mut rows: Vec<(String, Enforcement)> = vec![
        (
            "sliding log (exact)".into(),
            enforcement(&SlidingLog::new(q), &times),
        ),
        (
            "fixed window".into(),
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
    let half = q.allow_burst(NonZeroU32::new(LIMIT / 10).expect("non-zero"));
    rows.push((
        format!("GCRA, burst {}", LIMIT / 10),
        enforcement(&Gcra::new(half), &times),
    ));
    for (name, e) in &rows {
        table.row([
            name.clone(),
            pct(e.allowed, times.len()),
            pct(e.wrongly_allowed, times.len()),
            pct(e.wrongly_denied, times.len()),
            format!("{:.2}", e.max_in_window as f64 / f64::from(LIMIT)),
            format!("{:.2} %", e.mean_abs * 100.0),
        ]);
    }
    report.table(&table);
}

/// Fixed-window estimate of all traffic (every request counted).
/// The post's graphs: over the first minutes of the same traffic, the
/// exact sliding count (grey) against each approximation's estimate.
fn plot_counts(report: &mut Report, times: &[u64]) {
    let horizon = 6 * 60 * SEC;
    let shown: Vec<u64> = times.iter().copied().take_while(|&t| t < horizon).collect();
    let unlimited = Quota::try_new(u32::MAX, WINDOW).expect("valid");
    let secs = |t: u64| t as f64 / SEC as f64;
    // One point per request thins out to about one a second for the file.
    let step = (shown.len() / 720).max(1);
    let mut exact = Exact::new();
    let mut perfect = Vec::new();
    for (i, &t) in shown.iter().enumerate() {
        if i % step == 0 {
            perfect.push((secs(t), exact.count(t) as f64));
        }
        exact.push(t);
    }
    let series_of = |estimate: &mut dyn FnMut(u64) -> f64| {
        shown
            .iter()
            .enumerate()
            .filter_map(|(i, &t)| {
                let e = estimate(t);
                (i % step == 0).then(|| (secs(t), e))
            })
            .collect::<Vec<_>>()
    };
    let fw = FixedWindow::new(unlimited);
    let mut fw_state = fw.new_state(0);
    let fixed = series_of(&mut |t| {
        let e = fw.estimate(&fw_state, t);
        let _ = fw.check(&mut fw_state, t, 1, Mode::Consume);
        e
    });
    let sliding = |n: u32| {
        let sw = SlidingWindow::try_new(unlimited, n).expect("valid counters");
        let mut state = sw.new_state(0);
        series_of(&mut |t| {
            let e = sw.estimate(&state, t);
            let _ = sw.check(&mut state, t, 1, Mode::Consume);
            e
        })
    };
    let reference = Some((f64::from(LIMIT), format!("limit {LIMIT}")));
    let plot = |title: &str, label: &str, estimate: Vec<(f64, f64)>| crate::plot::LinePlot {
        title: title.to_string(),
        x_label: "time (s)".into(),
        y_label: format!("calls in the last {} s", WINDOW.as_secs()),
        series: vec![
            crate::plot::Series::line("perfect sliding window", perfect.clone()),
            crate::plot::Series::dashed(label, estimate),
        ],
        reference: reference.clone(),
        y_max: None,
    };
    report.plot(
        "criteo-fixed-window",
        &plot(
            "Fixed window against the perfect sliding window",
            "fixed window",
            fixed,
        ),
    );
    report.plot(
        "criteo-two-windows",
        &plot(
            "Two-window approximation (Cloudflare) against the perfect sliding window",
            "2 counters",
            sliding(2),
        ),
    );
    report.plot(
        "criteo-five-windows",
        &plot(
            "Five 15 s windows against the perfect sliding window",
            "5 counters",
            sliding(5),
        ),
    );
}

fn count_all_fixed(times: &[u64]) -> CountingError {
    let unlimited = Quota::try_new(u32::MAX, WINDOW).expect("valid");
    let fw = FixedWindow::new(unlimited);
    let mut s = fw.new_state(0);
    counting(times, &mut |t| {
        let est = fw.estimate(&s, t);
        let _ = fw.check(&mut s, t, 1, Mode::Consume);
        est
    })
}

/// N-counter estimate of all traffic (every request counted).
fn count_all_sliding(times: &[u64], n: u32) -> CountingError {
    let unlimited = Quota::try_new(u32::MAX, WINDOW).expect("valid");
    let sw = SlidingWindow::try_new(unlimited, n).expect("valid counters");
    let mut s = sw.new_state(0);
    counting(times, &mut |t| {
        let est = sw.estimate(&s, t);
        let _ = sw.check(&mut s, t, 1, Mode::Consume);
        est
    })
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
    workload::run_streams(streams, |key| limiter.check(key))
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
pub fn benchmark(report: &mut Report) {
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
    let anchor = position(GOVERNOR);
    let (exact, sketch) = (position(EXACT), position(SKETCH));
    let (upkeep, exact_recent) = (position(GOVERNOR_UPKEEP), position(EXACT_RECENT));
    let mut table = Table::new([
        "keys",
        "limiter",
        "1 thread ns/check",
        "2 threads ns/check",
        "× governor (1 thread)",
        "× governor (2 threads)",
        "peak bytes",
        "allowed (1 thread)",
    ]);
    let mut goals = Table::new(["goal", "keys", "this run: median (min–max)", "verdict"]);
    let mut recent = Table::new([
        "keys",
        "threads",
        "weir exact on RecentClock × governor on QuantaUpkeepClock",
        "weir exact on RecentClock × governor on its default clock",
    ]);
    // ns per check for the chart: [contender][distribution × threads].
    let mut chart: Vec<Vec<Option<Spread>>> = vec![Vec::new(); n];
    let mut groups = Vec::new();
    for (d, distribution) in DISTRIBUTIONS.iter().enumerate() {
        let streams: Vec<Vec<Vec<u32>>> = [1usize, 2]
            .iter()
            .map(|&t| {
                (0..t)
                    .map(|i| {
                        let seed = 7000 + 100 * d as u64 + i as u64;
                        match d {
                            0 => workload::uniform(total / t, seed),
                            _ => workload::zipf(total / t, 1.1, seed),
                        }
                    })
                    .collect()
            })
            .collect();
        // times[contender][threads][repetition]
        let mut times = vec![[Vec::new(), Vec::new()]; n];
        let mut first = vec![(AllocStats::default(), 0u64); n];
        for (t, stream) in streams.iter().enumerate() {
            for repetition in 0..repetitions {
                report.progress(&format!(
                    "{distribution}, {} thread(s), repetition {}/{repetitions}",
                    t + 1,
                    repetition + 1
                ));
                for offset in 0..n {
                    let c = (repetition + offset) % n;
                    let elapsed = if t == 0 && repetition == 0 {
                        let ((elapsed, allowed), stats) =
                            alloc::measure(|| (contenders[c].time)(stream));
                        first[c] = (stats, allowed);
                        elapsed
                    } else {
                        (contenders[c].time)(stream).0
                    };
                    times[c][t].push(elapsed.as_secs_f64());
                }
            }
        }
        let per_check = |c: usize, t: usize| -> Vec<f64> {
            let per_thread = (total / (t + 1)) as f64;
            times[c][t].iter().map(|s| s * 1e9 / per_thread).collect()
        };
        // Each repetition of `c` paired with the same repetition of `over`.
        let ratio = |over: usize, c: usize, t: usize| -> Vec<f64> {
            times[over][t]
                .iter()
                .zip(&times[c][t])
                .map(|(g, w)| g / w)
                .collect()
        };
        let speedup = |c: usize, t: usize| ratio(anchor, c, t);
        for t in 0..2 {
            groups.push(format!(
                "{distribution}, {} thread{}",
                t + 1,
                if t == 0 { "" } else { "s" }
            ));
            for (c, bars) in chart.iter_mut().enumerate() {
                bars.push(Some(Spread::of(&per_check(c, t))));
            }
        }
        for (c, contender) in contenders.iter().enumerate() {
            let (memory, allowed) = first[c];
            table.row([
                distribution.to_string(),
                contender.name.to_string(),
                Spread::of(&per_check(c, 0)).show(1),
                Spread::of(&per_check(c, 1)).show(1),
                Spread::of(&speedup(c, 0)).show(2),
                Spread::of(&speedup(c, 1)).show(2),
                thousands(memory.peak_bytes as u64),
                format!(
                    "{} ({:.2}%)",
                    thousands(allowed),
                    allowed as f64 * 100.0 / total as f64
                ),
            ]);
        }
        for t in 0..2 {
            recent.row([
                distribution.to_string(),
                (t + 1).to_string(),
                Spread::of(&ratio(upkeep, exact_recent, t)).show(2),
                Spread::of(&speedup(exact_recent, t)).show(2),
            ]);
        }
        for (name, c, bound) in [
            ("KeyedLimiter ≥ 3× governor", exact, 3.0),
            ("SketchLimiter ≥ 5× governor", sketch, 5.0),
        ] {
            for t in 0..2 {
                let s = Spread::of(&speedup(c, t));
                goals.row([
                    format!("{name}, {} thread(s)", t + 1),
                    distribution.to_string(),
                    s.show(2),
                    verdict(s, bound).to_string(),
                ]);
            }
        }
        // Allowed shares from the timed runs are not comparable: a slower
        // limiter spends more real time, so its over-quota keys earn more.
        // Compare on the 1-thread stream with the same timestamps for both.
        let (by_exact, by_sketch) = allowed_on_a_timed_stream(&streams[0][0]);
        let gap = (by_exact as f64 - by_sketch as f64) * 100.0 / total as f64;
        goals.row([
            "SketchLimiter allows within 0.1 pp of the exact limiter (same timed stream)"
                .to_string(),
            distribution.to_string(),
            format!(
                "exact {:.3}%, sketch {:.3}%: {gap:+.3} pp",
                by_exact as f64 * 100.0 / total as f64,
                by_sketch as f64 * 100.0 / total as f64
            ),
            if gap.abs() <= 0.1 {
                "met"
            } else {
                "**not met**"
            }
            .to_string(),
        ]);
    }
    report.table(&table);
    report.plot(
        "rate-keyed-ns-per-check",
        &BarPlot {
            title: "weir-rate: ns per check by key distribution and thread count, keyed limiters against governor (median, min–max)".into(),
            x_label: "keys, threads checking at once".into(),
            y_label: "ns/check per thread".into(),
            groups,
            series: contenders
                .iter()
                .zip(chart)
                .map(|(c, bars)| BarSeries::new(c.name, bars))
                .collect(),
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
        let mut sink = 0u64;
        for _ in 0..reads {
            sink = sink.wrapping_add(clock.now_nanos());
        }
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
        let now = i as u64 * step;
        by_exact += u64::from(
            exact
                .check_n_at(key, 1, Timestamp::from_nanos(now))
                .is_ok_and(|d| d.is_allowed()),
        );
        by_sketch += u64::from(
            sketch
                .check_n_at(key, 1, Timestamp::from_nanos(now))
                .is_ok_and(|d| d.is_allowed()),
        );
    }
    (by_exact, by_sketch)
}

/// `met in every repetition`, `met at the median`, or `not met`, for a
/// figure that must be at least `bound`.
fn verdict(s: Spread, bound: f64) -> &'static str {
    if s.min >= bound {
        "met in every repetition"
    } else if s.median >= bound {
        "met at the median, not in every repetition"
    } else {
        "**not met**"
    }
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
/// sprayed check and the heap: peak growth, and what is still held.
fn spray_once(weir: bool, keys: u64) -> (f64, AllocStats) {
    let quota = Quota::per_hour(NonZeroU32::new(100).expect("non-zero"));
    let two_hours = Duration::from_secs(2 * 3600);
    let (ns, stats) = alloc::measure(|| {
        if weir {
            let clock = ManualClock::new();
            let limiter = KeyedLimiter::<u64, _, _>::with_clock(Gcra::new(quota), clock.clone());
            let start = Instant::now();
            for key in 0..keys {
                clock.advance(Duration::from_micros(1));
                std::hint::black_box(limiter.allows(&key));
            }
            let ns = start.elapsed().as_nanos() as f64 / keys as f64;
            clock.advance(two_hours);
            limiter.evict_idle();
            for key in 0..LIVE_AFTER_SPRAY {
                std::hint::black_box(limiter.allows(&key));
            }
            // Held until measured: what the limiter keeps is the figure.
            (ns, Some(limiter), None)
        } else {
            let clock = governor::clock::FakeRelativeClock::default();
            let limiter = governor::RateLimiter::dashmap_with_clock(
                governor::Quota::per_hour(NonZeroU32::new(100).expect("non-zero")),
                clock.clone(),
            );
            let start = Instant::now();
            for key in 0..keys {
                clock.advance(Duration::from_micros(1));
                std::hint::black_box(limiter.check_key(&key).is_ok());
            }
            let ns = start.elapsed().as_nanos() as f64 / keys as f64;
            clock.advance(two_hours);
            limiter.retain_recent();
            limiter.shrink_to_fit();
            for key in 0..LIVE_AFTER_SPRAY {
                std::hint::black_box(limiter.check_key(&key).is_ok());
            }
            (ns, None, Some(limiter))
        }
    });
    (ns.0, stats)
}

/// The key-spray table: memory and throughput under millions of one-shot
/// keys, weir's capped exact limiter (default capacity) against governor.
pub fn spray(report: &mut Report) {
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
    let mut runs: [Vec<(f64, AllocStats)>; 2] = [Vec::new(), Vec::new()];
    for repetition in 0..3 {
        report.progress(&format!("key spray, repetition {} of 3", repetition + 1));
        // Alternate which goes first, so drift hits both alike.
        let order = if repetition % 2 == 0 { [0, 1] } else { [1, 0] };
        for i in order {
            runs[i].push(spray_once(i == 0, keys));
        }
    }
    let spread = |xs: &mut Vec<f64>, f: &dyn Fn(f64) -> String| Spread::of(xs).show_each(f);
    let mb = |b: f64| {
        if b.abs() >= 1e6 {
            format!("{:.1} MB", b / 1e6)
        } else {
            format!("{:.0} KB", b / 1e3)
        }
    };
    let ns = |x: f64| format!("{x:.0}");
    let mut table = Table::new([
        "limiter",
        "ns per sprayed check",
        "peak heap growth",
        "held two hours later",
    ]);
    for (i, name) in [
        "weir KeyedLimiter<Gcra> (default capacity)",
        "governor keyed (DashMap, GCRA)",
    ]
    .iter()
    .enumerate()
    {
        table.row([
            (*name).to_owned(),
            spread(&mut runs[i].iter().map(|r| r.0).collect(), &ns),
            spread(
                &mut runs[i].iter().map(|r| r.1.peak_bytes as f64).collect(),
                &mb,
            ),
            spread(
                &mut runs[i].iter().map(|r| r.1.live_bytes as f64).collect(),
                &mb,
            ),
        ]);
    }
    let mut ratio: Vec<f64> = runs[1]
        .iter()
        .zip(&runs[0])
        .map(|(g, w)| g.0 / w.0)
        .collect();
    table.row([
        "governor ÷ weir, per repetition".to_owned(),
        spread(&mut ratio, &|x| format!("{x:.2}×")),
        String::new(),
        String::new(),
    ]);
    report.table(&table);
}

/// Scale-independent helper for the criterion bench: a stream of keys.
pub fn keys(len: usize) -> Vec<u32> {
    workload::uniform(len, 7000)
}
