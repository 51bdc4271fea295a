//! The classifier: rakelimit's hierarchical-heavy-hitter limiter.
//!
//! # Algorithm
//!
//! Every [`Generalisation`] of the lattice owns one count-min sketch whose
//! cells hold an **EWMA packet rate** and the time of the cell's last update
//! (rakelimit stores rates, not counts). For each packet the classifier walks
//! the levels from the most specific (0, the exact 4-tuple) to the most
//! general (4, everything sent to the destination address). At each level it
//! updates the packet's cells in every generalisation of the level with
//! weir-limits' EWMA ([`EwmaWindow::update_fixed`] for one event now, with
//! its divisions precomputed: weir-limits' `OneEventUpdate`), takes the minimum over a
//! generalisation's cells as its estimate (count-min of rates), and the
//! maximum estimate over the level. If that maximum exceeds the limit, the
//! packet is *limited at this level*: it passes with probability
//! `limit / rate` and is otherwise dropped, and in either case it is **not
//! counted at more general levels**. So a flood from one 4-tuple is held at
//! level 0 and never inflates the rate of its subnet, and legitimate traffic
//! from the same subnet keeps flowing; a flood spread over many sources
//! (a reflection attack from one source port) is caught at the first level
//! that aggregates it, as long as each source stays under the limit (one
//! over it is limited, and stops counting, at its own level: the crate docs'
//! "What the limit bounds"). Packets never limited pass and are counted
//! everywhere.
//!
//! # Aggregates remember longer (a deliberate change from rakelimit)
//!
//! An aggregate always carries at least the rate of every stream inside it,
//! so with one EWMA window for all levels a starting flood pushes its
//! aggregates over the limit *before* its own exact 4-tuple: for a few
//! milliseconds the flood is limited at, say, "this source, any port", and
//! the legitimate packets of that source's other ports are dropped with it.
//! rakelimit hides this by initialising a rate from the first inter-arrival
//! gap (the flood's second packet already shows its full rate), which in
//! turn lets two unrelated packets that happen to hash together look like a
//! flood. weir keeps the EWMA of weir-limits unchanged and instead gives level
//! `l` the window `window · growth^l` (default growth 2: 100 ms, 200 ms,
//! ... 1.6 s). The more specific estimate reacts faster, so the culprit is
//! singled out at its own level before any aggregate containing it crosses
//! the limit, and it is then no longer counted there (the scenario test
//! `equal_windows_let_a_starting_attack_hit_its_neighbours` shows the loss
//! with `window_growth(1)`). Steady-state rates are the same for any
//! window; only aggregate floods are detected later (about a window).
//!
//! # Speed
//!
//! A packet costs 12 sketch updates. To keep them cheap:
//!
//! * **Hashing.** The tuple is digested once (three source-prefix digests,
//!   one destination digest, the two ports); each generalisation's 64-bit key
//!   hash is then one keyed 64×64→128-bit multiply of two words, with a seed
//!   per generalisation and per address family (IPv4 digests are the
//!   addresses themselves, so no work at all). Weir-limits'
//!   [`Locator::locate_hash`] maps that hash to the key's cells.
//! * **Layout.** [`Layout::Rows`] (the default) is the classic count-min
//!   matrix: each of a key's cells sits in its own row, so a light key
//!   shares *all* its cells with a heavy one with probability about
//!   `1/slots^hashes`. [`Layout::Blocked`] keeps a key's cells in one
//!   128-byte block (one memory access per generalisation) but correlates
//!   them: in the paper's scenarios a random legitimate packet then
//!   inherits a flood's rate about once per ten thousand packets (the
//!   scenario tests fail with it), and on this workload it is not reliably
//!   faster (see the bench report), so it is an option, not the default.
//! * **Fixed point.** Rates are [`FixedRate`] (16 fractional bits) updated
//!   with integer arithmetic; the coin for limited packets is a 32-bit
//!   integer compared without division.
//! * **No allocation, optional clock reads.** [`Classifier::classify_at`]
//!   takes the time from the caller (a receive loop can read the clock once
//!   per batch); [`Classifier::classify`] reads the injected clock.
//!
//! The pieces, one per file: `builder.rs` (configuration, its validation
//! and the defaults), `hashing.rs` (the per-generalisation hash, shared
//! with the BPF filter), `cells.rs` (the sketches' cells and the hot loop
//! that updates them), `verdict.rs` (what a packet's check returns and the
//! per-level counters); this file holds the classifier's public face.

mod builder;
mod cells;
mod hashing;
#[cfg(all(test, not(loom)))]
mod tests;
mod verdict;

pub use builder::ClassifierBuilder;
#[cfg(feature = "bpf")]
pub(crate) use builder::Params;
pub use verdict::{LevelStats, Limited, Stats, Verdict};

use cells::{BLOCK_CELLS, Block};
use hashing::{Keys, generalised_hash_dyn};
use verdict::Counters;
#[cfg(feature = "metrics")]
use verdict::bump;

use crate::error::ConfigError;
use crate::lattice::{Generalisation, LEVELS, Prefixes};
use crate::random::{RandomSource, ThreadRandom};
use crate::sync::{AtomicU64, Ordering};
use crate::tuple::{FourTuple, ParseError};
use std::time::Duration;
use thread_local::ThreadLocal;
use weir_limits::Shape;
use weir_limits::clock::{Clock, MonotonicClock, Timestamp};
use weir_limits::ewma::{FixedRate, OneEventUpdate};
use weir_limits::sketch::Locator;

/// rakelimit's fair-share flood limiter over 4-tuples: one sketch of packet
/// rates per [`Generalisation`], a packet limited at the most specific one
/// over the limit.
///
/// Build one with [`try_new`](Self::try_new) or [`builder`](Self::builder).
/// It is `Send + Sync` and takes `&self` everywhere: share it (e.g. in an
/// `Arc`) between all receive loops of a service. Its memory is fixed when
/// it is built ([`memory_bytes`](Self::memory_bytes)), whatever the number
/// of sources.
///
/// ```
/// use weir_hhh::{Classifier, FourTuple};
///
/// let rake = Classifier::try_new(1_000)?; // 1000 packets/s per generalisation
/// let tuple = FourTuple::from_socket_addrs(
///     "192.0.2.10:5353".parse().unwrap(),
///     "198.51.100.1:53".parse().unwrap(),
/// );
/// if rake.classify(&tuple).is_pass() {
///     // hand the datagram to the application
/// }
/// # Ok::<(), weir_hhh::ConfigError>(())
/// ```
#[derive(Debug)]
pub struct Classifier<C = MonotonicClock, R = ThreadRandom> {
    limit: AtomicU64,
    /// The EWMA of each level (windows growing with the level).
    windows: [OneEventUpdate; LEVELS],
    locator: Locator,
    cells_per_sketch: usize,
    blocks: Box<[Block]>,
    keys: Keys,
    v4_masks: [u32; 3],
    v6_masks: [u128; 3],
    prefixes: Prefixes,
    counters: ThreadLocal<Counters>,
    clock: C,
    random: R,
}

impl Classifier {
    /// The shape of each generalisation's sketch unless
    /// [`ClassifierBuilder::shape`] says otherwise: 2 × 1024, rows layout.
    pub(crate) const DEFAULT_SHAPE: Shape = Shape::rows::<2, 1024>();

    /// A classifier with the default configuration and a limit of
    /// `limit_pps` packets per second for every generalisation.
    ///
    /// # Errors
    ///
    /// [`ConfigError::ZeroLimit`] if `limit_pps` is 0.
    pub fn try_new(limit_pps: u64) -> Result<Self, ConfigError> {
        Self::builder(limit_pps).build()
    }

    /// Configure a classifier with a limit of `limit_pps` packets per second
    /// (checked by [`ClassifierBuilder::build`]).
    pub fn builder(limit_pps: u64) -> ClassifierBuilder {
        ClassifierBuilder::with_defaults(limit_pps)
    }
}

impl<C: Clock, R: RandomSource> Classifier<C, R> {
    /// Judge one packet now (reads the clock once).
    #[inline]
    pub fn classify(&self, tuple: &FourTuple) -> Verdict {
        self.classify_at(tuple, self.clock.now())
    }

    /// Judge a raw IP packet now, by the tuple
    /// [`FourTuple::attribute`] gives it: a packet whose ports cannot be
    /// read (a later fragment, many extension headers, another protocol)
    /// is judged by its addresses, with both ports
    /// [`UNKNOWN_PORT`](crate::UNKNOWN_PORT).
    ///
    /// ```
    /// use weir_hhh::Classifier;
    ///
    /// let rake = Classifier::try_new(1_000).unwrap();
    /// let packet = [
    ///     0x45, 0, 0, 28, 0, 0, 0x40, 0, 64, 17, 0, 0, // IPv4, 28 bytes, UDP
    ///     192, 0, 2, 7, 198, 51, 100, 1, // 192.0.2.7 -> 198.51.100.1
    ///     0x13, 0xe9, 0, 53, 0, 8, 0, 0, // UDP 5097 -> 53, no payload
    /// ];
    /// assert!(rake.classify_packet(&packet).unwrap().is_pass());
    /// assert!(rake.classify_packet(&packet[..12]).is_err()); // ends before its addresses
    /// ```
    ///
    /// # Errors
    ///
    /// Only for a packet that is not IPv4 or IPv6 or ends before its
    /// addresses: nothing can be attributed, and the caller decides what
    /// to do with it.
    pub fn classify_packet(&self, packet: &[u8]) -> Result<Verdict, ParseError> {
        let seen = FourTuple::attribute(packet);
        #[cfg(feature = "metrics")]
        {
            use verdict::ParseOutcome;
            let outcome = match &seen {
                Ok(a) if a.ports_unknown.is_none() => ParseOutcome::Attributed,
                Ok(_) => ParseOutcome::PortsUnknown,
                Err(_) => ParseOutcome::Unattributable,
            };
            bump(&self.counters.get_or_default().parsed[outcome as usize]);
        }
        Ok(self.classify(&seen?.tuple))
    }

    /// Judge one packet that arrived at `now` on the classifier's clock
    /// (pass the time when the caller already has it, e.g. once per batch
    /// of packets: [`now`](Self::now)).
    ///
    /// Any `now` is accepted, up to `u64::MAX` ns. A time behind a cell's
    /// last update counts as no time passing, however stale. Only a cell
    /// stamped a window or more ahead of the classifier's clock (by a wild
    /// time far in the future) has its timestamp moved back to a time a
    /// window or more behind it, so one wild time never freezes the cells
    /// it shares with other keys: it restarts their rates as an idle spell
    /// would, and the packets after it are judged normally.
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir_hhh::{Classifier, FourTuple};
    /// use weir_hhh::clock::ManualClock;
    ///
    /// let clock = ManualClock::new();
    /// let rake = Classifier::builder(1_000).clock(clock.clone()).build().unwrap();
    /// let t = FourTuple::from_socket_addrs("10.0.0.1:1".parse().unwrap(), "10.0.0.2:2".parse().unwrap());
    /// clock.advance(Duration::from_secs(1));
    /// let now = rake.now(); // once for a batch of packets
    /// assert!(rake.classify_at(&t, now).is_pass());
    /// ```
    #[inline]
    pub fn classify_at(&self, tuple: &FourTuple, now: Timestamp<C>) -> Verdict {
        let now_nanos = now.as_nanos();
        // Specialise the hot loop for the usual numbers of cells per key,
        // so that it unrolls; anything else takes the general path.
        match self.locator.hashes() {
            1 => self.classify_cells::<1>(tuple, now_nanos, 1),
            2 => self.classify_cells::<2>(tuple, now_nanos, 2),
            3 => self.classify_cells::<3>(tuple, now_nanos, 3),
            4 => self.classify_cells::<4>(tuple, now_nanos, 4),
            5 => self.classify_cells::<5>(tuple, now_nanos, 5),
            n => self.classify_cells::<{ weir_limits::sketch::MAX_HASHES }>(tuple, now_nanos, n),
        }
    }

    /// The estimated rate of `tuple` under one generalisation at `now` on
    /// the classifier's clock, decayed since the last update; changes
    /// nothing.
    ///
    /// ```
    /// use weir_hhh::{Classifier, FourTuple, Generalisation};
    /// use weir_hhh::clock::Timestamp;
    ///
    /// let rake = Classifier::builder(1000).seed(1).build().unwrap();
    /// let t = FourTuple::from_socket_addrs("10.0.0.1:1".parse().unwrap(), "10.0.0.2:2".parse().unwrap());
    /// for i in 0..1000 {
    ///     rake.classify_at(&t, Timestamp::from_nanos(i * 1_000_000)); // 1000 pps for a second
    /// }
    /// let exact = Generalisation::ALL[0];
    /// let rate = rake.estimate_at(&t, exact, Timestamp::from_nanos(999_000_000)).as_f64();
    /// assert!((rate - 1000.0).abs() < 100.0, "{rate}");
    /// ```
    pub fn estimate_at(
        &self,
        tuple: &FourTuple,
        generalisation: Generalisation,
        now: Timestamp<C>,
    ) -> FixedRate {
        let now_nanos = now.as_nanos();
        let g = generalisation.index();
        let (digest, keys) = self.digest(tuple);
        let hash = generalised_hash_dyn(g, &digest, keys[g]);
        let base = g * self.cells_per_sketch;
        let min = self
            .locator
            .locate_hash(hash)
            .iter()
            .map(|i| {
                let cell = self.cell(base + i);
                let rate = FixedRate::from_bits(cell.rate.load(Ordering::Relaxed));
                let stamp = cell.stamp.load(Ordering::Relaxed);
                self.windows[usize::from(generalisation.level())]
                    .window()
                    .decay_fixed(rate, now_nanos.saturating_sub(stamp))
            })
            .min();
        min.unwrap_or(FixedRate::ZERO)
    }

    /// Counters of every verdict so far (each counter is exact; the set is
    /// not a consistent snapshot while packets are being classified). Reads
    /// one set of counters per thread that has classified a packet; cheap
    /// enough for a scrape, not for every packet.
    pub fn stats(&self) -> Stats {
        let mut stats = Stats::default();
        for c in self.counters.iter() {
            use std::sync::atomic::Ordering::Relaxed;
            stats.unlimited += c.unlimited.load(Relaxed);
            for (l, s) in stats.levels.iter_mut().enumerate() {
                s.passed += c.passed[l].load(Relaxed);
                s.dropped += c.dropped[l].load(Relaxed);
            }
        }
        stats
    }

    /// Publish this classifier's counts through the
    /// [`metrics`](https://docs.rs/metrics) facade (feature `metrics`), to
    /// whatever recorder (exporter) is installed, and return
    /// [`stats`](Self::stats). Every series carries the label
    /// `classifier` = `name`:
    ///
    /// | metric | kind | labels | what |
    /// |---|---|---|---|
    /// | `weir_hhh_unlimited_packets_total` | counter | | passed, no generalisation over the limit |
    /// | `weir_hhh_limited_packets_total` | counter | `level` (`0`–`4`), `generalisation` (as it displays, e.g. `src:* -> dst:dport`), `outcome` (`passed`, `dropped`) | limited there, and let through by the lottery or dropped |
    /// | `weir_hhh_parsed_packets_total` | counter | `outcome`: `attributed` (with its ports), `ports_unknown` (by its addresses), `unattributable` | what [`classify_packet`](Self::classify_packet) made of each raw packet ([`FourTuple::attribute`]) |
    ///
    /// Summed over `level`, the limited counts are [`Stats::levels`]. The
    /// `udp` module's `GuardedUdpSocket` classifies by socket addresses, so
    /// its datagrams are in the verdict counts only.
    ///
    /// Nothing is published per packet: the packet path keeps counting in
    /// the per-thread counters [`stats`](Self::stats) reads (with the
    /// feature, limited packets are also counted by generalisation, and
    /// `classify_packet` counts its parse outcomes), and this call sums
    /// them and sets the facade's counters to the totals (`absolute`).
    /// Call it where the values are wanted: before rendering a scrape, or
    /// from a periodic task. Give each classifier its own name.
    ///
    /// ```
    /// use weir_hhh::{Classifier, FourTuple};
    ///
    /// let rake = Classifier::try_new(1000).unwrap();
    /// let t = FourTuple::from_socket_addrs("10.0.0.1:1".parse().unwrap(), "10.0.0.2:2".parse().unwrap());
    /// assert!(rake.classify(&t).is_pass());
    /// assert!(rake.classify_packet(&[0x45, 0]).is_err()); // truncated: unattributable
    /// // With an exporter installed as the recorder, e.g. once per scrape:
    /// let stats = rake.publish_metrics("dns");
    /// assert_eq!(stats.unlimited, 1);
    /// ```
    #[cfg(feature = "metrics")]
    #[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
    pub fn publish_metrics(&self, name: &str) -> Stats {
        use std::sync::atomic::Ordering::Relaxed;
        let stats = self.stats();
        let mut counts = crate::telemetry::ClassifierCounts {
            unlimited: stats.unlimited,
            ..Default::default()
        };
        for c in self.counters.iter() {
            for (sum, by_outcome) in counts
                .by_generalisation
                .iter_mut()
                .zip(&c.by_generalisation)
            {
                for (sum, n) in sum.iter_mut().zip(by_outcome) {
                    *sum += n.load(Relaxed);
                }
            }
            for (sum, n) in counts.parsed.iter_mut().zip(&c.parsed) {
                *sum += n.load(Relaxed);
            }
        }
        crate::telemetry::publish_classifier(name, &counts);
        stats
    }

    /// The limit in force.
    pub fn limit(&self) -> FixedRate {
        FixedRate::from_bits(self.limit.load(Ordering::Relaxed))
    }

    /// Change the limit at run time (takes effect for the next packet).
    ///
    /// ```
    /// use weir_hhh::Classifier;
    ///
    /// let rake = Classifier::try_new(1_000).unwrap();
    /// rake.set_limit(5_000).unwrap();
    /// assert_eq!(rake.limit().as_f64(), 5_000.0);
    /// ```
    ///
    /// # Errors
    ///
    /// [`ConfigError::ZeroLimit`] if `limit_pps` is 0 (the limit
    /// in force is kept).
    pub fn set_limit(&self, limit_pps: u64) -> Result<(), ConfigError> {
        if limit_pps == 0 {
            return Err(ConfigError::ZeroLimit);
        }
        self.limit.store(
            FixedRate::from_per_second(limit_pps).to_bits(),
            Ordering::Relaxed,
        );
        Ok(())
    }

    /// The EWMA window of each level (0 to 4): the builder's
    /// [`window`](ClassifierBuilder::window) at level 0, times the
    /// [`window_growth`](ClassifierBuilder::window_growth) per level.
    pub fn level_windows(&self) -> [Duration; LEVELS] {
        self.windows.map(|w| w.window().window())
    }

    /// The source prefix lengths (for
    /// [`Generalisation::apply`]).
    pub fn prefixes(&self) -> Prefixes {
        self.prefixes
    }

    /// The cells of each of the twelve sketches.
    #[cfg(test)]
    pub(super) fn locator(&self) -> &Locator {
        &self.locator
    }

    /// The time on the classifier's clock, for [`classify_at`](Self::classify_at).
    pub fn now(&self) -> Timestamp<C> {
        self.clock.now()
    }

    /// Heap and inline memory of the classifier in bytes (the sketches are
    /// all of it but a few hundred bytes).
    ///
    /// ```
    /// use weir_hhh::Classifier;
    ///
    /// // 12 sketches × 2 × 1024 cells × 16 bytes.
    /// assert!(Classifier::try_new(1).unwrap().memory_bytes() >= 12 * 2048 * 16);
    /// ```
    pub fn memory_bytes(&self) -> usize {
        std::mem::size_of_val(&*self.blocks) + std::mem::size_of::<Self>()
    }
}
