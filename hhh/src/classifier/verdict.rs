//! What the classifier answers: a packet's verdict (and why it was limited),
//! and the per-level counts of passed and dropped packets, kept per thread.

#[cfg(feature = "metrics")]
use crate::lattice::GENERALISATIONS;
use crate::lattice::{Generalisation, LEVELS};
use std::fmt;
use weir_limits::ewma::FixedRate;

/// Why a packet was limited: the level and generalisation whose estimated
/// rate exceeded the limit ([`Verdict::limited`]).
///
/// ```
/// use weir_hhh::{Classifier, FourTuple};
/// use weir_hhh::clock::Timestamp;
///
/// let rake = Classifier::try_new(10).unwrap();
/// let t = FourTuple::from_socket_addrs("10.0.0.1:53".parse().unwrap(), "10.0.0.2:53".parse().unwrap());
/// let mut verdict = rake.classify_at(&t, Timestamp::from_nanos(0));
/// for i in 1..100 {
///     verdict = rake.classify_at(&t, Timestamp::from_nanos(i * 10_000));
/// }
/// let why = verdict.limited().unwrap();
/// assert_eq!((why.level, why.generalisation.to_string().as_str()), (0, "src:sport -> dst:dport"));
/// assert!(why.rate > why.limit);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limited {
    /// The level (0–4) at which the rate first exceeded the limit.
    pub level: u8,
    /// The generalisation with the highest rate at that level.
    pub generalisation: Generalisation,
    /// Its estimated rate (packets per second), including this packet.
    pub rate: FixedRate,
    /// The limit in force.
    pub limit: FixedRate,
}

impl Limited {
    /// The probability with which a packet limited like this passes
    /// (`limit / rate`).
    fn pass_probability(&self) -> f64 {
        if self.rate.to_bits() == 0 {
            1.0
        } else {
            (self.limit.as_f64() / self.rate.as_f64()).min(1.0)
        }
    }
}

impl fmt::Display for Limited {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "level {} ({}) at {:.1} pps over the limit of {:.1} pps",
            self.level,
            self.generalisation,
            self.rate.as_f64(),
            self.limit.as_f64()
        )
    }
}

/// What to do with a packet, and why.
///
/// ```
/// use weir_hhh::{Classifier, FourTuple, Verdict};
/// use weir_hhh::clock::Timestamp;
/// use weir_hhh::random::ConstantRandom;
///
/// let rake = Classifier::builder(10).random(ConstantRandom(u32::MAX)).build().unwrap();
/// let t = FourTuple::from_socket_addrs("10.0.0.1:53".parse().unwrap(), "10.0.0.2:53".parse().unwrap());
/// // 100 packets within 1 ms: far over 10 pps.
/// let verdicts: Vec<Verdict> = (0..100).map(|i| rake.classify_at(&t, Timestamp::from_nanos(i * 10_000))).collect();
/// assert!(verdicts[0].is_pass());
/// let Verdict::Drop(why) = verdicts[99] else { panic!() };
/// assert_eq!(why.level, 0);
/// println!("{}", verdicts[99]); // "drop: level 0 (src:sport -> dst:dport) at 1000.0 pps over the limit of 10.0 pps"
/// ```
#[must_use = "a verdict not looked at lets every packet through"]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// No generalisation of the packet is over the limit.
    Pass,
    /// Over the limit, but let through by the `limit / rate` lottery.
    Sampled(Limited),
    /// Over the limit and dropped.
    Drop(Limited),
}

impl Verdict {
    /// Whether the packet should be delivered.
    #[inline]
    pub fn is_pass(&self) -> bool {
        !matches!(self, Verdict::Drop(_))
    }

    /// The limit that applied, if any.
    #[inline]
    pub fn limited(&self) -> Option<&Limited> {
        match self {
            Verdict::Pass => None,
            Verdict::Sampled(l) | Verdict::Drop(l) => Some(l),
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::Pass => f.write_str("pass"),
            Verdict::Sampled(l) => {
                write!(f, "pass (sampled with p={:.3}): {l}", l.pass_probability())
            }
            Verdict::Drop(l) => write!(f, "drop: {l}"),
        }
    }
}

/// Packets limited at one level ([`Stats::levels`]).
///
/// ```
/// use weir_hhh::Classifier;
///
/// let rake = Classifier::try_new(100).unwrap();
/// let exact = rake.stats().levels[0];
/// assert_eq!((exact.passed, exact.dropped), (0, 0));
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LevelStats {
    /// Limited here but let through by the lottery.
    pub passed: u64,
    /// Limited here and dropped.
    pub dropped: u64,
}

/// Counters of every verdict so far ([`Classifier::stats`](crate::Classifier::stats)).
///
/// ```
/// use weir_hhh::Classifier;
///
/// let rake = Classifier::try_new(100).unwrap();
/// let s = rake.stats();
/// assert_eq!((s.total(), s.passed(), s.dropped()), (0, 0, 0));
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Packets no generalisation limited (all passed).
    pub unlimited: u64,
    /// Packets limited at each level (index = level).
    pub levels: [LevelStats; LEVELS],
}

impl Stats {
    /// All packets passed (unlimited and sampled).
    pub fn passed(&self) -> u64 {
        self.unlimited + self.levels.iter().map(|l| l.passed).sum::<u64>()
    }

    /// All packets dropped.
    pub fn dropped(&self) -> u64 {
        self.levels.iter().map(|l| l.dropped).sum()
    }

    /// All packets classified.
    pub fn total(&self) -> u64 {
        self.passed() + self.dropped()
    }
}

/// One thread's counters, on their own cache lines. Only the owning thread
/// writes them, so an increment is a plain load and store (exact, and no
/// locked instruction: a `fetch_add` per packet cost about a fifth of the
/// whole classification, because it waits for the packet's 48 cell stores
/// to drain); [`Classifier::stats`] sums every thread's.
///
/// These are std atomics even under loom: a single writer per OS thread
/// needs no model (and loom runs its threads on one OS thread, where they
/// would share one set).
#[derive(Debug, Default)]
#[repr(align(128))]
pub(super) struct Counters {
    pub(super) unlimited: std::sync::atomic::AtomicU64,
    pub(super) passed: [std::sync::atomic::AtomicU64; LEVELS],
    pub(super) dropped: [std::sync::atomic::AtomicU64; LEVELS],
    /// Feature `metrics`: limited packets by generalisation (index as in
    /// [`Generalisation::ALL`]), passed then dropped.
    #[cfg(feature = "metrics")]
    pub(super) by_generalisation: [[std::sync::atomic::AtomicU64; 2]; GENERALISATIONS],
    /// Feature `metrics`: `classify_packet`'s parse outcomes, in
    /// [`ParseOutcome`] order.
    #[cfg(feature = "metrics")]
    pub(super) parsed: [std::sync::atomic::AtomicU64; 3],
}

/// What [`FourTuple::attribute`](crate::FourTuple::attribute) made of a
/// packet given to `classify_packet` (feature `metrics`).
#[cfg(feature = "metrics")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ParseOutcome {
    /// Attributed with the ports of its UDP header.
    Attributed = 0,
    /// Attributed by its addresses alone (ports unknown).
    PortsUnknown = 1,
    /// Not attributable (not IPv4 or IPv6, or ends before its addresses).
    Unattributable = 2,
}

/// Add one to a counter only this thread writes.
#[inline(always)]
pub(super) fn bump(counter: &std::sync::atomic::AtomicU64) {
    use std::sync::atomic::Ordering::Relaxed;
    counter.store(counter.load(Relaxed) + 1, Relaxed);
}
