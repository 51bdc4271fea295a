//! The load every weir figure comes from: callers checking keys through
//! limiters for a while, timed per decision, CPU read on both sides.

use crate::contest;
use crate::machine;
use crate::workload;
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use weir_rate::redis::{RedisLimiter, Source};

/// What one load run measured.
#[derive(Debug, Clone, Default)]
pub struct Run {
    /// Decisions answered.
    pub decisions: u64,
    /// Of those, allowed.
    pub allowed: u64,
    /// Of those, answered from a lease.
    pub leased: u64,
    /// Answered by the failure policy or an error.
    pub failed: u64,
    /// Wall time of the run.
    pub secs: f64,
    /// Median latency per decision, µs.
    pub p50_us: f64,
    /// 99th percentile latency per decision, µs.
    pub p99_us: f64,
    /// The redis-server process's CPU seconds over the run (0 when unknown).
    pub server_cpu: f64,
    /// This process's CPU seconds over the run: the limiter client and the
    /// callers driving it (0 when unknown).
    pub client_cpu: f64,
}

impl Run {
    /// Decisions per second.
    pub fn rate(&self) -> f64 {
        self.decisions as f64 / self.secs.max(1e-9)
    }

    /// Redis CPU time per decision, in microseconds.
    pub fn server_us(&self) -> f64 {
        self.server_cpu * 1e6 / self.decisions.max(1) as f64
    }

    /// Client CPU time per decision (callers included), in microseconds.
    pub fn client_us(&self) -> f64 {
        self.client_cpu * 1e6 / self.decisions.max(1) as f64
    }
}

/// `callers` tasks check keys for `dur`: `hot` = one key, else keys drawn
/// from 10 000 (the report's load shape; `examples/redis_batched.rs` runs
/// it alone for profiling).
pub async fn load(
    limiters: &[RedisLimiter],
    callers: usize,
    dur: Duration,
    hot: bool,
    server_pid: Option<u32>,
) -> Run {
    let (me, start) = (std::process::id(), Instant::now());
    let cpu_at_start = (
        server_pid.and_then(machine::process_cpu_secs),
        machine::process_cpu_secs(me),
    );
    let (stop, failed) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
    );
    let caller = |c: usize| {
        let (limiter, stop, failed) = (
            limiters[c % limiters.len()].clone(),
            stop.clone(),
            failed.clone(),
        );
        tokio::spawn(async move {
            let (mut lat, mut allowed, mut leased) =
                (Vec::<u32>::with_capacity(1 << 16), 0u64, 0u64);
            let (mut x, mut key) = (0x9E37_79B9_7F4A_7C15u64 ^ (c as u64 + 1), String::new());
            while !stop.load(Ordering::Relaxed) {
                key.clear();
                let _ = if hot {
                    write!(key, "hot")
                } else {
                    write!(key, "k{}", workload::xorshift(&mut x) % 10_000)
                };
                let t = Instant::now();
                match limiter.check_verbose(&key, 1).await {
                    Ok(v) => {
                        leased += u64::from(v.source == Source::Lease);
                        if v.source != Source::Lease && v.source != Source::Redis {
                            failed.fetch_add(1, Ordering::Relaxed);
                        }
                        allowed += u64::from(v.decision.is_allowed());
                    }
                    Err(_) => _ = failed.fetch_add(1, Ordering::Relaxed),
                }
                lat.push(u32::try_from(t.elapsed().as_nanos()).unwrap_or(u32::MAX));
            }
            (lat, allowed, leased)
        })
    };
    let handles: Vec<_> = (0..callers).map(caller).collect();
    tokio::time::sleep(dur).await;
    stop.store(true, Ordering::Relaxed);
    let (mut all, mut run) = (Vec::<u32>::new(), Run::default());
    for h in handles {
        if let Ok((lat, allowed, leased)) = h.await {
            all.extend_from_slice(&lat);
            (run.allowed, run.leased) = (run.allowed + allowed, run.leased + leased);
        }
    }
    run.secs = start.elapsed().as_secs_f64();
    let used = |pid: Option<u32>, at_start: Option<f64>| {
        pid.and_then(machine::process_cpu_secs)
            .zip(at_start)
            .map_or(0.0, |(now, then)| now - then)
    };
    (run.server_cpu, run.client_cpu) = (
        used(server_pid, cpu_at_start.0),
        used(Some(me), cpu_at_start.1),
    );
    (run.decisions, run.failed) = (all.len() as u64, failed.load(Ordering::Relaxed));
    all.sort_unstable();
    let pct = |p| contest::quantile(&all, p).map_or(0.0, |ns| f64::from(ns) / 1000.0);
    (run.p50_us, run.p99_us) = (pct(0.50), pct(0.99));
    run
}
