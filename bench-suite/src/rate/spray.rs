//! Keyed limiting under a key spray: memory and throughput under millions
//! of one-shot keys, weir's capped exact limiter against governor.

use crate::harness::alloc::{self, AllocStats};
use crate::harness::contest::{self, Spread};
use crate::harness::report::{Report, Table, thousands};
use std::num::NonZeroU32;
use std::time::{Duration, Instant};
use weir_limits::clock::ManualClock;
use weir_rate::{Gcra, KeyedLimiter, Quota};

/// Keys still sending after the spray, checked once more two hours later.
const LIVE_AFTER_SPRAY: u64 = 50;

/// One spray of `keys` one-shot keys on an hourly quota, on manual clocks
/// (1 µs between checks), then two hours of quiet, the idle keys forgotten
/// (weir: `evict_idle`; governor: `retain_recent` and `shrink_to_fit`) and
/// [`LIVE_AFTER_SPRAY`] keys checked again. Returns the nanoseconds per
/// sprayed check and the heap: peak growth, and what is still held (the
/// limiter is held until measured: what it keeps is the figure).
fn spray_once(weir: bool, keys: u64) -> (f64, AllocStats) {
    let per_hour = NonZeroU32::new(100).expect("non-zero");
    let two_hours = Duration::from_secs(2 * 3600);
    let spray = |advance: &dyn Fn(Duration), check: &dyn Fn(u64)| {
        let start = Instant::now();
        for key in 0..keys {
            advance(Duration::from_micros(1));
            check(key);
        }
        start.elapsed().as_nanos() as f64 / keys as f64
    };
    let ((ns, _weir, _governor), stats) = alloc::measure(|| {
        if weir {
            let clock = ManualClock::new();
            let limiter = KeyedLimiter::<u64, _, _>::with_clock(
                Gcra::new(Quota::per_hour(per_hour)),
                clock.clone(),
            );
            let ns = spray(&|d| clock.advance(d), &|key| {
                std::hint::black_box(limiter.allows(&key));
            });
            clock.advance(two_hours);
            limiter.evict_idle();
            (0..LIVE_AFTER_SPRAY).for_each(|key| {
                std::hint::black_box(limiter.allows(&key));
            });
            (ns, Some(limiter), None)
        } else {
            let clock = governor::clock::FakeRelativeClock::default();
            let limiter = governor::RateLimiter::dashmap_with_clock(
                governor::Quota::per_hour(per_hour),
                clock.clone(),
            );
            let ns = spray(&|d| clock.advance(d), &|key| {
                std::hint::black_box(limiter.check_key(&key).is_ok());
            });
            clock.advance(two_hours);
            limiter.retain_recent();
            limiter.shrink_to_fit();
            (0..LIVE_AFTER_SPRAY).for_each(|key| {
                std::hint::black_box(limiter.check_key(&key).is_ok());
            });
            (ns, None, Some(limiter))
        }
    });
    (ns, stats)
}

/// The key-spray table: memory and throughput under millions of one-shot
/// keys, weir's capped exact limiter (default capacity) against governor.
pub(super) fn spray(report: &mut Report) {
    let keys: u64 = report.scale().pick(1_000_000, 10_000_000);
    report.section("Keyed limiting under a key spray");
    report.text(&format!(
        "{} one-shot `u64` keys, each checked once on an hourly quota (100 per hour), 1 µs apart on manual clocks; then two hours \
         of quiet, the idle keys forgotten (weir `evict_idle`; governor `retain_recent` + `shrink_to_fit`) and {LIVE_AFTER_SPRAY} keys \
         checked again. weir's `KeyedLimiter` has its default capacity ({} keys; a key it forgets spills into a small sketch, so it \
         is never judged looser); governor's keyed limiter grows with the keys. Heap from the counting allocator; three repetitions \
         alternating the two, min / median / max.",
        thousands(keys),
        thousands(KeyedLimiter::<u64, Gcra>::DEFAULT_MAX_KEYS.get() as u64),
    ));
    let runs = contest::rotate(report, "key spray", 2, 3, |i, _| spray_once(i == 0, keys));
    let mb = |b: f64| {
        if b.abs() >= 1e6 {
            format!("{:.1} MB", b / 1e6)
        } else {
            format!("{:.0} KB", b / 1e3)
        }
    };
    let mut table =
        Table::new("limiter | ns per sprayed check | peak heap growth | held two hours later");
    for (i, name) in [
        "weir KeyedLimiter<Gcra> (default capacity)",
        "governor keyed (DashMap, GCRA)",
    ]
    .into_iter()
    .enumerate()
    {
        let spread = |f: fn(&(f64, AllocStats)) -> f64| contest::spreads(&runs, f)[i];
        let (ns, peak) = (
            spread(|r| r.0).show_each(|x| format!("{x:.0}")),
            spread(|r| r.1.peak_bytes as f64).show_each(mb),
        );
        table.row(format!(
            "{name} | {ns} | {peak} | {}",
            spread(|r| r.1.live_bytes as f64).show_each(mb)
        ));
    }
    let ns = |i: usize| runs[i].iter().map(|r| r.0).collect::<Vec<_>>();
    let ratio = Spread::of(&contest::paired(&ns(1), &ns(0))).show_each(|x| format!("{x:.2}×"));
    table.cells([
        "governor ÷ weir, per repetition".to_owned(),
        ratio,
        String::new(),
        String::new(),
    ]);
    report.table(&table);
}
