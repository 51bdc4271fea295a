//! Loom models of weir-rate's shared structures: every interleaving (up to
//! `LOOM_MAX_PREEMPTIONS` preemptions) of a few threads. Run with
//! `cargo xtask loom`.
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;
use std::num::NonZeroU32;
use std::time::Duration;
use weir_limits::clock::ManualClock;
use weir_rate::{Gcra, KeyedLimiter, Quota, SketchLimiter};
use weir_rate::{Layout, Shape};

fn sketch(burst: u32, slots: usize) -> SketchLimiter<ManualClock> {
    let quota =
        Quota::per_second(NonZeroU32::new(1).unwrap()).allow_burst(NonZeroU32::new(burst).unwrap());
    let shape = Shape::try_new(2, slots, Layout::Rows).unwrap().with_seed(3);
    SketchLimiter::with_clock(quota, shape, ManualClock::new())
}

#[test]
fn racing_checks_of_one_key_never_exceed_its_burst() {
    loom::model(|| {
        let limiter = Arc::new(sketch(1, 4));
        let other = Arc::clone(&limiter);
        let t = thread::spawn(move || other.check(&7u32).is_allowed());
        let mine = limiter.check(&7u32).is_allowed();
        let theirs = t.join().unwrap();
        // Burst 1 and no time passing: exactly one of the two may pass.
        assert!(mine ^ theirs, "mine {mine}, theirs {theirs}");
    });
}

#[test]
fn racing_exact_checks_of_one_key_never_exceed_its_burst() {
    loom::model(|| {
        // One shard: the two keys' checks also race for one lock, and loom
        // checks every access to the shard's map against the other's.
        let quota = Quota::per_second(NonZeroU32::new(1).unwrap());
        let limiter = Arc::new(
            KeyedLimiter::builder(Gcra::new(quota))
                .clock(ManualClock::new())
                .shards(1)
                .build(),
        );
        let other = Arc::clone(&limiter);
        let t = thread::spawn(move || [other.allows(&7u32), other.allows(&8u32)]);
        let mine = limiter.allows(&7u32);
        let [theirs, eight] = t.join().unwrap();
        assert!(mine ^ theirs, "mine {mine}, theirs {theirs}");
        assert!(eight, "another key's first check");
        assert_eq!(limiter.len(), 2);
    });
}

/// A refusal remembered while the shard is busy never outlives a refund:
/// once the refund is seen done, the key's unit is back, whichever way the
/// checks and the refund interleaved.
#[test]
fn a_remembered_refusal_never_hides_a_refund() {
    loom::model(|| {
        let quota = Quota::per_second(NonZeroU32::new(1).unwrap());
        let limiter = Arc::new(
            KeyedLimiter::builder(Gcra::new(quota))
                .clock(ManualClock::new())
                .shards(1)
                .build(),
        );
        let spent = limiter.check(&1u32);
        assert!(spent.is_allowed());
        limiter.loom_mark_busy();
        let done = Arc::new(loom::sync::atomic::AtomicBool::new(false));
        let (other, finished) = (Arc::clone(&limiter), Arc::clone(&done));
        let t = thread::spawn(move || {
            other.refund(&1u32, &spent);
            finished.store(true, std::sync::atomic::Ordering::Release);
        });
        let first = limiter.allows(&1u32);
        if done.load(std::sync::atomic::Ordering::Acquire) {
            assert!(first || limiter.allows(&1u32), "the refunded unit is back");
        }
        t.join().unwrap();
    });
}

/// Nor a new limit: once the wider burst is seen set, the key's next unit
/// passes.
#[test]
fn a_remembered_refusal_never_hides_a_new_limit() {
    loom::model(|| {
        let quota = Quota::per_second(NonZeroU32::new(1).unwrap());
        let limiter = Arc::new(
            KeyedLimiter::builder(Gcra::new(quota))
                .clock(ManualClock::new())
                .shards(1)
                .build(),
        );
        assert!(limiter.check(&1u32).is_allowed());
        limiter.loom_mark_busy();
        let done = Arc::new(loom::sync::atomic::AtomicBool::new(false));
        let (other, finished) = (Arc::clone(&limiter), Arc::clone(&done));
        let t = thread::spawn(move || {
            other.set_limit(Gcra::new(quota.allow_burst(NonZeroU32::new(2).unwrap())));
            finished.store(true, std::sync::atomic::Ordering::Release);
        });
        let first = limiter.allows(&1u32);
        if done.load(std::sync::atomic::Ordering::Acquire) {
            assert!(first || limiter.allows(&1u32), "the wider burst's unit");
        }
        t.join().unwrap();
    });
}

#[test]
fn a_key_forgotten_by_a_racing_insert_comes_back_spent() {
    loom::model(|| {
        // One shard of one key: whichever check comes second makes the
        // shard forget the other key, whose spending must survive in the
        // spill sketch however the threads interleave.
        let quota = Quota::per_second(NonZeroU32::new(1).unwrap());
        let limiter = Arc::new(
            KeyedLimiter::builder(Gcra::new(quota))
                .clock(ManualClock::new())
                .shards(1)
                .max_keys(std::num::NonZeroUsize::MIN)
                .build(),
        );
        let other = Arc::clone(&limiter);
        let t = thread::spawn(move || [other.allows(&8u32), other.allows(&7u32)]);
        let mine = limiter.allows(&7u32);
        let [eight, theirs] = t.join().unwrap();
        assert!(eight, "another key's first check");
        assert!(mine ^ theirs, "mine {mine}, theirs {theirs}");
        assert_eq!(limiter.len(), 1);
    });
}

#[test]
fn a_colliding_key_never_loosens_another() {
    loom::model(|| {
        // One slot per row: keys 1 and 2 share every cell.
        let limiter = Arc::new(sketch(2, 1));
        let a = Arc::clone(&limiter);
        let b = Arc::clone(&limiter);
        let ta = thread::spawn(move || a.check(&1u32).is_allowed());
        let tb = thread::spawn(move || b.check(&1u32).is_allowed());
        let c = limiter.check(&2u32).is_allowed();
        let passed = [ta.join().unwrap(), tb.join().unwrap(), c];
        // Every cell is shared, so the three together fit a burst of 2.
        assert_eq!(passed.iter().filter(|&&p| p).count(), 2);
    });
}

#[test]
fn a_quota_change_is_never_seen_half_done() {
    loom::model(|| {
        let small = Quota::per_second(NonZeroU32::new(1).unwrap());
        let big = Quota::per_minute(NonZeroU32::new(600).unwrap())
            .allow_burst(NonZeroU32::new(3).unwrap());
        let shape = Shape::try_new(1, 2, Layout::Rows).unwrap().with_seed(3);
        let limiter = Arc::new(SketchLimiter::with_clock(small, shape, ManualClock::new()));
        let other = Arc::clone(&limiter);
        let t = thread::spawn(move || other.set_limit(big));
        let d = limiter.check_n(&1u32, 1).unwrap();
        t.join().unwrap();
        // Either the old quota (1/s, burst 1) or the new one (600/min,
        // burst 3), never a mix of the two.
        match d.limit() {
            1 => assert_eq!((d.window(), d.remaining()), (Duration::from_secs(1), 0)),
            600 => assert_eq!((d.window(), d.remaining()), (Duration::from_secs(60), 2)),
            other => panic!("torn quota: limit {other}"),
        }
        assert_eq!(limiter.quota(), big);
    });
}
