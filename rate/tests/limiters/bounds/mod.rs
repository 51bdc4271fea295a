//! Property tests: no algorithm allows more than its documented bound in any
//! interval, peeking changes nothing, and the sketch-backed keyed limiter
//! never allows a key more than the exact one.

use proptest::prelude::*;
use std::num::NonZeroU32;
use std::time::Duration;
use weir_limits::clock::ManualClock;
use weir_rate::clock::Timestamp;
use weir_rate::{
    Algorithm, AllOf, FixedWindow, Forgettable, Gcra, KeyedLimiter, LeakyBucket, Mode, Quota,
    Receipt, SketchLimiter, SlidingLog, SlidingWindow, TokenBucket,
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
fn run<L: Algorithm>(limiter: &L, start: u64, requests: &[(u64, u32)]) -> Vec<(u64, u64)> {
    let mut state = limiter.new_state(start);
    let mut now = start;
    let mut allowed = Vec::new();
    for &(gap, cost) in requests {
        now += gap;
        let cost = cost.min(limiter.max_cost());
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
        let effective = (sw.sub_window().as_nanos() as u64) * u64::from(n - 1);
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
        let t = (gcra.emission_interval().as_nanos() as u64) as f64;
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
        let t = q.emission_interval().as_nanos() as u64;
        let mut state = shaper.new_state(start);
        let mut now = start;
        let mut releases = Vec::new();
        for &(gap, cost) in &reqs {
            now += gap;
            let cost = cost.min(shaper.max_cost());
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
        fn both<L: Algorithm>(l: &L, reqs: &[(u64, u32)]) -> Result<(), TestCaseError> {
            let (mut a, mut b) = (l.new_state(0), l.new_state(0));
            let mut now = 0;
            for &(gap, cost) in reqs {
                now += gap;
                let cost = cost.min(l.max_cost());
                let peek = l.check(&mut b, now, cost, Mode::Peek).unwrap();
                let x = l.check(&mut a, now, cost, Mode::Consume).unwrap();
                let y = l.check(&mut b, now, cost, Mode::Consume).unwrap();
                prop_assert_eq!(&x, &y);
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
        fn feed<L: Forgettable>(l: &L, times: &[u64], cost: u32) {
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
    assert_eq!(Gcra::new(q).max_cost(), 4);
    assert_eq!(TokenBucket::new(q).max_cost(), 4);
    assert_eq!(FixedWindow::new(q).max_cost(), 10);
    let shaper = LeakyBucket::try_shaper(q, Duration::from_millis(250)).unwrap();
    assert_eq!(shaper.max_cost(), 3);
    let gcra = Gcra::new(q);
    let mut s = gcra.new_state(0);
    let err = gcra.check(&mut s, 0, 5, Mode::Consume).unwrap_err();
    assert_eq!((err.cost, err.max_cost), (5, 4));
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
    let keyed = KeyedLimiter::builder(Gcra::new(q))
        .clock(clock.clone())
        .shards(1)
        .build();
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
    fn exhaust<L: Algorithm>(l: &L) -> weir_rate::Decision {
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
    fn allowed_at_once<L: Algorithm>(l: &L, now: u64) -> u32 {
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
            ("shaper", allowed_at_once(&shaper, now), shaper.max_cost()),
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

mod charges;
mod refunds;
