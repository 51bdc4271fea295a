//! The paper's scenarios and rakelimit's own checks, on a simulated clock.

use std::net::IpAddr;
use std::time::Duration;
use weir_hhh::clock::ManualClock;
use weir_hhh::clock::Timestamp;
use weir_hhh::random::{ConstantRandom, RandomSource, SeededRandom};
use weir_hhh::sim::{self, Addr, Port, Scenario, Stream};
use weir_hhh::test_util::paper;
use weir_hhh::{AddrScope, Classifier, Generalisation, PortScope, Verdict};

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn fixed(s: &str) -> Addr {
    Addr::Fixed(ip(s))
}

fn classifier<R: RandomSource>(limit: u64, random: R) -> Classifier<ManualClock, R> {
    Classifier::builder(limit)
        .seed(0x5eed)
        .clock(ManualClock::new())
        .random(random)
        .build()
        .unwrap()
}

/// Scenario 1: a 100 pps flood from one address and port, 5 pps of
/// legitimate traffic from another address of the same /24.
#[test]
fn scenario_1_single_address_and_port() {
    let (limit, scenario) = paper::single_flood();
    let rake = classifier(limit, SeededRandom::new(1));
    let out = sim::run(&scenario, &rake);
    let flood = out.stream("flood").unwrap();
    let legit = out.stream("legit").unwrap();
    let rate = flood.forwarded_rate_after(1);
    assert!((rate - 25.0).abs() <= 2.5, "flood forwarded at {rate} pps");
    assert_eq!(
        flood.dropped_at_level[1..],
        [0; 4],
        "flood limited above level 0"
    );
    assert_eq!(
        legit.dropped_total(),
        0,
        "legit lost packets: {:?}",
        legit.first_drop
    );
    assert_eq!(legit.received_total(), 300);
}

/// Scenario 2: a reflection attack (random sources, one source port) beside
/// fully random 4-tuples.
#[test]
fn scenario_2_reflection_attack() {
    let (limit, scenario) = paper::reflection();
    let rake = classifier(limit, SeededRandom::new(2));
    let out = sim::run(&scenario, &rake);
    let attack = out.stream("attack").unwrap();
    let random = out.stream("random").unwrap();
    let rate = attack.forwarded_rate_after(1);
    assert!((rate - 25.0).abs() <= 2.5, "attack forwarded at {rate} pps");
    // Caught where it aggregates: any source, source port 53.
    assert_eq!(attack.dropped_total(), attack.dropped_at_level[2]);
    let (_, why) = attack.first_drop.unwrap();
    assert_eq!(
        why.generalisation,
        Generalisation {
            src: AddrScope::Any,
            src_port: PortScope::Exact,
            dst_port: PortScope::Exact,
        }
    );
    assert_eq!(
        random.dropped_total(),
        0,
        "random lost packets: {:?}",
        random.first_drop
    );
}

/// Scenario 3: one million packets per second for five seconds against a
/// limit of 250 000.
#[test]
fn scenario_3_high_rate_flood() {
    let (limit, scenario) = paper::high_rate();
    let rake = classifier(limit, SeededRandom::new(3));
    let out = sim::run(&scenario, &rake);
    let flood = &out.streams[0];
    assert_eq!(flood.received, vec![1_000_000; 5]);
    for (second, &f) in flood.forwarded.iter().enumerate().skip(1) {
        let off = (f as f64 - 250_000.0).abs() / 250_000.0;
        assert!(off < 0.02, "second {second}: forwarded {f}");
    }
}

/// rakelimit's TestRate: one 4-tuple at twice the limit is accepted at the
/// limit ±5%, and limited at level 0 only.
#[test]
fn single_tuple_at_twice_the_limit_is_accepted_at_the_limit() {
    let rake = classifier(100, SeededRandom::new(4));
    let scenario = Scenario {
        duration: Duration::from_secs(10),
        seed: 4,
        streams: vec![Stream::new(
            "one",
            200,
            fixed("7.6.5.4"),
            Port::Fixed(53),
            fixed("1.2.3.4"),
            Port::Fixed(443),
        )],
    };
    let out = sim::run(&scenario, &rake);
    let s = &out.streams[0];
    let rate = s.forwarded_total() as f64 / 10.0;
    assert!((rate - 100.0).abs() <= 5.0, "accepted {rate} pps");
    assert_eq!(s.dropped_total(), s.dropped_at_level[0]);
    let stats = rake.stats();
    assert_eq!(
        stats.levels[1..]
            .iter()
            .map(|l| l.passed + l.dropped)
            .sum::<u64>(),
        0
    );
}

/// rakelimit's TestGeneralisations: for each of the twelve generalisations
/// (IPv4 and IPv6), traffic just over the limit that varies in exactly the
/// generalised fields is dropped at exactly that generalisation's level.
#[test]
fn each_generalisation_is_limited_at_its_own_level() {
    const LIMIT: u64 = 100;
    for (src, subnet_prefix, dst) in [
        ("7.6.5.4", 24, "1.2.3.4"),
        ("1122:3344:5566:7788::aabb", 48, "8877:6655:4433:2211::ffee"),
    ] {
        for (i, g) in Generalisation::ALL.iter().enumerate() {
            let rake = classifier(LIMIT, ConstantRandom(u32::MAX));
            let src_addr = match g.src {
                AddrScope::Exact => fixed(src),
                AddrScope::Subnet => Addr::Random {
                    base: ip(src),
                    prefix: subnet_prefix,
                },
                AddrScope::Any => Addr::Random {
                    base: ip(src),
                    prefix: 0,
                },
            };
            let port = |scope: PortScope, p: u16| match scope {
                PortScope::Exact => Port::Fixed(p),
                PortScope::Any => Port::Random,
            };
            // Long enough for level 4's 1.6 s window to converge.
            let seconds = 20;
            let scenario = Scenario {
                duration: Duration::from_secs(seconds),
                seed: i as u64,
                streams: vec![Stream::new(
                    "s",
                    LIMIT + 1,
                    src_addr,
                    port(g.src_port, 53),
                    fixed(dst),
                    port(g.dst_port, 443),
                )],
            };
            let out = sim::run(&scenario, &rake);
            let s = &out.streams[0];
            let level = usize::from(g.level());
            assert_eq!(
                s.dropped_total(),
                s.dropped_at_level[level],
                "{src} {g}: drops by level {:?}",
                s.dropped_at_level
            );
            let (_, why) = s
                .first_drop
                .unwrap_or_else(|| panic!("{src} {g}: nothing dropped"));
            assert_eq!(why.generalisation, *g, "{src}: {why}");
            // Once converged, every packet is dropped.
            let tail = &s.forwarded[10..];
            assert!(
                tail.iter().all(|&f| f == 0),
                "{src} {g}: forwarded {tail:?}"
            );
        }
    }
}

/// rakelimit's TestAttackPropagation: an attacker at three times the limit
/// never costs legitimate traffic from the same address (other ports) a
/// packet, even with every limited packet dropped.
#[test]
fn attacker_at_three_times_the_limit_never_costs_legit_a_packet() {
    let (limit, scenario) = paper::attack_propagation();
    let rake = classifier(limit, ConstantRandom(u32::MAX));
    let out = sim::run(&scenario, &rake);
    let legit = out.stream("legit").unwrap();
    assert_eq!(
        legit.dropped_total(),
        0,
        "first legit drop: {:?}",
        legit.first_drop
    );
    let attack = out.stream("attack").unwrap();
    assert_eq!(attack.dropped_total(), attack.dropped_at_level[0]);
    assert!(attack.dropped_total() > 0);
}

/// The same attack with rakelimit's single window shows why aggregates get
/// longer windows: legit traffic is hit while the attack ramps up.
#[test]
fn equal_windows_let_a_starting_attack_hit_its_neighbours() {
    const LIMIT: u64 = 2645;
    let rake = Classifier::builder(LIMIT)
        .seed(0x5eed)
        .window_growth(1)
        .random(ConstantRandom(u32::MAX))
        .build()
        .unwrap();
    let scenario = Scenario {
        duration: Duration::from_secs(2),
        seed: 6,
        streams: vec![
            Stream::new(
                "attack",
                3 * LIMIT,
                fixed("7.6.5.4"),
                Port::Fixed(53),
                fixed("1.2.3.4"),
                Port::Fixed(443),
            ),
            Stream::new(
                "legit",
                LIMIT / 2,
                fixed("7.6.5.4"),
                Port::Random,
                fixed("1.2.3.4"),
                Port::Fixed(443),
            ),
        ],
    };
    let out = sim::run(&scenario, &rake);
    let legit = out.stream("legit").unwrap();
    assert!(legit.dropped_total() > 0);
    let (at, why) = legit.first_drop.unwrap();
    assert!(at < Duration::from_millis(100), "{at:?}");
    assert_eq!(why.level, 1);
}

/// Scenario 1 with the classifier reading its (manual) clock instead of
/// being handed the time: the two entry points agree.
#[test]
fn classify_reads_the_injected_clock() {
    let clock = ManualClock::new();
    let a = Classifier::builder(10)
        .seed(9)
        .clock(clock.clone())
        .random(ConstantRandom(u32::MAX))
        .build()
        .unwrap();
    let b = Classifier::builder(10)
        .seed(9)
        .random(ConstantRandom(u32::MAX))
        .build()
        .unwrap();
    let t = weir_hhh::FourTuple::from_socket_addrs(
        "10.0.0.1:1".parse().unwrap(),
        "10.0.0.2:2".parse().unwrap(),
    );
    for i in 0..200u64 {
        clock.set(Duration::from_millis(100 + i * 20));
        let now = 100_000_000 + i * 20_000_000;
        assert_eq!(
            a.classify(&t),
            b.classify_at(&t, Timestamp::from_nanos(now))
        );
    }
    assert_eq!(a.stats(), b.stats());
    assert!(matches!(a.classify(&t), Verdict::Drop(_)));
}
