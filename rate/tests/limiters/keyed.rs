//! Keyed limiters: peek, refunds, shadow mode, several limits per key, and
//! the sketch against the exact map under concurrency.

use proptest::prelude::*;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;
use weir_limits::clock::ManualClock;
use weir_rate::clock::Timestamp;
use weir_rate::{
    Algorithm, AllOf, FixedWindow, Forgettable, Gcra, KeyedLimiter, LeakyBucket, Mode, Quota,
    RateLimiter, SketchLimiter, SlidingLog, SlidingWindow, TokenBucket,
};
use weir_rate::{Layout, Shape};

fn per_second(n: u32) -> Quota {
    Quota::per_second(NonZeroU32::new(n).unwrap())
}

#[test]
fn keyed_peek_refund_and_shadow() {
    let clock = ManualClock::new();
    let keyed = KeyedLimiter::with_clock(Gcra::new(per_second(2)), clock.clone());
    assert!(keyed.peek_n(&"a", 2).unwrap().is_allowed());
    assert!(keyed.is_empty(), "a peek must not insert the key");
    let both = keyed.check_n(&"a", 2).unwrap();
    assert!(both.is_allowed());
    let denied = keyed.check(&"a");
    assert!(!denied.is_allowed());
    keyed.refund(&"a", &denied); // spent nothing: returns nothing
    assert!(!keyed.check(&"a").is_allowed());
    keyed.refund(&"b", &both); // no such key: nothing to return
    keyed.refund(&"a", &both);
    assert!(keyed.check_n(&"a", 2).unwrap().is_allowed());
    keyed.set_shadow(true);
    let d = keyed.check(&"a");
    assert!(d.is_allowed() && !d.is_conforming());
    assert_eq!(keyed.check_n(&"a", 3).unwrap_err().max_cost, 2);
}

#[test]
fn several_limits_per_key_are_all_or_nothing() {
    let clock = ManualClock::new();
    let limits = (
        Gcra::new(per_second(5)),
        FixedWindow::new(Quota::per_minute(NonZeroU32::new(8).unwrap())),
    );
    let keyed = KeyedLimiter::with_clock(limits, clock.clone());
    // The per-second burst binds first: 5, and nothing spent on the rest.
    assert_eq!(
        (0..10).filter(|_| keyed.check(&1u8).is_allowed()).count(),
        5
    );
    clock.advance(Duration::from_secs(2));
    // Then the per-minute window: 3 more, although the burst would allow 5.
    assert_eq!(
        (0..10).filter(|_| keyed.check(&1u8).is_allowed()).count(),
        3
    );
    let d = keyed.check(&1u8);
    assert_eq!(d.remaining(), 0);
    assert!(d.retry_after().unwrap() > Duration::from_secs(50));
}

/// Several limits per key can be refunded together only if each charged
/// the check to the same instant. A check stamped before the key's latest
/// (a thread that read the clock before waiting for the lock, or a
/// caller-supplied time) must still leave one receipt that refunds every
/// limit: here the token bucket would otherwise charge it at 100 ms and
/// the GCRA at 50 ms, and the refund would return nothing.
#[test]
fn a_refund_reaches_every_limit_of_a_check_stamped_earlier() {
    const MS: u64 = 1_000_000;
    let q = Quota::per_minute(NonZeroU32::new(2).unwrap()).allow_burst(NonZeroU32::new(3).unwrap());
    let limits = (Gcra::new(q), weir_rate::TokenBucket::new(q));
    let single = RateLimiter::with_clock(limits.clone(), ManualClock::new());
    let keyed = KeyedLimiter::with_clock(limits, ManualClock::new());
    assert!(
        single
            .check_n_at(1, Timestamp::from_nanos(100 * MS))
            .unwrap()
            .is_allowed()
    );
    assert!(
        keyed
            .check_n_at(&"k", 1, Timestamp::from_nanos(100 * MS))
            .unwrap()
            .is_allowed()
    );
    let late = single
        .check_n_at(1, Timestamp::from_nanos(50 * MS))
        .unwrap();
    let keyed_late = keyed
        .check_n_at(&"k", 1, Timestamp::from_nanos(50 * MS))
        .unwrap();
    assert!(late.is_allowed() && keyed_late.is_allowed());
    single.refund(&late);
    keyed.refund(&"k", &keyed_late);
    // One unit is left of three; the refund makes it two.
    assert!(
        single
            .check_n_at(2, Timestamp::from_nanos(100 * MS))
            .unwrap()
            .is_allowed(),
        "the refund returned nothing"
    );
    assert!(
        keyed
            .check_n_at(&"k", 2, Timestamp::from_nanos(100 * MS))
            .unwrap()
            .is_allowed(),
        "the keyed refund returned nothing"
    );
}

proptest! {
    /// The lean `allows` decides exactly as `check(..).is_allowed()`, and
    /// spends exactly as it: two limiters of each kind fed the same keys at
    /// the same times never disagree, in shadow mode too.
    #[test]
    fn allows_decides_and_spends_as_check(
        steps in proptest::collection::vec((0u64..30_000_000, 0u8..6), 1..300),
        shadow: bool,
    ) {
        let quota = Quota::per_second(NonZeroU32::new(50).unwrap()).allow_burst(NonZeroU32::new(3).unwrap());
        let clocks = (ManualClock::new(), ManualClock::new());
        let exact = (
            KeyedLimiter::with_clock(Gcra::new(quota), clocks.0.clone()),
            KeyedLimiter::with_clock(Gcra::new(quota), clocks.1.clone()),
        );
        let window = FixedWindow::new(quota);
        let windows = (
            KeyedLimiter::with_clock(window.clone(), clocks.0.clone()),
            KeyedLimiter::with_clock(window, clocks.1.clone()),
        );
        let sketch = |clock: &ManualClock| {
            let shape = Shape::try_new(2, 4, Layout::Rows).unwrap().with_seed(3);
            SketchLimiter::with_clock(quota, shape, clock.clone())
        };
        let sketches = (sketch(&clocks.0), sketch(&clocks.1));
        for limiter in [&exact.0, &exact.1] { limiter.set_shadow(shadow); }
        for limiter in [&windows.0, &windows.1] { limiter.set_shadow(shadow); }
        for limiter in [&sketches.0, &sketches.1] { limiter.set_shadow(shadow); }
        let single = (
            RateLimiter::with_clock(Gcra::new(quota), clocks.0.clone()),
            RateLimiter::with_clock(Gcra::new(quota), clocks.1.clone()),
        );
        for limiter in [&single.0, &single.1] { limiter.set_shadow(shadow); }
        for (gap, key) in steps {
            clocks.0.advance(Duration::from_nanos(gap));
            clocks.1.advance(Duration::from_nanos(gap));
            prop_assert_eq!(exact.0.allows(&key), exact.1.check(&key).is_allowed());
            prop_assert_eq!(windows.0.allows(&key), windows.1.check(&key).is_allowed());
            prop_assert_eq!(sketches.0.allows(&key), sketches.1.check(&key).is_allowed());
            prop_assert_eq!(single.0.allows(), single.1.check().is_allowed());
            prop_assert_eq!(exact.0.len(), exact.1.len());
        }
    }

    /// `AllOf` over two limits decides exactly as the pair of them, step by
    /// step (both go through the same all-or-nothing rule), and neither
    /// ever spends what the other refused: each limit's own state matches a
    /// copy that was only charged when both allowed.
    #[test]
    fn all_of_two_decides_as_the_pair(
        steps in proptest::collection::vec((0u64..400_000_000, 1u32..4, any::<bool>()), 1..120),
    ) {
        let fast = Gcra::new(per_second(6));
        let slow = Gcra::new(Quota::per_minute(NonZeroU32::new(9).unwrap()));
        let pair = (fast.clone(), slow.clone());
        let all = AllOf::new(vec![fast.clone(), slow.clone()]);
        let (mut p, mut a) = (pair.new_state(0), all.new_state(0));
        let (mut alone_fast, mut alone_slow) = (fast.new_state(0), slow.new_state(0));
        let mut now = 0u64;
        for (gap, cost, peek) in steps {
            now += gap;
            let mode = if peek { Mode::Peek } else { Mode::Consume };
            let dp = pair.check(&mut p, now, cost, mode).unwrap();
            let da = all.check(&mut a, now, cost, mode).unwrap();
            prop_assert_eq!(&dp, &da);
            if dp.is_allowed() && mode == Mode::Consume {
                prop_assert!(fast.check(&mut alone_fast, now, cost, Mode::Consume).unwrap().is_allowed());
                prop_assert!(slow.check(&mut alone_slow, now, cost, Mode::Consume).unwrap().is_allowed());
            }
            prop_assert_eq!(&p.0, &alone_fast);
            prop_assert_eq!(&p.1, &alone_slow);
            prop_assert_eq!(&a[..], &[alone_fast, alone_slow][..]);
        }
    }
}

#[test]
fn sliding_window_estimate_weighs_the_oldest_sub_window() {
    let q = Quota::per_minute(NonZeroU32::new(1000).unwrap());
    let sw = SlidingWindow::try_new(q, 2).unwrap();
    let mut s = sw.new_state(0);
    let sec = 1_000_000_000;
    assert!(
        sw.check(&mut s, 10 * sec, 60, Mode::Consume)
            .unwrap()
            .is_allowed()
    );
    assert_eq!(sw.estimate(&s, 30 * sec), 60.0);
    assert_eq!(sw.estimate(&s, 90 * sec), 30.0);
    assert_eq!(sw.estimate(&s, 120 * sec), 0.0);
    let fw = FixedWindow::new(q);
    let mut f = fw.new_state(0);
    assert!(
        fw.check(&mut f, 10 * sec, 60, Mode::Consume)
            .unwrap()
            .is_allowed()
    );
    assert_eq!(fw.estimate(&f, 59 * sec), 60.0);
    assert_eq!(fw.estimate(&f, 60 * sec), 0.0);
}

#[test]
fn sketch_racing_threads_never_exceed_a_keys_burst() {
    let clock = ManualClock::new();
    let q = per_second(1).allow_burst(NonZeroU32::new(100).unwrap());
    let shape = Shape::try_new(3, 64, Layout::Blocked).unwrap().with_seed(9);
    let sketch = Arc::new(SketchLimiter::with_clock(q, shape, clock));
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let sketch = Arc::clone(&sketch);
            std::thread::spawn(move || {
                (0..1000)
                    .filter(|_| sketch.check(&5u32).is_allowed())
                    .count()
            })
        })
        .collect();
    let allowed: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    // No time passes: exactly the burst, however the threads interleave.
    assert_eq!(allowed, 100);
}

#[test]
fn exact_racing_threads_spend_each_keys_burst_exactly() {
    // Time stands still and four shards serve 16 keys, so two threads keep
    // meeting on the same shard locks; together they must be allowed
    // exactly each key's burst, no more (a lost lock) and no less.
    let keyed = Arc::new(
        KeyedLimiter::builder(Gcra::new(per_second(1000)))
            .clock(ManualClock::new())
            .shards(4)
            .build(),
    );
    let allowed: usize = (0..2)
        .map(|_| {
            let keyed = Arc::clone(&keyed);
            std::thread::spawn(move || (0..40_000u32).filter(|i| keyed.allows(&(i % 16))).count())
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|t| t.join().unwrap())
        .sum();
    assert_eq!(allowed, 16 * 1000);
}

#[test]
fn a_limiter_on_the_recent_clock_limits_and_refills() {
    use weir_rate::clock::RecentClock;
    let keyed = KeyedLimiter::with_clock(
        Gcra::new(Quota::try_new(1, Duration::from_millis(50)).unwrap()),
        RecentClock::new(),
    );
    assert!(keyed.allows("a"));
    assert!(!keyed.allows("a"), "the clock cannot have moved 50 ms");
    // Refilled once the upkeep thread's time passes 50 ms (bounded wait:
    // an overloaded machine delays the upkeep, which only delays this).
    let start = std::time::Instant::now();
    while !keyed.allows("a") {
        assert!(start.elapsed() < Duration::from_secs(5), "never refilled");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn checks_at_a_caller_supplied_time() {
    let q = per_second(1);
    let keyed = KeyedLimiter::with_clock(Gcra::new(q), ManualClock::new());
    let shape = Shape::try_new(2, 32, Layout::Rows).unwrap().with_seed(1);
    let sketch = SketchLimiter::with_clock(q, shape, ManualClock::new());
    let sec = 1_000_000_000;
    for (t, expect) in [(0, true), (sec / 2, false), (sec, true), (sec / 2, false)] {
        assert_eq!(
            keyed
                .check_n_at(&3u32, 1, Timestamp::from_nanos(t))
                .unwrap()
                .is_allowed(),
            expect,
            "keyed at {t}"
        );
        assert_eq!(
            sketch
                .check_n_at(&3u32, 1, Timestamp::from_nanos(t))
                .unwrap()
                .is_allowed(),
            expect,
            "sketch at {t}"
        );
    }
}

#[test]
fn string_keys_are_checked_by_str() {
    let keyed: KeyedLimiter<String, Gcra, ManualClock> =
        KeyedLimiter::with_clock(Gcra::new(per_second(1)), ManualClock::new());
    let client = String::from("client-7");
    assert!(keyed.check("client-7").is_allowed());
    assert!(
        !keyed.check(client.as_str()).is_allowed(),
        "one key, borrowed or owned"
    );
    assert!(!keyed.check(&client).is_allowed());
    assert_eq!(keyed.len(), 1);
}

/// A keyed limiter of bounded capacity forgets keys when
/// full, keeping when each turns idle in a small sketch, so that a key
/// that comes back is judged no looser than if it had stayed.
mod bounded {
    use proptest::prelude::*;
    use std::num::{NonZeroU32, NonZeroUsize};
    use std::time::Duration;
    use weir_limits::clock::ManualClock;
    use weir_rate::{
        FixedWindow, Forgettable, Gcra, KeyedLimiter, LeakyBucket, Quota, SlidingLog,
        SlidingWindow, TokenBucket,
    };

    const MS: u64 = 1_000_000;
    const KEYS: usize = 8;

    fn quota() -> Quota {
        Quota::try_new(3, Duration::from_millis(100))
            .unwrap()
            .allow_burst(NonZeroU32::new(2).unwrap())
    }

    /// One step: after `gap` ns, a unit check of `key` on both limiters,
    /// or a peek, or (when both allowed the key's last check) a refund of
    /// it on both.
    type Step = (u64, u8, u8);

    fn steps() -> impl Strategy<Value = Vec<Step>> {
        proptest::collection::vec((0u64..40 * MS, 0u8..KEYS as u8, 0u8..8), 1..300)
    }

    /// Runs `steps` on an exact limiter (capacity beyond any key count) and
    /// one of `capacity` keys in `shards` shards. For every key, the bounded
    /// one never has allowed more (net of refunds) in any prefix; and as
    /// long as it has never been full, it decides exactly as the exact one.
    fn compare<L: Forgettable + Clone>(
        limiter: L,
        steps: &[Step],
        capacity: usize,
        shards: usize,
    ) -> Result<(), TestCaseError> {
        let clock = ManualClock::new();
        let exact = KeyedLimiter::builder(limiter.clone())
            .clock(clock.clone())
            .shards(shards)
            .max_keys(NonZeroUsize::MAX)
            .build();
        let capacity = NonZeroUsize::new(capacity).unwrap();
        let bounded = KeyedLimiter::builder(limiter)
            .clock(clock.clone())
            .shards(shards)
            .max_keys(capacity)
            .build();
        let (mut by_exact, mut by_bounded) = ([0i64; KEYS], [0i64; KEYS]);
        let mut last: [Option<(weir_rate::Decision, weir_rate::Decision)>; KEYS] =
            std::array::from_fn(|_| None);
        let mut full = false;
        for &(gap, key, kind) in steps {
            clock.advance(Duration::from_nanos(gap));
            let k = usize::from(key);
            match kind {
                0 => {
                    let (e, b) = (
                        exact.peek_n(&key, 1).unwrap(),
                        bounded.peek_n(&key, 1).unwrap(),
                    );
                    prop_assert!(!b.is_allowed() || e.is_allowed() || full, "peek of {key}");
                    if !full {
                        prop_assert_eq!(e, b);
                    }
                }
                1 => {
                    if let Some((e, b)) = last[k].take() {
                        exact.refund(&key, &e);
                        bounded.refund(&key, &b);
                        by_exact[k] -= 1;
                        by_bounded[k] -= 1;
                    }
                }
                _ => {
                    let (e, b) = (exact.check(&key), bounded.check(&key));
                    by_exact[k] += i64::from(e.is_allowed());
                    by_bounded[k] += i64::from(b.is_allowed());
                    if !full {
                        prop_assert_eq!(&e, &b, "key {} before the limiter was ever full", key);
                    }
                    last[k] = (e.is_allowed() && b.is_allowed()).then_some((e, b));
                }
            }
            prop_assert!(
                by_bounded[k] <= by_exact[k],
                "key {}: bounded allowed {} against exact {}",
                key,
                by_bounded[k],
                by_exact[k]
            );
            prop_assert!(bounded.len() <= bounded.max_keys());
            // A shard evicts only when it is full before an insert; with
            // one shard that is the whole limiter, seen after a step.
            full |= shards > 1 || bounded.len() == bounded.max_keys();
        }
        Ok(())
    }

    proptest! {
        #[test]
        fn gcra_bounded_is_never_looser_than_exact(
            steps in steps(), capacity in 1usize..6, shards in 1usize..3,
        ) {
            compare(Gcra::new(quota()), &steps, capacity, shards)?;
        }

        #[test]
        fn buckets_bounded_are_never_looser_than_exact(
            steps in steps(), capacity in 1usize..6, shards in 1usize..3,
        ) {
            compare(TokenBucket::new(quota()), &steps, capacity, shards)?;
            compare(LeakyBucket::meter(quota()), &steps, capacity, shards)?;
            let shaper = LeakyBucket::try_shaper(quota(), Duration::from_millis(50)).unwrap();
            compare(shaper, &steps, capacity, shards)?;
        }

        #[test]
        fn windows_bounded_are_never_looser_than_exact(
            steps in steps(), capacity in 1usize..6, shards in 1usize..3,
        ) {
            compare(FixedWindow::new(quota()), &steps, capacity, shards)?;
            compare(SlidingLog::new(quota()), &steps, capacity, shards)?;
            compare(SlidingWindow::try_new(quota(), 3).unwrap(), &steps, capacity, shards)?;
        }

        #[test]
        fn pairs_bounded_are_never_looser_than_exact(
            steps in steps(), capacity in 1usize..6, shards in 1usize..3,
        ) {
            let slow = Quota::try_new(5, Duration::from_millis(400)).unwrap();
            compare((Gcra::new(quota()), FixedWindow::new(slow)), &steps, capacity, shards)?;
        }
    }

    /// A key forgotten to make room comes back as spent as it left: with
    /// nothing kept, its third request in a burst of two would pass.
    #[test]
    fn a_forgotten_key_comes_back_as_spent() {
        let clock = ManualClock::new();
        let one = NonZeroUsize::MIN;
        let limiter = KeyedLimiter::builder(Gcra::new(quota()))
            .clock(clock)
            .shards(1)
            .max_keys(one)
            .build();
        assert!(limiter.allows(&"a") && limiter.allows(&"a"));
        assert!(limiter.allows(&"b"), "b takes a's place");
        assert_eq!(limiter.len(), 1);
        assert!(!limiter.allows(&"a"), "a's burst was spent");
        assert!(!limiter.check(&"a").is_allowed());
    }

    /// A quota raised at run time grants a forgotten key no burst either.
    #[test]
    fn a_forgotten_key_gains_no_burst_from_a_new_quota() {
        let clock = ManualClock::new();
        let small = Quota::per_second(NonZeroU32::new(2).unwrap());
        let big = Quota::per_second(NonZeroU32::new(100).unwrap());
        let one = NonZeroUsize::MIN;
        let limiter = KeyedLimiter::builder(Gcra::new(small))
            .clock(clock.clone())
            .shards(1)
            .max_keys(one)
            .build();
        assert_eq!((0..5).filter(|_| limiter.allows(&1u8)).count(), 2);
        assert!(limiter.allows(&2u8), "1 is forgotten");
        limiter.set_limit(Gcra::new(big));
        // A second of debt stays a second of debt.
        assert!(!limiter.allows(&1u8));
        clock.advance(Duration::from_millis(1010));
        assert!(limiter.allows(&1u8));
    }
}

/// A check's sweep forgets idle keys and keeps every live one: many keys
/// in one shard, so the checks themselves sweep it several times, some
/// spent long ago (idle) and some just now (still refused).
#[test]
fn sweeps_forget_idle_keys_and_keep_live_ones() {
    let clock = ManualClock::new();
    let capacity = std::num::NonZeroUsize::new(100_000).unwrap();
    let keyed = KeyedLimiter::builder(Gcra::new(per_second(1)))
        .clock(clock.clone())
        .shards(1)
        .max_keys(capacity)
        .build();
    for key in 0..1_000u32 {
        assert!(keyed.allows(&key), "key {key}'s first unit");
    }
    for key in 0..1_000u32 {
        assert!(!keyed.allows(&key), "key {key} was spent a moment ago");
    }
    clock.advance(Duration::from_secs(2));
    for key in 1_000..3_000u32 {
        assert!(keyed.allows(&key), "key {key}'s first unit");
    }
    for key in 1_000..3_000u32 {
        assert!(
            !keyed.allows(&key),
            "key {key} survived the sweeps its peers made"
        );
    }
    // The first sweep after the clock moved on forgot the 1 000 idle keys.
    assert_eq!(keyed.len(), 2_000, "only the live keys are kept");
    for key in 0..1_000u32 {
        assert!(keyed.allows(&key), "key {key} is idle again after 2 s");
    }
}

/// A key judged ahead of the limiter's clock (`check_n_at`) and then
/// forgotten as idle, whose time ahead is then dropped with the table of
/// such times when other keys fill it, must not come back with its
/// spending forgotten: with the clock standing still, it gets no more than
/// the same key alone, judged ahead the same way. (Written first, the fixed
/// window, the token bucket, the sliding log and the sliding window each
/// let 100 through where 4 were due.)
#[test]
fn a_key_judged_ahead_and_forgotten_gets_no_fresh_quota() {
    fn admitted<L: Forgettable + Clone>(limiter: L, crowded: bool) -> u32 {
        let clock = ManualClock::new();
        clock.advance(Duration::from_secs(10));
        let capacity = std::num::NonZeroUsize::new(64).unwrap();
        let keyed = KeyedLimiter::<u64, _>::builder(limiter)
            .clock(clock)
            .shards(1)
            .max_keys(capacity)
            .build();
        // Two windows ahead: every algorithm's state is empty then.
        let ahead = keyed.now() + Duration::from_secs(2);
        let (mut admitted, mut other) = (0, 1000u64);
        for _ in 0..50 {
            for _ in 0..3 {
                admitted += u32::from(keyed.check(&0).is_allowed());
            }
            // Judged ahead at no cost: its state moves to that time.
            let _ = keyed.check_n_at(&0, 0, ahead);
            keyed.evict_idle();
            if crowded {
                // Other keys judged ahead fill the table of times ahead,
                // which is then cleared.
                for _ in 0..=capacity.get() {
                    let _ = keyed.check(&other);
                    let _ = keyed.check_n_at(&other, 0, ahead);
                    other += 1;
                }
                keyed.evict_idle();
            }
        }
        admitted
    }
    fn judge<L: Forgettable + Clone>(name: &str, limiter: L) {
        let (alone, crowded) = (admitted(limiter.clone(), false), admitted(limiter, true));
        assert!(
            crowded <= alone,
            "{name}: {crowded} admitted, {alone} alone"
        );
    }
    let q = per_second(2);
    judge("fixed window", FixedWindow::new(q));
    judge("token bucket", TokenBucket::new(q));
    judge("leaky meter", LeakyBucket::meter(q));
    judge("sliding log", SlidingLog::new(q));
    judge("sliding window", SlidingWindow::try_new(q, 2).unwrap());
    judge("GCRA", Gcra::new(q));
}
