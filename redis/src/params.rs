//! What a limit's script takes from its algorithm value: the value's own
//! step (GCRA's emission interval, the sliding window's sub-window) and
//! quota, printed exactly for the script's doubles, so Redis and
//! in-process limiting cannot drift apart.

use weir_primitives::time::duration_to_nanos as nanos;
use weir_store::{Kind, Limit};

/// The script's parameters (`ARGV[1..P]`) of `limit`, from its algorithm
/// value.
pub(crate) fn params(limit: &Limit) -> Vec<String> {
    let q = &limit.quota();
    // Microseconds with their fraction, printed exactly (shortest
    // round-trip form) for the script's doubles.
    let us = |ns: f64| format!("{}", ns / 1000.0);
    match limit.kind() {
        // Refill at exactly limit / window, as `TokenBucket` does: ns
        // per token with its fraction.
        Kind::TokenBucket => vec![
            format!("{}", nanos(q.window()) as f64 / f64::from(q.limit())),
            q.burst().to_string(),
        ],
        // The value's own emission interval (whole ns).
        Kind::Gcra { emission_interval } => {
            vec![nanos(emission_interval).to_string(), q.burst().to_string()]
        }
        Kind::FixedWindow => vec![us(nanos(q.window()) as f64), q.limit().to_string()],
        // The value's own whole-ns sub-windows.
        Kind::SlidingWindow {
            counters,
            sub_window,
        } => vec![
            us(nanos(sub_window) as f64),
            q.limit().to_string(),
            counters.to_string(),
        ],
    }
}
