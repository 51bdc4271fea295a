//! The keyed-limiter benchmark against governor: ns per check by key
//! distribution and thread count, memory and allowed shares beside, the
//! issue's goals, and the cheaper clocks.

use crate::harness::contest::{self, Goal, Spread};
use crate::harness::plot::{BarPlot, BarSeries};
use crate::harness::report::{Report, Table, thousands};
use crate::harness::{machine, workload};
use std::num::{NonZeroU32, NonZeroU64, NonZeroUsize};
use std::time::{Duration, Instant};
use weir_limits::clock::{Clock, ManualClock, MonotonicClock, StdClock, Timestamp};
use weir_rate::clock::RecentClock;
use weir_rate::{FixedWindow, Gcra, KeyedLimiter, Quota, SketchLimiter};

/// A keyed limiter checked by `u32` key in the benchmark.
pub trait KeyedContender: Sync {
    /// Check one unit for `key`; true when allowed.
    fn check(&self, key: u32) -> bool;
}

/// A weir limiter checked through its lean `allows` (yes or no, no
/// `Decision`): the job governor's `check_key` does.
pub struct Lean<L>(pub L);

macro_rules! keyed {
    ($(<$($g:ident: $b:path),*> $t:ty: |$s:ident, $k:ident| $check:expr;)*) => {$(
        impl<$($g: $b),*> KeyedContender for $t {
            #[inline]
            fn check(&self, $k: u32) -> bool {
                let $s = self;
                $check
            }
        }
    )*};
}

keyed! {
    <C: Clock> KeyedLimiter<u32, Gcra, C>: |s, k| s.check(&k).is_allowed();
    <C: Clock> KeyedLimiter<u32, (Gcra, FixedWindow), C>: |s, k| s.check(&k).is_allowed();
    <C: Clock> SketchLimiter<C>: |s, k| s.check(&k).is_allowed();
    <C: Clock> Lean<KeyedLimiter<u32, Gcra, C>>: |s, k| s.0.allows(&k);
    <C: Clock> Lean<SketchLimiter<C>>: |s, k| s.0.allows(&k);
    <> governor::DefaultKeyedRateLimiter<u32>: |s, k| s.check_key(&k).is_ok();
    <> GovernorUpkeep: |s, k| s.check_key(&k).is_ok();
    <> ClockFloor: |s, k| s.0.now_nanos() != u64::from(k);
    <> CellFloor: |s, k| s.allows(k);
}

/// GCRA in one atomic word per cell of a flat array indexed by the key's
/// hash, on the default clock: no key stored (keys sharing a cell share a
/// limit), nothing forgotten, no lock; a denial only reads. Not a limiter
/// to ship, but the floor of a lock-free keyed design.
pub struct CellFloor {
    cells: Box<[std::sync::atomic::AtomicU64]>,
    hasher: ahash::RandomState,
    clock: MonotonicClock,
    interval: u64,
    tolerance: u64,
}

impl CellFloor {
    /// Twice the benchmark's keys in cells, so few keys share one.
    fn new() -> Self {
        let q = bench_quota();
        let interval = 1_000_000_000 / u64::from(q.limit());
        Self {
            cells: (0..2 * workload::KEYS as usize)
                .map(|_| Default::default())
                .collect(),
            hasher: ahash::RandomState::new(),
            clock: MonotonicClock::new(),
            interval,
            tolerance: interval * u64::from(q.burst() - 1),
        }
    }

    #[inline]
    fn allows(&self, key: u32) -> bool {
        use std::sync::atomic::Ordering::{AcqRel, Acquire};
        let cell = &self.cells[self.hasher.hash_one(key) as usize % self.cells.len()];
        let now = self.clock.now_nanos();
        let mut tat = cell.load(Acquire);
        loop {
            if tat.saturating_sub(self.tolerance) > now {
                return false;
            }
            let next = tat.max(now) + self.interval;
            match cell.compare_exchange_weak(tat, next, AcqRel, Acquire) {
                Ok(_) => return true,
                Err(seen) => tat = seen,
            }
        }
    }
}

/// No limiter, only the default clock read that every exact check makes:
/// the time no limiter reading that clock per check can go below.
pub struct ClockFloor(MonotonicClock);

/// governor's keyed limiter on its upkeep clock (quanta's `recent()`).
pub type GovernorUpkeep = governor::RateLimiter<
    u32,
    governor::state::keyed::DefaultKeyedStateStore<u32>,
    governor::clock::QuantaUpkeepClock,
    governor::middleware::NoOpMiddleware<governor::clock::QuantaInstant>,
>;

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
    /// Checks every key of each stream on its own barrier-started thread
    /// over a fresh limiter, calling it directly; the slowest thread's
    /// time and the number allowed.
    pub time: fn(&[Vec<u32>]) -> (Duration, u64),
    /// Builds a fresh limiter.
    pub build: fn() -> Box<dyn KeyedContender>,
}

macro_rules! contenders {
    ($($name:expr => $build:expr,)*) => {
        vec![$(Contender {
            name: $name,
            time: |streams| {
                let limiter = std::hint::black_box(($build)());
                contest::run_streams(streams, |key| KeyedContender::check(&limiter, key))
            },
            build: || Box::new(($build)()),
        },)*]
    };
}

fn governor_quota() -> governor::Quota {
    let q = bench_quota();
    let burst = NonZeroU32::new(q.burst()).expect("non-zero");
    governor::Quota::per_second(NonZeroU32::new(q.limit()).expect("non-zero")).allow_burst(burst)
}

/// governor on an upkeep clock refreshed as often as weir's [`RecentClock`].
fn governor_upkeep() -> GovernorUpkeep {
    let clock = governor::clock::QuantaUpkeepClock::from_interval(RecentClock::INTERVAL);
    governor::RateLimiter::dashmap_with_clock(governor_quota(), clock.expect("an upkeep thread"))
}

fn shape() -> weir_limits::Shape {
    let load = NonZeroU64::new(SIZED_FOR).expect("non-zero");
    SketchLimiter::shape_for_load(bench_quota(), load, WRONG_DENIALS).expect("a valid sizing")
}

/// The sketch as its own sizing rule sizes it for [`SIZED_FOR`] checks a
/// second at [`WRONG_DENIALS`].
pub fn sized_sketch() -> SketchLimiter {
    let load = NonZeroU64::new(SIZED_FOR).expect("non-zero");
    SketchLimiter::try_sized_for(bench_quota(), load, WRONG_DENIALS).expect("a valid sizing")
}

fn exact() -> KeyedLimiter<u32, Gcra> {
    KeyedLimiter::new(Gcra::new(bench_quota()))
}

/// The benchmark's quota all-or-nothing with a daily one that never binds
/// here: what an API's "10 a second and 1000 a day" costs per check. A
/// daily window keeps every key it has seen for the day, so the limiter is
/// sized for every key of the run, as such a service would size it (past
/// its `max_keys` it would refuse new keys instead).
fn exact_and_daily() -> KeyedLimiter<u32, (Gcra, FixedWindow)> {
    let day = Quota::per_day(NonZeroU32::new(u32::MAX).expect("non-zero"));
    KeyedLimiter::builder((Gcra::new(bench_quota()), FixedWindow::new(day)))
        .max_keys(NonZeroUsize::new(1 << 21).expect("non-zero"))
        .build()
}

/// The anchor every ratio is taken against, weir's two lean limiters that
/// the goals judge, and each crate on its cheaper clock.
const GOVERNOR: &str = "governor keyed (DashMap, GCRA)";
const EXACT: &str = "weir KeyedLimiter<Gcra> (exact), allows";
const SKETCH: &str = "weir SketchLimiter (sized by its rule), allows";
const GOVERNOR_UPKEEP: &str = "governor keyed on QuantaUpkeepClock (1 ms)";
const EXACT_RECENT: &str = "weir KeyedLimiter<Gcra> on RecentClock, allows";
const EXACT_CHECK: &str = "weir KeyedLimiter, check (full Decision)";

/// weir's keyed limiters and governor's.
pub fn contenders() -> Vec<Contender> {
    contenders![
        GOVERNOR => || governor::RateLimiter::keyed(governor_quota()),
        EXACT => || Lean(exact()),
        SKETCH => || Lean(sized_sketch()),
        EXACT_CHECK => exact,
        "weir SketchLimiter, check (full Decision)" => sized_sketch,
        "weir KeyedLimiter<(Gcra, FixedWindow)> all-or-nothing, check (full Decision)" => exact_and_daily,
        GOVERNOR_UPKEEP => governor_upkeep,
        EXACT_RECENT => || Lean(KeyedLimiter::with_clock(Gcra::new(bench_quota()), RecentClock::new())),
        "floor: one default-clock read per check, no limiter" => || ClockFloor(MonotonicClock::new()),
        "floor: lock-free GCRA cells by key hash (no keys kept), allows" => CellFloor::new,
    ]
}

/// Round trips of the cross-core probe beside each distribution's runs.
const TRIPS: u64 = 20_000;

/// The key distributions of the benchmark; the goals are judged on the
/// first two, the third is an attack shape.
const DISTRIBUTIONS: [&str; 3] = ["uniform", "Zipf 1.1", "one key (a flood)"];

/// The key every check of the flood asks for.
const FLOOD_KEY: u32 = 42;

/// The benchmark part of the report.
pub(super) fn benchmark(report: &mut Report) {
    let scale = report.scale();
    let (total, repetitions): (usize, usize) =
        (scale.pick(4_000_000, 20_000_000), scale.pick(3, 5));
    report.section("weir-rate: keyed limiters against governor");
    let (q, (hashes, slots)) = (bench_quota(), (shape().hashes(), shape().slots()));
    report.text(&format!(
        "{} checks over {} `u32` keys drawn uniformly or from Zipf (s = 1.1), pre-generated, and as a flood: every check, from every thread, \
         of one key, which is over its limit almost all the time; per-key quota {} per second, burst {} (GCRA), \
         both crates on their default clocks. The sketch is sized by `SketchLimiter::try_sized_for` for {} M checks a second at {}% wrong denials: \
         {hashes} × {slots} cells ({} KiB). Each figure is the median (min–max) of {repetitions} repetitions; within one the contenders \
         run back to back (order rotating), each on a fresh limiter, threads barrier-started; ratios pair a repetition with governor's. \
         Memory is the peak heap growth of the first 1-thread run; 'allowed' is what each let through in it. \
         weir's rows marked `allows` answer yes or no, as governor's `check_key` does; the `check` rows build the full `Decision` \
         (remaining, reset and retry times for headers). The goals are judged on the `allows` rows. \
         The two floor rows are not limiters to ship. The clock row is only the clock read an exact check makes on the default clock: \
         its ratio to governor is the most any limiter reading that clock per check could reach here. The cells row is GCRA in one \
         atomic word per cell of a flat array (two cells per key of the key space) indexed by the key's hash: no key kept, no lock, \
         a denial only reads, the floor of a lock-free keyed design.",
        thousands(total as u64),
        thousands(u64::from(workload::KEYS)),
        q.limit(),
        q.burst(),
        SIZED_FOR / 1_000_000,
        WRONG_DENIALS * 100.0,
        hashes * slots * 8 / 1024,
    ));
    let contenders = contenders();
    let position = |name| {
        contenders
            .iter()
            .position(|c| c.name == name)
            .expect("a contender of this benchmark")
    };
    let (anchor, exact, exact_check) = (position(GOVERNOR), position(EXACT), position(EXACT_CHECK));
    let (upkeep, exact_recent) = (position(GOVERNOR_UPKEEP), position(EXACT_RECENT));
    let mut table = Table::new(
        "keys | limiter | 1 thread ns/check | 2 threads ns/check | × governor (1 thread) | × governor (2 threads) | peak bytes | allowed (1 thread)",
    );
    let mut goals = Table::new("goal | keys | this run: median (min–max) | verdict");
    let mut recent = Table::new(
        "keys | threads | weir exact on RecentClock × governor on QuantaUpkeepClock | weir exact on RecentClock × governor on its default clock",
    );
    // ns per check for the chart: [contender][distribution × threads].
    let (mut chart, mut groups) = (vec![Vec::new(); contenders.len()], Vec::new());
    let mut trips = Vec::new();
    for (d, distribution) in DISTRIBUTIONS.iter().enumerate() {
        let streams = |threads: usize| -> Vec<Vec<u32>> {
            let seed = |i: usize| 7000 + 100 * d as u64 + i as u64;
            let keys = |i| match d {
                0 => workload::uniform(total / threads, seed(i)),
                1 => workload::zipf(total / threads, 1.1, seed(i)),
                _ => vec![FLOOD_KEY; total / threads],
            };
            (0..threads).map(keys).collect()
        };
        let sets = [streams(1), streams(2)];
        let trip_before = machine::cross_core_round_trip_ns(TRIPS);
        let what = |t: usize| format!("{distribution}, {} thread(s)", t + 1);
        let (ns, first) = contest::per_thread_ns(
            report,
            what,
            contenders.len(),
            repetitions,
            &sets,
            |c, s| (contenders[c].time)(s),
        );
        // Each repetition of `c` paired with the same repetition of `over`.
        let ratio = |over: usize, c: usize, t: usize| contest::paired(&ns[t][over], &ns[t][c]);
        for (t, ns_t) in ns.iter().enumerate() {
            groups.push(format!(
                "{distribution}, {} thread{}",
                t + 1,
                if t == 0 { "" } else { "s" }
            ));
            chart
                .iter_mut()
                .zip(ns_t)
                .for_each(|(bars, ns)| bars.push(Some(Spread::of(ns))));
            let [upkeep, default] =
                [upkeep, anchor].map(|over| Spread::of(&ratio(over, exact_recent, t)).show(2));
            recent.row(format!("{distribution} | {} | {upkeep} | {default}", t + 1));
        }
        for (c, contender) in contenders.iter().enumerate() {
            let (memory, allowed) = first[c];
            let [one, two] = [0, 1].map(|t| Spread::of(&ns[t][c]).show(1));
            let [x1, x2] = [0, 1].map(|t| Spread::of(&ratio(anchor, c, t)).show(2));
            let share = allowed as f64 * 100.0 / total as f64;
            let (peak, allowed) = (thousands(memory.peak_bytes as u64), thousands(allowed));
            table.row(format!("{distribution} | {} | {one} | {two} | {x1} | {x2} | {peak} | {allowed} ({share:.2}%)", contender.name));
        }
        let trip_after = machine::cross_core_round_trip_ns(TRIPS);
        trips.push(format!(
            "{distribution} {trip_before:.0} ns before, {trip_after:.0} after"
        ));
        if d >= 2 {
            continue;
        }
        for (goal, c) in [
            (
                Goal::at_least("KeyedLimiter allows ≥ 3× governor", 3.0),
                exact,
            ),
            (
                Goal::at_least("KeyedLimiter check (full Decision) ≥ 2× governor", 2.0),
                exact_check,
            ),
        ] {
            for t in 0..2 {
                let [figure, verdict] = goal.judge(&ratio(anchor, c, t));
                goals.row(format!(
                    "{}, {} thread(s) | {distribution} | {figure} | {verdict}",
                    goal.name,
                    t + 1
                ));
            }
        }
        // Allowed shares from the timed runs are not comparable: a slower
        // limiter spends more real time, so its over-quota keys earn more.
        // Compare on the 1-thread stream with the same timestamps for both.
        let [by_exact, by_sketch] =
            allowed_on_a_timed_stream(&sets[0][0]).map(|a| a as f64 * 100.0 / total as f64);
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
    report.text(
        "On the flood, once a shard's lock has been found held, weir's exact limiter answers a key it has just refused from the \
         checking thread's own memory of refusals (exact: a refund, a new limit, a caller's time ahead, a charge of a refused key or an eviction forgets them), so two threads \
         refusing one key do not pass the lock's cache line between them; governor's keyed check takes a read lock on its map's shard (a write to the lock's word) on every check.",
    );
    report.text(&format!(
        "A cache line's round trip between two threads, measured just before and just after each distribution's runs \
         (the median of nine rounds of {} passes): {}. Every two-thread figure of a contended structure moves with it, and on a shared VM it moves with \
         where the host puts the two cores: a round trip several times its usual, before or after, marks that distribution's two-thread rows as disturbed.",
        thousands(TRIPS),
        trips.join("; "),
    ));
    let series = contenders
        .iter()
        .zip(chart)
        .map(|(c, bars)| BarSeries::new(c.name, bars));
    let title = "weir-rate: ns per check by key distribution and thread count, keyed limiters against governor (median, min–max)";
    let plot = BarPlot::new(
        title,
        "keys, threads checking at once",
        "ns/check per thread",
        groups,
        series.collect(),
    );
    report.plot(
        "rate-keyed-ns-per-check",
        &BarPlot {
            values: false,
            ..plot
        },
    );
    report.text("Goals, judged on this run:");
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
    let (monotonic, std_clock) = (per_read(&MonotonicClock::new()), per_read(&StdClock::new()));
    let recent_clock = per_read(&RecentClock::new());
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
fn allowed_on_a_timed_stream(keys: &[u32]) -> [u64; 2] {
    let exact = KeyedLimiter::with_clock(Gcra::new(bench_quota()), ManualClock::new());
    let sketch = SketchLimiter::with_clock(bench_quota(), shape(), ManualClock::new());
    let step = 2_000_000_000 / SIZED_FOR;
    let mut allowed = [0, 0];
    for (i, key) in keys.iter().enumerate() {
        let now = Timestamp::from_nanos(i as u64 * step);
        allowed[0] += u64::from(exact.check_n_at(key, 1, now).is_ok_and(|d| d.is_allowed()));
        allowed[1] += u64::from(sketch.check_n_at(key, 1, now).is_ok_and(|d| d.is_allowed()));
    }
    allowed
}
