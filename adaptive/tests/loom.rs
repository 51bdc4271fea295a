//! Loom models of the adaptive limiters' shared state (the word holding
//! limit and count, the algorithm's lock, the keyed table and its
//! eviction), through weir-rate's `sync` shim over the real code. Run with
//! `cargo xtask loom`.
#![cfg(loom)]

use loom::thread;
use std::num::{NonZeroU32, NonZeroUsize};
use std::time::Duration;
use weir_adaptive::{AdaptiveLimiter, Aimd, Constant, KeyedAdaptiveLimiter};
use weir_limits::clock::ManualClock;

fn one() -> Constant {
    Constant::new(NonZeroU32::new(1).unwrap())
}

/// AIMD at `limit` that backs off after every single drop (no probe
/// window first: a probe pins the limit and learns, it does not back off).
fn twitchy(limit: u32) -> Aimd {
    let n = NonZeroU32::new(limit).unwrap();
    Aimd::builder()
        .initial_limit(n)
        .max_limit(n)
        .window(Duration::ZERO)
        .window_samples(NonZeroU32::new(1).unwrap())
        .probe_interval(None)
        .build()
        .unwrap()
}

#[test]
fn racing_admissions_at_a_limit_of_one_admit_exactly_one() {
    loom::model(|| {
        let limiter = AdaptiveLimiter::with_clock(one(), ManualClock::new());
        let other = limiter.clone();
        let t = thread::spawn(move || other.try_acquire().ok());
        let mine = limiter.try_acquire().ok();
        let theirs = t.join().unwrap();
        assert!(mine.is_some() ^ theirs.is_some());
        assert_eq!(limiter.in_flight(), 1);
        drop((mine, theirs));
        assert_eq!(limiter.in_flight(), 0);
    });
}

#[test]
fn a_limit_stored_by_a_finishing_request_never_loses_a_racing_admission() {
    loom::model(|| {
        let limiter = AdaptiveLimiter::with_clock(twitchy(2), ManualClock::new());
        let held = limiter.try_acquire().unwrap();
        // Dropped without an outcome: a drop, so the limit backs off to 1.
        let t = thread::spawn(move || drop(held));
        let mine = limiter.try_acquire();
        t.join().unwrap();
        let mine = mine.expect("under the limit whichever came first");
        assert_eq!(limiter.limit(), 1, "the backed-off limit was stored");
        assert_eq!(limiter.in_flight(), 1, "the admission was kept");
        mine.success();
        assert_eq!(limiter.in_flight(), 0);
    });
}

#[test]
fn concurrent_reports_store_the_algorithms_last_limit() {
    loom::model(|| {
        let limiter = AdaptiveLimiter::with_clock(twitchy(3), ManualClock::new());
        let a = limiter.try_acquire().unwrap();
        let b = limiter.try_acquire().unwrap();
        let t = thread::spawn(move || a.dropped());
        b.dropped();
        t.join().unwrap();
        // 3 × 0.9 × 0.9 = 2.43: whichever order, the word holds the
        // algorithm's final answer, not an earlier one stored late.
        assert_eq!(limiter.limit(), 2);
        assert_eq!(limiter.in_flight(), 0);
    });
}

#[test]
fn racing_first_admissions_of_a_new_key_share_one_state() {
    loom::model(|| {
        let keys = loom::sync::Arc::new(KeyedAdaptiveLimiter::with_clock(
            one(),
            NonZeroUsize::new(4).unwrap(),
            ManualClock::new(),
        ));
        let other = loom::sync::Arc::clone(&keys);
        let t = thread::spawn(move || other.try_acquire(&7u32).ok());
        let mine = keys.try_acquire(&7u32).ok();
        let theirs = t.join().unwrap();
        assert!(mine.is_some() ^ theirs.is_some(), "one state, limit 1");
        assert_eq!(keys.len(), 1);
        drop((mine, theirs));
        assert_eq!(keys.in_flight(&7u32), 0);
    });
}

#[test]
fn a_new_key_racing_the_release_of_the_only_stored_one() {
    loom::model(|| {
        let keys = loom::sync::Arc::new(KeyedAdaptiveLimiter::with_clock(
            one(),
            NonZeroUsize::new(1).unwrap(),
            ManualClock::new(),
        ));
        let held = keys.try_acquire(&1u32).unwrap();
        let t = thread::spawn(move || held.success());
        // Either key 1 is idle and replaced, or it is still held and key 2
        // is admitted on the shard's overflow state (free until now):
        // never refused, never both.
        let two = keys
            .try_acquire(&2u32)
            .expect("a new key is never refused here");
        t.join().unwrap();
        assert_eq!(keys.len(), 1);
        let stored = keys.limit(&2u32).is_some();
        assert_eq!(stored, keys.overflowed() == 0);
        assert_eq!(keys.limit(&1u32).is_some(), !stored);
        assert_eq!(keys.in_flight(&2u32), u32::from(stored));
        drop(two);
        assert_eq!(keys.in_flight(&1u32) + keys.in_flight(&2u32), 0);
    });
}
