//! One hot key at 50 callers: plain against local pre-aggregation
//! (leases), and, at a limit that is reached, how many requests each admits
//! against what the limit allows.

use super::{Algorithm, Bench, Run, kps, nz};
use crate::report::{Report, Table, thousands};
use std::time::Duration;
use weir_rate::Quota;
use weir_rate::redis::{FailurePolicy, PreAggregation, RedisLimitError};

/// What the hot-key runs measured, for the goals.
pub(super) struct Hot {
    /// Plain and pre-aggregated, far from the limit.
    pub(super) plain: Result<Run, RedisLimitError>,
    pub(super) pre: Result<Run, RedisLimitError>,
    /// Pre-aggregated at its limit: the run and what the limit allows.
    pub(super) admitted_pre: Option<(Run, f64)>,
    /// The leases pre-aggregation took.
    pub(super) leases: PreAggregation,
}

/// The hot-key tables.
pub(super) fn section(report: &mut Report, bench: &Bench<'_>) -> Hot {
    // 3. One hot key: plain against pre-aggregation, far from the limit.
    report.progress("hot key: plain and pre-aggregated");
    let leases = PreAggregation {
        lease: 1024,
        hot_after: 100,
        max_age: Duration::from_millis(50),
        ..Default::default()
    };
    let huge = Quota::per_second(nz(100_000_000));
    let hot = |pre: Option<PreAggregation>| {
        bench
            .connect(Algorithm::Gcra, huge, false, pre)
            .map(|l| bench.load(&[l], 50, bench.dur, true))
    };
    let (hot_plain, hot_pre) = (hot(None), hot(Some(leases)));

    // 4. A hot key that reaches its limit: admitted against the limit.
    report.progress("hot key at its limit: admitted requests");
    let limit = 100_000u32;
    let admitted = |pre: bool| -> Option<(Run, f64)> {
        // Two "instances" (limiters with their own leases), 25 callers each,
        // each run on a fresh prefix so the bucket starts full.
        let instance = |_| {
            let b = Algorithm::Gcra
                .over(Quota::per_second(nz(limit)))
                .prefix(format!("adm{}0", u8::from(pre)));
            let b = b
                .timeout(Duration::from_secs(1))
                .on_failure(FailurePolicy::Closed);
            bench
                .rt
                .block_on(
                    if pre { b.pre_aggregate(leases) } else { b }.connect(bench.target.clone()),
                )
                .ok()
        };
        let limiters = (0..2).map(instance).collect::<Option<Vec<_>>>()?;
        let r = bench.load(&limiters, 50, bench.dur, true);
        // burst + rate × elapsed
        let ideal = f64::from(limit) + f64::from(limit) * r.secs;
        Some((r, ideal))
    };
    let (adm_plain, adm_pre) = (admitted(false), admitted(true));

    let mut t = Table::new("hot key, 50 callers | decisions/s | p50 µs | p99 µs | from leases");
    for (name, r) in [
        ("plain (GCRA)", &hot_plain),
        ("pre-aggregated (lease 1024, max age 50 ms)", &hot_pre),
    ] {
        match r {
            Ok(r) => {
                let leased = 100.0 * r.leased as f64 / r.decisions.max(1) as f64;
                t.row(format!(
                    "{name} | {} | {:.1} | {:.0} | {leased:.1}%",
                    kps(r.rate()),
                    r.p50_us,
                    r.p99_us
                ));
            }
            Err(e) => t.cells([
                name.to_owned(),
                format!("failed: {e}"),
                String::new(),
                String::new(),
                String::new(),
            ]),
        }
    }
    report.table(&t);
    let mut t = Table::new(
        "hot key at 100 000/s (2 instances × 25 callers) | decisions/s | admitted | limit allows (burst + rate × elapsed) | extra admitted",
    );
    for (name, (r, ideal)) in [("plain", &adm_plain), ("pre-aggregated", &adm_pre)]
        .into_iter()
        .filter_map(|(n, r)| Some((n, r.as_ref()?)))
    {
        let extra = r.allowed as f64 - ideal;
        let (rate, allowed, ideal_n) = (
            kps(r.rate()),
            thousands(r.allowed),
            thousands(*ideal as u64),
        );
        t.row(format!(
            "{name} | {rate} | {allowed} | {ideal_n} | {extra:+.0} ({:+.2}%)",
            100.0 * extra / ideal
        ));
    }
    report.table(&t);
    Hot {
        plain: hot_plain,
        pre: hot_pre,
        admitted_pre: adm_pre,
        leases,
    }
}
