//! A slow lookup of keys' tiers behind a bounded cache: asked once per key
//! per ttl, its answers (no tier too) given back unchanged, memory within
//! the bound under a spray of new keys, recent keys kept, and tier names
//! bounded however many a lookup invents.

use proptest::prelude::*;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use weir_rate::clock::ManualClock;
use weir_rate::{CachedTierOf, TierOf};

/// A lookup that counts its calls: key `n` is in tier `t{n % 5}`, or in
/// none for multiples of 7.
fn counted() -> (
    Arc<AtomicUsize>,
    impl Fn(&str) -> Option<String> + Send + Sync,
) {
    let asked = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&asked);
    let lookup = move |key: &str| {
        counter.fetch_add(1, Ordering::Relaxed);
        let n: u64 = key.parse().unwrap();
        (!n.is_multiple_of(7)).then(|| format!("t{}", n % 5))
    };
    (asked, lookup)
}

fn expected(key: u64) -> Option<String> {
    (!key.is_multiple_of(7)).then(|| format!("t{}", key % 5))
}

fn keys(n: usize) -> NonZeroUsize {
    NonZeroUsize::new(n).unwrap()
}

#[test]
fn a_key_is_looked_up_once_per_ttl_and_no_tier_is_kept_too() {
    let (asked, lookup) = counted();
    let clock = ManualClock::new();
    let cache: CachedTierOf<String, _, _> =
        CachedTierOf::with_clock(lookup, keys(100), Duration::from_secs(10), clock.clone());
    for _ in 0..5 {
        assert_eq!(TierOf::<str>::tier_of(&cache, "3"), Some("t3"));
        assert_eq!(TierOf::<str>::tier_of(&cache, "14"), None);
    }
    assert_eq!(asked.load(Ordering::Relaxed), 2);
    clock.advance(Duration::from_secs(9));
    assert_eq!(TierOf::<str>::tier_of(&cache, "3"), Some("t3"));
    assert_eq!(asked.load(Ordering::Relaxed), 2);
    clock.advance(Duration::from_secs(1));
    assert_eq!(TierOf::<str>::tier_of(&cache, "3"), Some("t3"));
    assert_eq!(TierOf::<str>::tier_of(&cache, "14"), None);
    assert_eq!(asked.load(Ordering::Relaxed), 4);
}

#[test]
fn a_spray_of_new_keys_stays_within_the_bound_and_keeps_a_hot_key() {
    let (asked, lookup) = counted();
    let cache: CachedTierOf<String, _> =
        CachedTierOf::new(lookup, keys(1_000), Duration::from_secs(3600));
    let hot = "1".to_owned();
    for i in 0..100_000u64 {
        let sprayed = (1_000_000 + i).to_string();
        assert_eq!(
            TierOf::<str>::tier_of(&cache, sprayed.as_str()),
            expected(1_000_000 + i).as_deref()
        );
        if i.is_multiple_of(10) {
            assert_eq!(TierOf::<str>::tier_of(&cache, hot.as_str()), Some("t1"));
        }
        assert!(cache.len() <= 1_000, "{} keys held", cache.len());
    }
    // Every sprayed key asked once; the hot one once in all.
    assert_eq!(asked.load(Ordering::Relaxed), 100_000 + 1);
}

#[test]
fn tier_names_are_bounded_however_many_a_lookup_invents() {
    let invent = |key: &str| Some(format!("tier-{key}"));
    let cache: CachedTierOf<String, _> =
        CachedTierOf::new(invent, keys(10_000), Duration::from_secs(60));
    let named = (0..1_000)
        .filter(|i| TierOf::<str>::tier_of(&cache, i.to_string().as_str()).is_some())
        .count();
    assert_eq!(named, 64);
    assert_eq!(TierOf::<str>::tier_of(&cache, "5"), Some("tier-5"));
    assert_eq!(TierOf::<str>::tier_of(&cache, "500"), None);
}

#[test]
fn concurrent_checks_get_the_lookups_answers() {
    let (_, lookup) = counted();
    let cache: Arc<CachedTierOf<String, _>> = Arc::new(CachedTierOf::new(
        lookup,
        keys(256),
        Duration::from_millis(1),
    ));
    let threads: Vec<_> = (0..2)
        .map(|t| {
            let cache = Arc::clone(&cache);
            std::thread::spawn(move || {
                for i in 0..50_000u64 {
                    let key = (i * 7 + t) % 600;
                    let got = TierOf::<str>::tier_of(&*cache, key.to_string().as_str())
                        .map(str::to_owned);
                    assert_eq!(got, expected(key), "key {key}");
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    assert!(cache.len() <= 256);
}

proptest! {
    /// Whatever the keys, the bound and the passing of time, the cache
    /// answers as the lookup does and holds at most its bound.
    #[test]
    fn the_cache_answers_as_the_lookup_within_its_bound(
        max_keys in 1usize..300,
        steps in prop::collection::vec((0u64..500, 0u64..30), 1..400),
    ) {
        let (_, lookup) = counted();
        let clock = ManualClock::new();
        let cache: CachedTierOf<String, _, _> =
            CachedTierOf::with_clock(lookup, keys(max_keys), Duration::from_millis(100), clock.clone());
        for (key, wait_ms) in steps {
            clock.advance(Duration::from_millis(wait_ms));
            let got = TierOf::<str>::tier_of(&cache, key.to_string().as_str()).map(str::to_owned);
            prop_assert_eq!(got, expected(key));
            prop_assert!(cache.len() <= max_keys.max(2), "{} > {}", cache.len(), max_keys);
        }
    }
}
