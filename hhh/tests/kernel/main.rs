//! The kernel filter (feature `bpf`): agreement with the user-space
//! classifier under `BPF_PROG_TEST_RUN`, malformed packets, and real UDP
//! sockets on loopback (127.0.0.0/8 and ::1). Every test is bounded in
//! packets (at most ~13 000) and time (a few seconds; every receive has a
//! timeout).
//!
//! Loading a BPF program needs CAP_BPF (or root). Without it each test says
//! loudly on stderr what it skipped and why, and passes, unless `CI=true`,
//! where it fails instead.
#![cfg(all(feature = "bpf", not(loom)))]

#[path = "../hostile/mod.rs"]
mod hostile;

mod filter;
mod packets;
mod replay;
mod sockets;
mod times;

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};
use weir_hhh::clock::{ManualClock, Timestamp};
use weir_hhh::kernel::{KernelFilter, KernelStats};
use weir_hhh::random::{ConstantRandom, RandomSource, SeededRandom};
use weir_hhh::sim::{self, Addr, Port, Scenario, ScenarioOutcome, Stream};
use weir_hhh::sketch::{Layout, Shape};
use weir_hhh::test_util::{ethernet_frame, paper, udp_packet};
use weir_hhh::{
    Classifier, ClassifierBuilder, FixedRate, FourTuple, Generalisation, Limited, ParseError,
    Prefixes, Verdict,
};
use weir_primitives::random::SplitMix64;

/// Load a filter, or skip the calling test (loudly) when the kernel refuses
/// for lack of privilege; under `CI=true` a skip is a failure.
fn load_or_skip<C, R>(test: &str, builder: ClassifierBuilder<C, R>) -> Option<KernelFilter>
where
    C: weir_hhh::clock::Clock,
    R: RandomSource,
{
    match KernelFilter::load(builder) {
        Ok(f) => Some(f),
        Err(e) if e.is_permission_denied() => {
            if std::env::var("CI").as_deref() == Ok("true") {
                panic!("{test}: CI=true and the kernel filter cannot be loaded: {e}");
            }
            eprintln!(
                "\n*** SKIPPED {test}: no permission to load BPF programs ({e}). \
                 Run as root or with CAP_BPF to test the kernel filter. ***\n"
            );
            None
        }
        Err(e) => panic!("{test}: loading the kernel filter failed: {e}"),
    }
}

/// A coin the test sets before each packet, so the classifier draws the
/// same number the kernel is given.
#[derive(Clone, Default)]
struct SharedCoin(Arc<AtomicU32>);

impl RandomSource for SharedCoin {
    fn next_u32(&self) -> u32 {
        self.0.load(Ordering::Relaxed)
    }
}

/// What one packet came to, as either side reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Outcome {
    /// Passed unclassified (not IP, or truncated before its addresses).
    Unparsed,
    Unlimited,
    Sampled(u8),
    Dropped(u8),
}

fn user_outcome(verdict: Result<Verdict, ParseError>) -> Outcome {
    match verdict {
        Err(_) => Outcome::Unparsed,
        Ok(Verdict::Pass) => Outcome::Unlimited,
        Ok(Verdict::Sampled(why)) => Outcome::Sampled(why.level),
        Ok(Verdict::Drop(why)) => Outcome::Dropped(why.level),
    }
}

fn kernel_outcome(before: &KernelStats, after: &KernelStats) -> Outcome {
    if after.unparsed != before.unparsed {
        return Outcome::Unparsed;
    }
    for level in 0..5 {
        let (b, a) = (before.levels.levels[level], after.levels.levels[level]);
        if a.passed != b.passed {
            return Outcome::Sampled(level as u8);
        }
        if a.dropped != b.dropped {
            return Outcome::Dropped(level as u8);
        }
    }
    assert_eq!(after.levels.unlimited, before.levels.unlimited + 1);
    Outcome::Unlimited
}
