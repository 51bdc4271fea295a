//! Unit tests of the classifier: consistent verdicts for any traffic and
//! any times, counters summed over threads, typed configuration errors,
//! time going backwards, the coin, and a drop that explains itself.

use super::*;
use crate::random::{ConstantRandom, SeededRandom};
use std::net::{Ipv4Addr, SocketAddrV4};

fn t4(src: [u8; 4], sp: u16, dst: [u8; 4], dp: u16) -> FourTuple {
    FourTuple::v4(
        SocketAddrV4::new(Ipv4Addr::from(src), sp),
        SocketAddrV4::new(Ipv4Addr::from(dst), dp),
    )
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

    /// Any traffic, with time jumping back and forth: no panic, every
    /// packet counted once, and every limited verdict consistent (its
    /// generalisation sits at its level, its rate is over the limit).
    #[test]
    fn verdicts_are_consistent_for_any_traffic(
        limit in 1u64..200,
        hashes in 1usize..=5,
        packets in proptest::collection::vec((0u8..4, 0u16..3, 0u8..2, -2_000_000i64..20_000_000), 1..300),
    ) {
        let rake = Classifier::builder(limit)
            .shape(Shape::try_new(hashes, 16, weir_limits::Layout::Rows).unwrap())
            .seed(5)
            .random(SeededRandom::new(5))
            .build()
            .unwrap();
        let mut now: u64 = 1_000_000_000;
        for &(host, sport, v6, step) in &packets {
            now = now.saturating_add_signed(step);
            let tuple = if v6 == 0 {
                t4([10, 0, host / 2, host], 1000 + sport, [10, 9, 9, 9], 53)
            } else {
                FourTuple::from_socket_addrs(
                    std::net::SocketAddr::new(std::net::IpAddr::V6(std::net::Ipv6Addr::new(0x2001, 0xdb8, u16::from(host / 2), 0, 0, 0, 0, u16::from(host))), 1000 + sport),
                    "[2001:db8:ffff::1]:53".parse().unwrap(),
                )
            };
            if let Some(why) = rake.classify_at(&tuple, Timestamp::from_nanos(now)).limited() {
                proptest::prop_assert_eq!(why.generalisation.level(), why.level);
                proptest::prop_assert!(why.rate > why.limit);
                proptest::prop_assert_eq!(why.limit, FixedRate::from_per_second(limit));
            }
        }
        proptest::prop_assert_eq!(rake.stats().total(), packets.len() as u64);
    }

}

#[test]
fn stats_sum_every_thread() {
    let rake = std::sync::Arc::new(Classifier::builder(1_000_000).seed(1).build().unwrap());
    let threads: Vec<_> = (0..3u64)
        .map(|i| {
            let rake = std::sync::Arc::clone(&rake);
            std::thread::spawn(move || {
                let t = t4([10, 0, 0, i as u8], 1, [10, 0, 0, 200], 2);
                for k in 0..1000 {
                    let _ = rake.classify_at(&t, Timestamp::from_nanos(k * 10_000_000));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let s = rake.stats();
    assert_eq!((s.total(), s.unlimited), (3000, 3000));
}

#[test]
fn classifier_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Classifier>();
    check::<Classifier<weir_limits::clock::ManualClock, SeededRandom>>();
}

#[test]
fn bad_configurations_are_typed_errors() {
    assert_eq!(Classifier::try_new(0).unwrap_err(), ConfigError::ZeroLimit);
    assert_eq!(
        Classifier::builder(1)
            .window(Duration::ZERO)
            .build()
            .unwrap_err(),
        ConfigError::Limits(weir_limits::ConfigError::ZeroWindow)
    );
    assert_eq!(
        Classifier::builder(1).window_growth(0).build().unwrap_err(),
        ConfigError::ZeroWindowGrowth
    );
    assert_eq!(
        Classifier::builder(1)
            .window(Duration::from_secs(1 << 40))
            .window_growth(1 << 20)
            .build()
            .unwrap_err(),
        ConfigError::Limits(weir_limits::ConfigError::WindowTooLong)
    );
    // One sketch of 2³⁰ cells is valid; twelve are more than the
    // classifier's table addresses: an error, not an allocation abort.
    let huge = Shape::try_new(1, 1 << 30, weir_limits::Layout::Rows).unwrap();
    assert!(matches!(
        Classifier::builder(1).shape(huge).build(),
        Err(ConfigError::Limits(
            weir_limits::ConfigError::TooManyCells { .. }
        ))
    ));
    // A shape without a seed keeps the one set before it.
    let shape = Shape::rows::<2, 64>();
    let seeded = |b: ClassifierBuilder| b.build().unwrap().locator().shape().seed();
    assert_eq!(seeded(Classifier::builder(1).seed(3).shape(shape)), Some(3));
    assert_eq!(
        seeded(Classifier::builder(1).seed(3).shape(shape.with_seed(4))),
        Some(4)
    );
    assert!(matches!(
        Classifier::builder(1)
            .prefixes(Prefixes {
                v6_subnet: 129,
                v6_exact: 130,
                ..Prefixes::default()
            })
            .build(),
        Err(ConfigError::InvalidPrefix { family: "IPv6", .. })
    ));
    let rake = Classifier::try_new(5).unwrap();
    assert_eq!(rake.set_limit(0), Err(ConfigError::ZeroLimit));
    assert_eq!(rake.limit(), FixedRate::from_per_second(5));
}

#[test]
fn time_going_backwards_is_no_time() {
    let rake = Classifier::builder(1_000_000).seed(3).build().unwrap();
    let t = t4([10, 0, 0, 1], 1, [10, 0, 0, 2], 2);
    let _ = rake.classify_at(&t, Timestamp::from_nanos(50_000_000));
    // Earlier timestamps: rates only grow by 1/window, never wrap.
    for _ in 0..10 {
        assert!(rake.classify_at(&t, Timestamp::from_nanos(1_000)).is_pass());
    }
    let r = rake
        .estimate_at(
            &t,
            Generalisation::ALL[0],
            Timestamp::from_nanos(50_000_000),
        )
        .as_f64();
    assert!((r - 110.0).abs() < 1.0, "{r}");
}

#[test]
fn coin_decides_limited_packets() {
    let t = t4([10, 0, 0, 1], 1, [10, 0, 0, 2], 2);
    for (coin, expect_pass) in [(0, true), (u32::MAX, false)] {
        let rake = Classifier::builder(10)
            .seed(1)
            .random(ConstantRandom(coin))
            .build()
            .unwrap();
        let v: Vec<Verdict> = (0..50)
            .map(|i| rake.classify_at(&t, Timestamp::from_nanos(i * 1000)))
            .collect();
        // The first packet makes 10 pps: at, not over, the limit.
        assert_eq!(v[0], Verdict::Pass);
        assert!(v[1..].iter().all(|v| v.is_pass() == expect_pass), "{v:?}");
        let s = rake.stats();
        assert_eq!(s.total(), 50);
        assert_eq!(s.unlimited, 1);
    }
}

#[test]
fn a_drop_explains_itself() {
    let rake = Classifier::builder(10)
        .seed(1)
        .random(ConstantRandom(u32::MAX))
        .build()
        .unwrap();
    let t = t4([10, 0, 0, 1], 53, [10, 0, 0, 2], 53);
    let mut last = Verdict::Pass;
    for i in 0..5 {
        last = rake.classify_at(&t, Timestamp::from_nanos(i * 1000));
    }
    let why = *last.limited().unwrap();
    assert_eq!(why.level, 0);
    assert_eq!(why.generalisation, Generalisation::ALL[0]);
    assert_eq!(why.limit, FixedRate::from_per_second(10));
    assert!(why.rate.whole_per_second() >= 49, "{why}");
    assert!(
        last.to_string()
            .starts_with("drop: level 0 (src:sport -> dst:dport) at 50.0 pps"),
        "{last}"
    );
}
