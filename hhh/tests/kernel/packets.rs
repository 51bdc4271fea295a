//! Malformed and hostile packets through the kernel filter: what cannot be
//! attributed passes whole, the rest is attributed as `FourTuple::attribute`
//! does (IPv4 options, IPv6 extension headers), and the kernel and the
//! classifier reach the same outcome and publish the same counts.

use super::*;

/// Malformed packets, each with what it shows. Those that end before
/// their addresses (or are not IP) must pass untouched; the rest are
/// attributed to their addresses and classified.
fn malformed() -> Vec<(&'static str, Vec<u8>)> {
    let t4 = FourTuple::from_socket_addrs(
        "10.0.0.1:4000".parse().unwrap(),
        "10.0.0.2:53".parse().unwrap(),
    );
    let t6 = FourTuple::from_socket_addrs(
        "[2001:db8::1]:4000".parse().unwrap(),
        "[2001:db8::2]:53".parse().unwrap(),
    );
    let p4 = udp_packet(&t4, b"ping");
    let p6 = udp_packet(&t6, b"ping");
    let with = |p: &[u8], at: usize, b: u8| {
        let mut p = p.to_vec();
        p[at] = b;
        p
    };
    let mut v6_too_many = p6[..40].to_vec();
    v6_too_many[6] = 60;
    let body = |next: u8| [next, 0, 0, 0, 0, 0, 0, 0];
    for i in 0..9 {
        v6_too_many.extend_from_slice(&body(if i == 8 { 17 } else { 60 }));
    }
    v6_too_many.extend_from_slice(&p6[40..]);
    let len = (v6_too_many.len() - 40) as u16;
    v6_too_many[4..6].copy_from_slice(&len.to_be_bytes());
    vec![
        ("truncated IPv4 header (10 bytes)", p4[..10].to_vec()),
        (
            "IPv4 header without UDP header (24 bytes)",
            p4[..24].to_vec(),
        ),
        ("truncated IPv6 header (30 bytes)", p6[..30].to_vec()),
        (
            "IPv6 header without UDP header (44 bytes)",
            p6[..44].to_vec(),
        ),
        ("IPv4 IHL 4", with(&p4, 0, 0x44)),
        ("IPv4 options past the packet (IHL 15)", with(&p4, 0, 0x4f)),
        (
            "IPv4 total length below the header",
            with(&with(&p4, 2, 0), 3, 10),
        ),
        ("IPv4 non-first fragment", with(&p4, 7, 1)),
        ("IPv4 TCP", with(&p4, 9, 6)),
        ("IPv6 ICMPv6", with(&p6, 6, 58)),
        ("UDP length below 8", with(&with(&p4, 24, 0), 25, 4)),
        ("IP version 5", with(&p4, 0, 0x55)),
        ("nine IPv6 extension headers", v6_too_many),
    ]
}

#[test]
fn kernel_passes_what_it_cannot_parse() {
    // Limit 1 pps and the coin that drops every limited packet: anything
    // the filter classified would be dropped from the second copy on.
    let Some(mut filter) = load_or_skip(
        "kernel_passes_what_it_cannot_parse",
        Classifier::builder(1).seed(1),
    ) else {
        return;
    };
    let unattributable = malformed()
        .into_iter()
        .filter(|(_, p)| hostile::readable_addresses(p).is_none());
    for (i, (what, packet)) in unattributable.enumerate() {
        let mut frame = ethernet_frame(&packet);
        let header = if packet[0] >> 4 == 6 { 40 } else { 20 };
        if packet.len() < header {
            // Test-run refuses an IP EtherType with less than an IP header
            // (EINVAL); the filter goes by the version nibble, so the local
            // experimental EtherType carries the truncated header instead.
            frame[12..14].copy_from_slice(&[0x88, 0xb5]);
        }
        for k in 0..50u64 {
            let run = filter
                .test_run_at(&frame, 1_000_000_000 + k * 1000, Some(u32::MAX))
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            assert!(run.passed(), "{what}: dropped");
            assert_eq!(
                run.return_value as usize,
                packet.len(),
                "{what}: not passed whole"
            );
        }
        let stats = filter.stats().unwrap();
        assert_eq!(stats.unparsed, 50 * (i as u64 + 1), "{what}: parsed");
        assert_eq!(stats.levels.total(), 0, "{what}: classified");
    }
}

/// The malformed packets whose addresses are present (no UDP header, bad
/// header or total lengths, a later fragment, another protocol, nine
/// extension headers, a bad UDP length) are not passed unclassified:
/// each is attributed to its addresses, as `FourTuple::attribute` does,
/// and held to the limit.
#[test]
fn kernel_classifies_malformed_packets_by_their_addresses() {
    let Some(mut filter) = load_or_skip(
        "kernel_classifies_malformed_packets_by_their_addresses",
        Classifier::builder(1).seed(1),
    ) else {
        return;
    };
    let attributable = malformed()
        .into_iter()
        .filter(|(_, p)| hostile::readable_addresses(p).is_some());
    for (i, (what, packet)) in attributable.enumerate() {
        let seen = FourTuple::attribute(&packet).unwrap_or_else(|e| panic!("{what}: {e}"));
        let before = filter.stats().unwrap();
        let frame = ethernet_frame(&packet);
        // Each packet 10 s after the last: its own cells are idle again.
        let start = 10_000_000_000 * (i as u64 + 1);
        let passed: Vec<bool> = (0..50u64)
            .map(|k| {
                filter
                    .test_run_at(&frame, start + k * 1000, Some(u32::MAX))
                    .unwrap_or_else(|e| panic!("{what}: {e}"))
                    .passed()
            })
            .collect();
        let after = filter.stats().unwrap();
        assert_eq!(
            after.unparsed, before.unparsed,
            "{what}: passed unclassified"
        );
        assert_eq!(after.levels.total(), before.levels.total() + 50, "{what}");
        let unknown = u64::from(seen.ports_unknown.is_some()) * 50;
        assert_eq!(
            after.ports_unknown,
            before.ports_unknown + unknown,
            "{what}: {seen:?}"
        );
        // The first copy makes 1 pps (at the limit); the rest are over it.
        assert_eq!(
            passed.iter().filter(|&&p| p).count(),
            1,
            "{what}: {passed:?}"
        );
    }
}

#[test]
fn kernel_parses_ipv4_options_and_ipv6_extension_headers() {
    let Some(mut filter) = load_or_skip(
        "kernel_parses_ipv4_options_and_ipv6_extension_headers",
        Classifier::builder(10).seed(1),
    ) else {
        return;
    };
    let t4 = FourTuple::from_socket_addrs(
        "10.0.0.1:4000".parse().unwrap(),
        "10.0.0.2:53".parse().unwrap(),
    );
    let t6 = FourTuple::from_socket_addrs(
        "[2001:db8::1]:4000".parse().unwrap(),
        "[2001:db8::2]:53".parse().unwrap(),
    );
    // IPv4 with 8 bytes of options (IHL 7).
    let p4 = udp_packet(&t4, b"ping");
    let mut opts = p4[..20].to_vec();
    opts[0] = 0x47;
    opts[2..4].copy_from_slice(&((p4.len() + 8) as u16).to_be_bytes());
    opts.extend_from_slice(&[1; 8]); // NOPs
    opts.extend_from_slice(&p4[20..]);
    // IPv6 with hop-by-hop (8 bytes), destination options (16 bytes) and a
    // first fragment header.
    let p6 = udp_packet(&t6, b"ping");
    let mut ext = p6[..40].to_vec();
    ext[6] = 0;
    ext.extend_from_slice(&[60, 0, 1, 4, 0, 0, 0, 0]);
    ext.extend_from_slice(&[44, 1, 1, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    ext.extend_from_slice(&[17, 0, 0, 0, 0, 0, 0, 42]);
    ext.extend_from_slice(&p6[40..]);
    let len = (ext.len() - 40) as u16;
    ext[4..6].copy_from_slice(&len.to_be_bytes());
    for (what, packet, tuple) in [
        ("IPv4 with options", opts, t4),
        ("IPv6 with extension headers", ext, t6),
    ] {
        assert_eq!(weir_hhh::FourTuple::parse(&packet), Ok(tuple), "{what}");
        // Parsed to the same tuple as the plain packet: the first copy makes
        // 10 pps (at the limit), the second within a microsecond is over it
        // and dropped at level 0, and the plain packet shares their cells.
        let before = filter.stats().unwrap();
        let frame = ethernet_frame(&packet);
        let plain = ethernet_frame(&udp_packet(&tuple, b"ping"));
        let base = 10_000_000_000 + before.levels.total() * 10_000_000_000;
        assert!(
            filter
                .test_run_at(&frame, base, Some(u32::MAX))
                .unwrap()
                .passed()
        );
        assert!(
            !filter
                .test_run_at(&frame, base + 1000, Some(u32::MAX))
                .unwrap()
                .passed(),
            "{what}"
        );
        assert!(
            !filter
                .test_run_at(&plain, base + 2000, Some(u32::MAX))
                .unwrap()
                .passed(),
            "{what}"
        );
        let after = filter.stats().unwrap();
        assert_eq!(after.unparsed, before.unparsed, "{what}");
        assert_eq!(
            after.levels.levels[0].dropped,
            before.levels.levels[0].dropped + 2,
            "{what}"
        );
    }
}

/// The `metrics` feature: the same packets through the kernel (test-run,
/// replayed clock, the coin that drops every limited packet) and through
/// `Classifier::classify_packet` (a manual clock at the same instants), then
/// both published into a real recorder (Prometheus, this thread only): the
/// kernel's series equal the classifier's, level by level and parse
/// outcome by parse outcome, and the counts the packets call for.
#[cfg(feature = "metrics")]
#[test]
fn kernel_and_classifier_publish_the_same_counts() {
    let builder = || Classifier::builder(1).seed(1);
    let Some(mut filter) = load_or_skip("kernel_and_classifier_publish_the_same_counts", builder())
    else {
        return;
    };
    let clock = ManualClock::new();
    let rake = builder()
        .clock(clock.clone())
        .random(ConstantRandom(u32::MAX))
        .build()
        .unwrap();
    let well_formed = |src: &str, dst: &str| {
        let t = FourTuple::from_socket_addrs(src.parse().unwrap(), dst.parse().unwrap());
        ("well formed", udp_packet(&t, b"ping"))
    };
    let mut packets = malformed();
    packets.push(well_formed("10.0.0.1:4000", "10.0.0.2:53"));
    packets.push(well_formed("[2001:db8::1]:4000", "[2001:db8::2]:53"));
    let copies = 20u64;
    let mut expected = HashMap::from([
        ("attributed", 0u64),
        ("ports_unknown", 0),
        ("unattributable", 0),
    ]);
    for (i, (what, packet)) in packets.iter().enumerate() {
        let outcome = match FourTuple::attribute(packet) {
            Ok(a) if a.ports_unknown.is_none() => "attributed",
            Ok(_) => "ports_unknown",
            Err(_) => "unattributable",
        };
        *expected.get_mut(outcome).unwrap() += copies;
        let mut frame = ethernet_frame(packet);
        let header = if packet[0] >> 4 == 6 { 40 } else { 20 };
        if packet.len() < header {
            // As in `kernel_passes_what_it_cannot_parse`.
            frame[12..14].copy_from_slice(&[0x88, 0xb5]);
        }
        // Each packet 10 s after the last: its own cells are idle again.
        let start = 10_000_000_000 * (i as u64 + 1);
        for k in 0..copies {
            let now = start + k * 1000;
            filter
                .test_run_at(&frame, now, Some(u32::MAX))
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            clock.set(Duration::from_nanos(now));
            let _ = rake.classify_packet(packet);
        }
    }
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let (kernel, user) = metrics::with_local_recorder(&recorder, || {
        (
            filter.publish_metrics("k").unwrap(),
            rake.publish_metrics("u"),
        )
    });
    assert_eq!(kernel, filter.stats().unwrap());
    assert_eq!(kernel.levels, user);
    assert!(user.dropped() > 0 && user.unlimited > 0, "{user:?}");
    let rendered = recorder.handle().render();
    // `name{labels} value` lines, keyed by the whole series.
    let series: HashMap<&str, f64> = rendered
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            Some((series, value.parse().ok()?))
        })
        .collect();
    let sum = |prefix: &str, labels: &[String]| -> f64 {
        series
            .iter()
            .filter(|(s, _)| s.starts_with(prefix) && labels.iter().all(|l| s.contains(l.as_str())))
            .map(|(_, v)| v)
            .sum()
    };
    for (outcome, n) in &expected {
        let o = format!("outcome=\"{outcome}\"");
        let o = [o];
        let k = sum("weir_hhh_kernel_parsed_packets_total{", &o);
        let u = sum("weir_hhh_parsed_packets_total{", &o);
        assert_eq!((k, u), (*n as f64, *n as f64), "{outcome}");
    }
    assert_eq!(
        sum("weir_hhh_kernel_unlimited_packets_total{", &[]),
        user.unlimited as f64
    );
    assert_eq!(
        sum("weir_hhh_unlimited_packets_total{", &[]),
        user.unlimited as f64
    );
    for l in 0..5 {
        for outcome in ["passed", "dropped"] {
            let labels = [format!("level=\"{l}\""), format!("outcome=\"{outcome}\"")];
            let k = sum("weir_hhh_kernel_limited_packets_total{", &labels);
            let u = sum("weir_hhh_limited_packets_total{", &labels);
            let s = user.levels[l];
            let n = if outcome == "passed" {
                s.passed
            } else {
                s.dropped
            };
            assert_eq!((k, u), (n as f64, n as f64), "level {l} {outcome}");
        }
    }
}

/// `packet` as test-run takes it: behind an Ethernet header whose EtherType
/// matches its version, or the local experimental EtherType when it is too
/// short for its IP header (test-run refuses those with EINVAL; the filter
/// goes by the version nibble either way).
fn frame_for(packet: &[u8]) -> Vec<u8> {
    let mut frame = ethernet_frame(packet);
    if hostile::readable_addresses(packet).is_none() {
        frame[12..14].copy_from_slice(&[0x88, 0xb5]);
    }
    frame
}

/// The hostile packets of `tests/hostile` (extension-header chains up to
/// past the walking bound, fragments, other protocols, every truncation,
/// bogus lengths, random damage), replayed through the kernel and the
/// classifier with the same times and coin: the same outcome for every
/// packet, the same rates afterwards, and nothing whose addresses are
/// readable passed unclassified.
#[test]
fn kernel_and_classifier_agree_on_hostile_packets() {
    const LIMIT: u64 = 50;
    // Limited packets pass while their rate is under twice the limit.
    const COIN: u32 = u32::MAX / 2;
    let test = "kernel_and_classifier_agree_on_hostile_packets";
    let Some(mut filter) = load_or_skip(test, Classifier::builder(LIMIT).seed(8)) else {
        return;
    };
    let clock = ManualClock::new();
    let rake = Classifier::builder(LIMIT)
        .seed(8)
        .clock(clock.clone())
        .random(ConstantRandom(COIN))
        .build()
        .unwrap();
    let mut before = filter.stats().unwrap();
    let mut disagree = Vec::new();
    let mut unclassified = Vec::new();
    let mut seen: HashMap<Outcome, u64> = HashMap::new();
    let packets = hostile::catalogue(1500);
    let mut now = 1_000_000_000u64;
    for (what, packet) in &packets {
        // A socket filter returns the bytes to keep, so it cannot pass an
        // empty buffer (and no socket receives one).
        if packet.is_empty() {
            continue;
        }
        let ports_unknown = FourTuple::attribute(packet).is_ok_and(|a| a.ports_unknown.is_some());
        for copy in 0..2 {
            // The second copy from another host of the same subnet, so
            // that the aggregates above the exact keys fill up too.
            let mut packet = packet.clone();
            if copy == 1 {
                let host = (now / 100_000) as u16;
                match packet[0] >> 4 {
                    4 if packet.len() >= 20 => packet[15] = host as u8,
                    6 if packet.len() >= 40 => packet[22..24].copy_from_slice(&host.to_be_bytes()),
                    _ => {}
                }
            }
            let packet = &packet;
            now += 100_000;
            clock.set(Duration::from_nanos(now));
            let user = user_outcome(rake.classify_packet(packet));
            let run = filter
                .test_run_at(&frame_for(packet), now, Some(COIN))
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            let after = filter.stats().unwrap();
            let kernel = kernel_outcome(&before, &after);
            assert_eq!(
                after.ports_unknown - before.ports_unknown,
                u64::from(ports_unknown),
                "{what}: the kernel and FourTuple::attribute differ on the ports"
            );
            before = after;
            *seen.entry(kernel).or_default() += 1;
            let dropped = matches!(kernel, Outcome::Dropped(_));
            assert_eq!(run.passed(), !dropped, "{what}");
            if run.passed() {
                assert_eq!(
                    run.return_value as usize,
                    packet.len(),
                    "{what}: not passed whole"
                );
            }
            if user != kernel {
                disagree.push(format!(
                    "{what} (copy {copy}): user {user:?}, kernel {kernel:?}"
                ));
            }
            if kernel == Outcome::Unparsed && hostile::readable_addresses(packet).is_some() {
                unclassified.push(format!("{what}: {packet:02x?}"));
            }
        }
    }
    eprintln!(
        "{test}: {} packets twice; kernel outcomes {seen:?}",
        packets.len()
    );
    assert!(
        unclassified.is_empty(),
        "{} packets with readable addresses passed unclassified by the kernel:\n{}",
        unclassified.len(),
        unclassified.join("\n")
    );
    assert!(
        disagree.is_empty(),
        "{} disagreements:\n{}",
        disagree.len(),
        disagree.join("\n")
    );
    // The same rates in every sketch the packets reached.
    for (what, packet) in &packets {
        let Ok(seen) = FourTuple::attribute(packet) else {
            continue;
        };
        let tuple = seen.tuple;
        for g in Generalisation::ALL {
            assert_eq!(
                filter.estimate_at(&tuple, g, now).unwrap(),
                rake.estimate_at(&tuple, g, Timestamp::from_nanos(now)),
                "{what}: {tuple} {g}"
            );
        }
    }
    // The replay must exercise the limiter at several levels, both ways.
    let dropped = seen
        .keys()
        .filter(|o| matches!(o, Outcome::Dropped(_)))
        .count();
    let sampled = seen
        .keys()
        .filter(|o| matches!(o, Outcome::Sampled(_)))
        .count();
    assert!(dropped >= 2 && sampled >= 2, "{seen:?}");
}
