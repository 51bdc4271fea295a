//! Load runs that interleave services in one server: every service is
//! served by the same process under the same load, and which one answers
//! switches every slice, in cycles of one slice per service (the order
//! rotating). Whatever slows the machine down lasts longer than a cycle
//! and so hits the services alike. What a slice measures is the server's
//! CPU time per request, which work stolen by other processes does not
//! reach.

use super::report::{Table, thousands};
use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// What one slice measured for one service: requests dispatched to it,
/// the server's CPU time and the slice's wall-clock length (ns).
#[derive(Debug, Clone, Copy, Default)]
pub struct Slice {
    /// Requests the service took in the slice.
    pub requests: u64,
    /// The server's CPU time in the slice.
    pub cpu_ns: u64,
    /// The slice's length.
    pub wall_ns: u64,
}

impl Slice {
    fn cpu_per_request(&self) -> f64 {
        self.cpu_ns as f64 / self.requests.max(1) as f64
    }
}

/// Runs `cycles` cycles of one `slice` per service: `current` says which
/// service answers, `dispatched[i]` counts the requests service `i` has
/// taken, and `server_cpu_ns` reads the server's CPU clock. Each cycle's
/// slices, indexed like `dispatched`.
pub async fn interleave<const N: usize, F: Future<Output = u64>>(
    cycles: usize,
    slice: Duration,
    current: &AtomicUsize,
    dispatched: &[AtomicU64; N],
    mut server_cpu_ns: impl FnMut() -> F,
) -> Vec<[Slice; N]> {
    let mut measured = Vec::with_capacity(cycles);
    for cycle in 0..cycles {
        let mut this = [Slice::default(); N];
        for step in 0..N {
            let i = (cycle + step) % N;
            current.store(i, Ordering::Relaxed);
            let (cpu, requests, start) = (
                server_cpu_ns().await,
                dispatched[i].load(Ordering::Relaxed),
                Instant::now(),
            );
            tokio::time::sleep(slice).await;
            this[i] = Slice {
                requests: dispatched[i].load(Ordering::Relaxed) - requests,
                cpu_ns: server_cpu_ns().await.saturating_sub(cpu),
                wall_ns: u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX),
            };
        }
        measured.push(this);
    }
    measured
}

/// Each service's server CPU per request over every slice pooled (ns),
/// and its requests per second.
pub fn pooled<const N: usize>(measured: &[[Slice; N]], i: usize) -> (f64, f64) {
    let sum = |f: fn(&Slice) -> u64| measured.iter().map(|c| f(&c[i])).sum::<u64>().max(1) as f64;
    let requests = sum(|s| s.requests);
    (
        sum(|s| s.cpu_ns) / requests,
        requests * 1e9 / sum(|s| s.wall_ns),
    )
}

/// The table of a run whose first service is the bare one: each service's
/// server CPU per request (the column named `cpu`), its overhead over the
/// bare service's (pooled, and the median and middle half of the
/// per-cycle ratios), its requests per second, and `extra.1(i)` in one
/// more column named `extra.0`, if given.
pub fn overhead_table<const N: usize>(
    measured: &[[Slice; N]],
    (names, cpu): ([&str; N], &str),
    extra: Option<(&str, &dyn Fn(usize) -> String)>,
) -> Table {
    let mut headers = format!(
        "service | {cpu} | overhead (all slices pooled) | median of per-cycle ratios | middle half of cycles | requests/s",
    );
    if let Some((column, _)) = extra {
        headers.push_str(" | ");
        headers.push_str(column);
    }
    let mut table = Table::new(&headers);
    let bare = pooled(measured, 0).0;
    let percent = |r: f64| format!("{:+.1}%", (r - 1.0) * 100.0);
    for (i, name) in names.iter().enumerate() {
        let (ns, rps) = pooled(measured, i);
        let mut by_cycle: Vec<f64> = measured
            .iter()
            .map(|c| c[i].cpu_per_request() / c[0].cpu_per_request().max(1e-9))
            .collect();
        let [median, lo, hi] = median_and_quartiles(&mut by_cycle).map(percent);
        let [overhead, median, range] = match i {
            0 => ["—", "—", "—"].map(String::from),
            _ => [percent(ns / bare.max(1e-9)), median, format!("{lo} … {hi}")],
        };
        let mut row = format!(
            "{name} | {:.2} µs | {overhead} | {median} | {range} | {}",
            ns / 1000.0,
            thousands(rps as u64)
        );
        if let Some((_, extra)) = extra {
            row.push_str(" | ");
            row.push_str(&extra(i));
        }
        table.row(row);
    }
    table
}

/// The median and the quartiles of `xs`, which must not be empty.
pub fn median_and_quartiles(xs: &mut [f64]) -> [f64; 3] {
    xs.sort_by(f64::total_cmp);
    [0.5, 0.25, 0.75].map(|q| {
        let x = q * (xs.len() - 1) as f64;
        let (lo, hi) = (x.floor() as usize, x.ceil() as usize);
        xs[lo] + (xs[hi] - xs[lo]) * (x - lo as f64)
    })
}
