//! Pre-generated inputs, so that no benchmark times its random number
//! generator: the blog's uniform stream over 1 M `u32` keys and a Zipf
//! stream (s ≈ 1.1) over the same key space.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Zipf};

/// Run one thread a stream of these inputs, released together, as every
/// keyed table of the report does (also for ad hoc probes outside it).
pub use crate::harness::contest::run_streams;

/// Number of distinct keys in the blog's workload.
pub const KEYS: u32 = 1_000_000;

/// `len` keys drawn uniformly from `0..KEYS`, reproducibly from `seed`.
pub fn uniform(len: usize, seed: u64) -> Vec<u32> {
    let mut rng = SmallRng::seed_from_u64(seed);
    (0..len).map(|_| rng.random_range(0..KEYS)).collect()
}

/// `len` keys drawn from a Zipf distribution with exponent `s` over
/// `0..KEYS` (key 0 the most frequent), reproducibly from `seed`.
pub fn zipf(len: usize, s: f64, seed: u64) -> Vec<u32> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let dist = Zipf::new(f64::from(KEYS), s).expect("valid Zipf parameters");
    (0..len)
        .map(|_| (dist.sample(&mut rng) as u32).saturating_sub(1))
        .collect()
}

/// The next number of a xorshift generator (never zero from a non-zero
/// state): cheap enough for a load loop's keys and delays.
pub fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_keys_stay_in_range_and_are_reproducible() {
        let a = uniform(10_000, 7);
        assert!(a.iter().all(|&k| k < KEYS));
        assert_eq!(a, uniform(10_000, 7));
        assert_ne!(a, uniform(10_000, 8));
    }

    #[test]
    fn zipf_puts_most_mass_on_small_keys() {
        let keys = zipf(100_000, 1.1, 1);
        assert!(keys.iter().all(|&k| k < KEYS));
        // With s = 1.1 over 1 M keys the first 100 keys carry about half the mass.
        let head = keys.iter().filter(|&&k| k < 100).count();
        assert!(head > 30_000, "head {head}");
    }
}
