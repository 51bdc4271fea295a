//! Extreme inputs at the in-process limiters' public entry points: each
//! gets a typed error or a documented, saturated outcome, never a panic,
//! and never loosens another key's limit.

use std::num::NonZeroU32;
use weir_rate::clock::ManualClock;
use weir_rate::{Gcra, KeyedLimiter, Quota};

/// A shard count beyond any power of two a `usize` holds is capped, not
/// an overflow inside the constructor.
#[test]
fn a_huge_shard_count_is_capped() {
    let q = Quota::per_second(NonZeroU32::MIN);
    let limiter =
        KeyedLimiter::<u32, _, _>::with_shards(Gcra::new(q), ManualClock::new(), usize::MAX);
    assert!(limiter.allows(&1));
    assert!(!limiter.allows(&1));
    assert!(limiter.allows(&2));
}
