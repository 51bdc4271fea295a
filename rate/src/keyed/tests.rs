//! The per-thread memory of refused keys, switched on for every shard, must
//! leave every decision as the shard's lock alone would make it.

use super::KeyedLimiter;
use crate::clock::{Clock, ManualClock, Timestamp};
use crate::sync::Ordering;
use crate::{Gcra, Quota};
use proptest::prelude::*;
use std::num::NonZeroU32;
use std::sync::mpsc;
use std::time::Duration;

type Keyed = KeyedLimiter<u32, Gcra, ManualClock>;

fn limiter(clock: &ManualClock, burst: u32) -> Keyed {
    let quota = Quota::per_second(NonZeroU32::new(10).unwrap())
        .allow_burst(NonZeroU32::new(burst).unwrap());
    KeyedLimiter::with_shards(Gcra::new(quota), clock.clone(), 2)
}

/// Every shard as if found contended for good.
fn busy(limiter: &Keyed) {
    for shard in limiter.shards.iter() {
        shard.busy_until.store(u64::MAX, Ordering::Relaxed);
    }
}

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
        6 => (0u32..3).prop_map(Step::Allows),
        2 => (0u32..3).prop_map(Step::Check),
        1 => (0u32..3).prop_map(Step::Refund),
        1 => (0u32..3, 0u64..300_000_000).prop_map(|(k, ahead)| Step::CheckAhead(k, ahead)),
        1 => (0u32..3, 1u32..4).prop_map(|(k, cost)| Step::Charge(k, cost)),
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
    ) {
        let clocks = (ManualClock::new(), ManualClock::new());
        let (remembering, plain) = (limiter(&clocks.0, 2), limiter(&clocks.1, 2));
        busy(&remembering);
        let mut receipts = [[None; 2]; 3];
        for (i, step) in steps.iter().enumerate() {
            match *step {
                Step::Allows(k) => {
                    prop_assert_eq!(remembering.allows(&k), plain.allows(&k), "step {}: {:?}", i, steps);
                }
                Step::Check(k) => {
                    let (a, b) = (remembering.check(&k), plain.check(&k));
                    prop_assert_eq!(a, b, "step {}: {:?}", i, steps);
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
                    let a = remembering.check_n_at(&k, 1, at(&clocks.0)).map(|d| d.is_allowed());
                    let b = plain.check_n_at(&k, 1, at(&clocks.1)).map(|d| d.is_allowed());
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

/// A refusal this thread remembers is answered without the shard's lock:
/// with every lock held elsewhere, the check still returns.
#[test]
fn a_remembered_refusal_is_answered_without_the_lock() {
    let clock = ManualClock::new();
    let limiter = limiter(&clock, 1);
    busy(&limiter);
    assert!(limiter.allows(&7));
    assert!(!limiter.allows(&7), "burst 1 spent");
    let guards: Vec<_> = limiter.shards.iter().map(|s| s.lock.lock()).collect();
    let (tx, rx) = mpsc::channel();
    std::thread::scope(|s| {
        s.spawn(|| {
            // This thread's own memory is empty: it would wait for the lock.
            let _ = tx.send(("other thread", limiter.allows(&7)));
        });
        let checked = limiter.check(&7);
        let _ = tx.send((
            "remembering thread",
            limiter.allows(&7) || checked.is_allowed(),
        ));
        let first = rx.recv_timeout(Duration::from_secs(10));
        assert_eq!(first, Ok(("remembering thread", false)));
        assert_eq!(checked.retry_after(), Some(Duration::from_millis(100)));
        drop(guards);
    });
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
