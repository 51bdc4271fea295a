//! Scenarios replayed through the kernel filter (test runs on a replayed
//! clock) and the classifier: the same verdicts, counters and sketch rates,
//! with every compiled program, and with the kernel's own coin.

use super::*;

/// Which verdict the kernel reached, read from its counters around one run.
fn kernel_verdict(before: &KernelStats, after: &KernelStats, passed: bool) -> Verdict {
    for level in 0..5 {
        let (b, a) = (before.levels.levels[level], after.levels.levels[level]);
        if a == b {
            continue;
        }
        // The kernel does not report the generalisation or the rate; only
        // the level is compared.
        let why = Limited {
            level: level as u8,
            generalisation: Generalisation::at_level(level as u8)[0],
            rate: FixedRate::ZERO,
            limit: FixedRate::ZERO,
        };
        assert_eq!(a.passed - b.passed, u64::from(passed));
        return if passed {
            Verdict::Sampled(why)
        } else {
            Verdict::Drop(why)
        };
    }
    assert_eq!(after.levels.unlimited, before.levels.unlimited + 1);
    assert!(passed, "an unlimited packet was dropped");
    Verdict::Pass
}

/// Replay `scenario` through the kernel (test-run, replayed clock) and the
/// classifier, with the same coin per packet (`None`: the kernel's own
/// `bpf_get_prandom_u32` and a seeded generator in user space).
fn replay_both(
    test: &str,
    builder: impl Fn() -> ClassifierBuilder,
    scenario: &Scenario,
    pinned_coins: bool,
) -> Option<Replayed> {
    let mut filter = load_or_skip(test, builder())?;
    let coin = SharedCoin::default();
    let rake = builder().random(coin.clone()).build().unwrap();
    let epoch = rake.level_windows()[0];
    let mut coins = SplitMix64::new(99);
    let user = sim::run_with(
        scenario,
        |tuple, now| {
            coin.0
                .store((coins.next_u64() >> 32) as u32, Ordering::Relaxed);
            rake.classify_at(tuple, Timestamp::from_nanos(now))
        },
        epoch,
    );
    let mut coins = SplitMix64::new(99);
    let mut before = filter.stats().unwrap();
    let kernel = sim::run_with(
        scenario,
        |tuple, now| {
            let c = (coins.next_u64() >> 32) as u32;
            let frame = ethernet_frame(&udp_packet(tuple, b"ping"));
            let run = filter
                .test_run_at(&frame, now, pinned_coins.then_some(c))
                .unwrap();
            let after = filter.stats().unwrap();
            let v = kernel_verdict(&before, &after, run.passed());
            before = after;
            v
        },
        epoch,
    );
    let stats = filter.stats().unwrap();
    Some(Replayed {
        user,
        kernel,
        stats,
        rake,
        filter,
        end: epoch.as_nanos() as u64 + scenario.duration.as_nanos() as u64,
    })
}

/// Both sides of a replay.
struct Replayed {
    user: ScenarioOutcome,
    kernel: ScenarioOutcome,
    stats: KernelStats,
    rake: Classifier<weir_hhh::clock::MonotonicClock, SharedCoin>,
    filter: KernelFilter,
    /// The replay's last instant.
    end: u64,
}

impl Replayed {
    /// The two sides agree: the same verdict for every packet, the same
    /// per-level counts, and the same rates (`assert_same_rates`).
    fn assert_agrees(&self, name: &str, scenario: &Scenario) {
        assert_eq!(summary(&self.kernel), summary(&self.user), "{name}");
        assert_eq!(self.stats.levels, self.rake.stats(), "{name}");
        assert_same_rates(name, scenario, &self.filter, &self.rake, self.end);
    }
}

/// The kernel's sketches and the classifier's hold the same rates, bit for
/// bit, for every stream of `scenario` at `end`.
fn assert_same_rates<R: RandomSource>(
    name: &str,
    scenario: &Scenario,
    filter: &KernelFilter,
    rake: &Classifier<weir_hhh::clock::MonotonicClock, R>,
    end: u64,
) {
    for tuple in representatives(scenario) {
        for g in Generalisation::ALL {
            let k = filter.estimate_at(&tuple, g, end).unwrap();
            assert_eq!(
                k,
                rake.estimate_at(&tuple, g, Timestamp::from_nanos(end)),
                "{name}: {tuple} {g}"
            );
        }
    }
}

/// One tuple per stream: its fixed fields, and fixed stand-ins for random ones.
fn representatives(scenario: &Scenario) -> Vec<FourTuple> {
    let addr = |a: Addr| match a {
        Addr::Fixed(a) => a,
        Addr::Random { base, .. } => base,
    };
    let port = |p: Port| match p {
        Port::Fixed(p) => p,
        Port::Random => 1,
    };
    scenario
        .streams
        .iter()
        .map(|s| {
            FourTuple::from_socket_addrs(
                SocketAddr::new(addr(s.src), port(s.src_port)),
                SocketAddr::new(addr(s.dst), port(s.dst_port)),
            )
        })
        .collect()
}

fn shorten(mut s: Scenario, secs: u64) -> Scenario {
    s.duration = Duration::from_secs(secs);
    s
}

fn v6_scenario_1() -> Scenario {
    let fixed = |s: &str| Addr::Fixed(s.parse().unwrap());
    Scenario {
        duration: Duration::from_secs(20),
        seed: 11,
        streams: vec![
            Stream::new(
                "flood",
                100,
                fixed("2001:db8:1:1::1"),
                Port::Fixed(80),
                fixed("2001:db8:ffff::1"),
                Port::Fixed(53),
            ),
            Stream::new(
                "legit",
                5,
                fixed("2001:db8:1:1::2"),
                Port::Fixed(80),
                fixed("2001:db8:ffff::1"),
                Port::Fixed(53),
            ),
            Stream::new(
                "random",
                20,
                Addr::Random {
                    base: "2001:db8::".parse().unwrap(),
                    prefix: 32,
                },
                Port::Random,
                fixed("2001:db8:ffff::1"),
                Port::Random,
            ),
        ],
    }
}

/// Per stream: packets sent, passed and dropped at each level.
fn summary(o: &ScenarioOutcome) -> Vec<(String, u64, u64, [u64; 5])> {
    o.streams
        .iter()
        .map(|s| {
            (
                s.name.clone(),
                s.received_total(),
                s.forwarded_total(),
                s.dropped_at_level,
            )
        })
        .collect()
}

#[test]
fn kernel_and_classifier_agree_packet_for_packet() {
    let (_, _, limit1, s1) = paper::all().remove(0);
    let (_, _, limit2, s2) = paper::all().remove(1);
    type MakeBuilder = Box<dyn Fn(u64) -> ClassifierBuilder>;
    let cases: Vec<(&str, u64, Scenario, MakeBuilder)> = vec![
        (
            "paper scenario 1 (IPv4), default configuration",
            limit1,
            shorten(s1, 20),
            Box::new(|limit| Classifier::builder(limit).seed(1)),
        ),
        (
            "paper scenario 2 (reflection, IPv4), 3 x 1000 cells (no power of two), window 50 ms x 3 per level",
            limit2,
            shorten(s2, 20),
            Box::new(|limit| {
                Classifier::builder(limit)
                    .seed(2)
                    .shape(Shape::try_new(3, 1000, Layout::Rows).unwrap())
                    .window(Duration::from_millis(50))
                    .window_growth(3)
            }),
        ),
        (
            "paper scenario 1 (IPv4), blocked layout 3 x 1000",
            limit1,
            shorten(paper::all().remove(0).3, 10),
            Box::new(|limit| {
                Classifier::builder(limit)
                    .seed(4)
                    .shape(Shape::try_new(3, 1000, Layout::Blocked).unwrap())
            }),
        ),
        (
            "paper scenario 1 (IPv4), blocked layout 2 x 1024 (a program compiled for it)",
            limit1,
            shorten(paper::all().remove(0).3, 10),
            Box::new(|limit| {
                Classifier::builder(limit)
                    .seed(5)
                    .shape(Shape::blocked::<2, 1024>())
            }),
        ),
        (
            "scenario 1 in IPv6 with random /32 neighbours, /64 as one host",
            25,
            v6_scenario_1(),
            Box::new(|limit| {
                Classifier::builder(limit).seed(3).prefixes(Prefixes {
                    v6_exact: 64,
                    ..Prefixes::default()
                })
            }),
        ),
    ];
    for (name, limit, scenario, builder) in cases {
        let Some(replayed) = replay_both(
            "kernel_and_classifier_agree_packet_for_packet",
            || builder(limit),
            &scenario,
            true,
        ) else {
            return;
        };
        replayed.assert_agrees(name, &scenario);
        assert_eq!(replayed.stats.unparsed, 0, "{name}");
        // The scenario must exercise the limiter, or agreement is trivial.
        let dropped = replayed.rake.stats().dropped();
        assert!(dropped > 100, "{name}: {:?}", replayed.rake.stats());
        eprintln!(
            "{name}: identical verdicts for {} packets",
            replayed.stats.levels.total()
        );
    }
}

/// Every program the object holds for a common layout loads (the verifier
/// accepts it) and agrees with the classifier; the agreement test above runs
/// only the default's and one blocked layout's.
#[test]
fn every_compiled_program_loads_and_agrees_with_the_classifier() {
    let (_, _, limit, s1) = paper::all().remove(0);
    let scenario = shorten(s1, 6);
    let shapes = [
        Shape::rows::<1, 1024>(),
        Shape::rows::<3, 1024>(),
        Shape::rows::<4, 512>(),
        Shape::blocked::<1, 1024>(),
        Shape::blocked::<4, 512>(),
    ];
    for shape in shapes {
        let Some(replayed) = replay_both(
            "every_compiled_program_loads_and_agrees_with_the_classifier",
            || Classifier::builder(limit).seed(6).shape(shape),
            &scenario,
            true,
        ) else {
            return;
        };
        let name = format!("{shape:?}");
        replayed.assert_agrees(&name, &scenario);
        let dropped = replayed.rake.stats().dropped();
        assert!(dropped > 0, "{name}: {:?}", replayed.rake.stats());
    }
}

#[test]
fn kernel_random_coin_holds_the_same_rates_as_the_classifier() {
    let (_, _, limit, s1) = paper::all().remove(0);
    let scenario = shorten(s1, 60);
    let Some(Replayed { user, kernel, .. }) = replay_both(
        "kernel_random_coin_holds_the_same_rates_as_the_classifier",
        || Classifier::builder(limit).seed(5),
        &scenario,
        false,
    ) else {
        return;
    };
    // Two samples of one process: after the first second the flood passes
    // with probability ~limit/100 = 1/4, a binomial over ~5 900 packets
    // (sd ~0.6 pps; seven 30-second runs of the kernel spread with sd 1.3
    // pps, so ~0.9 here). 4 pps is over 4 sd from the limit.
    let rate = |o: &ScenarioOutcome, s: &str| o.stream(s).unwrap().forwarded_rate_after(1);
    let (k, u) = (rate(&kernel, "flood"), rate(&user, "flood"));
    assert!(
        (k - u).abs() < 5.0,
        "flood forwarded {k:.1} pps in the kernel, {u:.1} in user space"
    );
    assert!(
        (k - limit as f64).abs() < 4.0,
        "flood forwarded {k:.1} pps against a limit of {limit}"
    );
    let legit = kernel.stream("legit").unwrap();
    assert_eq!(
        legit.dropped_total(),
        0,
        "legitimate packets dropped in the kernel"
    );
}
