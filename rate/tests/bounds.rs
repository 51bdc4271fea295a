//! Property tests: no algorithm allows more than its documented bound in any
//! interval, peeking changes nothing, and the sketch-backed keyed limiter
//! never allows a key more than the exact one.

use proptest::prelude::*;
use std::num::NonZeroU32;
use std::time::Duration;
use weir_limits::clock::ManualClock;
use weir_rate::clock::Timestamp;
use weir_rate::{
    AllOf, FixedWindow, Gcra, KeyedLimiter, LeakyBucket, Limiter, Mode, Quota, Receipt,
    SketchLimiter, SlidingLog, SlidingWindow, TokenBucket,
};
use weir_rate::{Layout, Shape};

const MS: u64 = 1_000_000;

fn quota(limit: u32, window_ms: u64, burst: u32) -> Quota {
    Quota::try_new(limit, Duration::from_millis(window_ms))
        .unwrap()
        .try_burst(burst)
        .unwrap()
}

/// Feed `(gap, cost)` requests; returns the allowed `(time, cost)`.
fn run<L: Limiter>(limiter: &L, start: u64, requests: &[(u64, u32)]) -> Vec<(u64, u64)> {
    let mut state = limiter.new_state(start);
    let mut now = start;
    let mut allowed = Vec::new();
    for &(gap, cost) in requests {
        now += gap;
        let cost = cost.min(limiter.capacity());
        let d = limiter.check(&mut state, now, cost, Mode::Consume).unwrap();
        if d.is_allowed() {
            allowed.push((now, u64::from(cost)));
        }
    }
    allowed
}

/// Largest total allowed in any half-open interval `[t, t + len)`.
fn max_in_window(allowed: &[(u64, u64)], len: u64) -> u64 {
    let mut best = 0;
    for (i, &(t, _)) in allowed.iter().enumerate() {
        let sum: u64 = allowed[i..]
            .iter()
            .take_while(|&&(u, _)| u < t + len)
            .map(|&(_, c)| c)
            .sum();
        best = best.max(sum);
    }
    best
}

/// Checks `total(i..=j) ≤ bound(t_j − t_i)` for every pair.
fn check_rate_bound(allowed: &[(u64, u64)], bound: impl Fn(u64) -> f64) -> Result<(), String> {
    for i in 0..allowed.len() {
        let mut sum = 0;
        for j in i..allowed.len() {
            sum += allowed[j].1;
            let span = allowed[j].0 - allowed[i].0;
            if sum as f64 > bound(span) + 1e-9 {
                return Err(format!("{sum} units in {span} ns > {}", bound(span)));
            }
        }
    }
    Ok(())
}

fn requests() -> impl Strategy<Value = Vec<(u64, u32)>> {
    proptest::collection::vec((0u64..300 * MS, 1u32..4), 1..200)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn fixed_window_allows_at_most_twice_the_limit(
        limit in 1u32..20, window in 1u64..2000, start in 0u64..10_000 * MS, reqs in requests(),
    ) {
        let q = quota(limit, window, 1);
        let allowed = run(&FixedWindow::new(q), start, &reqs);
        prop_assert!(max_in_window(&allowed, window * MS) <= 2 * u64::from(limit));
    }

    #[test]
    fn sliding_log_is_exact(
        limit in 1u32..20, window in 1u64..2000, start in 0u64..10_000 * MS, reqs in requests(),
    ) {
        let q = quota(limit, window, 1);
        let allowed = run(&SlidingLog::new(q), start, &reqs);
        prop_assert!(max_in_window(&allowed, window * MS) <= u64::from(limit));
    }

    #[test]
    fn sliding_window_allows_at_most_twice_the_limit(
        limit in 1u32..20, window in 1u64..2000, n in 2u32..20, start in 0u64..10_000 * MS,
        reqs in requests(),
    ) {
        let q = quota(limit, window * 60, 1);
        let sw = SlidingWindow::try_new(q, n).unwrap();
        let effective = sw.sub_window_nanos() * u64::from(n - 1);
        let allowed = run(&sw, start, &reqs);
        prop_assert!(max_in_window(&allowed, effective) <= 2 * u64::from(limit));
    }

    #[test]
    fn token_bucket_and_meter_allow_at_most_burst_plus_rate(
        limit in 1u32..50, window in 1u64..3000, burst in 1u32..20, start in 0u64..10_000 * MS,
        reqs in requests(),
    ) {
        let q = quota(limit, window, burst);
        let rate = f64::from(limit) / (window * MS) as f64;
        let bound = |span: u64| f64::from(burst) + rate * span as f64;
        let tb = run(&TokenBucket::new(q), start, &reqs);
        prop_assert!(check_rate_bound(&tb, bound).is_ok(), "{:?}", check_rate_bound(&tb, bound));
        let meter = run(&LeakyBucket::meter(q), start, &reqs);
        prop_assert_eq!(&meter, &tb);
    }

    #[test]
    fn gcra_allows_at_most_burst_plus_span_over_interval(
        limit in 1u32..50, window in 1u64..3000, burst in 1u32..20, start in 0u64..10_000 * MS,
        reqs in requests(),
    ) {
        let q = quota(limit, window, burst);
        let gcra = Gcra::new(q);
        let t = gcra.interval_nanos() as f64;
        let allowed = run(&gcra, start, &reqs);
        let bound = |span: u64| f64::from(burst) + span as f64 / t;
        prop_assert!(check_rate_bound(&allowed, bound).is_ok(), "{:?}", check_rate_bound(&allowed, bound));
    }

    #[test]
    fn shaper_releases_units_at_the_rate(
        limit in 1u32..50, window in 1u64..3000, delay in 0u64..2000, start in 0u64..10_000 * MS,
        reqs in requests(),
    ) {
        let q = quota(limit, window, 1);
        let shaper = LeakyBucket::try_shaper(q, Duration::from_millis(delay)).unwrap();
        let t = q.emission_interval_nanos();
        let mut state = shaper.new_state(start);
        let mut now = start;
        let mut releases = Vec::new();
        for &(gap, cost) in &reqs {
            now += gap;
            let cost = cost.min(shaper.capacity());
            let d = shaper.check(&mut state, now, cost, Mode::Consume).unwrap();
            if d.is_allowed() {
                prop_assert!(d.delay() <= Duration::from_millis(delay));
                let first = now + d.delay().as_nanos() as u64;
                for k in 0..u64::from(cost) {
                    releases.push(first + k * t);
                }
            }
        }
        for pair in releases.windows(2) {
            prop_assert!(pair[1] >= pair[0] + t, "units released {} ns apart", pair[1] - pair[0]);
        }
    }

    #[test]
    fn peeking_changes_nothing(limit in 1u32..10, burst in 1u32..10, reqs in requests()) {
        let q = quota(limit, 1000, burst);
        fn both<L: Limiter>(l: &L, reqs: &[(u64, u32)]) -> Result<(), TestCaseError> {
            let (mut a, mut b) = (l.new_state(0), l.new_state(0));
            let mut now = 0;
            for &(gap, cost) in reqs {
                now += gap;
                let cost = cost.min(l.capacity());
                let peek = l.check(&mut b, now, cost, Mode::Peek).unwrap();
                let x = l.check(&mut a, now, cost, Mode::Consume).unwrap();
                let y = l.check(&mut b, now, cost, Mode::Consume).unwrap();
                prop_assert_eq!(x, y);
                prop_assert_eq!(peek.is_allowed(), x.is_allowed());
            }
            Ok(())
        }
        both(&FixedWindow::new(q), &reqs)?;
        both(&SlidingLog::new(q), &reqs)?;
        both(&SlidingWindow::try_new(q, 4).unwrap(), &reqs)?;
        both(&TokenBucket::new(q), &reqs)?;
        both(&LeakyBucket::try_shaper(q, Duration::from_millis(500)).unwrap(), &reqs)?;
        both(&Gcra::new(q), &reqs)?;
    }

    #[test]
    fn backwards_time_and_extreme_values_never_panic(
        times in proptest::collection::vec(any::<u64>(), 1..50), cost in 0u32..5,
    ) {
        let q = Quota::try_new(u32::MAX, Duration::from_nanos(u64::MAX)).unwrap();
        let tiny = Quota::try_new(3, Duration::from_nanos(1)).unwrap();
        fn feed<L: Limiter>(l: &L, times: &[u64], cost: u32) {
            let mut s = l.new_state(times[0]);
            let mut last = None;
            for &t in times {
                // Refund the previous check's spending (if any) at this
                // time, which may be before or long after it.
                if let Some(receipt) = last.take() {
                    l.refund(&mut s, t, receipt);
                }
                if let Ok(d) = l.check(&mut s, t, cost, Mode::Consume) {
                    last = d.receipt();
                }
                let _ = l.is_idle(&s, t);
            }
        }
        for q in [q, tiny] {
            feed(&FixedWindow::new(q), &times, cost);
            feed(&SlidingLog::new(q), &times, cost);
            feed(&TokenBucket::new(q), &times, cost);
            feed(&LeakyBucket::meter(q), &times, cost);
            feed(&LeakyBucket::try_shaper(q, Duration::MAX).unwrap_or_else(|_| LeakyBucket::meter(q)), &times, cost);
            feed(&Gcra::new(q), &times, cost);
        }
        feed(&SlidingWindow::try_new(q, 60).unwrap(), &times, cost);
    }

    #[test]
    fn sketch_never_allows_more_than_exact(
        reqs in proptest::collection::vec((0u64..50 * MS, 0u32..40), 1..300),
        limit in 1u32..10, burst in 1u32..5, slots in 1usize..16, seed: u64,
    ) {
        let q = quota(limit, 1000, burst);
        let clock = ManualClock::new();
        let exact = KeyedLimiter::with_clock(Gcra::new(q), clock.clone());
        let shape = Shape::try_new(2, slots, Layout::Rows).unwrap().with_seed(seed);
        let sketch = SketchLimiter::with_clock(q, shape, clock.clone());
        let mut exact_allowed = [0u32; 40];
        let mut sketch_allowed = [0u32; 40];
        for &(gap, key) in &reqs {
            clock.advance(Duration::from_nanos(gap));
            exact_allowed[key as usize] += u32::from(exact.check(&key).is_allowed());
            sketch_allowed[key as usize] += u32::from(sketch.check(&key).is_allowed());
            prop_assert!(sketch_allowed[key as usize] <= exact_allowed[key as usize], "key {key}");
        }
    }
}

#[test]
fn costs_beyond_capacity_are_never_allowed_not_denied() {
    let q = quota(10, 1000, 4);
    assert_eq!(Gcra::new(q).capacity(), 4);
    assert_eq!(TokenBucket::new(q).capacity(), 4);
    assert_eq!(FixedWindow::new(q).capacity(), 10);
    let shaper = LeakyBucket::try_shaper(q, Duration::from_millis(250)).unwrap();
    assert_eq!(shaper.capacity(), 3);
    let gcra = Gcra::new(q);
    let mut s = gcra.new_state(0);
    let err = gcra.check(&mut s, 0, 5, Mode::Consume).unwrap_err();
    assert_eq!((err.cost, err.capacity), (5, 4));
    assert!(err.to_string().contains("never"));
}

#[test]
fn changing_the_quota_grants_no_burst() {
    let clock = ManualClock::new();
    let small = Quota::per_second(NonZeroU32::new(10).unwrap());
    let big = Quota::per_second(NonZeroU32::new(100).unwrap());
    let limiter = weir_rate::RateLimiter::with_clock(Gcra::new(small), clock.clone());
    assert_eq!((0..20).filter(|_| limiter.check().is_allowed()).count(), 10);
    limiter.set_limit(Gcra::new(big));
    // A second of debt stays a second of debt: nothing until it is paid.
    assert!(!limiter.check().is_allowed());
    clock.advance(Duration::from_millis(10));
    assert_eq!((0..20).filter(|_| limiter.check().is_allowed()).count(), 1);

    let keyed = KeyedLimiter::with_clock(TokenBucket::new(small), clock.clone());
    assert_eq!((0..20).filter(|_| keyed.check(&1).is_allowed()).count(), 10);
    keyed.set_limit(TokenBucket::new(big));
    // Ten tokens spent stay spent out of the new hundred.
    assert_eq!(
        (0..200).filter(|_| keyed.check(&1).is_allowed()).count(),
        90
    );

    let sketch = SketchLimiter::with_clock(
        small,
        Shape::try_new(2, 64, Layout::Rows).unwrap().with_seed(1),
        clock.clone(),
    );
    assert_eq!(
        (0..20).filter(|_| sketch.check(&1).is_allowed()).count(),
        10
    );
    sketch.set_limit(big);
    assert!(!sketch.check(&1).is_allowed());
    assert_eq!(sketch.quota(), big);
}

#[test]
fn shadow_mode_lets_everything_through_but_reports_it() {
    let clock = ManualClock::new();
    let q = Quota::per_second(NonZeroU32::new(2).unwrap());
    let limiter = weir_rate::RateLimiter::with_clock(SlidingLog::new(q), clock.clone());
    limiter.set_shadow(true);
    let decisions: Vec<_> = (0..4).map(|_| limiter.check()).collect();
    assert!(decisions.iter().all(|d| d.is_allowed()));
    assert_eq!(decisions.iter().filter(|d| d.is_conforming()).count(), 2);
    limiter.set_shadow(false);
    assert!(!limiter.check().is_allowed());
}

#[test]
fn keyed_limiter_forgets_idle_keys_by_itself() {
    let clock = ManualClock::new();
    let q = Quota::per_second(NonZeroU32::new(5).unwrap());
    let keyed = KeyedLimiter::with_shards(Gcra::new(q), clock.clone(), 1);
    for k in 0..1000u32 {
        assert!(keyed.check(&k).is_allowed());
        clock.advance(Duration::from_millis(10));
    }
    // Only keys seen within the last ~200 ms (one burst's worth) are live;
    // sweeps on growth keep the map far below the 1000 keys seen.
    assert!(keyed.len() < 200, "{} keys kept", keyed.len());
    clock.advance(Duration::from_secs(1));
    assert_eq!(keyed.evict_idle(), 0);
}

#[test]
fn decisions_carry_retry_and_reset_for_every_algorithm() {
    let q = quota(4, 1000, 4);
    fn exhaust<L: Limiter>(l: &L) -> weir_rate::Decision {
        let mut s = l.new_state(0);
        loop {
            let d = l.check(&mut s, 0, 1, Mode::Consume).unwrap();
            if !d.is_allowed() {
                return d;
            }
        }
    }
    // The sliding-window counter remembers a sub-window for up to two
    // sub-windows (here N = 2: two windows); the others within one window.
    let two = Duration::from_secs(2);
    for (name, d) in [
        ("fixed", exhaust(&FixedWindow::new(q))),
        ("log", exhaust(&SlidingLog::new(q))),
        ("sliding", exhaust(&SlidingWindow::try_new(q, 2).unwrap())),
        ("token", exhaust(&TokenBucket::new(q))),
        ("gcra", exhaust(&Gcra::new(q))),
    ] {
        assert_eq!(d.status(), Some(429), "{name}");
        assert_eq!(d.remaining(), 0, "{name}");
        let retry = d.retry_after().unwrap();
        assert!(retry > Duration::ZERO && retry <= two, "{name}: {retry:?}");
        assert!(d.reset_after() <= two && d.reset_after() >= retry, "{name}");
        if name != "sliding" {
            assert!(d.reset_after() <= two / 2, "{name}");
        }
    }
}

/// At the end of the clock's range (a far-future or hostile timestamp) an
/// algorithm whose bookkeeping would pass `u64::MAX` denies: it never
/// forgets a cost and lets everything through.
#[test]
fn the_end_of_time_never_disables_a_limit() {
    let q = quota(4, 1000, 4);
    fn allowed_at_once<L: Limiter>(l: &L, now: u64) -> u32 {
        let mut s = l.new_state(now);
        (0..100)
            .filter(|_| l.check(&mut s, now, 1, Mode::Consume).unwrap().is_allowed())
            .count() as u32
    }
    let shaper = LeakyBucket::try_shaper(q, Duration::from_millis(500)).unwrap();
    for now in [
        u64::MAX,
        u64::MAX - 1,
        u64::MAX - 300 * MS,
        u64::MAX - 3000 * MS,
    ] {
        for (name, allowed, capacity) in [
            ("fixed", allowed_at_once(&FixedWindow::new(q), now), 4),
            ("log", allowed_at_once(&SlidingLog::new(q), now), 4),
            (
                "sliding",
                allowed_at_once(&SlidingWindow::try_new(q, 2).unwrap(), now),
                4,
            ),
            ("token", allowed_at_once(&TokenBucket::new(q), now), 4),
            ("gcra", allowed_at_once(&Gcra::new(q), now), 4),
            ("leaky", allowed_at_once(&LeakyBucket::meter(q), now), 4),
            ("shaper", allowed_at_once(&shaper, now), shaper.capacity()),
        ] {
            assert!(
                allowed <= capacity,
                "{name} at {now}: allowed {allowed} of 100 at one instant (capacity {capacity})"
            );
        }
    }
}

/// Shrinking a quota at run time below what a key has already spent leaves
/// it with nothing remaining: a denial, never an arithmetic panic.
#[test]
fn shrinking_a_quota_below_what_was_spent_denies_without_panicking() {
    use weir_limits::clock::ManualClock;
    use weir_rate::{LeakyBucket, RateLimiter};
    let big = Quota::per_second(NonZeroU32::new(100).unwrap());
    let small = Quota::per_second(NonZeroU32::new(10).unwrap());
    let bucket = RateLimiter::with_clock(TokenBucket::new(big), ManualClock::new());
    assert!(bucket.check_n(100).unwrap().is_allowed());
    bucket.set_limit(TokenBucket::new(small));
    let denied = bucket.check();
    assert!(!denied.is_allowed());
    assert_eq!(denied.remaining(), 0);
    let meter = RateLimiter::with_clock(LeakyBucket::meter(big), ManualClock::new());
    assert!(meter.check_n(100).unwrap().is_allowed());
    meter.set_limit(LeakyBucket::meter(small));
    assert_eq!(meter.check().remaining(), 0);
}

/// A key swept out as idle is idle only from the sweep on: a check stamped
/// earlier (a thread that read the clock before waiting for the lock, or a
/// caller-supplied time) is judged at the sweep's time, exactly as if the
/// key had been kept. Judged at its own stamp on a fresh state, it would be
/// a third request in a window that allows two.
#[test]
fn eviction_never_lets_an_earlier_stamped_check_through() {
    const MS: u64 = 1_000_000;
    let quota = Quota::per_second(NonZeroU32::new(2).unwrap());
    let clock = ManualClock::new();
    let evicting = KeyedLimiter::with_clock(FixedWindow::new(quota), clock.clone());
    let keeping = KeyedLimiter::with_clock(FixedWindow::new(quota), clock.clone());
    for limiter in [&evicting, &keeping] {
        assert!(
            limiter
                .check_n_at(&"k", 2, Timestamp::from_nanos(500 * MS))
                .unwrap()
                .is_allowed()
        );
    }
    clock.set(Duration::from_millis(1600));
    evicting.evict_idle();
    assert_eq!(evicting.len(), 0);
    // The window [0, 1 s) is full; a check stamped 0.9 s must not find room in it.
    let late = evicting
        .check_n_at(&"k", 1, Timestamp::from_nanos(900 * MS))
        .unwrap();
    let reference = keeping
        .check_n_at(&"k", 1, Timestamp::from_nanos(1600 * MS))
        .unwrap();
    assert_eq!(late, reference);
}

// ---- Refunds (issue 15, item 6) ----
//
// A refund names the spending it gives back. Each algorithm documents when
// a refund really returns it; these tests count a refunded spending as not
// served exactly then (in part, for the buckets), and check that the
// algorithm's bound still holds for what was served.

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
struct Spending {
    seq: usize,
    at: u64,
    cost: u64,
    delay: u64,
    receipt: Receipt,
    refunded: Option<(usize, u64)>,
}

/// Plays `steps` from `start` and returns every allowed spending (each
/// with a receipt for what it spent, charged at its own time).
fn play<L: Limiter>(
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
        let cost = step.cost.min(limiter.capacity());
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
        let sub = sw.sub_window_nanos();
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
        let t = u128::from(gcra.interval_nanos());
        let spent = play(&gcra, start, &steps)?;
        check_served_bound(
            &spent,
            |s| {
                let whole = u128::from(s.cost) * t;
                let returned = s.refunded.map_or(0, |(_, when)| {
                    (u128::from(s.at) + whole).saturating_sub(u128::from(when)).min(whole)
                });
                whole - returned
            },
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
        let served = |s: &Spending| {
            let whole = u128::from(s.cost) * w;
            let returned = s.refunded.map_or(0, |(_, when)| {
                whole.saturating_sub(u128::from(limit) * u128::from(when - s.at))
            });
            whole - returned
        };
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
        let t = q.emission_interval_nanos();
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

// ---- Forced charges (issue 29, item 4) ----
//
// A charge spends unconditionally, past the limit if need be, for work
// already done. Counting charged units as served, the algorithm's bound
// must still hold over every interval that ends at an allowed check: the
// debt is what later checks wait out. Refunds (of checks and charges) are
// counted by the same rules as above.

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
fn play_charges<L: Limiter>(
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
                    u32::try_from(u64::from(step.charge) * u64::from(limiter.capacity()) / 10)
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
                let cost = step.cost.min(limiter.capacity());
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
        let t = u128::from(gcra.interval_nanos());
        let spent = play_charges(&gcra, start, &steps)?;
        check_bound_at_checks(
            &spent,
            |s| {
                let whole = u128::from(s.cost) * t;
                let returned = s.refunded.map_or(0, |(_, when)| {
                    (u128::from(s.at) + whole).saturating_sub(u128::from(when)).min(whole)
                });
                whole - returned
            },
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
        let served = |s: &Spending| {
            let whole = u128::from(s.cost) * w;
            let returned = s.refunded.map_or(0, |(_, when)| {
                whole.saturating_sub(u128::from(limit) * u128::from(when - s.at))
            });
            whole - returned
        };
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
        let sub = sw.sub_window_nanos();
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
        let t = q.emission_interval_nanos();
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
        fn same<L: Limiter>(l: &L, start: u64, reqs: &[(u64, u32, Option<u32>)]) -> Result<(), TestCaseError> {
            let (mut plain, mut charged) = (l.new_state(start), l.new_state(start));
            let mut now = start;
            for (i, &(gap, cost, charge)) in reqs.iter().enumerate() {
                now += gap;
                if let Some(c) = charge {
                    let receipt = l.charge(&mut charged, now, c);
                    l.refund(&mut charged, now, receipt);
                }
                let cost = cost.min(l.capacity());
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
        fn feed<L: Limiter>(l: &L, times: &[u64], costs: &[u32]) {
            let mut s = l.new_state(times[0]);
            let mut last = None;
            for (i, &t) in times.iter().enumerate() {
                let cost = costs[i % costs.len()];
                if let Some(receipt) = last.take() {
                    l.refund(&mut s, t, receipt);
                }
                last = Some(l.charge(&mut s, t, cost));
                let _ = l.check(&mut s, t, cost.min(l.capacity()), Mode::Consume);
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
