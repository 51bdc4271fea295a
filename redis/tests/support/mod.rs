//! Shared pieces of the Redis integration tests: load generators, worker
//! processes (the test binary re-executed), and the bound every run must
//! respect. The servers themselves come from `weir_test_support::redis_server`.

#![allow(dead_code)]

use std::collections::HashMap;
use std::error::Error;
use std::num::NonZeroU32;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use weir_rate::{FixedWindow, Gcra, Quota, SlidingWindow, TokenBucket};
use weir_redis::{RedisLimiter, RedisLimiterBuilder, Source, Target};

pub type TestResult = Result<(), Box<dyn Error>>;

/// The environment variable that turns a test binary into a load worker.
pub const WORKER_ENV: &str = "WEIR_REDIS_WORKER";

/// A current-thread runtime with I/O and timers, as each test uses.
pub fn rt() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
}

/// A prefix no other test (or earlier run) uses.
pub fn unique_prefix(name: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("t-{name}-{}-{nanos}", std::process::id())
}

/// The Redis scripts by kind, for tests that run each over the same quota
/// (the limiter itself takes the algorithm value, quota included).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    TokenBucket,
    Gcra,
    FixedWindow,
    SlidingWindow { counters: u32 },
}

impl Algorithm {
    /// A limiter builder running this algorithm over `quota`.
    ///
    /// # Panics
    ///
    /// If a sliding window's counters do not fit `quota`.
    pub fn builder(self, quota: Quota) -> RedisLimiterBuilder {
        match self {
            Self::TokenBucket => RedisLimiter::builder(TokenBucket::new(quota)),
            Self::Gcra => RedisLimiter::builder(Gcra::new(quota)),
            Self::FixedWindow => RedisLimiter::builder(FixedWindow::new(quota)),
            Self::SlidingWindow { counters } => RedisLimiter::builder(
                SlidingWindow::try_new(quota, counters).expect("counters that fit the quota"),
            ),
        }
    }
}

impl std::fmt::Display for Algorithm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&alg_name(*self))
    }
}

pub const ALGORITHMS: [Algorithm; 4] = [
    Algorithm::TokenBucket,
    Algorithm::Gcra,
    Algorithm::FixedWindow,
    Algorithm::SlidingWindow { counters: 2 },
];

pub fn alg_name(a: Algorithm) -> String {
    match a {
        Algorithm::TokenBucket => "tb".into(),
        Algorithm::Gcra => "gcra".into(),
        Algorithm::FixedWindow => "fw".into(),
        Algorithm::SlidingWindow { counters } => format!("sw{counters}"),
    }
}

pub fn parse_alg(s: &str) -> Option<Algorithm> {
    Some(match s {
        "tb" => Algorithm::TokenBucket,
        "gcra" => Algorithm::Gcra,
        "fw" => Algorithm::FixedWindow,
        s => Algorithm::SlidingWindow {
            counters: s.strip_prefix("sw")?.parse().ok()?,
        },
    })
}

/// What a worker process does: `tasks` tokio tasks, each making `requests`
/// checks round-robin over `keys`.
#[derive(Debug, Clone)]
pub struct Spec {
    pub cluster: bool,
    pub urls: Vec<String>,
    pub prefix: String,
    pub algorithm: Algorithm,
    pub limit: u32,
    pub window: Duration,
    pub keys: Vec<String>,
    pub tasks: usize,
    pub requests: usize,
    pub batched: bool,
}

impl Spec {
    pub fn target(&self) -> Target {
        if self.cluster {
            Target::cluster(self.urls.clone())
        } else {
            Target::server(self.urls[0].clone())
        }
    }

    pub fn quota(&self) -> Result<Quota, Box<dyn Error>> {
        Ok(Quota::try_new(self.limit, self.window)?)
    }

    fn encode(&self) -> String {
        [
            if self.cluster { "c" } else { "s" }.to_owned(),
            self.urls.join(","),
            self.prefix.clone(),
            alg_name(self.algorithm),
            self.limit.to_string(),
            self.window.as_millis().to_string(),
            self.keys.join(","),
            self.tasks.to_string(),
            self.requests.to_string(),
            if self.batched { "b" } else { "p" }.to_owned(),
        ]
        .join("|")
    }

    fn decode(s: &str) -> Option<Self> {
        let f: Vec<&str> = s.split('|').collect();
        if f.len() != 10 {
            return None;
        }
        Some(Self {
            cluster: f[0] == "c",
            urls: f[1].split(',').map(str::to_owned).collect(),
            prefix: f[2].to_owned(),
            algorithm: parse_alg(f[3])?,
            limit: f[4].parse().ok()?,
            window: Duration::from_millis(f[5].parse().ok()?),
            keys: f[6].split(',').map(str::to_owned).collect(),
            tasks: f[7].parse().ok()?,
            requests: f[8].parse().ok()?,
            batched: f[9] == "b",
        })
    }

    pub async fn limiter(&self) -> Result<RedisLimiter, Box<dyn Error>> {
        let mut b = self
            .algorithm
            .builder(self.quota()?)
            .prefix(self.prefix.clone())
            .timeout(Duration::from_secs(2));
        if self.batched {
            b = b.batching(Default::default());
        }
        Ok(b.connect(self.target()).await?)
    }
}

/// Allowed units per key, and how many decisions did not come from Redis.
#[derive(Debug, Default, Clone)]
pub struct Tally {
    pub allowed: HashMap<String, u64>,
    pub not_redis: u64,
}

impl Tally {
    pub fn merge(&mut self, other: &Tally) {
        for (k, v) in &other.allowed {
            *self.allowed.entry(k.clone()).or_default() += v;
        }
        self.not_redis += other.not_redis;
    }
}

/// Run the spec's load in this process.
pub async fn run_load(spec: &Spec) -> Result<Tally, Box<dyn Error>> {
    let limiter = spec.limiter().await?;
    let mut handles = Vec::new();
    for t in 0..spec.tasks {
        let limiter = limiter.clone();
        let keys = spec.keys.clone();
        let requests = spec.requests;
        handles.push(tokio::spawn(async move {
            let mut tally = Tally::default();
            for i in 0..requests {
                let key = &keys[(i + t) % keys.len()];
                match limiter.check_verbose(key, 1).await {
                    Ok(v) => {
                        if v.source != Source::Store {
                            tally.not_redis += 1;
                        } else if v.decision.is_allowed() {
                            *tally.allowed.entry(key.clone()).or_default() += 1;
                        }
                    }
                    Err(_) => tally.not_redis += 1,
                }
            }
            tally
        }));
    }
    let mut total = Tally::default();
    for h in handles {
        total.merge(&h.await?);
    }
    Ok(total)
}

/// Start `n` copies of this test binary running only `entry` (a test that
/// calls [`worker_main`]) with the spec in the environment.
pub fn spawn_workers(
    entry: &str,
    n: usize,
    spec: &Spec,
) -> Result<Vec<std::process::Child>, Box<dyn Error>> {
    let exe = std::env::current_exe()?;
    let mut children = Vec::new();
    for _ in 0..n {
        children.push(
            Command::new(&exe)
                .args([entry, "--exact", "--nocapture", "--test-threads=1"])
                .env(WORKER_ENV, spec.encode())
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()?,
        );
    }
    Ok(children)
}

/// Wait for the workers and add up what they report.
pub fn collect_workers(children: Vec<std::process::Child>) -> Result<Tally, Box<dyn Error>> {
    let mut total = Tally::default();
    for child in children {
        let out = child.wait_with_output()?;
        if !out.status.success() {
            return Err(format!("worker process failed: {}", out.status).into());
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let mut seen = false;
        for line in text.lines() {
            // The harness may print "test name ... " before our line.
            if let Some(at) = line.find("WEIR_ALLOWED ") {
                let rest = &line[at + "WEIR_ALLOWED ".len()..];
                seen = true;
                let (k, v) = rest.rsplit_once('=').ok_or("bad worker line")?;
                if k == "!not_redis" {
                    total.not_redis += v.parse::<u64>()?;
                } else {
                    *total.allowed.entry(k.to_owned()).or_default() += v.parse::<u64>()?;
                }
            }
        }
        if !seen {
            return Err(format!("worker printed no result: {text}").into());
        }
    }
    Ok(total)
}

/// The body of the worker entry test: does nothing unless started by
/// [`spawn_workers`].
pub fn worker_main() -> TestResult {
    let Ok(encoded) = std::env::var(WORKER_ENV) else {
        return Ok(());
    };
    let spec = Spec::decode(&encoded).ok_or("bad worker spec")?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let tally = rt.block_on(run_load(&spec))?;
    println!();
    for (k, v) in &tally.allowed {
        println!("WEIR_ALLOWED {k}={v}");
    }
    println!("WEIR_ALLOWED !not_redis={}", tally.not_redis);
    Ok(())
}

/// Window index of wall time (the server runs on this machine, so its
/// `TIME` is this clock).
pub fn window_index(window: Duration) -> u128 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros());
    now / window.as_micros().max(1)
}

/// The most one key may allow over a run of `elapsed`, starting fresh:
/// `limit` (= burst), plus refill for the rate algorithms, plus a second
/// window's worth when the run crossed a window boundary.
pub fn upper_bound(
    alg: Algorithm,
    limit: u32,
    window: Duration,
    elapsed: Duration,
    crossed: bool,
) -> u64 {
    let limit = u64::from(limit);
    let refill = (limit as f64 * elapsed.as_secs_f64() / window.as_secs_f64()).ceil() as u64 + 1;
    match alg {
        Algorithm::TokenBucket | Algorithm::Gcra => limit + refill,
        Algorithm::FixedWindow if crossed => 2 * limit,
        Algorithm::SlidingWindow { .. } if crossed => limit + refill,
        _ => limit,
    }
}

/// Check every key of a run against [`upper_bound`], and (when every
/// decision came from Redis and the load was large enough) that the limit
/// was reached, i.e. nothing was lost either.
pub fn check_tally(
    what: &str,
    spec: &Spec,
    tally: &Tally,
    started: Instant,
    first_window: u128,
) -> TestResult {
    let elapsed = started.elapsed();
    let crossed = window_index(spec.window) != first_window;
    let hi = upper_bound(spec.algorithm, spec.limit, spec.window, elapsed, crossed);
    for key in &spec.keys {
        let got = tally.allowed.get(key).copied().unwrap_or(0);
        if got > hi {
            return Err(format!(
                "{what}: {} key {key} allowed {got} > bound {hi} (limit {}, elapsed {elapsed:?}, crossed {crossed})",
                spec.algorithm, spec.limit
            )
            .into());
        }
        if tally.not_redis == 0 && got < u64::from(spec.limit) {
            return Err(format!(
                "{what}: {} key {key} allowed only {got} of {} with Redis healthy",
                spec.algorithm, spec.limit
            )
            .into());
        }
    }
    Ok(())
}

pub fn nz(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).unwrap_or(NonZeroU32::MIN)
}
