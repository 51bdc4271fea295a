//! Attacks on the user-space limiter that stay in CI: hostile packets (the
//! classification rule: what can be attributed to a source is never passed
//! unclassified), wild caller-supplied times, and a spray of distinct
//! sources. The kernel filter meets the same packets in `tests/kernel/`.
#![cfg(not(loom))]

mod hostile;

use hostile::{Ext, UDP, arb_hostile, catalogue, readable_addresses, v6, v6_packet};
use proptest::prelude::*;
use std::cell::Cell;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::time::Duration;
use weir_hhh::clock::{Clock, ManualClock, Timestamp};
use weir_hhh::random::{ConstantRandom, RandomSource, SeededRandom};
use weir_hhh::{Attribution, Classifier, FourTuple, Generalisation, UNKNOWN_PORT};
use weir_primitives::random::SplitMix64;

/// The most IPv6 extension headers walked to the ports, as documented on
/// `FourTuple::parse` and `ParseError::TooManyExtensionHeaders`.
const MAX_EXTENSION_HEADERS: usize = 8;

/// What a receive loop delivers when it judges raw packets with
/// `classify_packet`: an error it cannot attribute is passed (a limiter must
/// not drop what it does not understand), a verdict decides the rest.
fn delivered(verdict: Result<weir_hhh::Verdict, weir_hhh::ParseError>) -> bool {
    verdict.map_or(true, |v| v.is_pass())
}

fn manual(limit: u64) -> (Classifier<ManualClock, SeededRandom>, ManualClock) {
    let clock = ManualClock::new();
    let rake = Classifier::builder(limit)
        .seed(0xa77ac4)
        .clock(clock.clone())
        .random(SeededRandom::new(7))
        .build()
        .unwrap();
    (rake, clock)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    /// Any hostile packet: no panic, and classified exactly when its
    /// addresses are readable, by those addresses; whatever the strict
    /// parser accepts is attributed to the same tuple with its ports.
    #[test]
    fn hostile_packets_are_classified_when_their_addresses_are_readable(packet in arb_hostile()) {
        let rake = Classifier::builder(10).seed(1).build().unwrap();
        let verdict = rake.classify_packet(&packet);
        let readable = readable_addresses(&packet);
        prop_assert_eq!(
            verdict.is_ok(),
            readable.is_some(),
            "{:?} for {:02x?}", verdict, packet
        );
        let attributed = FourTuple::attribute(&packet);
        prop_assert_eq!(attributed.is_ok(), readable.is_some());
        if let (Ok(seen), Some((src, dst))) = (attributed, readable) {
            prop_assert_eq!(octets(seen.tuple.src()), src);
            prop_assert_eq!(octets(seen.tuple.dst()), dst);
            if seen.ports_unknown.is_some() {
                prop_assert_eq!((seen.tuple.src().port(), seen.tuple.dst().port()), (UNKNOWN_PORT, UNKNOWN_PORT));
            }
        }
        if let Ok(strict) = FourTuple::parse(&packet) {
            prop_assert_eq!(attributed, Ok(Attribution { tuple: strict, ports_unknown: None }));
        }
    }

    /// Undamaged IPv6 chains: the ports are read behind up to
    /// `MAX_EXTENSION_HEADERS` headers of any kind, in a first fragment,
    /// and are unknown past that bound, in a later fragment, or behind
    /// another protocol.
    #[test]
    fn ports_are_read_exactly_where_they_can_be_reached(
        exts in proptest::collection::vec(
            prop_oneof![
                (0u8..4).prop_map(Ext::HopByHop),
                (0u8..4).prop_map(Ext::Routing),
                (0u8..4).prop_map(Ext::DestOpts),
                (0u16..3, any::<bool>()).prop_map(|(offset, more)| Ext::Fragment { offset, more }),
                (0u8..4).prop_map(Ext::Auth),
            ],
            0..13,
        ),
        last in prop_oneof![3 => Just(UDP), 1 => any::<u8>()],
        sport: u16,
        dport: u16,
    ) {
        let addrs = v6("2001:db8::1", sport, "2001:db8::2", dport);
        let seen = FourTuple::attribute(&v6_packet(addrs, &exts, last, b"x")).unwrap();
        let reachable = exts.len() <= MAX_EXTENSION_HEADERS
            && exts.iter().all(|e| e.keeps_ports())
            && last == UDP;
        prop_assert_eq!(seen.ports_unknown.is_none(), reachable, "{:?}", seen);
        let ports = if reachable { (sport, dport) } else { (UNKNOWN_PORT, UNKNOWN_PORT) };
        prop_assert_eq!((seen.tuple.src().port(), seen.tuple.dst().port()), ports);
    }
}

fn octets(addr: SocketAddr) -> Vec<u8> {
    match addr.ip() {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    }
}

/// The same rule over the deterministic catalogue the kernel test replays.
#[test]
fn the_hostile_catalogue_is_classified_when_its_addresses_are_readable() {
    let rake = Classifier::builder(10).seed(1).build().unwrap();
    let mut wrong = Vec::new();
    for (what, packet) in catalogue(2000) {
        let verdict = rake.classify_packet(&packet);
        if verdict.is_ok() != readable_addresses(&packet).is_some() {
            wrong.push(format!("{what}: {verdict:?}"));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} wrong:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

/// Send `count` packets at `pps`, with a legitimate plain stream from
/// another port of the same source beside them; returns (flood delivered,
/// legitimate delivered, legitimate sent).
fn flood_through_classify_packet(flood: &[u8], pps: u64, count: u64) -> (u64, u64, u64) {
    let (rake, clock) = manual(200);
    let legit = v6_packet(
        v6("2001:db8:5::1", 5353, "2001:db8:ffff::1", 53),
        &[],
        UDP,
        b"legit",
    );
    let gap = 1_000_000_000 / pps;
    let (mut flood_got, mut legit_got, mut legit_sent) = (0, 0, 0);
    for k in 0..count {
        clock.set(Duration::from_nanos(1_000_000_000 + k * gap));
        flood_got += u64::from(delivered(rake.classify_packet(flood)));
        // 50 pps of legitimate traffic.
        if (k * gap) % 20_000_000 < gap {
            legit_sent += 1;
            legit_got += u64::from(delivered(rake.classify_packet(&legit)));
        }
    }
    (flood_got, legit_got, legit_sent)
}

/// An attack seen in review: a UDP/IPv6 flood whose packets carry nine
/// Destination Options headers. It must be held like the same flood
/// without them, and the source's other traffic must still pass.
#[test]
fn an_extension_header_flood_is_held_like_a_plain_one() {
    let addrs = v6("2001:db8:5::1", 40000, "2001:db8:ffff::1", 53);
    let plain = v6_packet(addrs, &[], UDP, b"flood");
    let (plain_got, legit_got, legit_sent) = flood_through_classify_packet(&plain, 2000, 4000);
    assert_eq!(legit_got, legit_sent);
    for (what, exts) in [
        ("nine destination options", vec![Ext::DestOpts(0); 9]),
        (
            "twelve hop-by-hop and routing",
            [Ext::HopByHop(0), Ext::Routing(0)].repeat(6),
        ),
        (
            "non-first fragments",
            vec![Ext::Fragment {
                offset: 3,
                more: true,
            }],
        ),
    ] {
        let flood = v6_packet(addrs, &exts, UDP, b"flood");
        let (got, legit_got, legit_sent) = flood_through_classify_packet(&flood, 2000, 4000);
        eprintln!("{what}: {got} of 4000 delivered; the plain flood {plain_got}");
        assert!(
            (got as f64 - plain_got as f64).abs() < 0.25 * plain_got as f64,
            "{what}: {got} of 4000 delivered, the plain flood {plain_got}"
        );
        assert_eq!(legit_got, legit_sent, "{what}: legitimate packets dropped");
    }
}

fn tuple(src: &str, dst: &str) -> FourTuple {
    FourTuple::from_socket_addrs(src.parse().unwrap(), dst.parse().unwrap())
}

/// `pps` packets a second of `t` for `secs` seconds from `start` (ns);
/// returns how many were not passed.
fn honest<C: Clock, R: RandomSource>(
    rake: &Classifier<C, R>,
    t: &FourTuple,
    start: u64,
    pps: u64,
    secs: u64,
) -> usize {
    let gap = 1_000_000_000 / pps;
    (0..pps * secs)
        .filter(|k| {
            !rake
                .classify_at(t, Timestamp::from_nanos(start + k * gap))
                .is_pass()
        })
        .count()
}

/// Wild times a caller might pass: far beyond the clock (a [`standing`]
/// one), and the end of its range.
fn wild_times(now: u64) -> [(&'static str, Timestamp<ManualClock>); 3] {
    let now = Timestamp::from_nanos(now);
    [
        ("a day ahead", now + Duration::from_secs(86_400)),
        ("now + Duration::MAX", now + Duration::MAX),
        ("u64::MAX ns", Timestamp::from_nanos(u64::MAX)),
    ]
}

/// A clock standing at 2 s, the time these tests' packets start from: a
/// time a day after it is far beyond it. (The default clock counts from
/// the Unix epoch, so on it these tests' times would all lie decades in
/// the past.)
fn standing() -> ManualClock {
    let clock = ManualClock::new();
    clock.set(Duration::from_secs(2));
    clock
}

/// One packet of another key stamped far in the future must not freeze the
/// cells it shares with an honest key (here the aggregate of everything
/// sent to the destination): the honest key, at half the limit, keeps
/// passing.
#[test]
fn a_far_future_time_does_not_freeze_another_keys_cells() {
    for (what, wild) in wild_times(2_000_000_000) {
        let rake = Classifier::builder(100)
            .seed(3)
            .clock(standing())
            .random(ConstantRandom(u32::MAX))
            .build()
            .unwrap();
        let honest_key = tuple("10.1.1.1:4000", "10.9.9.9:53");
        let stranger = tuple("172.16.5.5:999", "10.9.9.9:7");
        assert_eq!(honest(&rake, &honest_key, 1_000_000_000, 50, 1), 0);
        let _ = rake.classify_at(&stranger, wild);
        let dropped = honest(&rake, &honest_key, 2_000_000_000, 50, 10);
        assert_eq!(
            dropped, 0,
            "{what}: the honest key lost {dropped} of 500 packets"
        );
        let rate = rake
            .estimate_at(
                &honest_key,
                Generalisation::ALL[11],
                Timestamp::from_nanos(11_980_000_000),
            )
            .as_f64();
        assert!(
            (rate - 50.0).abs() < 10.0,
            "{what}: everything to the destination at {rate} pps"
        );
    }
}

/// A key whose own cells were stamped in the future is judged normally
/// again from its next honest packet on: at half the limit it passes, and
/// its estimate is its true rate.
#[test]
fn a_key_stamped_in_the_future_is_judged_normally_again() {
    for (what, wild) in wild_times(2_000_000_000) {
        let rake = Classifier::builder(100)
            .seed(3)
            .clock(standing())
            .random(ConstantRandom(u32::MAX))
            .build()
            .unwrap();
        let key = tuple("10.1.1.1:4000", "10.9.9.9:53");
        let _ = rake.classify_at(&key, wild);
        let dropped = honest(&rake, &key, 2_000_000_000, 50, 10);
        assert_eq!(
            dropped, 0,
            "{what}: {dropped} of 500 honest packets not passed"
        );
        let rate = rake
            .estimate_at(
                &key,
                Generalisation::ALL[0],
                Timestamp::from_nanos(11_980_000_000),
            )
            .as_f64();
        assert!(
            (rate - 50.0).abs() < 10.0,
            "{what}: estimated at {rate} pps"
        );
    }
}

/// A flood held at its own level stays held when another key's wild time
/// touches the aggregates above it, and a wild time between its own packets
/// does not let it through for longer than an idle window would.
#[test]
fn a_held_flood_stays_held_around_wild_times() {
    for (what, wild) in wild_times(2_000_000_000) {
        let rake = Classifier::builder(100)
            .seed(3)
            .clock(standing())
            .random(SeededRandom::new(1))
            .build()
            .unwrap();
        let flood = tuple("10.1.1.1:4000", "10.9.9.9:53");
        let stranger = tuple("10.1.1.7:4000", "10.9.9.9:53");
        // 1000 pps against 100: after the ramp, about a tenth passes.
        let passed = |start: u64| {
            (0..2000u64)
                .filter(|k| {
                    rake.classify_at(&flood, Timestamp::from_nanos(start + k * 1_000_000))
                        .is_pass()
                })
                .count()
        };
        let before = passed(1_000_000_000);
        let _ = rake.classify_at(&stranger, wild);
        let after_stranger = passed(3_000_000_000);
        let _ = rake.classify_at(&flood, wild);
        let after_own = passed(5_000_000_000);
        eprintln!("{what}: {before} / {after_stranger} / {after_own} of 2000 passed");
        assert!(before < 400, "{what}: {before}");
        assert!(
            after_stranger < 300,
            "{what}: {after_stranger} passed after a stranger's wild time"
        );
        assert!(
            after_own < 400,
            "{what}: {after_own} passed after the flood's own wild time"
        );
    }
}

/// A receive thread that read the clock once for its batch and was then
/// preempted (a flooded, CPU-starved host) judges packets at a time a
/// window or more old. That is a time in the past, not a wild one: it
/// counts as no time passing and must not move the cells' timestamps back,
/// or the next packet sees a whole window pass and the flood's rate
/// restarts from one event. A 1000 pps flood against a limit of 100, some
/// of its own packets stale, passes about as few packets as without.
#[test]
fn a_stale_time_does_not_wipe_a_floods_rate() {
    let passed = |every: u64, stale_ms: u64| {
        let clock = ManualClock::new();
        let rake = Classifier::builder(100)
            .seed(3)
            .clock(clock.clone())
            .random(SeededRandom::new(1))
            .build()
            .unwrap();
        let flood = tuple("10.1.1.1:4000", "10.9.9.9:53");
        let mut passed = 0;
        for k in 0..3000u64 {
            clock.set(Duration::from_millis(1000 + k));
            passed += usize::from(rake.classify(&flood).is_pass());
            if every > 0 && k % every == every - 1 {
                let stale = (1000 + k - stale_ms) * 1_000_000;
                passed += usize::from(
                    rake.classify_at(&flood, Timestamp::from_nanos(stale))
                        .is_pass(),
                );
            }
        }
        passed
    };
    let baseline = passed(0, 0);
    assert!(
        baseline < 450,
        "{baseline} of 3000 passed without stale times"
    );
    for (every, stale_ms) in [(150, 99), (150, 100), (150, 120), (110, 105), (50, 900)] {
        let got = passed(every, stale_ms);
        assert!(
            got <= baseline + baseline / 5,
            "one packet {stale_ms} ms stale every {every} ms: {got} passed against {baseline}"
        );
    }
}

/// Wild times mixed with honest ones, in any order: no panic (debug builds
/// check every overflow), every verdict consistent.
#[test]
fn wild_times_never_panic() {
    let rake = Classifier::builder(100).seed(3).build().unwrap();
    let key = tuple("[2001:db8::1]:1", "[2001:db8::2]:2");
    let times = [
        0,
        1,
        99_999_999,
        100_000_000,
        u64::MAX / 2,
        u64::MAX - 1,
        u64::MAX,
        5,
        u64::MAX - 100_000_000,
        7,
    ];
    for &a in &times {
        for &b in &times {
            let _ = rake.classify_at(&key, Timestamp::from_nanos(a));
            if let Some(why) = rake.classify_at(&key, Timestamp::from_nanos(b)).limited() {
                assert!(why.rate > why.limit);
            }
            for g in Generalisation::ALL {
                let _ = rake.estimate_at(&key, g, Timestamp::from_nanos(a));
            }
        }
    }
}

thread_local! {
    /// Bytes this thread allocated (the counting allocator below).
    static ALLOCATED: Cell<u64> = const { Cell::new(0) };
}

/// Counts each thread's allocations, so a test can tell that the spray
/// allocated nothing while other tests run beside it.
struct Counting;

// SAFETY: every call is forwarded to the system allocator unchanged; the
// thread-local counter is const-initialised and has no destructor, so
// touching it never allocates.
unsafe impl std::alloc::GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        let _ = ALLOCATED.try_with(|a| a.set(a.get() + layout.size() as u64));
        // SAFETY: forwarded with the caller's layout.
        unsafe { std::alloc::System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        // SAFETY: forwarded: `ptr` came from `System.alloc` with `layout`.
        unsafe { std::alloc::System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// A spray of 300 000 packets from random /64s of one /48 (random source
/// ports too) at 100 000 packets a second: the classifier allocates
/// nothing and keeps its fixed size, the spray is held where its sources
/// aggregate, and legitimate sources in other subnets lose nothing.
#[test]
fn a_spray_of_random_sixty_fours_keeps_memory_fixed_and_spares_other_subnets() {
    let rake = Classifier::builder(1000)
        .seed(9)
        .random(SeededRandom::new(9))
        .build()
        .unwrap();
    let size = rake.memory_bytes();
    let dst: SocketAddr = "[2001:db8:ffff::1]:443".parse().unwrap();
    let legit: Vec<FourTuple> = (0..20u16)
        .map(|i| {
            let src = Ipv6Addr::new(0x2001, 0xdb8, 0x900 + i, 0, 0, 0, 0, 1);
            FourTuple::from_socket_addrs(SocketAddr::new(src.into(), 5000 + i), dst)
        })
        .collect();
    // Warm up (the per-thread counters are allocated on first use).
    let _ = rake.classify_at(&legit[0], Timestamp::from_nanos(1));
    let mut rng = SplitMix64::new(27);
    let allocated = ALLOCATED.with(Cell::get);
    let (mut legit_sent, mut legit_dropped, mut spray_passed) = (0, 0, 0);
    let spray = 300_000u64;
    for k in 0..spray {
        let now = 1_000_000_000 + k * 10_000;
        let r = rng.next_u64();
        let src = Ipv6Addr::new(
            0x2001,
            0xdb8,
            0xbad,
            (r >> 48) as u16,
            (r >> 32) as u16,
            r as u16,
            1,
            1,
        );
        let t = FourTuple::from_socket_addrs(SocketAddr::new(src.into(), (r >> 16) as u16), dst);
        spray_passed += u64::from(rake.classify_at(&t, Timestamp::from_nanos(now)).is_pass());
        // Each legitimate source at 10 pps (200 pps in all).
        if k % 10_000 == 0 {
            for t in &legit {
                legit_sent += 1;
                legit_dropped +=
                    u64::from(!rake.classify_at(t, Timestamp::from_nanos(now)).is_pass());
            }
        }
    }
    let allocated = ALLOCATED.with(Cell::get) - allocated;
    let stats = rake.stats();
    eprintln!(
        "spray: {spray_passed} of {spray} passed; legit {legit_dropped} of {legit_sent} dropped; {stats:?}"
    );
    assert_eq!(allocated, 0, "the classifier allocated during the spray");
    assert_eq!(rake.memory_bytes(), size);
    assert_eq!(
        legit_dropped, 0,
        "legitimate packets from other subnets dropped"
    );
    // 3 s at R = 100 000 pps against L = 1000 pps, caught at level 2 (the
    // /48, any source port; window W = 400 ms): about 400 packets pass
    // before its rate reaches the limit, then L·(3 s + W·ln(R/L)) ≈ 4840
    // while the EWMA climbs to R and stays there.
    assert!(spray_passed < 6000, "{spray_passed} of the spray passed");
    // Held where its sources aggregate (the /48, any source port), all but
    // the ramp.
    let held = stats.levels[2].passed + stats.levels[2].dropped;
    assert!(held > spray - 1000, "{stats:?}");
}
