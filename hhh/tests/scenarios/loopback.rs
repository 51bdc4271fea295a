//! The scenarios again, over real UDP sockets on loopback through the tokio
//! guard. Every datagram is really sent from its source address (any
//! 127.0.0.0/8 address can be bound on loopback) to a `GuardedUdpSocket`,
//! and the verdict the guard reached is reported back. The sender moves the
//! classifier's manual clock to each packet's simulated arrival time and
//! waits for the guard's verdict before sending the next packet (lockstep),
//! so the outcome is as deterministic as on the simulated clock and no
//! datagram can be lost to a full socket buffer. Each test is bounded in
//! packets (at most 8000) and in time (every wait has a timeout).
#![cfg(all(not(loom), feature = "tokio"))]

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;
use weir_hhh::clock::ManualClock;
use weir_hhh::random::{ConstantRandom, RandomSource, SeededRandom};
use weir_hhh::sim::{self, Addr, Port, Scenario, ScenarioOutcome, Stream};
use weir_hhh::udp::GuardedUdpSocket;
use weir_hhh::{Classifier, Verdict};

/// How long to wait for the guard's verdict on one datagram.
const WAIT: Duration = Duration::from_secs(5);

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// Play `scenario` over loopback against a guard with this limit and coin.
/// `reuse` lists source addresses whose sockets are kept open (fixed
/// sources); other sources get a fresh socket per datagram.
fn over_loopback<R: RandomSource + 'static>(
    scenario: &Scenario,
    limit: u64,
    random: R,
    reuse: &[SocketAddr],
) -> ScenarioOutcome {
    let clock = ManualClock::new();
    let rake = Arc::new(
        Classifier::builder(limit)
            .seed(0x5eed)
            .clock(clock.clone())
            .random(random)
            .build()
            .unwrap(),
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_io()
        .build()
        .unwrap();
    let (verdicts_tx, verdicts) = mpsc::channel::<(SocketAddr, Verdict)>();
    let guard = runtime.block_on(async {
        let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        GuardedUdpSocket::try_new(socket, Arc::clone(&rake)).unwrap()
    });
    let server = guard.local_addr();
    let receiver = runtime.spawn(async move {
        let mut buf = [0u8; 64];
        loop {
            let tx = verdicts_tx.clone();
            // Every datagram, passed or dropped, reports its verdict; the
            // passed ones also come back out of recv_from.
            let got = guard
                .recv_from_inspect(&mut buf, |peer, v| {
                    let _ = tx.send((peer, *v));
                })
                .await;
            if got.is_err() {
                break;
            }
        }
    });

    let mut kept: HashMap<SocketAddr, UdpSocket> = reuse
        .iter()
        .map(|&a| {
            (
                a,
                UdpSocket::bind(a).unwrap_or_else(|e| panic!("bind {a}: {e}")),
            )
        })
        .collect();
    let epoch = rake.level_windows()[0];
    let outcome = sim::run_with(
        scenario,
        |tuple, now| {
            clock.set(Duration::from_nanos(now));
            let src = tuple.src();
            let fresh;
            let socket = match kept.get_mut(&src) {
                Some(s) => &*s,
                None => {
                    // A random source: its port may be taken, so let the
                    // kernel pick one (it is just as random).
                    fresh = UdpSocket::bind(src)
                        .or_else(|_| UdpSocket::bind(SocketAddr::new(src.ip(), 0)))
                        .unwrap_or_else(|e| panic!("bind {src}: {e}"));
                    &fresh
                }
            };
            let from = socket.local_addr().unwrap();
            socket.send_to(b"ping", server).unwrap();
            let (peer, verdict) = verdicts
                .recv_timeout(WAIT)
                .unwrap_or_else(|e| panic!("no verdict for a datagram from {from}: {e}"));
            assert_eq!(peer, from, "verdicts out of step");
            verdict
        },
        epoch,
    );
    receiver.abort();
    drop(kept);
    runtime.shutdown_timeout(Duration::from_secs(1));
    outcome
}

#[test]
fn loopback_scenario_1_single_address_and_port() {
    let flood: SocketAddr = "127.1.1.1:40080".parse().unwrap();
    let legit: SocketAddr = "127.1.1.2:40081".parse().unwrap();
    let scenario = Scenario {
        duration: Duration::from_secs(10),
        seed: 1,
        streams: vec![
            Stream::new(
                "flood",
                100,
                Addr::Fixed(flood.ip()),
                Port::Fixed(flood.port()),
                Addr::Fixed(ip("127.0.0.1")),
                Port::Fixed(1),
            ),
            Stream::new(
                "legit",
                5,
                Addr::Fixed(legit.ip()),
                Port::Fixed(legit.port()),
                Addr::Fixed(ip("127.0.0.1")),
                Port::Fixed(1),
            ),
        ],
    };
    let out = over_loopback(&scenario, 25, SeededRandom::new(1), &[flood, legit]);
    let f = out.stream("flood").unwrap();
    let l = out.stream("legit").unwrap();
    assert_eq!(f.received_total(), 1000);
    let rate = f.forwarded_rate_after(1);
    assert!((rate - 25.0).abs() <= 2.5, "flood forwarded at {rate} pps");
    assert_eq!(l.dropped_total(), 0, "{:?}", l.first_drop);
}

#[test]
fn loopback_scenario_2_reflection_attack() {
    // Random loopback addresses; the attack keeps source port 40053.
    let any = Addr::Random {
        base: ip("127.0.0.0"),
        prefix: 8,
    };
    let scenario = Scenario {
        duration: Duration::from_secs(8),
        seed: 2,
        streams: vec![
            Stream::new(
                "attack",
                100,
                any,
                Port::Fixed(40053),
                Addr::Fixed(ip("127.0.0.1")),
                Port::Fixed(1),
            ),
            Stream::new(
                "random",
                20,
                any,
                Port::Random,
                Addr::Fixed(ip("127.0.0.1")),
                Port::Fixed(1),
            ),
        ],
    };
    let out = over_loopback(&scenario, 25, SeededRandom::new(2), &[]);
    let a = out.stream("attack").unwrap();
    let r = out.stream("random").unwrap();
    let rate = a.forwarded_rate_after(1);
    assert!((rate - 25.0).abs() <= 2.5, "attack forwarded at {rate} pps");
    assert_eq!(a.dropped_total(), a.dropped_at_level[2]);
    assert_eq!(r.dropped_total(), 0, "{:?}", r.first_drop);
}

#[test]
fn loopback_scenario_3_fast_flood() {
    // The high-rate scenario scaled to what lockstep loopback sends in about
    // a second: 4000 pps against 1000 pps for 2 s.
    let src: SocketAddr = "127.9.9.9:40999".parse().unwrap();
    let scenario = Scenario {
        duration: Duration::from_secs(2),
        seed: 3,
        streams: vec![Stream::new(
            "flood",
            4000,
            Addr::Fixed(src.ip()),
            Port::Fixed(src.port()),
            Addr::Fixed(ip("127.0.0.1")),
            Port::Fixed(1),
        )],
    };
    let out = over_loopback(&scenario, 1000, SeededRandom::new(3), &[src]);
    let f = &out.streams[0];
    assert_eq!(f.received, vec![4000, 4000]);
    let off = (f.forwarded[1] as f64 - 1000.0).abs() / 1000.0;
    assert!(off < 0.1, "second 1: forwarded {}", f.forwarded[1]);
}

#[test]
fn loopback_attacker_never_costs_legit_a_packet() {
    let attack: SocketAddr = "127.7.6.5:40053".parse().unwrap();
    let scenario = Scenario {
        duration: Duration::from_secs(2),
        seed: 6,
        streams: vec![
            Stream::new(
                "attack",
                600,
                Addr::Fixed(attack.ip()),
                Port::Fixed(attack.port()),
                Addr::Fixed(ip("127.0.0.1")),
                Port::Fixed(1),
            ),
            Stream::new(
                "legit",
                100,
                Addr::Fixed(attack.ip()),
                Port::Random,
                Addr::Fixed(ip("127.0.0.1")),
                Port::Fixed(1),
            ),
        ],
    };
    let out = over_loopback(&scenario, 200, ConstantRandom(u32::MAX), &[attack]);
    let l = out.stream("legit").unwrap();
    let a = out.stream("attack").unwrap();
    assert_eq!(l.dropped_total(), 0, "{:?}", l.first_drop);
    assert!(a.dropped_total() > 0);
    assert_eq!(a.dropped_total(), a.dropped_at_level[0]);
}
