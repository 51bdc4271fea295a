//! The per-thread memory of refused keys, switched on for every shard, must
//! leave every decision as the shard's lock alone would make it.

use super::KeyedLimiter;
use crate::clock::{Clock, ManualClock, Timestamp};
use crate::sync::Ordering;
use crate::{Gcra, Quota};
use proptest::prelude::*;
use std::num::{NonZeroU32, NonZeroUsize};
use std::sync::{Barrier, mpsc};
use std::time::Duration;

type Keyed = KeyedLimiter<u32, Gcra, ManualClock>;

fn limiter(clock: &ManualClock, burst: u32) -> Keyed {
    let quota = Quota::per_second(NonZeroU32::new(10).unwrap())
        .allow_burst(NonZeroU32::new(burst).unwrap());
    KeyedLimiter::builder(Gcra::new(quota))
        .clock(clock.clone())
        .shards(2)
        .build()
}

/// Two limiters that hash and spill alike, with room for `capacity` keys
/// in their one shard, so that both forget the same keys into the same
/// cells.
fn twins(clocks: &(ManualClock, ManualClock), capacity: usize, burst: u32) -> (Keyed, Keyed) {
    let quota = Quota::per_second(NonZeroU32::new(10).unwrap())
        .allow_burst(NonZeroU32::new(burst).unwrap());
    let capacity = NonZeroUsize::new(capacity).unwrap();
    let make = |clock: &ManualClock| {
        KeyedLimiter::builder(Gcra::new(quota))
            .clock(clock.clone())
            .shards(1)
            .max_keys(capacity)
            .build()
    };
    let (a, mut b) = (make(&clocks.0), make(&clocks.1));
    b.shards.set_hasher(a.shards.hasher().clone());
    b.spill = a.spill.clone();
    (a, b)
}

/// Every shard as if found contended for good.
fn busy(limiter: &Keyed) {
    for shard in limiter.shards.iter() {
        shard.busy_until.store(u64::MAX, Ordering::Relaxed);
    }
}

/// Keys the steps pick from: more than the smallest capacity below.
const KEYS: u32 = 12;

#[derive(Debug, Clone)]
enum Step {
    Allows(u32),
    Check(u32),
    Refund(u32),
    CheckAhead(u32, u64),
    Charge(u32, u32),
    SetBurst(u32),
    Advance(u64),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (0u32..KEYS).prop_map(Step::Allows),
        2 => (0u32..KEYS).prop_map(Step::Check),
        1 => (0u32..KEYS).prop_map(Step::Refund),
        1 => (0u32..KEYS, 0u64..300_000_000).prop_map(|(k, ahead)| Step::CheckAhead(k, ahead)),
        1 => (0u32..KEYS, 1u32..4).prop_map(|(k, cost)| Step::Charge(k, cost)),
        1 => (1u32..5).prop_map(Step::SetBurst),
        3 => (0u64..150_000_000).prop_map(Step::Advance),
    ]
}

proptest! {
    /// Refunds, new limits, callers' times ahead, charges and time passing,
    /// in any order: `allows` and `check` answer as a limiter without the
    /// memory, to the last field of the decision.
    #[test]
    fn remembered_refusals_decide_as_the_lock_does(
        steps in proptest::collection::vec(step(), 1..200),
        capacity in prop_oneof![Just(4usize), Just(8), Just(1000)],
    ) {
        let clocks = (ManualClock::new(), ManualClock::new());
        let (remembering, plain) = twins(&clocks, capacity, 2);
        busy(&remembering);
        let mut receipts: Vec<[Option<crate::Decision>; 2]> = (0..KEYS).map(|_| [None, None]).collect();
        for (i, step) in steps.iter().enumerate() {
            match *step {
                Step::Allows(k) => {
                    prop_assert_eq!(remembering.allows(&k), plain.allows(&k), "step {}: {:?}", i, steps);
                }
                Step::Check(k) => {
                    let (a, b) = (remembering.check(&k), plain.check(&k));
                    prop_assert_eq!(&a, &b, "step {}: {:?}", i, steps);
                    receipts[k as usize] = [Some(a), Some(b)];
                }
                Step::Refund(k) => {
                    if let [Some(a), Some(b)] = &receipts[k as usize] {
                        remembering.refund(&k, a);
                        plain.refund(&k, b);
                    }
                }
                Step::CheckAhead(k, ahead) => {
                    let at = |clock: &ManualClock| Timestamp::from_nanos(clock.now_nanos() + ahead);
                    let a = remembering.check_n_at(&k, 1, at(&clocks.0));
                    let b = plain.check_n_at(&k, 1, at(&clocks.1));
                    prop_assert_eq!(a.ok(), b.ok(), "step {}: {:?}", i, steps);
                }
                Step::Charge(k, cost) => {
                    remembering.charge(&k, cost);
                    plain.charge(&k, cost);
                }
                Step::SetBurst(burst) => {
                    let quota = Quota::per_second(NonZeroU32::new(10).unwrap())
                        .allow_burst(NonZeroU32::new(burst).unwrap());
                    remembering.set_limit(Gcra::new(quota));
                    plain.set_limit(Gcra::new(quota));
                }
                Step::Advance(ns) => {
                    clocks.0.advance(Duration::from_nanos(ns));
                    clocks.1.advance(Duration::from_nanos(ns));
                }
            }
        }
    }
}

/// A remembered key forgotten to make room comes back from spill cells
/// that keys forgotten after it may have raised: its remembered reset and
/// retry times must not outlive that (the review's case: burst 1, keys
/// charged past their burst fill a full shard).
#[test]
fn a_key_forgotten_to_make_room_is_not_answered_from_memory() {
    for _ in 0..40 {
        let clocks = (ManualClock::new(), ManualClock::new());
        let (remembering, plain) = twins(&clocks, 16, 1);
        busy(&remembering);
        for limiter in [&remembering, &plain] {
            assert!(limiter.allows(&1));
            assert!(!limiter.allows(&1));
            for key in 100..117 {
                limiter.charge(&key, 2);
            }
        }
        for clock in [&clocks.0, &clocks.1] {
            clock.advance(Duration::from_millis(50));
        }
        assert_eq!(remembering.check(&1), plain.check(&1));
    }
}

/// A refusal a thread remembers is answered without the shard's lock:
/// with every lock held by another thread, its checks still return, while
/// a thread with nothing remembered waits.
#[test]
fn a_remembered_refusal_is_answered_without_the_lock() {
    let clock = ManualClock::new();
    let limiter = limiter(&clock, 1);
    busy(&limiter);
    let (spent, locked) = (Barrier::new(2), Barrier::new(3));
    let (tx, rx) = mpsc::channel();
    let answer = std::thread::scope(|s| {
        s.spawn(|| {
            assert!(limiter.allows(&7));
            assert!(!limiter.allows(&7), "burst 1 spent");
            spent.wait();
            locked.wait();
            let checked = limiter.check(&7);
            let _ = tx.send(("remembering", limiter.allows(&7), checked.retry_after()));
        });
        s.spawn(|| {
            locked.wait();
            // Nothing remembered on this thread: it waits for the lock.
            let _ = tx.send(("forgetful", limiter.allows(&7), None));
        });
        spent.wait();
        let guards: Vec<_> = limiter.shards.iter().map(|s| s.lock.lock()).collect();
        locked.wait();
        let first = rx.recv_timeout(Duration::from_secs(10));
        drop(guards);
        first
    });
    let retry = Some(Duration::from_millis(100));
    assert_eq!(answer, Ok(("remembering", false, retry)));
}

/// An uncontended shard remembers nothing: one thread never pays for it.
#[test]
fn an_uncontended_limiter_remembers_no_refusal() {
    let clock = ManualClock::new();
    let limiter = limiter(&clock, 1);
    assert!(limiter.allows(&7));
    assert!(!limiter.allows(&7));
    busy(&limiter);
    assert!(
        limiter
            .refusals
            .refusal(limiter.shard(&7).0, &7, 0)
            .is_none()
    );
}

/// A limiter in shadow mode is a dry run: a shaper's admissions carry no
/// delay, so nothing that waits on `Decision::delay` (the tower layer, the
/// waits) holds a request back.
#[test]
fn a_shadowed_shaper_asks_no_one_to_wait() {
    let quota = Quota::per_second(NonZeroU32::new(10).unwrap());
    let shaper = crate::LeakyBucket::try_shaper(quota, Duration::from_secs(1)).unwrap();
    let limiter = KeyedLimiter::with_clock(shaper, ManualClock::new());
    assert_eq!(limiter.check(&1u32).delay(), Duration::ZERO);
    assert_eq!(limiter.check(&1u32).delay(), Duration::from_millis(100));
    limiter.set_shadow(true);
    let shadowed = limiter.check(&1u32);
    assert!(shadowed.is_allowed());
    assert_eq!(shadowed.delay(), Duration::ZERO);
}
