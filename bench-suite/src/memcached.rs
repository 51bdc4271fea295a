//! Criteo's two stores side by side: every algorithm in process, as a
//! Redis script and on Memcached (counters or compare-and-swap), with
//! Memcached's own ceiling through the same client; each store's accuracy
//! against an exact sliding log on the same traffic; and the post's claim
//! that optimistic concurrency "degrades under heavy load", measured as
//! callers on one hot key grow. Real private servers on loopback; skipped,
//! with a line saying so, when `memcached` or `redis-server` is not
//! installed.

use crate::harness::contest::{self, Goal, Spread};
use crate::harness::plot::{LinePlot, Series};
use crate::harness::report::{Report, Table, share, thousands};
use crate::harness::workload;
use memcache::exp::{Arithmetic, AsyncMetaClient};
use std::collections::VecDeque;
use std::future::Future;
use std::num::NonZeroU32;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::runtime::Runtime;
use weir_memcached::{MemcachedLimiter, Servers};
use weir_rate::clock::ManualClock;
use weir_rate::{CheckKey, FixedWindow, Gcra, KeyedLimiter, Quota, SlidingWindow, TokenBucket};
use weir_redis::{FailurePolicy, RedisLimiter, Target};
use weir_store::{Backend, Source, StoreAlgorithm, StoreLimiter};
use weir_test_support::memcached_server::{self, MemcachedServer};
use weir_test_support::redis_server::{self, RedisServer};

/// Concurrent callers, as the post's comparison runs them.
const CALLERS: usize = 50;

/// The algorithms compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Algorithm {
    FixedWindow,
    SlidingWindow2,
    Gcra,
    TokenBucket,
}

const ALGORITHMS: [Algorithm; 4] = [
    Algorithm::FixedWindow,
    Algorithm::SlidingWindow2,
    Algorithm::Gcra,
    Algorithm::TokenBucket,
];

impl Algorithm {
    fn name(self) -> &'static str {
        match self {
            Self::FixedWindow => "fixed window",
            Self::SlidingWindow2 => "sliding window (2 counters)",
            Self::Gcra => "GCRA",
            Self::TokenBucket => "token bucket",
        }
    }

    /// How Memcached keeps it.
    fn on_memcached(self) -> &'static str {
        match self {
            Self::FixedWindow | Self::SlidingWindow2 => "counters",
            Self::Gcra | Self::TokenBucket => "compare-and-swap",
        }
    }
}

/// One way of deciding a key, behind one call: the contenders of a run.
#[derive(Clone)]
enum Contender {
    InProcess(Arc<dyn CheckKey<str>>),
    Redis(RedisLimiter),
    Memcached(MemcachedLimiter),
    /// One `ma` per call through the client the store uses: Memcached's
    /// own ceiling for the fixed window's one operation.
    RawIncrement(AsyncMetaClient),
}

/// What one call came to.
#[derive(Debug, Clone, Copy, Default)]
struct Outcome {
    allowed: bool,
    /// Answered by something else than the store (fallback, error, shed).
    off_store: bool,
}

impl Contender {
    fn check<'a>(&'a self, key: &'a str) -> Pin<Box<dyn Future<Output = Outcome> + Send + 'a>> {
        Box::pin(async move {
            match self {
                Self::InProcess(l) => Outcome {
                    allowed: l.check_n(key, 1).is_ok_and(|d| d.is_allowed()),
                    off_store: false,
                },
                Self::Redis(l) => answer(l.check_verbose(key, 1).await),
                Self::Memcached(l) => answer(l.check_verbose(key, 1).await),
                Self::RawIncrement(client) => {
                    let op = Arithmetic::new(format!("raw:{key}|0")).initial(1, 60);
                    let ok = client.run(op).await.is_ok();
                    Outcome {
                        allowed: ok,
                        off_store: !ok,
                    }
                }
            }
        })
    }
}

fn answer(a: Result<weir_store::Answer, weir_rate::NeverAllowed>) -> Outcome {
    match a {
        Ok(a) => Outcome {
            allowed: a.decision.is_allowed(),
            off_store: a.source != Source::Store,
        },
        Err(_) => Outcome {
            allowed: false,
            off_store: true,
        },
    }
}

/// What one load run measured.
#[derive(Debug, Clone, Copy, Default)]
struct Run {
    decisions: u64,
    allowed: u64,
    off_store: u64,
    secs: f64,
}

impl Run {
    fn rate(&self) -> f64 {
        self.decisions as f64 / self.secs.max(1e-9)
    }
}

/// `callers` tasks check keys through `contender` for `dur`: one key if
/// `hot`, else keys drawn uniformly from 10 000.
async fn load(contender: &Contender, callers: usize, dur: Duration, hot: bool) -> Run {
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let tasks: Vec<_> = (0..callers)
        .map(|c| {
            let (contender, stop) = (contender.clone(), stop.clone());
            tokio::spawn(async move {
                let mut run = Run::default();
                let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ (c as u64 + 1);
                while !stop.load(Ordering::Relaxed) {
                    let key = if hot {
                        "hot".to_owned()
                    } else {
                        format!("k{}", workload::xorshift(&mut x) % 10_000)
                    };
                    let outcome = contender.check(&key).await;
                    run.decisions += 1;
                    run.allowed += u64::from(outcome.allowed);
                    run.off_store += u64::from(outcome.off_store);
                    // In process there is no await point: let the others run.
                    if matches!(contender, Contender::InProcess(_)) && run.decisions % 64 == 0 {
                        tokio::task::yield_now().await;
                    }
                }
                run
            })
        })
        .collect();
    tokio::time::sleep(dur).await;
    stop.store(true, Ordering::Relaxed);
    let mut total = Run::default();
    for t in tasks {
        if let Ok(r) = t.await {
            total.decisions += r.decisions;
            total.allowed += r.allowed;
            total.off_store += r.off_store;
        }
    }
    total.secs = start.elapsed().as_secs_f64();
    total
}

fn nz(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).unwrap_or(NonZeroU32::MIN)
}

fn kps(x: f64) -> String {
    format!("{:.1} k/s", x / 1000.0)
}

/// The servers and the runtime every part runs on.
struct Bench<'a> {
    memcached: &'a MemcachedServer,
    redis: &'a RedisServer,
    rt: &'a Runtime,
    dur: Duration,
    repetitions: usize,
}

impl Bench<'_> {
    fn prefix(name: &str) -> String {
        let n = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() % 1_000_000_000);
        format!("bench-{name}-{n}")
    }

    fn memcached<L: StoreAlgorithm>(&self, algorithm: L, name: &str) -> Option<MemcachedLimiter> {
        let connect = MemcachedLimiter::builder(algorithm)
            .prefix(Self::prefix(name))
            .timeout(Duration::from_secs(1))
            .on_failure(FailurePolicy::Closed)
            .connect(Servers::one(self.memcached.addr()));
        self.rt.block_on(connect).ok()
    }

    fn redis<L: StoreAlgorithm>(&self, algorithm: L, name: &str) -> Option<RedisLimiter> {
        let connect = RedisLimiter::builder(algorithm)
            .prefix(Self::prefix(name))
            .timeout(Duration::from_secs(1))
            .on_failure(FailurePolicy::Closed)
            .connect(Target::server(self.redis.url()));
        self.rt.block_on(connect).ok()
    }
}

/// Private `memcached` and `redis-server` processes and a 2-worker
/// runtime, or `None` with the reason written in the report.
pub(crate) fn both_stores(report: &mut Report) -> Option<(MemcachedServer, RedisServer, Runtime)> {
    if !memcached_server::installed() || !redis_server::installed() {
        report.text(
            "**Skipped**: `memcached` or `redis-server` is not installed \
             (Debian: `apt-get install memcached redis-server redis-tools`).",
        );
        return None;
    }
    let (memcached, redis) = match (MemcachedServer::start(), RedisServer::start()) {
        (Ok(m), Ok(r)) => (m, r),
        (Err(e), _) | (_, Err(e)) => {
            report.text(&format!("**Skipped**: a private server did not start: {e}"));
            return None;
        }
    };
    match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => Some((memcached, redis, rt)),
        Err(e) => {
            report.text(&format!("**Skipped**: no tokio runtime: {e}"));
            None
        }
    }
}

/// The section of the report.
pub fn run(report: &mut Report) {
    report.section("Memcached beside Redis: the two stores Criteo weighed");
    let Some((memcached, redis, rt)) = both_stores(report) else {
        return;
    };
    let scale = report.scale();
    let bench = Bench {
        memcached: &memcached,
        redis: &redis,
        rt: &rt,
        dur: scale.pick(Duration::from_millis(600), Duration::from_secs(2)),
        repetitions: scale.pick(2, 5),
    };
    report.text(&format!(
        "Private `memcached` (64 MB, one thread pool of 4) and `redis-server` (no persistence) on \
         loopback, sharing this machine's two cores with the client. Each store's limiter on its \
         plain path (no batching, no leases), the closed failure policy so that every answer off \
         the store is counted. {CALLERS} concurrent callers on a 2-worker tokio runtime; \
         figures are the median (min–max) of {} repetitions of {:.1} s, the contenders of a row \
         interleaved with the order rotating.",
        bench.repetitions,
        bench.dur.as_secs_f64()
    ));
    let ceiling = throughput(report, &bench);
    let accuracy = accuracy(report, &bench);
    let contention = contention(report, &bench);
    let all_of = all_of(report, &bench);
    goals(report, &ceiling, &accuracy, &contention, &all_of);
}

/// Decisions per second per algorithm and store, and the fixed window
/// against Memcached's raw increment through the same client.
struct Throughput {
    /// The Memcached fixed window over the raw increment, per repetition.
    fixed_over_raw: Vec<f64>,
}

fn throughput(report: &mut Report, bench: &Bench<'_>) -> Throughput {
    // Room for everything: what is measured is the decision's path.
    let roomy = Quota::per_second(nz(1_000_000));
    let mut table = Table::new(
        "algorithm | in process | Redis (script) | Memcached | Memcached keeps it as | answered off the store (Memcached)",
    );
    let mut fixed_over_raw = Vec::new();
    for algorithm in ALGORITHMS {
        let label = algorithm.name();
        let in_process: Arc<dyn CheckKey<str>> = match algorithm {
            Algorithm::FixedWindow => {
                Arc::new(KeyedLimiter::<String, _>::new(FixedWindow::new(roomy)))
            }
            Algorithm::SlidingWindow2 => Arc::new(KeyedLimiter::<String, _>::new(
                SlidingWindow::try_new(roomy, 2).expect("two counters"),
            )),
            Algorithm::Gcra => Arc::new(KeyedLimiter::<String, _>::new(Gcra::new(roomy))),
            Algorithm::TokenBucket => {
                Arc::new(KeyedLimiter::<String, _>::new(TokenBucket::new(roomy)))
            }
        };
        let (redis, memcached) = match algorithm {
            Algorithm::FixedWindow => (
                bench.redis(FixedWindow::new(roomy), "fw"),
                bench.memcached(FixedWindow::new(roomy), "fw"),
            ),
            Algorithm::SlidingWindow2 => {
                let sw = SlidingWindow::try_new(roomy, 2).expect("two counters");
                (bench.redis(sw.clone(), "sw"), bench.memcached(sw, "sw"))
            }
            Algorithm::Gcra => (
                bench.redis(Gcra::new(roomy), "gcra"),
                bench.memcached(Gcra::new(roomy), "gcra"),
            ),
            Algorithm::TokenBucket => (
                bench.redis(TokenBucket::new(roomy), "tb"),
                bench.memcached(TokenBucket::new(roomy), "tb"),
            ),
        };
        let (Some(redis), Some(memcached)) = (redis, memcached) else {
            table.cells(
                [label.to_owned(), "could not connect".to_owned()]
                    .into_iter()
                    .chain(std::iter::repeat_n(String::new(), 4)),
            );
            continue;
        };
        let mut contenders = vec![
            Contender::InProcess(in_process),
            Contender::Redis(redis),
            Contender::Memcached(memcached.clone()),
        ];
        let raw = (algorithm == Algorithm::FixedWindow).then(|| {
            let client = bench.rt.block_on(
                AsyncMetaClient::builder()
                    .io_timeout(Some(Duration::from_secs(1)))
                    .connect_async(bench.memcached.addr()),
            );
            client.ok().map(Contender::RawIncrement)
        });
        if let Some(Some(raw)) = raw {
            contenders.push(raw);
        }
        let runs = contest::rotate(
            report,
            label,
            contenders.len(),
            bench.repetitions,
            |c, _| {
                bench
                    .rt
                    .block_on(load(&contenders[c], CALLERS, bench.dur, false))
            },
        );
        let rates = contest::spreads(&runs, Run::rate);
        let off: u64 = runs[2].iter().map(|r| r.off_store).sum();
        let decided: u64 = runs[2].iter().map(|r| r.decisions).sum();
        table.row(format!(
            "{label} | {} | {} | {} | {} | {}",
            show_kps(&rates[0]),
            show_kps(&rates[1]),
            show_kps(&rates[2]),
            algorithm.on_memcached(),
            share(off, decided, 2)
        ));
        if let Some(raw) = runs.get(3) {
            let mine: Vec<f64> = runs[2].iter().map(Run::rate).collect();
            let theirs: Vec<f64> = raw.iter().map(Run::rate).collect();
            fixed_over_raw = contest::paired(&mine, &theirs);
            table.cells([
                "raw `ma` (one increment a call, same client)".to_owned(),
                String::new(),
                String::new(),
                show_kps(&rates[3]),
                String::new(),
                String::new(),
            ]);
        }
    }
    report.table(&table);
    Throughput { fixed_over_raw }
}

fn show_kps(s: &Spread) -> String {
    format!(
        "{} ({:.1}–{:.1})",
        kps(s.median),
        s.min / 1000.0,
        s.max / 1000.0
    )
}

/// The exact count of a set of times in the window ending now.
struct Exact {
    window: u64,
    times: VecDeque<u64>,
}

impl Exact {
    fn count(&mut self, now: u64) -> u64 {
        while self.times.front().is_some_and(|&t| t + self.window <= now) {
            self.times.pop_front();
        }
        self.times.len() as u64
    }
}

/// One limiter's verdicts on the traffic, judged against the exact sliding
/// window over the requests it allowed.
#[derive(Debug, Clone, Copy, Default)]
struct Judged {
    requests: u64,
    allowed: u64,
    wrongly_allowed: u64,
    wrongly_denied: u64,
}

impl Judged {
    fn record(&mut self, exact: &mut Exact, limit: u64, now: u64, allowed: bool) {
        let truth_allows = exact.count(now) < limit;
        self.requests += 1;
        self.allowed += u64::from(allowed);
        self.wrongly_allowed += u64::from(allowed && !truth_allows);
        self.wrongly_denied += u64::from(!allowed && truth_allows);
        if allowed {
            exact.times.push_back(now);
        }
    }

    fn wrong(&self) -> f64 {
        (self.wrongly_allowed + self.wrongly_denied) as f64 / self.requests.max(1) as f64
    }
}

/// Accuracy rows: (name, in process, Memcached).
struct Accuracy {
    rows: Vec<(String, Judged, Judged)>,
}

/// The same traffic, played in real time, through each window algorithm
/// in process (on a manual clock set to each request's wall time) and on
/// Memcached (on its own wall clock), each judged against the exact
/// sliding window over what it allowed.
fn accuracy(report: &mut Report, bench: &Bench<'_>) -> Accuracy {
    let (limit, window) = (20u32, Duration::from_secs(1));
    let quota = Quota::try_new(limit, window).expect("a valid quota");
    let run = bench.dur * 4;
    let keys = 8;
    // Poisson arrivals per key whose rate changes every 2 s between a
    // quarter and four times the limit's: the limit binds about half the
    // time. Offsets in ns from the start, sorted.
    let mut schedule: Vec<(u64, usize)> = Vec::new();
    let mut x = 0x5EED_u64;
    for key in 0..keys {
        let (mut t, mut rate, mut segment_end) = (0.0f64, 0.0f64, 0.0f64);
        while t < run.as_secs_f64() {
            if t >= segment_end {
                segment_end += 2.0;
                let u = (workload::xorshift(&mut x) % 1000) as f64 / 1000.0;
                rate = f64::from(limit) * 2f64.powf(4.0 * u - 2.0);
            }
            let u = ((workload::xorshift(&mut x) % 1_000_000) as f64 + 1.0) / 1_000_001.0;
            t += -u.ln() / rate;
            schedule.push(((t * 1e9) as u64, key));
        }
    }
    schedule.sort_unstable();
    let kinds: [(&str, Option<u32>); 3] = [
        ("fixed window", None),
        ("sliding window, 2 counters", Some(2)),
        ("sliding window, 5 counters", Some(5)),
    ];
    let mut rows = Vec::new();
    for (name, counters) in kinds {
        report.progress(&format!("accuracy: {name}"));
        let clock = ManualClock::new();
        let local: Box<dyn CheckKey<str>> = match counters {
            None => Box::new(KeyedLimiter::<String, _, _>::with_clock(
                FixedWindow::new(quota),
                clock.clone(),
            )),
            Some(n) => Box::new(KeyedLimiter::<String, _, _>::with_clock(
                SlidingWindow::try_new(quota, n).expect("valid counters"),
                clock.clone(),
            )),
        };
        let store = match counters {
            None => bench.memcached(FixedWindow::new(quota), "acc-fw"),
            Some(n) => bench.memcached(
                SlidingWindow::try_new(quota, n).expect("valid"),
                &format!("acc-sw{n}"),
            ),
        };
        let Some(store) = store else {
            continue;
        };
        let (local_judged, store_judged) = bench.rt.block_on(async {
            let mut judges = (Judged::default(), Judged::default());
            let mut exact: Vec<(Exact, Exact)> = (0..keys)
                .map(|_| {
                    let e = || Exact {
                        window: window.as_nanos() as u64,
                        times: VecDeque::new(),
                    };
                    (e(), e())
                })
                .collect();
            let start = Instant::now();
            for &(offset, key) in &schedule {
                let due = Duration::from_nanos(offset);
                if let Some(wait) = due.checked_sub(start.elapsed()) {
                    tokio::time::sleep(wait).await;
                }
                let name = format!("k{key}");
                let now = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos() as u64);
                clock.set(Duration::from_nanos(now));
                let local_allows = local.check_n(&name, 1).is_ok_and(|d| d.is_allowed());
                let store_allows = store.check(&name).await.is_allowed();
                judges
                    .0
                    .record(&mut exact[key].0, u64::from(limit), now, local_allows);
                judges
                    .1
                    .record(&mut exact[key].1, u64::from(limit), now, store_allows);
            }
            judges
        });
        rows.push((name.to_owned(), local_judged, store_judged));
    }
    let mut table = Table::new(
        "algorithm | requests | allowed in process / Memcached | wrongly allowed in process / Memcached | wrongly denied in process / Memcached",
    );
    for (name, l, m) in &rows {
        table.row(format!(
            "{name} | {} | {} / {} | {} / {} | {} / {}",
            thousands(l.requests),
            thousands(l.allowed),
            thousands(m.allowed),
            share(l.wrongly_allowed, l.requests, 2),
            share(m.wrongly_allowed, m.requests, 2),
            share(l.wrongly_denied, l.requests, 2),
            share(m.wrongly_denied, m.requests, 2),
        ));
    }
    report.text(&format!(
        "**Accuracy against an exact sliding log**, {limit} per {} s per key, {keys} keys, Poisson \
         arrivals whose rate changes every 2 s between ¼ and 4 times the limit's, played in real \
         time for {:.1} s. Each limiter is judged on its own verdicts: a request it allowed while \
         the exact count of what it had allowed in the last window was at the limit is wrongly \
         allowed, one it refused below the limit wrongly denied. In process the limiter reads the \
         same wall-clock time the Memcached client reads.",
        window.as_secs(),
        run.as_secs_f64()
    ));
    report.table(&table);
    Accuracy { rows }
}

/// The claim: compare-and-swap under contention, by callers on one key.
struct Contention {
    /// Callers; Memcached decisions/s, CAS writes lost per decision, shed
    /// share, allowed over the exact bound; Redis decisions/s.
    rows: Vec<(usize, f64, f64, f64, f64, f64)>,
}

fn contention(report: &mut Report, bench: &Bench<'_>) -> Contention {
    // 2000 a second with a burst of 50: the limit binds, so allowed units
    // can be checked against GCRA's exact bound, burst + elapsed / T.
    let quota = Quota::per_second(nz(2000)).allow_burst(nz(50));
    let mut rows = Vec::new();
    let mut table = Table::new(
        "callers on one key | Memcached GCRA (compare-and-swap) | CAS writes lost per decision | shed after 8 lost writes | allowed / exact bound | Redis GCRA (script)",
    );
    for callers in [1usize, 4, 16, 64] {
        let (Some(memcached), Some(redis)) = (
            bench.memcached(Gcra::new(quota), &format!("cas{callers}")),
            bench.redis(Gcra::new(quota), &format!("cas{callers}")),
        ) else {
            continue;
        };
        let contenders = [
            Contender::Memcached(memcached.clone()),
            Contender::Redis(redis),
        ];
        let mut lost = Vec::new();
        let runs = contest::rotate(
            report,
            &format!("{callers} callers on one key"),
            2,
            bench.repetitions,
            |c, _| {
                let before = memcached.store().cas_writes().1;
                let start = Instant::now();
                let run = bench
                    .rt
                    .block_on(load(&contenders[c], callers, bench.dur, true));
                if c == 0 {
                    let lost_now = memcached.store().cas_writes().1 - before;
                    let elapsed = start.elapsed().as_secs_f64() + 1e-3;
                    // The exact bound over the run: the burst, plus what
                    // the rate allows in its time (a key's state carries
                    // over from the previous repetition: that adds one
                    // more burst at most).
                    let bound = 2.0 * 50.0 + 2000.0 * elapsed;
                    lost.push((lost_now, run.allowed as f64 / bound));
                }
                run
            },
        );
        let rates = contest::spreads(&runs, Run::rate);
        let decisions: u64 = runs[0].iter().map(|r| r.decisions).sum();
        let shed: u64 = runs[0].iter().map(|r| r.off_store).sum();
        let lost_writes: u64 = lost.iter().map(|l| l.0).sum();
        let worst = lost.iter().map(|l| l.1).fold(0.0f64, f64::max);
        let per_decision = lost_writes as f64 / decisions.max(1) as f64;
        table.row(format!(
            "{callers} | {} | {per_decision:.2} | {} | {worst:.2} | {}",
            show_kps(&rates[0]),
            share(shed, decisions, 1),
            show_kps(&rates[1]),
        ));
        rows.push((
            callers,
            rates[0].median,
            per_decision,
            shed as f64 / decisions.max(1) as f64,
            worst,
            rates[1].median,
        ));
    }
    report.text(
        "**The claim: optimistic concurrency under load.** GCRA at 2000 a second (burst 50) on \
         one hot key: on Memcached a decision reads the key's time with its CAS value and writes \
         it back only if unchanged, deciding again on a lost write (up to 8 times, then the \
         request is refused: shed); on Redis one script decides atomically. Allowed / exact \
         bound is the most units the run let through over what GCRA can allow in the run's time \
         (two bursts plus the rate), the worst repetition: at most 1 means never more than exact.",
    );
    report.table(&table);
    let series = vec![
        Series::line(
            "Memcached GCRA by compare-and-swap",
            rows.iter().map(|r| (r.0 as f64, r.1 / 1000.0)).collect(),
        ),
        Series::line(
            "Redis GCRA script",
            rows.iter().map(|r| (r.0 as f64, r.5 / 1000.0)).collect(),
        ),
    ];
    report.plot(
        "memcached-cas-by-callers",
        &LinePlot::new(
            "GCRA on one hot key: decisions per second by callers",
            "callers on one key",
            "thousand decisions per second",
            series,
        ),
    );
    let lost = vec![Series::line(
        "CAS writes lost per decision",
        rows.iter().map(|r| (r.0 as f64, r.2)).collect(),
    )];
    report.plot(
        "memcached-cas-lost-writes",
        &LinePlot::new(
            "GCRA by compare-and-swap: writes lost per decision by callers on one key",
            "callers on one key",
            "lost writes per decision",
            lost,
        ),
    );
    Contention { rows }
}

/// The set both stores decide all-or-nothing: 20 a second (fixed
/// window) and 50 in 5 s (sliding window, 2 counters) per key.
fn per_second_and_per_five() -> (FixedWindow, SlidingWindow) {
    let five = Quota::try_new(50, Duration::from_secs(5)).expect("a valid quota");
    (
        FixedWindow::new(Quota::per_second(nz(20))),
        SlidingWindow::try_new(five, 2).expect("valid counters"),
    )
}

/// Nanoseconds since the Unix epoch: the time line both stores' windows
/// fall on.
fn wall_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// One check as a caller saw it: when it was sent, its key and cost, and
/// whether the store allowed it (an answer off the store counts as off).
#[derive(Debug, Clone, Copy)]
struct Verdict {
    at: u64,
    key: usize,
    cost: u32,
    allowed: bool,
    off_store: bool,
}

/// Keys the all-or-nothing runs share among their callers.
const SET_KEYS: usize = 4;

/// `callers` tasks check [`SET_KEYS`] keys in turn through `limiter` for
/// `dur`, each a cost of 1, or of 1 to 4 if `mixed`.
async fn verdicts<B: Backend>(
    limiter: &StoreLimiter<B>,
    callers: usize,
    dur: Duration,
    mixed: bool,
) -> Vec<Verdict> {
    let stop = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = (0..callers)
        .map(|c| {
            let (limiter, stop) = (limiter.clone(), stop.clone());
            tokio::spawn(async move {
                let mut seen = Vec::new();
                let mut x = 0xA11_0F5E7u64 ^ (c as u64 + 1);
                let names: Vec<String> = (0..SET_KEYS).map(|k| format!("k{k}")).collect();
                let mut n = c;
                while !stop.load(Ordering::Relaxed) {
                    let key = n % SET_KEYS;
                    n += 1;
                    let cost = if mixed {
                        1 + (workload::xorshift(&mut x) % 4) as u32
                    } else {
                        1
                    };
                    let at = wall_ns();
                    let (allowed, off_store) = match limiter.check_verbose(&names[key], cost).await
                    {
                        Ok(a) => (a.decision.is_allowed(), a.source != Source::Store),
                        Err(_) => (false, true),
                    };
                    seen.push(Verdict {
                        at,
                        key,
                        cost,
                        allowed,
                        off_store,
                    });
                }
                seen
            })
        })
        .collect();
    tokio::time::sleep(dur).await;
    stop.store(true, Ordering::Relaxed);
    let mut all = Vec::new();
    for t in tasks {
        if let Ok(seen) = t.await {
            all.extend(seen);
        }
    }
    all
}

/// A store's run of the set beside the exact set's on the same checks.
#[derive(Debug, Clone, Copy, Default)]
struct SetRun {
    /// Units asked and allowed by the store.
    asked: u64,
    allowed: u64,
    /// Units the exact set in process allows when it decides the same
    /// checks, one by one at the times they were sent.
    exact: u64,
    off_store: u64,
}

impl SetRun {
    fn add(self, other: SetRun) -> SetRun {
        SetRun {
            asked: self.asked + other.asked,
            allowed: self.allowed + other.allowed,
            exact: self.exact + other.exact,
            off_store: self.off_store + other.off_store,
        }
    }

    /// Units the store refused that the exact set allowed.
    fn short(&self) -> u64 {
        self.exact.saturating_sub(self.allowed)
    }

    /// Units the store allowed beyond the exact set.
    fn beyond(&self) -> u64 {
        self.allowed.saturating_sub(self.exact)
    }
}

/// The store's verdicts beside the exact set's on the same checks, played
/// in the order they were sent. Far past the limits every unit a window
/// frees is asked for at once, so the two differ only by the units one of
/// them refused and the other allowed: a check sent just before a window
/// boundary and decided by the store just after it, either way, or (on
/// Memcached) a refusal for another check's increments not yet given back.
fn replay(mut verdicts: Vec<Verdict>) -> SetRun {
    verdicts.sort_by_key(|v| v.at);
    let clock = ManualClock::new();
    let exact = KeyedLimiter::<String, _, _>::with_clock(per_second_and_per_five(), clock.clone());
    let names: Vec<String> = (0..SET_KEYS).map(|k| format!("k{k}")).collect();
    let mut run = SetRun::default();
    for v in verdicts {
        clock.set(Duration::from_nanos(v.at));
        let cost = u64::from(v.cost);
        run.asked += cost;
        run.allowed += if v.allowed { cost } else { 0 };
        run.off_store += u64::from(v.off_store);
        if exact
            .check_n(&names[v.key], v.cost)
            .is_ok_and(|d| d.is_allowed())
        {
            run.exact += cost;
        }
    }
    run
}

/// All-or-nothing rows: callers, costs, Redis's and Memcached's runs
/// (summed over the repetitions), and the units a window boundary may
/// move either way over them.
struct AllOf {
    rows: Vec<(usize, &'static str, SetRun, SetRun, u64, Spread)>,
}

/// Windows all-or-nothing: Redis decides the set in one script, exactly;
/// Memcached on counters, giving every increment back on a refusal. Each
/// beside the exact set on the same checks.
fn all_of(report: &mut Report, bench: &Bench<'_>) -> AllOf {
    let mut rows = Vec::new();
    let mut table = Table::new(
        "callers | cost | units asked, Redis / Memcached | allowed, Redis / Memcached | exact set on the same checks, Redis / Memcached | refused that exact allowed, Redis / Memcached | allowed beyond exact, Redis / Memcached",
    );
    for (callers, mixed) in [(1usize, false), (1, true), (64, false), (64, true)] {
        let costs = if mixed { "1–4" } else { "1" };
        let runs = contest::rotate(
            report,
            &format!("all-or-nothing, {callers} callers, cost {costs}"),
            2,
            bench.repetitions,
            |c, _| {
                let name = format!("allof{callers}{}", if mixed { "mixed" } else { "unit" });
                let (fast, slow) = per_second_and_per_five();
                let seen = if c == 0 {
                    let connect = RedisLimiter::builder(fast)
                        .and(slow)
                        .prefix(Bench::prefix(&name))
                        .timeout(Duration::from_secs(1))
                        .on_failure(FailurePolicy::Closed)
                        .connect(Target::server(bench.redis.url()));
                    bench.rt.block_on(async {
                        match connect.await {
                            Ok(l) => verdicts(&l, callers, bench.dur, mixed).await,
                            Err(_) => Vec::new(),
                        }
                    })
                } else {
                    let connect = MemcachedLimiter::builder(fast)
                        .and(slow)
                        .prefix(Bench::prefix(&name))
                        .timeout(Duration::from_secs(1))
                        .on_failure(FailurePolicy::Closed)
                        .connect(Servers::one(bench.memcached.addr()));
                    bench.rt.block_on(async {
                        match connect.await {
                            Ok(l) => verdicts(&l, callers, bench.dur, mixed).await,
                            Err(_) => Vec::new(),
                        }
                    })
                };
                replay(seen)
            },
        );
        let sum = |runs: &[SetRun]| runs.iter().fold(SetRun::default(), |a, r| a.add(*r));
        let (r, m) = (sum(&runs[0]), sum(&runs[1]));
        table.row(format!(
            "{callers} | {costs} | {} / {} | {} / {} | {} / {} | {} / {} | {} / {}",
            thousands(r.asked),
            thousands(m.asked),
            thousands(r.allowed),
            thousands(m.allowed),
            thousands(r.exact),
            thousands(m.exact),
            share(r.short(), r.exact, 2),
            share(m.short(), m.exact, 2),
            share(r.beyond(), r.exact, 2),
            share(m.beyond(), m.exact, 2),
        ));
        // A boundary of the fixed window per key and second of each
        // repetition (and one more), at most a cost of 4 moved at each.
        let seconds = bench.dur.as_secs_f64().ceil() as u64 + 1;
        let boundaries = SET_KEYS as u64 * seconds * bench.repetitions as u64 * 4;
        // Memcached's refusals of what exact allowed, % of exact, by repetition.
        let short = contest::spreads(&runs[1..], |run| {
            100.0 * run.short() as f64 / run.exact.max(1) as f64
        })
        .remove(0);
        rows.push((callers, costs, r, m, boundaries, short));
    }
    report.text(
        "**Windows all-or-nothing.** 20 a second (fixed window) and 50 in 5 s (sliding window, \
         2 counters) per key, decided together: on Redis by one script (exact), on Memcached \
         by incrementing both counters in one pipeline and giving both back, before answering, \
         if either refuses. Closed-loop callers on 4 keys, far past the limits, for the same \
         repetitions as above; each store's checks are played again, in the order they were \
         sent, through the exact set in process. Units, summed over the repetitions. Both \
         stores differ from the replay by the checks that straddle a window boundary (sent \
         before it, decided after it); Memcached's refusals beyond Redis's are what the \
         give-back costs under concurrency.",
    );
    report.table(&table);
    AllOf { rows }
}

fn goals(
    report: &mut Report,
    throughput: &Throughput,
    accuracy: &Accuracy,
    contention: &Contention,
    all_of: &AllOf,
) {
    let mut lines = vec!["Goals, judged on this run:".to_owned()];
    if !throughput.fixed_over_raw.is_empty() {
        let goal = Goal::at_least("Memcached fixed window ≥ 0.8× the raw increment", 0.8);
        let [spread, verdict] = goal.judge(&throughput.fixed_over_raw);
        lines.push(format!("* {}: {spread} ({verdict})", goal.name));
    }
    for (name, local, store) in &accuracy.rows {
        let (l, m) = (local.wrong(), store.wrong());
        lines.push(format!(
            "* {name}: wrong decisions {:.2}% in process, {:.2}% on Memcached ({})",
            100.0 * l,
            100.0 * m,
            if (m - l).abs() <= 0.01 + 0.25 * l {
                "matches"
            } else {
                "**differs**"
            }
        ));
    }
    let worst = contention.rows.iter().map(|r| r.4).fold(0.0f64, f64::max);
    let goal = Goal::at_most("GCRA by compare-and-swap never admits more than exact", 1.0);
    lines.push(format!(
        "* {}: worst allowed / bound {worst:.2} over 1 to 64 callers ({})",
        goal.name,
        goal.verdict(worst)
    ));
    // Never looser than exact: beyond the exact set by no more than the
    // window boundaries can move, as Redis's exact script.
    if !all_of.rows.is_empty() {
        let goal = Goal::at_most(
            "Memcached's all-or-nothing set never looser than exact (units beyond the exact set, over what window boundaries move)",
            1.0,
        );
        let worst = all_of
            .rows
            .iter()
            .map(|(_, _, _, m, boundaries, _)| m.beyond() as f64 / (*boundaries).max(1) as f64)
            .fold(0.0f64, f64::max);
        let short: Vec<String> = all_of
            .rows
            .iter()
            .map(|(callers, costs, r, m, _, spread)| {
                format!(
                    "{callers} callers, cost {costs}: {} (by repetition {:.2}–{:.2}–{:.2} %; Redis {})",
                    share(m.short(), m.exact, 2),
                    spread.min,
                    spread.median,
                    spread.max,
                    share(r.short(), r.exact, 2)
                )
            })
            .collect();
        let off: u64 = all_of.rows.iter().map(|r| r.3.off_store).sum();
        lines.push(format!(
            "* {}: worst {worst:.2} of the boundaries' units, {off} answers off the store ({})",
            goal.name,
            goal.verdict(worst)
        ));
        lines.push(format!(
            "* Memcached's set refusing units the exact set allowed: {}",
            short.join("; ")
        ));
    }
    report.text(&lines.join("\n"));
}
