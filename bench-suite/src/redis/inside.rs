//! What Redis itself pays per decision, apart from any client: per-key
//! steps inside a script, instructions per decision (callgrind), and its
//! ceiling for batched calls.

use super::paths::Paths;
use super::{ALGORITHMS, Algorithm, Bench};
use crate::redis_cost::{self, Instructions};
use crate::report::{Report, Table};
use weir_rate::Quota;

/// What the goals read from this part.
pub(super) struct Inside {
    /// Instructions per decision, per algorithm.
    pub(super) instructions: Result<Vec<Instructions>, String>,
    /// GCRA's ceiling: (decisions a call, decisions per second).
    pub(super) gcra_ceiling: Vec<(usize, Option<f64>)>,
}

/// The section's part inside Redis, over `roomy`.
pub(super) fn section(
    report: &mut Report,
    bench: &Bench<'_>,
    paths: &Paths,
    roomy: Quota,
) -> Inside {
    // 5. What a decision costs Redis itself, apart from any client.
    report.progress("per-key steps inside a script");
    let mut t = Table::new("one step inside a script | Redis time per key");
    for (name, us) in redis_cost::script_steps(bench.server) {
        t.cells([
            name.to_owned(),
            us.map_or_else(|| "failed".into(), |us| format!("{us:.2} µs")),
        ]);
    }
    report.text(
        "What a script deciding many keys still pays per key, measured in one EVAL looping over \
         10 000 keys (`INFO commandstats`, the bare loop subtracted, best of 3). Every allowed decision \
         writes its key once, so the batched path's Redis time per decision cannot fall below a write \
         plus a share of `MGET`, however many keys a call decides. The scripts overwrite a busy key \
         in place with `SETRANGE` (its expiry kept) and set a new expiry only when it moves.",
    );
    report.table(&t);

    report.progress("Redis instructions per decision (callgrind)");
    let instructions =
        redis_cost::instructions(bench.rt, &ALGORITHMS, roomy, redis_cost::Costs::One);
    match &instructions {
        Ok(rows) => {
            report.text(
                "Instructions Redis executes per decision, counted by callgrind (within a few percent from \
                 run to run, where timings on this VM move by a third): each algorithm's script sent exactly as its limiter sends \
                 it, at 1 decision a call (the plain path) and 16 or 50 (the batched path), for new keys \
                 (written with an expiry) and busy keys (decided again at once: overwritten in place). \
                 Everything the server does for a call counts, from reading the request to writing the \
                 reply; the kernel's share of the socket calls does not.",
            );
            report.table(&redis_cost::instructions_table(rows));
        }
        Err(e) => report.text(&format!("Instructions per decision: **skipped**: {e}.")),
    }

    // 6. Redis's own ceiling for batched calls, the client out of the way.
    report.progress("Redis's ceiling for batched calls");
    let gcra_plain = paths
        .configs
        .iter()
        .find(|c| c.0 == Algorithm::Gcra && !c.2)
        .ok_or("no plain GCRA limiter connected".to_owned());
    let (ceilings, gcra_ceiling) =
        match gcra_plain.and_then(|c| redis_cost::capture(bench.server, bench.rt, &c.4)) {
            Ok(call) => redis_cost::ceiling(bench.server, &call, report.scale()),
            Err(e) => (
                Table::with_headers([format!("ceiling not measured: {e}")]),
                Vec::new(),
            ),
        };
    report.text(
        "Redis's own ceiling for a batched call, with the client out of the way: `redis-benchmark` \
         (C, 4 connections, one call each in flight) sends script calls of 16 or 50 decisions on random \
         keys of 10 000 until Redis is saturated (best of 3). The bare scripts do only what any \
         script keeping per-key state must: read the clock, read the keys, write each one back. 50 \
         closed-loop callers can never put more than 50 decisions into one call.",
    );
    report.table(&ceilings);
    Inside {
        instructions,
        gcra_ceiling,
    }
}
