//! The `metrics` feature: `Classifier::publish_metrics` counted into a real
//! recorder (metrics-exporter-prometheus, installed for this thread only)
//! after a known workload, every series read back from the rendered
//! Prometheus text and compared with the verdicts the classifier returned.
#![cfg(all(feature = "metrics", not(loom)))]

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusRecorder};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;
use weir_hhh::clock::{ManualClock, Timestamp};
use weir_hhh::random::{ConstantRandom, SeededRandom};
use weir_hhh::test_util::udp_packet;
use weir_hhh::{Classifier, FourTuple, Generalisation, Verdict};

/// Every sample of the rendered text: (metric, labels, value).
fn samples(recorder: &PrometheusRecorder) -> Vec<(String, HashMap<String, String>, f64)> {
    recorder
        .handle()
        .render()
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').expect("`series value`");
            let (name, labels) = match series.split_once('{') {
                Some((name, rest)) => (name, rest.trim_end_matches('}')),
                None => (series, ""),
            };
            let labels = labels
                .split("\",")
                .filter(|kv| !kv.is_empty())
                .map(|kv| {
                    let (k, v) = kv.split_once("=\"").expect("label=\"value\"");
                    (k.to_owned(), v.trim_end_matches('"').to_owned())
                })
                .collect();
            (name.to_owned(), labels, value.parse().expect("a number"))
        })
        .collect()
}

/// The value of the one sample of `metric` whose labels include `labels`.
fn value(recorder: &PrometheusRecorder, metric: &str, labels: &[(&str, &str)]) -> f64 {
    let found: Vec<f64> = samples(recorder)
        .into_iter()
        .filter(|(name, l, _)| {
            name == metric
                && labels
                    .iter()
                    .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|(_, _, v)| v)
        .collect();
    assert_eq!(found.len(), 1, "{metric} {labels:?}: {found:?}");
    found[0]
}

fn tuple(src: &str, dst: &str) -> FourTuple {
    FourTuple::from_socket_addrs(
        src.parse::<SocketAddr>().unwrap(),
        dst.parse::<SocketAddr>().unwrap(),
    )
}

/// One tuple, 50 packets 1 µs apart against a limit of 10 pps, every
/// limited packet dropped: the first passes (10 pps is at the limit, not
/// over it), the other 49 are dropped at level 0, exact tuple.
#[test]
fn a_flood_from_one_tuple_is_published_at_level_zero() {
    let rake = Classifier::builder(10)
        .seed(1)
        .random(ConstantRandom(u32::MAX))
        .build()
        .unwrap();
    let t = tuple("10.0.0.1:53", "10.0.0.2:53");
    let recorder = PrometheusBuilder::new().build_recorder();
    metrics::with_local_recorder(&recorder, || {
        for i in 0..50 {
            let _ = rake.classify_at(&t, Timestamp::from_nanos(i * 1000));
        }
        // Classifying publishes nothing by itself.
        assert!(samples(&recorder).is_empty());
        let stats = rake.publish_metrics("flood");
        assert_eq!(stats, rake.stats());
    });
    let c = ("classifier", "flood");
    assert_eq!(
        value(&recorder, "weir_hhh_unlimited_packets_total", &[c]),
        1.0
    );
    let at = |g: &str, outcome| {
        value(
            &recorder,
            "weir_hhh_limited_packets_total",
            &[c, ("generalisation", g), ("outcome", outcome)],
        )
    };
    assert_eq!(at("src:sport -> dst:dport", "dropped"), 49.0);
    assert_eq!(at("src:sport -> dst:dport", "passed"), 0.0);
    assert_eq!(at("*:* -> dst:*", "dropped"), 0.0);
    // Every generalisation has both series, with its level.
    for g in Generalisation::ALL {
        for outcome in ["passed", "dropped"] {
            let level = g.level().to_string();
            let _ = value(
                &recorder,
                "weir_hhh_limited_packets_total",
                &[
                    c,
                    ("generalisation", &g.to_string()),
                    ("level", &level),
                    ("outcome", outcome),
                ],
            );
        }
    }
    // No raw packets were given: every parse outcome is zero.
    for outcome in ["attributed", "ports_unknown", "unattributable"] {
        assert_eq!(
            value(
                &recorder,
                "weir_hhh_parsed_packets_total",
                &[c, ("outcome", outcome)]
            ),
            0.0
        );
    }
}

/// A flood from one source port spread over many addresses (limited where
/// the sources aggregate), beside a flood from one tuple, with a seeded
/// lottery: the published series equal the verdicts the classifier
/// returned, generalisation by generalisation, and sum to its `stats()`.
#[test]
fn published_series_equal_the_verdicts_returned() {
    let rake = Classifier::builder(50)
        .seed(3)
        .random(SeededRandom::new(3))
        .build()
        .unwrap();
    let single = tuple("192.0.2.7:4444", "198.51.100.1:53");
    let mut seen: HashMap<(Generalisation, bool), u64> = HashMap::new();
    let mut unlimited = 0u64;
    for i in 0..4000u64 {
        let t = if i % 2 == 0 {
            single
        } else {
            // Sources in distinct /24s, all from port 123.
            let src = format!("10.{}.{}.1:123", (i >> 8) & 0xff, i & 0xff);
            tuple(&src, "198.51.100.1:53")
        };
        match rake.classify_at(&t, Timestamp::from_nanos(1_000_000_000 + i * 100_000)) {
            Verdict::Pass => unlimited += 1,
            Verdict::Sampled(why) => *seen.entry((why.generalisation, true)).or_default() += 1,
            Verdict::Drop(why) => *seen.entry((why.generalisation, false)).or_default() += 1,
        }
    }
    // Not vacuous: both floods were limited, at different levels, and the
    // lottery let some through and dropped others.
    let limited_at: std::collections::HashSet<u8> = seen.keys().map(|(g, _)| g.level()).collect();
    assert!(limited_at.len() >= 2, "{seen:?}");
    assert!(seen.keys().any(|&(_, passed)| passed), "{seen:?}");
    assert!(seen.keys().any(|&(_, passed)| !passed), "{seen:?}");

    let recorder = PrometheusBuilder::new().build_recorder();
    let stats = metrics::with_local_recorder(&recorder, || rake.publish_metrics("mixed"));
    let c = ("classifier", "mixed");
    assert_eq!(
        value(&recorder, "weir_hhh_unlimited_packets_total", &[c]),
        unlimited as f64
    );
    let mut by_level = [[0u64; 2]; 5];
    for g in Generalisation::ALL {
        for (passed, outcome) in [(true, "passed"), (false, "dropped")] {
            let published = value(
                &recorder,
                "weir_hhh_limited_packets_total",
                &[c, ("generalisation", &g.to_string()), ("outcome", outcome)],
            );
            let expected = seen.get(&(g, passed)).copied().unwrap_or(0);
            assert_eq!(published, expected as f64, "{g} {outcome}");
            by_level[usize::from(g.level())][usize::from(!passed)] += expected;
        }
    }
    for (l, s) in stats.levels.iter().enumerate() {
        assert_eq!([s.passed, s.dropped], by_level[l], "level {l}");
        for (outcome, n) in [("passed", s.passed), ("dropped", s.dropped)] {
            let level = l.to_string();
            let published: f64 = samples(&recorder)
                .into_iter()
                .filter(|(name, labels, _)| {
                    name == "weir_hhh_limited_packets_total"
                        && labels["level"] == level
                        && labels["outcome"] == outcome
                })
                .map(|(_, _, v)| v)
                .sum();
            assert_eq!(published, n as f64, "level {l} {outcome}");
        }
    }
    assert_eq!(stats.total(), 4000);
}

/// Raw packets through `classify_packet` on three threads: the parse
/// outcomes are counted per thread and published summed.
#[test]
fn parse_outcomes_of_raw_packets_are_published() {
    let clock = ManualClock::new();
    let rake = Classifier::builder(1_000_000)
        .seed(1)
        .clock(clock.clone())
        .build()
        .unwrap();
    let v4 = tuple("10.0.0.1:4000", "10.0.0.2:53");
    let v6 = tuple("[2001:db8::1]:4000", "[2001:db8::2]:53");
    let mut fragment = udp_packet(&v4, b"later fragment");
    fragment[7] = 1; // fragment offset 1: no UDP header
    let mut other_protocol = udp_packet(&v6, b"not UDP");
    other_protocol[6] = 6; // next header TCP
    let packets: Vec<(Vec<u8>, &str)> = vec![
        (udp_packet(&v4, b"hello"), "attributed"),
        (udp_packet(&v6, b"hello"), "attributed"),
        (fragment, "ports_unknown"),
        (other_protocol, "ports_unknown"),
        (vec![], "unattributable"),
        (vec![0x45, 0, 0, 20], "unattributable"), // ends before its addresses
        (vec![0x10; 40], "unattributable"),       // IP version 1
    ];
    std::thread::scope(|s| {
        for _ in 0..3 {
            s.spawn(|| {
                for _ in 0..10 {
                    for (p, _) in &packets {
                        let _ = rake.classify_packet(p);
                        clock.advance(Duration::from_millis(1));
                    }
                }
            });
        }
    });
    let recorder = PrometheusBuilder::new().build_recorder();
    let stats = metrics::with_local_recorder(&recorder, || rake.publish_metrics("raw"));
    let c = ("classifier", "raw");
    for (outcome, per_round) in [
        ("attributed", 2.0),
        ("ports_unknown", 2.0),
        ("unattributable", 3.0),
    ] {
        assert_eq!(
            value(
                &recorder,
                "weir_hhh_parsed_packets_total",
                &[c, ("outcome", outcome)]
            ),
            30.0 * per_round,
            "{outcome}"
        );
    }
    // The attributable ones were classified (well under the limit).
    assert_eq!((stats.total(), stats.unlimited), (120, 120));
    // A second publish of unchanged counts changes nothing; a second
    // classifier publishes under its own name.
    let other = Classifier::try_new(10).unwrap();
    let _ = other.classify_packet(&[]);
    metrics::with_local_recorder(&recorder, || {
        rake.publish_metrics("raw");
        other.publish_metrics("other");
    });
    let parsed = |name, outcome| {
        value(
            &recorder,
            "weir_hhh_parsed_packets_total",
            &[("classifier", name), ("outcome", outcome)],
        )
    };
    assert_eq!(parsed("raw", "unattributable"), 90.0);
    assert_eq!(parsed("other", "unattributable"), 1.0);
    assert_eq!(parsed("other", "attributed"), 0.0);
}
