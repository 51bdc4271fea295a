//! Forced charges.
//!
//! A charge spends unconditionally, past the limit if need be, for work
//! already done. Counting charged units as served, the algorithm's bound
//! must still hold over every interval that ends at an allowed check: the
//! debt is what later checks wait out. Refunds (of checks and charges) are
//! counted by the same rules as above.

use super::refunds::{Spending, bucket_served, gcra_served};
use super::*;

/// One step of a charge scenario: after `gap` ns, a check of `cost`, a
/// charge of `charge` (up to three times the capacity), or a refund of an
/// earlier unrefunded spending picked by `pick`.
#[derive(Debug, Clone, Copy)]
struct ChargeStep {
    gap: u64,
    kind: u8,
    cost: u32,
    charge: u32,
    pick: usize,
}

fn charge_steps(max_gap: u64) -> impl Strategy<Value = Vec<ChargeStep>> {
    let step = (0..max_gap, 0u8..4, 1u32..4, 0u32..30, any::<usize>()).prop_map(
        |(gap, kind, cost, charge, pick)| ChargeStep {
            gap,
            kind,
            cost,
            charge,
            pick,
        },
    );
    proptest::collection::vec(step, 1..150)
}

/// A spending of a charge scenario: `check` tells a check from a charge.
#[derive(Debug, Clone, Copy)]
struct Spent {
    s: Spending,
    check: bool,
}

/// Plays `steps` (kind 0: refund, 1: charge, else a check; charges of
/// `charge · capacity / 10` units, so up to three times the capacity) and
/// returns every spending.
fn play_charges<L: Algorithm>(
    limiter: &L,
    start: u64,
    steps: &[ChargeStep],
) -> Result<Vec<Spent>, TestCaseError> {
    let mut state = limiter.new_state(start);
    let mut now = start;
    let mut spent: Vec<Spent> = Vec::new();
    for (seq, step) in steps.iter().enumerate() {
        now += step.gap;
        match step.kind {
            0 => {
                let open: Vec<usize> = (0..spent.len())
                    .filter(|&i| spent[i].s.refunded.is_none())
                    .collect();
                if let Some(&i) = open.get(step.pick % open.len().max(1)) {
                    limiter.refund(&mut state, now, spent[i].s.receipt);
                    spent[i].s.refunded = Some((seq, now));
                }
            }
            1 => {
                let cost =
                    u32::try_from(u64::from(step.charge) * u64::from(limiter.max_cost()) / 10)
                        .unwrap_or(u32::MAX);
                let receipt = limiter.charge(&mut state, now, cost);
                prop_assert_eq!((receipt.at_nanos(), receipt.cost()), (now, cost));
                if cost > 0 {
                    spent.push(Spent {
                        s: Spending {
                            seq,
                            at: now,
                            cost: u64::from(cost),
                            delay: 0,
                            receipt,
                            refunded: None,
                        },
                        check: false,
                    });
                }
            }
            _ => {
                let cost = step.cost.min(limiter.max_cost());
                let d = limiter.check(&mut state, now, cost, Mode::Consume).unwrap();
                if let Some(receipt) = d.receipt() {
                    spent.push(Spent {
                        s: Spending {
                            seq,
                            at: now,
                            cost: u64::from(cost),
                            delay: d.delay().as_nanos() as u64,
                            receipt,
                            refunded: None,
                        },
                        check: true,
                    });
                }
            }
        }
    }
    Ok(spent)
}

/// Checks `Σ served(i..=j) ≤ bound(t_j − t_i)` for every pair of
/// spendings whose later one is an allowed check.
fn check_bound_at_checks(
    spent: &[Spent],
    served: impl Fn(&Spending) -> u128,
    bound: impl Fn(u64) -> u128,
) -> Result<(), TestCaseError> {
    for i in 0..spent.len() {
        let mut sum = 0;
        for j in i..spent.len() {
            sum += served(&spent[j].s);
            let span = spent[j].s.at - spent[i].s.at;
            prop_assert!(
                !spent[j].check || sum <= bound(span),
                "{} > {} over {} ns from {}, ending at an allowed check",
                sum,
                bound(span),
                span,
                spent[i].s.at
            );
        }
    }
    Ok(())
}

/// What of `s` was served by the time of step `seq`: all of it, unless a
/// refund before then came while `charged(at, refund time)` says it still
/// counted.
fn net_before(s: &Spending, seq: usize, charged: impl Fn(u64, u64) -> bool) -> u64 {
    match s.refunded {
        Some((at_seq, when)) if at_seq < seq && charged(s.at, when) => 0,
        _ => s.cost,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// GCRA with charges: `Σ (cost·T − returned) ≤ burst·T + t` over every
    /// interval ending at an allowed check.
    #[test]
    fn gcra_charges_are_waited_out(
        limit in 1u32..20, window in 1u64..200, burst in 1u32..8, start in 0u64..10_000 * MS,
        steps in charge_steps(30 * MS),
    ) {
        let gcra = Gcra::new(quota(limit, window, burst));
        let t = u128::from(gcra.emission_interval().as_nanos() as u64);
        let spent = play_charges(&gcra, start, &steps)?;
        check_bound_at_checks(
            &spent,
            |s| gcra_served(s, t),
            |span| u128::from(burst) * t + u128::from(span),
        )?;
    }

    /// Token bucket and meter with charges: `burst + limit·t/window` over
    /// every interval ending at an allowed check, in `1/window` units.
    #[test]
    fn bucket_charges_are_waited_out(
        limit in 1u32..20, window in 1u64..200, burst in 1u32..8, start in 0u64..10_000 * MS,
        steps in charge_steps(30 * MS),
    ) {
        let q = quota(limit, window, burst);
        let w = u128::from(window * MS);
        let served = |s: &Spending| bucket_served(s, limit, w);
        let bound = |span: u64| u128::from(burst) * w + u128::from(limit) * u128::from(span);
        check_bound_at_checks(&play_charges(&TokenBucket::new(q), start, &steps)?, served, bound)?;
        check_bound_at_checks(&play_charges(&LeakyBucket::meter(q), start, &steps)?, served, bound)?;
    }

    /// Fixed window with charges: at every allowed check, its window has
    /// served at most the limit so far (charges and refunds before it
    /// included).
    #[test]
    fn fixed_window_charges_are_waited_out(
        limit in 1u32..8, window in 1u64..100, start in 0u64..10_000 * MS,
        steps in charge_steps(20 * MS),
    ) {
        let w = window * MS;
        let fw = FixedWindow::new(quota(limit, window, 1));
        let spent = play_charges(&fw, start, &steps)?;
        for check in spent.iter().filter(|c| c.check) {
            let served: u64 = spent
                .iter()
                .filter(|s| s.s.seq <= check.s.seq && s.s.at / w == check.s.at / w)
                .map(|s| net_before(&s.s, check.s.seq, |at, when| at / w == when / w))
                .sum();
            prop_assert!(served <= u64::from(limit), "{served} units in window {}", check.s.at / w);
        }
    }

    /// Sliding log with charges: at every allowed check at `t`, the window
    /// `(t − w, t]` has served at most the limit.
    #[test]
    fn sliding_log_charges_are_waited_out(
        limit in 1u32..8, window in 1u64..100, start in 0u64..10_000 * MS,
        steps in charge_steps(20 * MS),
    ) {
        let w = window * MS;
        let log = SlidingLog::new(quota(limit, window, 1));
        let spent = play_charges(&log, start, &steps)?;
        for check in spent.iter().filter(|c| c.check) {
            let end = check.s.at;
            let served: u64 = spent
                .iter()
                .filter(|s| s.s.seq <= check.s.seq && s.s.at + w > end)
                .map(|s| net_before(&s.s, check.s.seq, |at, when| when < at + w))
                .sum();
            prop_assert!(served <= u64::from(limit), "{served} units in ({}, {end}]", end.saturating_sub(w));
        }
    }

    /// Sliding-window counter with charges: right after every allowed
    /// check its estimate over the units served (charged ones included)
    /// is at most the limit.
    #[test]
    fn sliding_window_charges_are_waited_out(
        limit in 1u32..8, window in 2u64..100, n in 2u32..6, start in 0u64..10_000 * MS,
        steps in charge_steps(20 * MS),
    ) {
        let sw = SlidingWindow::try_new(quota(limit, window, 1), n).unwrap();
        let sub = sw.sub_window().as_nanos() as u64;
        let n = u64::from(n);
        let spent = play_charges(&sw, start, &steps)?;
        for check in spent.iter().filter(|c| c.check) {
            let (now, pos) = (check.s.at / sub, check.s.at % sub);
            let mut scaled = 0u128;
            for s in spent.iter().filter(|s| s.s.seq <= check.s.seq) {
                let served = net_before(&s.s, check.s.seq, |at, when| when / sub < at / sub + n);
                let age = now - s.s.at / sub;
                let weight = if age + 1 < n { sub } else if age + 1 == n { sub - pos } else { 0 };
                scaled += u128::from(served) * u128::from(weight);
            }
            prop_assert!(
                scaled <= u128::from(limit) * u128::from(sub),
                "estimate {} > {limit} at {}", scaled as f64 / sub as f64, check.s.at
            );
        }
    }

    /// Shaper with charges: a charge takes its `cost·T` of the queue, so a
    /// request admitted after spendings `i..j` leaves no earlier than the
    /// first of them started plus all their units' `T`s.
    #[test]
    fn shaper_charges_take_their_place_in_the_queue(
        limit in 1u32..20, window in 1u64..200, delay in 0u64..400, start in 0u64..10_000 * MS,
        steps in charge_steps(30 * MS),
    ) {
        let q = quota(limit, window, 1);
        let shaper = LeakyBucket::try_shaper(q, Duration::from_millis(delay)).unwrap();
        let t = q.emission_interval().as_nanos() as u64;
        let spent = play_charges(&shaper, start, &steps)?;
        for j in 0..spent.len() {
            if !spent[j].check {
                continue;
            }
            let leaves = spent[j].s.at + spent[j].s.delay;
            let mut units = 0;
            for i in (0..j).rev() {
                units += spent[i].s.cost;
                let started = spent[i].s.at + spent[i].s.delay;
                prop_assert!(
                    leaves >= started + units * t,
                    "leaves at {leaves}, before {started} + {units} units of {t} ns"
                );
            }
        }
    }

    /// A charge refunded at the instant it was made changes no later
    /// decision, for every algorithm whose refund returns a spending that
    /// still counts (all but the shaper), and for limits checked together.
    #[test]
    fn a_charge_refunded_at_once_changes_no_decision(
        limit in 1u32..10, window in 1u64..200, burst in 1u32..6, start in 0u64..10_000 * MS,
        reqs in proptest::collection::vec((0u64..40 * MS, 1u32..4, proptest::option::of(0u32..40)), 1..120),
    ) {
        fn same<L: Algorithm>(l: &L, start: u64, reqs: &[(u64, u32, Option<u32>)]) -> Result<(), TestCaseError> {
            let (mut plain, mut charged) = (l.new_state(start), l.new_state(start));
            let mut now = start;
            for (i, &(gap, cost, charge)) in reqs.iter().enumerate() {
                now += gap;
                if let Some(c) = charge {
                    let receipt = l.charge(&mut charged, now, c);
                    l.refund(&mut charged, now, receipt);
                }
                let cost = cost.min(l.max_cost());
                let a = l.check(&mut plain, now, cost, Mode::Consume).unwrap();
                let b = l.check(&mut charged, now, cost, Mode::Consume).unwrap();
                prop_assert_eq!(a, b, "decision {} differs", i);
            }
            Ok(())
        }
        let q = quota(limit, window, burst);
        same(&Gcra::new(q), start, &reqs)?;
        same(&TokenBucket::new(q), start, &reqs)?;
        same(&LeakyBucket::meter(q), start, &reqs)?;
        same(&FixedWindow::new(q), start, &reqs)?;
        same(&SlidingLog::new(q), start, &reqs)?;
        same(&SlidingWindow::try_new(quota(limit, window * 3, burst), 3).unwrap(), start, &reqs)?;
        same(&(Gcra::new(q), FixedWindow::new(quota(limit * 3, window * 5, 1))), start, &reqs)?;
        same(&AllOf::new(vec![Gcra::new(q), Gcra::new(quota(limit * 2, window * 7, burst))]), start, &reqs)?;
    }

    /// Charges of any size at any time, refunded at any later time, never
    /// panic, even at the ends of the clock's and the counts' ranges.
    #[test]
    fn charges_of_any_size_at_any_time_never_panic(
        times in proptest::collection::vec(any::<u64>(), 1..40), costs in proptest::collection::vec(any::<u32>(), 1..40),
    ) {
        let q = Quota::try_new(u32::MAX, Duration::from_nanos(u64::MAX)).unwrap();
        let tiny = Quota::try_new(3, Duration::from_nanos(1)).unwrap();
        fn feed<L: Forgettable>(l: &L, times: &[u64], costs: &[u32]) {
            let mut s = l.new_state(times[0]);
            let mut last = None;
            for (i, &t) in times.iter().enumerate() {
                let cost = costs[i % costs.len()];
                if let Some(receipt) = last.take() {
                    l.refund(&mut s, t, receipt);
                }
                last = Some(l.charge(&mut s, t, cost));
                let _ = l.check(&mut s, t, cost.min(l.max_cost()), Mode::Consume);
                let _ = (l.is_idle(&s, t), l.idle_at(&s, t));
            }
        }
        for q in [q, tiny] {
            feed(&FixedWindow::new(q), &times, &costs);
            feed(&SlidingLog::new(q), &times, &costs);
            feed(&TokenBucket::new(q), &times, &costs);
            feed(&LeakyBucket::meter(q), &times, &costs);
            feed(&LeakyBucket::try_shaper(q, Duration::MAX).unwrap_or_else(|_| LeakyBucket::meter(q)), &times, &costs);
            feed(&Gcra::new(q), &times, &costs);
            feed(&AllOf::new(vec![Gcra::new(q), Gcra::new(tiny)]), &times, &costs);
        }
        feed(&SlidingWindow::try_new(q, 60).unwrap(), &times, &costs);
    }
}

/// The containers charge too: a keyed key and a single limiter go into
/// debt, a refund of the charge's receipt at once takes it back, and the
/// sketch raises the key's cells.
#[test]
fn containers_charge_and_refund_charges() {
    let clock = ManualClock::new();
    let q = quota(2, 1000, 2);
    let keyed = KeyedLimiter::<String, _, _>::with_clock(Gcra::new(q), clock.clone());
    let charged = keyed.charge("a", 5);
    assert_eq!(keyed.len(), 1, "a charged key is remembered");
    assert!(!keyed.check("a").is_allowed());
    assert!(keyed.check("b").is_allowed());
    keyed.refund("a", &charged);
    assert!(keyed.check("a").is_allowed());
    // A charge of nothing is no spending.
    keyed.charge("c", 0);
    assert_eq!(keyed.len(), 2);

    let single = weir_rate::RateLimiter::with_clock(
        AllOf::new(vec![Gcra::new(q), Gcra::new(quota(10, 10_000, 10))]),
        clock.clone(),
    );
    let charged = single.charge(3);
    assert!(!single.check().is_allowed());
    single.refund(&charged);
    assert!(single.check().is_allowed());
    clock.advance(Duration::from_secs(1));
    single.charge(25); // 15 units past the per-10-seconds limit's burst
    clock.advance(Duration::from_secs(13));
    // The per-second limit has been paid off by now (TAT 13.5 s), the
    // other not (TAT 26 s, tolerance 10 s).
    assert!(
        !single.check().is_allowed(),
        "the longer limit's debt binds"
    );

    let sketch = SketchLimiter::with_clock(q, Shape::rows::<2, 64>().with_seed(3), clock.clone());
    sketch.charge(&"a", u32::MAX);
    assert!(!sketch.check(&"a").is_allowed());
    clock.advance(Duration::from_secs(3600));
    assert!(!sketch.check(&"a").is_allowed(), "a huge debt is kept");
}
