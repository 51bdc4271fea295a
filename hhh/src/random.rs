//! Where the classifier's coin flips come from.
//!
//! A packet over the limit passes with probability `limit / rate`. The coin
//! is a 32-bit number from a [`RandomSource`]: [`ThreadRandom`] (the default:
//! a per-thread generator, no shared state, seeded from the OS-randomised
//! std hasher), [`SeededRandom`] (one shared seeded sequence, for
//! reproducible simulations), or [`ConstantRandom`] (the same number every
//! time: `u32::MAX` drops every limited packet, `0` passes every one).
//! Implement [`RandomSource`] for anything else.
//!
//! The coin is only drawn for packets over the limit, so its cost is off the
//! path of ordinary traffic.

use crate::sync::{AtomicU64, Ordering};
use std::cell::Cell;
use std::hash::{BuildHasher, RandomState};

/// A source of uniformly distributed 32-bit numbers, shared between threads
/// ([`ClassifierBuilder::random`](crate::ClassifierBuilder::random)).
///
/// ```
/// use std::sync::atomic::{AtomicU32, Ordering};
/// use weir_hhh::Classifier;
/// use weir_hhh::random::RandomSource;
///
/// /// A coin a test sets by hand.
/// #[derive(Default)]
/// struct Coin(AtomicU32);
///
/// impl RandomSource for Coin {
///     fn next_u32(&self) -> u32 {
///         self.0.load(Ordering::Relaxed)
///     }
/// }
///
/// let rake = Classifier::builder(100).random(Coin::default()).build().unwrap();
/// # let _ = rake;
/// ```
pub trait RandomSource: Send + Sync {
    /// The next number.
    fn next_u32(&self) -> u32;
}

impl<R: RandomSource + ?Sized> RandomSource for std::sync::Arc<R> {
    fn next_u32(&self) -> u32 {
        (**self).next_u32()
    }
}

use weir_primitives::random::SplitMix64;

const GOLDEN: u64 = SplitMix64::GOLDEN;

/// A random 64-bit seed from the OS-randomised std hasher.
pub(crate) fn random_seed() -> u64 {
    RandomState::new().hash_one(0x5eed_u64)
}

/// The default source: one SplitMix64 generator per thread, seeded at random.
///
/// ```
/// use weir_hhh::random::{RandomSource, ThreadRandom};
///
/// let r = ThreadRandom;
/// assert_ne!((r.next_u32(), r.next_u32()), (r.next_u32(), r.next_u32()));
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct ThreadRandom;

thread_local! {
    static THREAD_STATE: Cell<u64> = Cell::new(random_seed());
}

impl RandomSource for ThreadRandom {
    #[inline]
    fn next_u32(&self) -> u32 {
        THREAD_STATE.with(|s| {
            let next = s.get().wrapping_add(GOLDEN);
            s.set(next);
            (SplitMix64::mix(next) >> 32) as u32
        })
    }
}

/// One seeded SplitMix64 sequence shared by every thread (an atomic counter):
/// the same seed and the same call order give the same numbers.
///
/// ```
/// use weir_hhh::random::{RandomSource, SeededRandom};
///
/// let (a, b) = (SeededRandom::new(7), SeededRandom::new(7));
/// assert_eq!(a.next_u32(), b.next_u32());
/// ```
#[derive(Debug)]
pub struct SeededRandom {
    state: AtomicU64,
}

impl SeededRandom {
    /// A sequence starting from `seed`.
    pub fn new(seed: u64) -> Self {
        Self {
            state: AtomicU64::new(seed),
        }
    }
}

impl RandomSource for SeededRandom {
    #[inline]
    fn next_u32(&self) -> u32 {
        let next = self
            .state
            .fetch_add(GOLDEN, Ordering::Relaxed)
            .wrapping_add(GOLDEN);
        (SplitMix64::mix(next) >> 32) as u32
    }
}

/// The same number every time (for tests that pin the coin).
///
/// ```
/// use weir_hhh::random::{ConstantRandom, RandomSource};
///
/// assert_eq!(ConstantRandom(u32::MAX).next_u32(), u32::MAX);
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct ConstantRandom(pub u32);

impl RandomSource for ConstantRandom {
    #[inline]
    fn next_u32(&self) -> u32 {
        self.0
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn seeded_numbers_are_roughly_uniform() {
        let r = SeededRandom::new(1);
        let n = 100_000;
        let below_half = (0..n).filter(|_| r.next_u32() < u32::MAX / 2).count();
        assert!(
            (below_half as f64 / n as f64 - 0.5).abs() < 0.01,
            "{below_half}"
        );
    }

    #[test]
    fn threads_get_different_sequences() {
        let here: Vec<u32> = (0..4).map(|_| ThreadRandom.next_u32()).collect();
        let there = std::thread::spawn(|| {
            (0..4)
                .map(|_| ThreadRandom.next_u32())
                .collect::<Vec<u32>>()
        })
        .join()
        .unwrap();
        assert_ne!(here, there);
    }
}
