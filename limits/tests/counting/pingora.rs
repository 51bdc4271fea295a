//! `weir_limits::pingora` against pingora-limits 0.9's signatures and
//! documented behaviour, plus the faults of pingora it fixes.

use std::time::Duration;
use weir_limits::clock::ManualClock;
use weir_limits::pingora::estimator::Estimator;
use weir_limits::pingora::inflight::{Guard, Inflight};
use weir_limits::pingora::rate::{PROPORTIONAL_RATE_ESTIMATE_CALC_FN, Rate, RateComponents};

/// Code written against pingora-limits, unchanged except for the one `use`
/// line: if a signature drifted from pingora's this module stops compiling.
mod written_for_pingora {
    use weir_limits::pingora as pingora_limits;

    use pingora_limits::estimator::Estimator;
    use pingora_limits::inflight::{Guard, Inflight};
    use pingora_limits::rate::{PROPORTIONAL_RATE_ESTIMATE_CALC_FN, Rate, RateComponents};
    use std::sync::LazyLock;
    use std::time::Duration;

    static REQUESTS: LazyLock<Rate> = LazyLock::new(|| Rate::new(Duration::from_secs(1)));
    static IN_FLIGHT: LazyLock<Inflight> = LazyLock::new(Inflight::new);
    const MAX_REQUESTS_PER_SECOND: isize = 3;
    const MAX_IN_FLIGHT: isize = 2;

    /// The rate-limiter example of pingora's proxy: true means "answer 429".
    pub fn over_rate_limit(app_id: &str) -> bool {
        REQUESTS.observe(&app_id, 1) > MAX_REQUESTS_PER_SECOND
    }

    /// A connection limit: hold the guard for as long as the request runs.
    pub fn admit(origin: String) -> Option<Guard> {
        let (guard, in_flight) = IN_FLIGHT.incr(origin, 1);
        (in_flight <= MAX_IN_FLIGHT).then_some(guard)
    }

    pub fn sliding(rate: &Rate, key: &u64) -> f64 {
        rate.rate_with(key, PROPORTIONAL_RATE_ESTIMATE_CALC_FN)
    }

    pub fn previous_and_current(rate: &Rate, key: &u64) -> (isize, isize) {
        rate.rate_with(key, |c: RateComponents| (c.prev_samples, c.curr_samples))
    }

    pub fn explicit_generics(rate: &Rate, key: &u64) -> f64 {
        rate.rate_with::<fn(RateComponents) -> f64, f64, u64>(
            key,
            PROPORTIONAL_RATE_ESTIMATE_CALC_FN,
        )
    }

    pub fn count_min(keys: &[u32]) -> isize {
        let estimator = Estimator::new(4, 256);
        let mut last = 0;
        for &k in keys {
            last = estimator.incr(k, 1);
        }
        estimator.decr(keys[0], 1);
        estimator.reset();
        last + estimator.get(keys[0])
    }

    pub fn tuned_rate() -> Rate {
        Rate::new_with_estimator_config(Duration::from_millis(100), 2, 128)
    }

    pub fn guard_ops(guard: &Guard) -> (isize, isize) {
        (guard.incr(), guard.get())
    }
}

#[test]
fn pingora_style_code_runs_on_weir() {
    for _ in 0..3 {
        assert!(!written_for_pingora::over_rate_limit("app"));
    }
    assert!(written_for_pingora::over_rate_limit("app"));
    assert!(!written_for_pingora::over_rate_limit("other app"));

    let first = written_for_pingora::admit("origin".to_string()).expect("1 of 2");
    let second = written_for_pingora::admit("origin".to_string()).expect("2 of 2");
    assert!(written_for_pingora::admit("origin".to_string()).is_none());
    // The refused request's guard was dropped at once, so two are counted.
    drop(first);
    let third = written_for_pingora::admit("origin".to_string()).expect("a slot was freed");
    assert_eq!(written_for_pingora::guard_ops(&third), (3, 3));
    drop((second, third));
    assert!(written_for_pingora::admit("origin".to_string()).is_some());

    assert_eq!(written_for_pingora::count_min(&[1, 2, 1, 1]), 3);
    let rate = written_for_pingora::tuned_rate();
    assert_eq!(rate.observe(&9u64, 2), 2);
    assert_eq!(written_for_pingora::previous_and_current(&rate, &9), (0, 2));
    let sliding = written_for_pingora::sliding(&rate, &9);
    assert!(sliding >= 0.0);
    assert!(written_for_pingora::explicit_generics(&rate, &9) >= 0.0);
}

#[test]
fn public_types_can_be_shared_between_threads() {
    fn shared<T: Send + Sync>() {}
    shared::<Estimator>();
    shared::<Inflight>();
    shared::<Guard>();
    shared::<Rate>();
    shared::<RateComponents>();
}

#[test]
fn estimator_incr_returns_the_new_estimate() {
    let est = Estimator::new(8, 8);
    assert_eq!(est.incr("a", 1), 1);
    assert_eq!(est.incr("b", 1), 1);
    assert_eq!(est.incr("a", 2), 3);
    assert_eq!(est.incr("b", 2), 3);
    assert_eq!(est.get("a"), 3);
    assert_eq!(est.get("b"), 3);
}

#[test]
// The borrows are the point: a reference must count as its referent.
#[allow(clippy::needless_borrows_for_generic_args)]
fn estimator_keys_by_value_and_by_reference_are_the_same_key() {
    let est = Estimator::new(4, 1024);
    est.incr(String::from("origin"), 2);
    est.incr("origin", 3);
    est.incr(&&"origin", 4);
    assert_eq!(est.get(String::from("origin")), 9);
    est.incr(42u64, 1);
    assert_eq!(est.get(&42u64), 1);
    est.incr((1u8, "pair"), 5);
    assert_eq!(est.get((1u8, "pair")), 5);
}

#[test]
fn estimator_counters_wrap_as_pingora_documents() {
    let est = Estimator::new(1, 1);
    assert_eq!(est.incr("a", isize::MAX), isize::MAX);
    assert_eq!(est.incr("a", 1), isize::MIN);
    assert_eq!(est.get("a"), isize::MIN);

    let est = Estimator::new(1, 1);
    assert_eq!(est.incr("a", isize::MIN), isize::MIN);
    assert_eq!(est.incr("a", -1), isize::MAX);
    est.decr("a", isize::MIN);
    assert_eq!(est.get("a"), -1);
}

#[test]
fn estimator_decr_and_reset() {
    let est = Estimator::new(8, 8);
    est.incr("a", 3);
    est.incr("b", 3);
    est.decr("a", 1);
    est.decr("b", 1);
    assert_eq!(est.get("a"), 2);
    assert_eq!(est.get("b"), 2);
    est.reset();
    assert_eq!(est.get("a"), 0);
    assert_eq!(est.get("b"), 0);
    assert_eq!(est.incr("a", 1), 1);
}

#[test]
#[should_panic(expected = "invalid Estimator dimensions")]
fn estimator_with_zero_slots_panics_at_construction() {
    // pingora-limits builds this and panics on a remainder by zero at the
    // first incr.
    let _ = Estimator::new(4, 0);
}

#[test]
#[should_panic(expected = "invalid Estimator dimensions")]
fn estimator_with_zero_hashes_panics_at_construction() {
    // pingora-limits builds this and answers isize::MAX for every key.
    let _ = Estimator::new(0, 1024);
}

#[test]
fn inflight_guards_uncount_on_drop() {
    let inflight = Inflight::new();
    let (g1, v) = inflight.incr("a", 1);
    assert_eq!(v, 1);
    let (g2, v) = inflight.incr("a", 2);
    assert_eq!(v, 3);
    drop(g1);
    assert_eq!(g2.get(), 2);
    drop(g2);
    let (_g3, v) = inflight.incr("a", 1);
    assert_eq!(v, 1);
}

#[test]
fn inflight_guard_dropped_on_another_thread_uncounts() {
    let inflight = Inflight::new();
    let (guard, _) = inflight.incr(7u64, 5);
    std::thread::spawn(move || drop(guard)).join().unwrap();
    assert_eq!(inflight.incr(7u64, 1).1, 1);
}

#[test]
fn inflight_guard_incr_is_released_with_the_guard() {
    let inflight = Inflight::new();
    let (guard, v) = inflight.incr("k", 2);
    assert_eq!(v, 2);
    assert_eq!(guard.incr(), 4);
    assert_eq!(guard.incr(), 6);
    assert_eq!(guard.get(), 6);
    drop(guard);
    // pingora-limits would answer 5 here: its guard subtracts its value once.
    assert_eq!(inflight.incr("k", 1).1, 1);
}

fn manual_rate(interval: Duration) -> (ManualClock, Rate<ManualClock>) {
    let clock = ManualClock::new();
    let rate = Rate::try_with_clock(interval, clock.clone()).unwrap();
    (clock, rate)
}

#[test]
fn rate_reports_the_previous_interval() {
    let (clock, r) = manual_rate(Duration::from_secs(1));
    let key = 1;
    assert_eq!(r.observe(&key, 3), 3);
    assert_eq!(r.observe(&key, 2), 5);
    assert_eq!(r.rate(&key), 0.0);

    clock.advance(Duration::from_secs(1));
    assert_eq!(r.observe(&key, 4), 4);
    assert_eq!(r.rate(&key), 5.0);

    clock.advance(Duration::from_secs(1));
    assert_eq!(r.rate(&key), 4.0);

    clock.advance(Duration::from_secs(1));
    assert_eq!(r.rate(&key), 0.0);
}

#[test]
fn rate_with_a_custom_function_sees_both_intervals() {
    let (clock, r) = manual_rate(Duration::from_secs(1));
    let key = 1;
    let ninety_ten = |c: RateComponents| {
        (c.prev_samples as f64 * 0.1 + c.curr_samples as f64 * 0.9) / c.interval.as_secs_f64()
    };
    r.observe(&key, 5);
    assert_eq!(r.rate_with(&key, ninety_ten), 5.0 * 0.9);
    clock.advance(Duration::from_secs(1));
    r.observe(&key, 4);
    assert_eq!(r.rate_with(&key, ninety_ten), 5.0 * 0.1 + 4.0 * 0.9);
    clock.advance(Duration::from_secs(1));
    assert_eq!(r.rate_with(&key, ninety_ten), 4.0 * 0.1);
    clock.advance(Duration::from_secs(1));
    assert_eq!(r.rate_with(&key, ninety_ten), 0.0);
}

#[test]
fn proportional_estimate_interpolates_the_previous_interval() {
    let (clock, r) = manual_rate(Duration::from_secs(1));
    let key = 1;
    let sliding = |r: &Rate<ManualClock>| r.rate_with(&key, PROPORTIONAL_RATE_ESTIMATE_CALC_FN);
    r.observe(&key, 5);
    assert_eq!(sliding(&r), 5.0);
    clock.advance(Duration::from_millis(500));
    assert_eq!(sliding(&r), 5.0);
    assert_eq!(r.rate(&key), 0.0);
    clock.advance(Duration::from_millis(500));
    r.observe(&key, 4);
    assert_eq!(sliding(&r), 9.0);
    clock.advance(Duration::from_millis(750));
    assert_eq!(sliding(&r), 5.0 * 0.25 + 4.0);
    let c = r.rate_with(&key, |c| c);
    assert_eq!(
        (
            c.prev_samples,
            c.curr_samples,
            c.interval,
            c.current_interval_fraction
        ),
        (5, 4, Duration::from_secs(1), 0.75)
    );
    clock.advance(Duration::from_millis(250));
    assert_eq!(sliding(&r), 4.0);
    assert_eq!(r.rate(&key), 4.0);
    clock.advance(Duration::from_millis(500));
    assert_eq!(sliding(&r), 2.0);
    clock.advance(Duration::from_secs(1));
    assert_eq!(sliding(&r), 0.0);
}

#[test]
fn proportional_fn_is_pingoras_formula() {
    let f: fn(RateComponents) -> f64 = PROPORTIONAL_RATE_ESTIMATE_CALC_FN;
    let (clock, r) = manual_rate(Duration::from_secs(2));
    r.observe(&"k", 8);
    clock.advance(Duration::from_millis(2500));
    r.observe(&"k", 3);
    // 8 × (1 − 0.25) + 3 over 2 s.
    assert_eq!(r.rate_with(&"k", f), 4.5);
}

#[test]
fn rate_windows_stay_on_the_grid_after_a_quiet_spell() {
    let (clock, r) = manual_rate(Duration::from_secs(1));
    r.observe(&"k", 5);
    clock.set(Duration::from_millis(2500));
    r.observe(&"k", 1);
    clock.set(Duration::from_millis(3000));
    // pingora-limits starts a window at the call at 2.5 s, so at 3.0 s that
    // window is still running and its rate() is 0.
    assert_eq!(r.rate(&"k"), 1.0);
}

#[test]
fn rate_tolerates_time_going_backwards() {
    let (clock, r) = manual_rate(Duration::from_secs(1));
    clock.set(Duration::from_millis(1500));
    r.observe(&"k", 2);
    clock.set(Duration::from_millis(200));
    assert_eq!(r.observe(&"k", 1), 3);
    assert_eq!(
        r.rate_with(&"k", |c| (c.prev_samples, c.curr_samples)),
        (0, 3)
    );
}

#[test]
fn rate_works_below_a_millisecond() {
    let (clock, r) = manual_rate(Duration::from_micros(500));
    r.observe(&"k", 3);
    clock.advance(Duration::from_micros(500));
    assert_eq!(r.rate(&"k"), 6000.0);
    clock.advance(Duration::from_micros(250));
    assert_eq!(
        r.rate_with(&"k", PROPORTIONAL_RATE_ESTIMATE_CALC_FN),
        3000.0
    );
}

#[test]
#[should_panic(expected = "invalid Rate interval")]
fn rate_with_a_zero_interval_panics_at_construction() {
    let _ = Rate::new(Duration::ZERO);
}

#[test]
#[should_panic(expected = "invalid Estimator dimensions")]
fn rate_with_bad_dimensions_panics_at_construction() {
    let _ = Rate::new_with_estimator_config(Duration::from_secs(1), 4, 0);
}

#[test]
fn rate_new_runs_on_the_real_clock() {
    let r = Rate::new(Duration::from_secs(1));
    assert_eq!(r.observe(&"k", 3), 3);
    // Bounded wait for the window to close; only a stall of over a whole
    // second between two polls would skip the window and fail this.
    let start = std::time::Instant::now();
    let mut seen = r.rate(&"k");
    while seen == 0.0 && start.elapsed() < Duration::from_secs(2) {
        std::thread::sleep(Duration::from_millis(5));
        seen = r.rate(&"k");
    }
    assert_eq!(seen, 3.0);
}

/// As in pingora, the intervals start when the `Rate` is created, not at a
/// multiple of the interval on the clock: a `Rate` made 700 ms into the
/// clock's second has no complete interval 400 ms later. (Written first, it
/// reported 5 events a second from a 300 ms stub of an interval.)
#[test]
fn pingora_rate_intervals_start_when_it_is_created() {
    use std::time::Duration;
    use weir_limits::clock::ManualClock;
    use weir_limits::pingora::rate::Rate;
    let clock = ManualClock::new();
    clock.advance(Duration::from_millis(700));
    let rate = Rate::try_with_clock(Duration::from_secs(1), clock.clone()).unwrap();
    rate.observe(&"k", 5);
    clock.advance(Duration::from_millis(400));
    assert_eq!(rate.rate(&"k"), 0.0, "no interval has ended yet");
    clock.advance(Duration::from_millis(600));
    assert_eq!(rate.rate(&"k"), 5.0);
}
