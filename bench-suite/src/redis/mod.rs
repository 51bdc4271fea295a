//! weir-rate's Redis backend against `redis-benchmark`, in one run, on one
//! private `redis-server` started for the purpose (loopback, no
//! persistence).
//!
//! * Baselines from `redis-benchmark` on that server: unpipelined `INCR`
//!   at 50 clients, `EVALSHA` of a minimal token-bucket script, and both
//!   pipelined 16 deep.
//! * Every algorithm's plain path (one script call per decision) at 1 and
//!   50 concurrent callers, and the batched path at 50: decisions per
//!   second and p50/p99 latency per decision, measured by the callers;
//!   Redis's CPU and this process's CPU per decision.
//! * GCRA plain and batched at 50, 200 and 800 callers: how many decisions
//!   a script call carries and what that does to each side's CPU per
//!   decision.
//! * One hot key at 50 callers: plain against local pre-aggregation
//!   (leases), and, with a limit that is reached, how many requests each
//!   admits against what the limit allows.
//! * What Redis pays per key inside a script, and Redis's own ceiling for
//!   batched calls (`redis-benchmark` driving bare and real scripts at 16
//!   and 50 decisions a call): the bound on what batching can give.
//!
//! Skipped, with a line saying so, when `redis-server` or
//! `redis-benchmark` is not installed.

mod callers;
mod goals;
mod hot;
mod inside;
mod load;
mod paths;

pub use load::{Run, load};

use crate::report::Report;
use std::num::NonZeroU32;
use std::time::Duration;
use tokio::runtime::Runtime;
use weir_rate::redis::{
    Batching, FailurePolicy, PreAggregation, RedisLimitError, RedisLimiter, RedisLimiterBuilder,
    Target,
};
use weir_rate::{FixedWindow, Gcra, Quota, SlidingWindow, TokenBucket};
use weir_test_support::redis_server::{self as testing, RedisServer};

/// The scripts the report measures, each run over the section's quota.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    /// [`TokenBucket`].
    TokenBucket,
    /// [`Gcra`].
    Gcra,
    /// [`FixedWindow`].
    FixedWindow,
    /// [`SlidingWindow`] over two counters (Cloudflare's).
    SlidingWindow2,
}

impl Algorithm {
    /// A limiter builder running this algorithm over `quota`.
    pub fn over(self, quota: Quota) -> RedisLimiterBuilder {
        match self {
            Self::TokenBucket => RedisLimiter::builder(TokenBucket::new(quota)),
            Self::Gcra => RedisLimiter::builder(Gcra::new(quota)),
            Self::FixedWindow => RedisLimiter::builder(FixedWindow::new(quota)),
            Self::SlidingWindow2 => RedisLimiter::builder(
                SlidingWindow::try_new(quota, 2).expect("two counters fit any quota"),
            ),
        }
    }
}

impl std::fmt::Display for Algorithm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names = [
            "token bucket",
            "GCRA",
            "fixed window",
            "sliding-window counter (2 counters)",
        ];
        f.write_str(names[*self as usize])
    }
}

/// The algorithms the report measures.
pub const ALGORITHMS: [Algorithm; 4] = [
    Algorithm::TokenBucket,
    Algorithm::Gcra,
    Algorithm::FixedWindow,
    Algorithm::SlidingWindow2,
];

fn nz(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).unwrap_or(NonZeroU32::MIN)
}

pub(crate) fn kps(x: f64) -> String {
    format!("{:.1} k/s", x / 1000.0)
}
/// What every part of the section runs on: the private server, the
/// runtime the limiters live in, and how long each load runs.
struct Bench<'a> {
    server: &'a RedisServer,
    rt: &'a Runtime,
    target: Target,
    dur: Duration,
}

impl Bench<'_> {
    /// A limiter of `alg` over `quota`, plain or batched, with
    /// pre-aggregation or not.
    fn connect(
        &self,
        alg: Algorithm,
        quota: Quota,
        batched: bool,
        hot: Option<PreAggregation>,
    ) -> Result<RedisLimiter, RedisLimitError> {
        let prefix = format!("bench{}", if batched { "b" } else { "" });
        let mut b = alg
            .over(quota)
            .prefix(prefix)
            .timeout(Duration::from_secs(1))
            .on_failure(FailurePolicy::Closed);
        if batched {
            b = b.batching(Batching::default());
        }
        if let Some(h) = hot {
            b = b.pre_aggregate(h);
        }
        self.rt.block_on(b.connect(self.target.clone()))
    }

    /// [`load`] of `limiters` on the section's runtime, the server's CPU read.
    fn load(&self, limiters: &[RedisLimiter], callers: usize, dur: Duration, hot: bool) -> Run {
        self.rt
            .block_on(load(limiters, callers, dur, hot, self.server.pid()))
    }
}

/// The Redis section of the report.
pub fn run(report: &mut Report) {
    report.section("Redis backend: weir-rate's scripts against redis-benchmark");
    if !testing::installed() || !testing::runs("redis-benchmark") {
        report.text(
            "**Skipped**: `redis-server`, `redis-cli` or `redis-benchmark` is not installed \
             (Debian: `apt-get install redis-server redis-tools`).",
        );
        return;
    }
    let server = match RedisServer::start() {
        Ok(s) => s,
        Err(e) => {
            return report.text(&format!(
                "**Skipped**: could not start a private redis-server: {e}"
            ));
        }
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return report.text(&format!("**Skipped**: no tokio runtime: {e}")),
    };
    measure(report, &server, &rt);
}

/// The section's measurements on a running server.
fn measure(report: &mut Report, server: &RedisServer, rt: &Runtime) {
    let bench = Bench {
        server,
        rt,
        target: Target::server(server.url()),
        dur: report
            .scale()
            .pick(Duration::from_millis(900), Duration::from_secs(3)),
    };
    let roomy = Quota::per_second(nz(1_000_000));
    let paths = paths::paths(report, &bench, roomy);
    let by_callers = callers::section(report, &bench, roomy);
    let hot = hot::section(report, &bench);
    let inside = inside::section(report, &bench, &paths, roomy);
    goals::section(report, &paths, &by_callers, &hot, &inside);
}
