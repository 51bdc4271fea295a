//! The rakelimit paper's scenarios (and rakelimit's own attack-propagation
//! check), defined once for the acceptance tests and the bench report, and
//! the report's per-second CSV of an outcome.

use crate::sim::{Addr, Port, Scenario, ScenarioOutcome, Stream};
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

impl ScenarioOutcome {
    /// Per-second series as CSV: `second,stream,received,forwarded` (the
    /// bench report's files).
    pub fn to_csv(&self) -> String {
        let mut out = String::from("second,stream,received,forwarded\n");
        for s in &self.streams {
            for (i, (r, f)) in s.received.iter().zip(&s.forwarded).enumerate() {
                out.push_str(&format!("{i},{},{r},{f}\n", s.name));
            }
        }
        out
    }
}

/// All four, as `(file stem, title, limit, scenario)`.
pub fn all() -> Vec<(&'static str, &'static str, u64, Scenario)> {
    let fixed = |s: &str| Addr::Fixed(s.parse().unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED)));
    let any4 = Addr::Random {
        base: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        prefix: 0,
    };
    vec![
        (
            "hhh-scenario-1",
            "Scenario 1: 100 pps flood from one address and port, 5 pps legit from the same /24, limit 25 pps",
            25,
            Scenario {
                duration: Duration::from_secs(60),
                seed: 1,
                streams: vec![
                    Stream::new(
                        "flood",
                        100,
                        fixed("10.1.1.1"),
                        Port::Fixed(80),
                        fixed("192.0.2.1"),
                        Port::Fixed(53),
                    ),
                    Stream::new(
                        "legit",
                        5,
                        fixed("10.1.1.2"),
                        Port::Fixed(80),
                        fixed("192.0.2.1"),
                        Port::Fixed(53),
                    ),
                ],
            },
        ),
        (
            "hhh-scenario-2",
            "Scenario 2: reflection attack (random sources, source port 53) at 100 pps beside 100 pps of random 4-tuples, limit 25 pps",
            25,
            Scenario {
                duration: Duration::from_secs(60),
                seed: 2,
                streams: vec![
                    Stream::new(
                        "attack",
                        100,
                        any4,
                        Port::Fixed(53),
                        fixed("192.0.2.1"),
                        Port::Fixed(443),
                    ),
                    Stream::new("random", 100, any4, Port::Random, any4, Port::Random),
                ],
            },
        ),
        (
            "hhh-scenario-3",
            "Scenario 3: 1 M pps for 5 s against a limit of 250 k pps",
            250_000,
            Scenario {
                duration: Duration::from_secs(5),
                seed: 3,
                streams: vec![Stream::new(
                    "flood",
                    1_000_000,
                    fixed("10.9.9.9"),
                    Port::Fixed(1234),
                    fixed("192.0.2.1"),
                    Port::Fixed(443),
                )],
            },
        ),
        (
            "hhh-attack-propagation",
            "rakelimit's attack propagation: 3x the limit from 7.6.5.4:53 beside limit/2 from 7.6.5.4 on random ports, limit 2645 pps",
            2645,
            Scenario {
                duration: Duration::from_secs(10),
                seed: 6,
                streams: vec![
                    Stream::new(
                        "attack",
                        3 * 2645,
                        fixed("7.6.5.4"),
                        Port::Fixed(53),
                        fixed("1.2.3.4"),
                        Port::Fixed(443),
                    ),
                    Stream::new(
                        "legit",
                        2645 / 2,
                        fixed("7.6.5.4"),
                        Port::Random,
                        fixed("1.2.3.4"),
                        Port::Fixed(443),
                    ),
                ],
            },
        ),
    ]
}

fn find(stem: &str) -> (u64, Scenario) {
    all()
        .into_iter()
        .find(|(s, ..)| *s == stem)
        .map(|(_, _, limit, scenario)| (limit, scenario))
        .expect("a scenario of the paper")
}

/// Scenario 1: a 100 pps flood from one address and port beside 5 pps
/// of legitimate traffic from the same /24; limit 25 pps.
///
/// ```
/// let (limit, scenario) = weir_hhh::test_util::paper::single_flood();
/// assert_eq!((limit, scenario.streams.len()), (25, 2));
/// ```
pub fn single_flood() -> (u64, Scenario) {
    find("hhh-scenario-1")
}

/// Scenario 2: a 100 pps reflection attack from random addresses and
/// one source port beside 100 pps of random 4-tuples; limit 25 pps.
pub fn reflection() -> (u64, Scenario) {
    find("hhh-scenario-2")
}

/// Scenario 3: 1 M pps for 5 s against a 250 k pps limit.
pub fn high_rate() -> (u64, Scenario) {
    find("hhh-scenario-3")
}

/// rakelimit's attack propagation: an attacker at 3× the limit beside
/// legitimate traffic at half the limit from the same address.
pub fn attack_propagation() -> (u64, Scenario) {
    find("hhh-attack-propagation")
}
