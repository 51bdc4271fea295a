//! Refunds.
//!
//! A refund names the spending it gives back. Each algorithm documents when
//! a refund really returns it; these tests count a refunded spending as not
//! served exactly then (in part, for the buckets), and check that the
//! algorithm's bound still holds for what was served.

use super::*;

/// One step of a refund scenario: after `gap` ns, a check of `cost`, or
/// (when `refund`) a refund of the earlier allowed, unrefunded spending
/// picked by `pick`.
#[derive(Debug, Clone, Copy)]
struct Step {
    gap: u64,
    refund: bool,
    cost: u32,
    pick: usize,
}

fn steps(max_gap: u64) -> impl Strategy<Value = Vec<Step>> {
    let step =
        (0..max_gap, 0u8..3, 1u32..4, any::<usize>()).prop_map(|(gap, kind, cost, pick)| Step {
            gap: if kind == 1 { 0 } else { gap },
            refund: kind == 0,
            cost,
            pick,
        });
    proptest::collection::vec(step, 1..150)
}

/// An allowed spending: its place in the sequence of steps, when it was
/// charged, its cost, its shaper delay, its receipt, and the step and time
/// of its refund, if any.
#[derive(Debug, Clone, Copy)]
pub(super) struct Spending {
    pub(super) seq: usize,
    pub(super) at: u64,
    pub(super) cost: u64,
    pub(super) delay: u64,
    pub(super) receipt: Receipt,
    pub(super) refunded: Option<(usize, u64)>,
}

/// Plays `steps` from `start` and returns every allowed spending (each
/// with a receipt for what it spent, charged at its own time).
fn play<L: Algorithm>(
    limiter: &L,
    start: u64,
    steps: &[Step],
) -> Result<Vec<Spending>, TestCaseError> {
    let mut state = limiter.new_state(start);
    let mut now = start;
    let mut spent: Vec<Spending> = Vec::new();
    for (seq, step) in steps.iter().enumerate() {
        now += step.gap;
        if step.refund {
            let open: Vec<usize> = (0..spent.len())
                .filter(|&i| spent[i].refunded.is_none())
                .collect();
            if let Some(&i) = open.get(step.pick % open.len().max(1)) {
                limiter.refund(&mut state, now, spent[i].receipt);
                spent[i].refunded = Some((seq, now));
            }
            continue;
        }
        let cost = step.cost.min(limiter.max_cost());
        let d = limiter.check(&mut state, now, cost, Mode::Consume).unwrap();
        if let Some(receipt) = d.receipt() {
            prop_assert_eq!((receipt.at_nanos(), receipt.cost()), (now, cost));
            spent.push(Spending {
                seq,
                at: now,
                cost: u64::from(cost),
                delay: d.delay().as_nanos() as u64,
                receipt,
                refunded: None,
            });
        } else {
            prop_assert!(
                !d.is_allowed() || cost == 0,
                "allowed {} without a receipt",
                cost
            );
        }
    }
    Ok(spent)
}

/// What of `s` was served: all of it, unless a refund came while
/// `charged(at, refund time)` (the algorithm's documented rule) says the
/// spending still counted, so the refund gave it back.
fn net(s: &Spending, charged: impl Fn(u64, u64) -> bool) -> u64 {
    match s.refunded {
        Some((_, when)) if charged(s.at, when) => 0,
        _ => s.cost,
    }
}

/// What a GCRA spending still counts for, in ns of schedule (`T` = `t` ns a
/// unit): its `cost·T`, less what a refund at `when` returned (the part not
/// yet elapsed since it was charged).
pub(super) fn gcra_served(s: &Spending, t: u128) -> u128 {
    let whole = u128::from(s.cost) * t;
    let returned = s.refunded.map_or(0, |(_, when)| {
        (u128::from(s.at) + whole)
            .saturating_sub(u128::from(when))
            .min(whole)
    });
    whole - returned
}

/// What a bucket spending still counts for, in `1/window` units (`w` ns a
/// window): its cost, less what a refund at `when` returned (the tokens not
/// yet refilled at `limit` per window).
pub(super) fn bucket_served(s: &Spending, limit: u32, w: u128) -> u128 {
    let whole = u128::from(s.cost) * w;
    let returned = s.refunded.map_or(0, |(_, when)| {
        whole.saturating_sub(u128::from(limit) * u128::from(when - s.at))
    });
    whole - returned
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Sliding log: a refund returns its spending while the spending is in
    /// the log (less than a window old). No half-open interval of one
    /// window, `(x − w, x]`, serves more than the limit.
    #[test]
    fn sliding_log_refunds_keep_every_window_within_the_limit(
        limit in 1u32..8, window in 1u64..100, start in 0u64..10_000 * MS, steps in steps(60 * MS),
    ) {
        let w = window * MS;
        let log = SlidingLog::new(quota(limit, window, 1));
        let spent = play(&log, start, &steps)?;
        for end in spent.iter().map(|s| s.at) {
            let served: u64 = spent
                .iter()
                .filter(|s| s.at + w > end && s.at <= end)
                .map(|s| net(s, |at, when| when < at + w))
                .sum();
            prop_assert!(served <= u64::from(limit), "{served} units served in ({}, {end}]", end.saturating_sub(w));
        }
    }

    /// Fixed window: a refund returns its spending only within the same
    /// window. No window serves more than the limit.
    #[test]
    fn fixed_window_refunds_keep_every_window_within_the_limit(
        limit in 1u32..8, window in 1u64..100, start in 0u64..10_000 * MS, steps in steps(60 * MS),
    ) {
        let w = window * MS;
        let fw = FixedWindow::new(quota(limit, window, 1));
        let spent = play(&fw, start, &steps)?;
        let mut per_window = std::collections::BTreeMap::new();
        for s in &spent {
            *per_window.entry(s.at / w).or_insert(0) += net(s, |at, when| at / w == when / w);
        }
        for (k, served) in per_window {
            prop_assert!(served <= u64::from(limit), "{served} units served in window {k}");
        }
    }

    /// Sliding-window counter: a refund returns its spending while the
    /// spending's sub-window is one of the `N` that count. Its documented
    /// promise is that, right after any allowed check at time `t`, its
    /// estimate of the window ending at `t` (the `N − 1` newest sub-windows
    /// in full, the oldest by the part of it still inside the window),
    /// computed over the units served and not returned by then, is at most
    /// the limit. (That in turn bounds any `N − 1` aligned sub-windows by
    /// the limit and any window-long interval by twice the limit.)
    #[test]
    fn sliding_window_refunds_keep_the_estimate_within_the_limit(
        limit in 1u32..8, window in 2u64..100, n in 2u32..6, start in 0u64..10_000 * MS,
        steps in steps(60 * MS),
    ) {
        let sw = SlidingWindow::try_new(quota(limit, window, 1), n).unwrap();
        let sub = sw.sub_window().as_nanos() as u64;
        let n = u64::from(n);
        let spent = play(&sw, start, &steps)?;
        for check in &spent {
            let (now, pos) = (check.at / sub, check.at % sub);
            let mut scaled = 0u128;
            for s in spent.iter().filter(|s| s.seq <= check.seq) {
                let served = match s.refunded {
                    Some((seq, when)) if seq < check.seq && when / sub < s.at / sub + n => 0,
                    _ => s.cost,
                };
                let age = now - s.at / sub;
                let weight = if age + 1 < n { sub } else if age + 1 == n { sub - pos } else { 0 };
                scaled += u128::from(served) * u128::from(weight);
            }
            prop_assert!(
                scaled <= u128::from(limit) * u128::from(sub),
                "estimate {} > {limit} at {}", scaled as f64 / sub as f64, check.at
            );
        }
    }
}

/// Checks `Σ served(i..=j) ≤ bound(t_j − t_i)` for every pair of
/// spendings, `served` and `bound` in a common scale.
fn check_served_bound(
    spent: &[Spending],
    served: impl Fn(&Spending) -> u128,
    bound: impl Fn(u64) -> u128,
) -> Result<(), TestCaseError> {
    for i in 0..spent.len() {
        let mut sum = 0;
        for j in i..spent.len() {
            sum += served(&spent[j]);
            let span = spent[j].at - spent[i].at;
            prop_assert!(
                sum <= bound(span),
                "{} > {} over {} ns from {}",
                sum,
                bound(span),
                span,
                spent[i].at
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// GCRA: a refund returns what of the spending's `cost·T` has not
    /// elapsed since it was charged (a spending ages out after `cost·T`).
    /// At most `burst + t/T` units are served in any interval of length
    /// `t`, in `T`ths: `Σ (cost·T − returned) ≤ burst·T + t`.
    #[test]
    fn gcra_refunds_keep_burst_plus_span_over_interval(
        limit in 1u32..20, window in 1u64..200, burst in 1u32..8, start in 0u64..10_000 * MS,
        steps in steps(30 * MS),
    ) {
        let gcra = Gcra::new(quota(limit, window, burst));
        let t = u128::from(gcra.emission_interval().as_nanos() as u64);
        let spent = play(&gcra, start, &steps)?;
        check_served_bound(
            &spent,
            |s| gcra_served(s, t),
            |span| u128::from(burst) * t + u128::from(span),
        )?;
    }

    /// Token bucket and leaky-bucket meter: a refund returns what of its
    /// tokens the bucket has not refilled since they were taken, at most
    /// `cost − limit·elapsed/window`. At most `burst + limit·t/window` units
    /// are served in any interval of length `t`, in `1/window` units.
    #[test]
    fn bucket_refunds_keep_burst_plus_rate(
        limit in 1u32..20, window in 1u64..200, burst in 1u32..8, start in 0u64..10_000 * MS,
        steps in steps(30 * MS),
    ) {
        let q = quota(limit, window, burst);
        let w = u128::from(window * MS);
        let served = |s: &Spending| bucket_served(s, limit, w);
        let bound = |span: u64| u128::from(burst) * w + u128::from(limit) * u128::from(span);
        check_served_bound(&play(&TokenBucket::new(q), start, &steps)?, served, bound)?;
        check_served_bound(&play(&LeakyBucket::meter(q), start, &steps)?, served, bound)?;
    }

    /// Shaper: every admitted request has been told when to leave, so a
    /// refund returns nothing; the units still served leave at least `T`
    /// apart.
    #[test]
    fn shaper_refunds_never_crowd_the_departures(
        limit in 1u32..20, window in 1u64..200, delay in 0u64..200, start in 0u64..10_000 * MS,
        steps in steps(30 * MS),
    ) {
        let q = quota(limit, window, 1);
        let shaper = LeakyBucket::try_shaper(q, Duration::from_millis(delay)).unwrap();
        let t = q.emission_interval().as_nanos() as u64;
        let mut releases: Vec<u64> = play(&shaper, start, &steps)?
            .iter()
            .flat_map(|s| (0..s.cost).map(move |k| s.at + s.delay + k * t))
            .collect();
        releases.sort_unstable();
        for pair in releases.windows(2) {
            prop_assert!(pair[1] >= pair[0] + t, "units released {} ns apart", pair[1] - pair[0]);
        }
    }
}
