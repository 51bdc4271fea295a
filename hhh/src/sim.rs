//! Replaying traffic scenarios against a [`Classifier`] on a simulated clock:
//! what a limit does to a mix of floods and legitimate streams, before it
//! meets real traffic.
//!
//! A [`Scenario`] is a set of [`Stream`]s, each sending at a constant rate
//! (evenly spaced packets, as rakelimit's own scenario generator does) with
//! fixed or random addresses and ports. [`run`] merges the streams in time
//! order, classifies every packet with [`Classifier::classify_at`] at its
//! simulated arrival time, and returns per-second counts of packets received
//! and forwarded for each stream. No wall-clock time passes and no memory is
//! allocated per packet, so a million-packet-per-second scenario takes as
//! long as classifying its packets.
//!
//! ```
//! use std::time::Duration;
//! use weir_hhh::Classifier;
//! use weir_hhh::random::SeededRandom;
//! use weir_hhh::sim::{self, Addr, Port, Scenario, Stream};
//!
//! let rake = Classifier::builder(25).seed(1).random(SeededRandom::new(1)).build().unwrap();
//! let server = Addr::Fixed("192.0.2.1".parse().unwrap());
//! let scenario = Scenario {
//!     duration: Duration::from_secs(10),
//!     seed: 7,
//!     streams: vec![Stream::new(
//!         "flood",
//!         100,
//!         Addr::Fixed("10.0.0.1".parse().unwrap()),
//!         Port::Fixed(80),
//!         server,
//!         Port::Fixed(53),
//!     )],
//! };
//! let outcome = sim::run(&scenario, &rake);
//! let flood = &outcome.streams[0];
//! assert_eq!(flood.received.iter().sum::<u64>(), 1000);
//! let rate = flood.forwarded_rate_after(1);
//! assert!((rate - 25.0).abs() < 2.5, "{rate}");
//! ```

use crate::classifier::{Classifier, Limited, Verdict};
use crate::lattice::LEVELS;
use crate::random::RandomSource;
use crate::tuple::FourTuple;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;
use weir_limits::clock::{Clock, Timestamp};
use weir_primitives::time::duration_to_nanos;

/// Where a stream's addresses come from.
///
/// ```
/// use weir_hhh::sim::Addr;
///
/// let one_host = Addr::Fixed("192.0.2.7".parse().unwrap());
/// // A fresh source in 198.51.100.0/24 for every packet.
/// let spoofed = Addr::Random { base: "198.51.100.0".parse().unwrap(), prefix: 24 };
/// assert_ne!(one_host, spoofed);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Addr {
    /// Always this address.
    Fixed(IpAddr),
    /// A fresh random address for every packet, keeping the first `prefix`
    /// bits of `base` (`prefix: 0` is fully random).
    Random {
        /// Address whose leading bits are kept (its family is used).
        base: IpAddr,
        /// Number of leading bits kept.
        prefix: u8,
    },
}

/// Where a stream's ports come from.
///
/// ```
/// use weir_hhh::sim::Port;
///
/// let dns = Port::Fixed(53);
/// let ephemeral = Port::Random;
/// assert_ne!(dns, ephemeral);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Port {
    /// Always this port.
    Fixed(u16),
    /// A fresh random port (1–65535) for every packet.
    Random,
}

/// One stream of packets at a constant rate.
///
/// ```
/// use std::time::Duration;
/// use weir_hhh::sim::{Addr, Port, Stream};
///
/// let server = Addr::Fixed("192.0.2.1".parse().unwrap());
/// // A reflection attack: random sources, source port 53, from second 5 on.
/// let attack = Stream {
///     start: Duration::from_secs(5),
///     ..Stream::new("attack", 10_000, Addr::Random { base: "0.0.0.0".parse().unwrap(), prefix: 0 }, Port::Fixed(53), server, Port::Fixed(443))
/// };
/// assert_eq!(attack.rate, 10_000);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stream {
    /// Label for reports.
    pub name: String,
    /// Packets per second (evenly spaced).
    pub rate: u64,
    /// When the stream starts, from the start of the scenario.
    pub start: Duration,
    /// Source addresses.
    pub src: Addr,
    /// Source ports.
    pub src_port: Port,
    /// Destination addresses.
    pub dst: Addr,
    /// Destination ports.
    pub dst_port: Port,
}

impl Stream {
    /// A stream starting at the beginning of the scenario.
    pub fn new(
        name: &str,
        rate: u64,
        src: Addr,
        src_port: Port,
        dst: Addr,
        dst_port: Port,
    ) -> Self {
        Self {
            name: name.to_string(),
            rate,
            start: Duration::ZERO,
            src,
            src_port,
            dst,
            dst_port,
        }
    }
}

/// Streams sent together for a while ([`run`]).
///
/// ```
/// use std::time::Duration;
/// use weir_hhh::sim::{Addr, Port, Scenario, Stream};
///
/// let host = |a: &str| Addr::Fixed(a.parse().unwrap());
/// let scenario = Scenario {
///     duration: Duration::from_secs(60),
///     seed: 1, // of the random addresses and ports
///     streams: vec![
///         Stream::new("flood", 100, host("10.1.1.1"), Port::Fixed(80), host("192.0.2.1"), Port::Fixed(53)),
///         Stream::new("legit", 5, host("10.1.1.2"), Port::Random, host("192.0.2.1"), Port::Fixed(53)),
///     ],
/// };
/// assert_eq!(scenario.streams.len(), 2);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scenario {
    /// How long the scenario runs.
    pub duration: Duration,
    /// The streams.
    pub streams: Vec<Stream>,
    /// Seed of the random addresses and ports.
    pub seed: u64,
}

/// What happened to one stream of a [`run`].
///
/// ```
/// use std::time::Duration;
/// use weir_hhh::Classifier;
/// use weir_hhh::sim::{self, Addr, Port, Scenario, Stream};
///
/// let rake = Classifier::builder(50).seed(1).build().unwrap();
/// let host = |a: &str| Addr::Fixed(a.parse().unwrap());
/// let scenario = Scenario {
///     duration: Duration::from_secs(3),
///     seed: 1,
///     streams: vec![Stream::new("steady", 20, host("10.0.0.1"), Port::Fixed(4000), host("192.0.2.1"), Port::Fixed(53))],
/// };
/// let steady = &sim::run(&scenario, &rake).streams[0];
/// assert_eq!(steady.received, [20, 20, 20]);
/// assert_eq!((steady.forwarded_total(), steady.dropped_total()), (60, 0));
/// assert!(steady.first_drop.is_none());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamOutcome {
    /// The stream's label.
    pub name: String,
    /// Packets sent in each second of the scenario.
    pub received: Vec<u64>,
    /// Packets passed in each second of the scenario.
    pub forwarded: Vec<u64>,
    /// Packets dropped at each level.
    pub dropped_at_level: [u64; LEVELS],
    /// The first drop: when (into the scenario) and why.
    pub first_drop: Option<(Duration, Limited)>,
}

impl StreamOutcome {
    /// Packets received in total.
    pub fn received_total(&self) -> u64 {
        self.received.iter().sum()
    }

    /// Packets forwarded in total.
    pub fn forwarded_total(&self) -> u64 {
        self.forwarded.iter().sum()
    }

    /// Packets dropped in total.
    pub fn dropped_total(&self) -> u64 {
        self.received_total() - self.forwarded_total()
    }

    /// Mean forwarded packets per second, skipping the first `skip` seconds.
    pub fn forwarded_rate_after(&self, skip: usize) -> f64 {
        let seconds = self.forwarded.len().saturating_sub(skip).max(1);
        self.forwarded.iter().skip(skip).sum::<u64>() as f64 / seconds as f64
    }
}

/// What happened to every stream of a scenario ([`run`]).
///
/// ```
/// use std::time::Duration;
/// use weir_hhh::Classifier;
/// use weir_hhh::sim::{self, Addr, Port, Scenario, Stream};
///
/// let rake = Classifier::builder(25).seed(1).build().unwrap();
/// let host = |a: &str| Addr::Fixed(a.parse().unwrap());
/// let scenario = Scenario {
///     duration: Duration::from_secs(10),
///     seed: 1,
///     streams: vec![
///         Stream::new("flood", 100, host("10.1.1.1"), Port::Fixed(80), host("192.0.2.1"), Port::Fixed(53)),
///         Stream::new("legit", 5, host("10.1.1.2"), Port::Fixed(80), host("192.0.2.1"), Port::Fixed(53)),
///     ],
/// };
/// let outcome = sim::run(&scenario, &rake);
/// assert_eq!(outcome.stream("legit").unwrap().dropped_total(), 0);
/// assert!(outcome.stream("flood").unwrap().dropped_total() > 0);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScenarioOutcome {
    /// One entry per stream, in the scenario's order.
    pub streams: Vec<StreamOutcome>,
}

impl ScenarioOutcome {
    /// The outcome of the stream called `name`.
    pub fn stream(&self, name: &str) -> Option<&StreamOutcome> {
        self.streams.iter().find(|s| s.name == name)
    }
}

/// A small deterministic generator for random fields.
struct Fields(weir_primitives::random::SplitMix64);

impl Fields {
    fn next(&mut self) -> u64 {
        self.0.next_u64()
    }

    fn addr(&mut self, addr: Addr) -> IpAddr {
        match addr {
            Addr::Fixed(a) => a,
            Addr::Random {
                base: IpAddr::V4(b),
                prefix,
            } => {
                let keep = u32::MAX
                    .checked_shl(32 - u32::from(prefix.min(32)))
                    .unwrap_or(0);
                let r = self.next() as u32;
                IpAddr::V4(Ipv4Addr::from((u32::from(b) & keep) | (r & !keep)))
            }
            Addr::Random {
                base: IpAddr::V6(b),
                prefix,
            } => {
                let keep = u128::MAX
                    .checked_shl(128 - u32::from(prefix.min(128)))
                    .unwrap_or(0);
                let r = (u128::from(self.next()) << 64) | u128::from(self.next());
                IpAddr::V6(Ipv6Addr::from((u128::from(b) & keep) | (r & !keep)))
            }
        }
    }

    fn port(&mut self, port: Port) -> u16 {
        match port {
            Port::Fixed(p) => p,
            Port::Random => (self.next() % 65535) as u16 + 1,
        }
    }
}

/// Arrival time (ns into the scenario) of packet `k` of `stream`.
fn arrival(stream: &Stream, k: u64) -> u64 {
    let offset = u128::from(k) * 1_000_000_000 / u128::from(stream.rate.max(1));
    let start = duration_to_nanos(stream.start);
    start.saturating_add(u64::try_from(offset).unwrap_or(u64::MAX))
}

/// Run `scenario` against `classifier`. Simulated time starts one EWMA window
/// after the classifier's clock epoch (so untouched cells look idle), and the
/// classifier's own clock is not read.
pub fn run<C: Clock, R: RandomSource>(
    scenario: &Scenario,
    classifier: &Classifier<C, R>,
) -> ScenarioOutcome {
    run_with(
        scenario,
        |tuple, now| classifier.classify_at(tuple, Timestamp::from_nanos(now)),
        classifier.level_windows()[0],
    )
}

/// [`run`] with any classification function `classify(tuple, now_nanos)`
/// (e.g. a classifier behind a wrapper); `epoch` is added to every
/// simulated time.
pub fn run_with(
    scenario: &Scenario,
    mut classify: impl FnMut(&FourTuple, u64) -> Verdict,
    epoch: Duration,
) -> ScenarioOutcome {
    let end = duration_to_nanos(scenario.duration);
    let epoch = duration_to_nanos(epoch);
    let seconds = scenario.duration.as_secs_f64().ceil() as usize;
    let mut outcomes: Vec<StreamOutcome> = scenario
        .streams
        .iter()
        .map(|s| StreamOutcome {
            name: s.name.clone(),
            received: vec![0; seconds],
            forwarded: vec![0; seconds],
            dropped_at_level: [0; LEVELS],
            first_drop: None,
        })
        .collect();
    let mut next_k = vec![0u64; scenario.streams.len()];
    let mut fields = Fields(weir_primitives::random::SplitMix64::new(scenario.seed));
    loop {
        // The stream whose next packet comes first (ties: lowest index).
        let mut best: Option<(u64, usize)> = None;
        for (i, s) in scenario.streams.iter().enumerate() {
            if s.rate == 0 {
                continue;
            }
            let t = arrival(s, next_k[i]);
            if t < end && best.is_none_or(|(bt, _)| t < bt) {
                best = Some((t, i));
            }
        }
        let Some((t, i)) = best else { break };
        next_k[i] += 1;
        let s = &scenario.streams[i];
        let src = SocketAddr::new(fields.addr(s.src), fields.port(s.src_port));
        let dst = SocketAddr::new(fields.addr(s.dst), fields.port(s.dst_port));
        let tuple = FourTuple::from_socket_addrs(src, dst);
        let verdict = classify(&tuple, epoch.saturating_add(t));
        let out = &mut outcomes[i];
        let second = ((t / 1_000_000_000) as usize).min(seconds.saturating_sub(1));
        out.received[second] += 1;
        match verdict {
            Verdict::Drop(why) => {
                out.dropped_at_level[usize::from(why.level).min(LEVELS - 1)] += 1;
                if out.first_drop.is_none() {
                    out.first_drop = Some((Duration::from_nanos(t), why));
                }
            }
            _ => out.forwarded[second] += 1,
        }
    }
    ScenarioOutcome { streams: outcomes }
}
