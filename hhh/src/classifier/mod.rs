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
//! weir-rate's EWMA ([`EwmaWindow::update_fixed`] for one event now, with
//! its divisions precomputed: weir-rate's `OneEventUpdate`), takes the minimum over a
//! generalisation's cells as its estimate (count-min of rates), and the
//! maximum estimate over the level. If that maximum exceeds the limit, the
//! packet is *limited at this level*: it passes with probability
//! `limit / rate` and is otherwise dropped, and in either case it is **not
//! counted at more general levels**. So a flood from one 4-tuple is held at
//! level 0 and never inflates the rate of its subnet, and legitimate traffic
//! from the same subnet keeps flowing; a flood spread over many sources
//! (a reflection attack from one source port) is caught at the first level
//! that aggregates it. Packets never limited pass and are counted everywhere.
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
//! flood. weir keeps the EWMA of weir-rate unchanged and instead gives level
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
//! # Racy but bounded, not exact
//!
//! Cells are two `AtomicU64` (rate, last update) read and written with
//! relaxed loads and stores, not a compare-and-swap loop or a lock. Two
//! threads updating the same cell at the same moment may both read the old
//! state and one update is lost (an undercount of one event, `1/window`
//! packets/s); a reader may pair a new rate with an old timestamp (it then
//! decays the rate too much) or an old rate with a new timestamp (it skips
//! one interval's decay). Whatever the interleaving, a racing update never
//! writes more than a rate the cell held before plus one event, and the
//! next uncontended updates correct it within a window. The exact
//! alternative (a CAS on a packed word or a
//! lock per cell) would cost an atomic read-modify-write on 24 cache lines
//! per packet, which is the contention weir-limits measured to collapse
//! pingora's sketch. The per-level counters are exact (one set per thread,
//! summed when read).
//!
//! # Times out of order, and wild ones
//!
//! A timestamp older than a cell's (threads racing, a receive loop's batch
//! time, even one a thread held while it was preempted for longer than a
//! window) counts as no time passing, and the cell keeps its newer
//! timestamp: a stale time must not restart the rates of everything
//! counted since.
//!
//! The one exception is a cell stamped at a wild time: a whole window or
//! more ahead of the classifier's own clock (a caller's timestamp far in
//! the future, up to `u64::MAX` ns). A packet whose time is a window or
//! more behind such a stamp moves it back to its own time (still counting
//! no time passing): otherwise the cells of that one packet, which it
//! shares with every key of its aggregates, would stay stamped in the
//! future, and every honest packet after it would count as no time
//! passing: the rates would only grow, and the whole destination would be
//! limited until the clock caught up. So a wild time does no more to the
//! cells it touches than an idle spell would (their rates restart), and
//! from the next honest packet on they decay normally; keys that share
//! none of its cells are untouched. Whether a stamp is wild is judged
//! against the clock, not against the packet's time (which may be the
//! stale one), and the clock is read only then, when a packet's time is a
//! window or more behind a cell's. The kernel filter keeps the same rule:
//! its packet's time is its clock's reading. Nothing overflows at any time
//! (the arithmetic wraps or saturates where it must).
//!
//! The pieces, one per file: `builder.rs` (configuration, its validation
//! and the defaults), `hashing.rs` (the per-generalisation hash, shared
//! with the BPF filter), `verdict.rs` (what a packet's check returns and the
//! per-level counters); this file holds the classifier and its hot loop.

mod builder;
mod hashing;
mod verdict;

#[cfg(feature = "bpf")]
pub(crate) use builder::Params;
pub use builder::{ClassifierBuilder, DEFAULT_WINDOW, DEFAULT_WINDOW_GROWTH};
pub use verdict::{LevelStats, Limited, Stats, Verdict};

use hashing::{Digest, Keys, digest, generalised_hash, generalised_hash_dyn};
use verdict::{Counters, bump};

use crate::ClassifierConfigError;
use crate::lattice::{GENERALISATIONS, Generalisation, LEVEL_RANGES, LEVELS, Prefixes};
use crate::random::{RandomSource, ThreadRandom};
use crate::sync::{AtomicU64, Ordering};
use crate::tuple::{FourTuple, ParseError};
use std::time::Duration;
use thread_local::ThreadLocal;
use weir_limits::Shape;
use weir_limits::clock::{Clock, MonotonicClock, Timestamp};
use weir_limits::sketch::Locator;
use weir_rate::ewma::{FixedRate, OneEventUpdate};

/// Cells per block (one block = the cells a blocked key can use).
const BLOCK_CELLS: usize = weir_limits::sketch::LANES;

/// One sketch cell: an EWMA rate ([`FixedRate`] bits) and the time of its
/// last update (nanoseconds on the classifier's clock).
#[derive(Debug, Default)]
#[repr(C, align(16))]
struct Cell {
    rate: AtomicU64,
    stamp: AtomicU64,
}

/// Eight cells: the unit [`Layout::Blocked`] confines a key to. Aligned so a
/// block is exactly one pair of adjacent cache lines.
#[derive(Debug, Default)]
#[repr(C, align(128))]
struct Block([Cell; BLOCK_CELLS]);

/// rakelimit's fair-share flood limiter over 4-tuples. `Send + Sync`: share
/// it (e.g. in an `Arc`) between all receive loops of a service.
///
/// ```
/// use weir_hhh::{Classifier, FourTuple};
///
/// let rake = Classifier::try_new(1_000).unwrap(); // 1000 packets/s per generalisation
/// let tuple = FourTuple::from_socket_addrs(
///     "192.0.2.10:5353".parse().unwrap(),
///     "198.51.100.1:53".parse().unwrap(),
/// );
/// if rake.classify(&tuple).is_pass() {
///     // hand the datagram to the application
/// }
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
    pub const DEFAULT_SHAPE: Shape = Shape::rows::<2, 1024>();

    /// A classifier with the default configuration and a limit of
    /// `limit_pps` packets per second for every generalisation, or
    /// [`ClassifierConfigError::ZeroLimit`].
    pub fn try_new(limit_pps: u64) -> Result<Self, ClassifierConfigError> {
        Self::builder(limit_pps).build()
    }

    /// Configure a classifier with a limit of `limit_pps` packets per second.
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
    /// [`UNKNOWN_PORT`](crate::tuple::UNKNOWN_PORT).
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
    /// would, and the packets after it are judged normally (see the module
    /// docs).
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

    /// [`classify_at`](Self::classify_at) for keys of `n ≤ H` cells.
    ///
    /// Written out per generalisation (a macro over the constant indices)
    /// so that each generalisation's choice of fields folds away at compile
    /// time.
    #[inline(always)]
    fn classify_cells<const H: usize>(&self, tuple: &FourTuple, now: u64, n: usize) -> Verdict {
        let n = n.min(H);
        let (digest, keys) = self.digest(tuple);
        // Locals, so the compiler need not reload them after every store.
        let blocks: &[Block] = &self.blocks;
        let per_sketch = self.cells_per_sketch;
        let locator = &self.locator;
        // Find every generalisation's cells and prefetch them first, so
        // that the cache misses of all twelve sketches overlap instead of
        // queueing behind each level's arithmetic.
        let first = &blocks[0].0[0];
        let mut cells: [[&Cell; H]; GENERALISATIONS] = [[first; H]; GENERALISATIONS];
        macro_rules! locate {
            ($($g:literal)*) => {$(
                let hash = generalised_hash::<$g>(&digest, keys[$g]);
                let base = $g * per_sketch;
                for (slot, cell) in cells[$g].iter_mut().zip(locator.locate_hash(hash).iter()) {
                    *slot = cell_at(blocks, base + cell);
                    prefetch(slot);
                }
            )*};
        }
        locate!(0 1 2 3 4 5 6 7 8 9 10 11);
        let limit = self.limit.load(Ordering::Relaxed);
        let windows = &self.windows;
        macro_rules! level {
            ($level:literal: $($g:literal)*) => {{
                let ewma = &windows[$level];
                let mut max = 0;
                let mut culprit = 0;
                $(
                    let mut rate = u64::MAX;
                    for cell in &cells[$g][..n] {
                        rate = rate.min(touch_cell(ewma, cell, now, &self.clock));
                    }
                    if rate > max {
                        max = rate;
                        culprit = $g;
                    }
                )*
                if max > limit {
                    return self.limited($level, culprit, max, limit);
                }
            }};
        }
        // The same ranges as LEVEL_RANGES (checked at compile time below).
        level!(0: 0);
        level!(1: 1 2 3);
        level!(2: 4 5 6 7);
        level!(3: 8 9 10);
        level!(4: 11);
        bump(&self.counters.get_or_default().unlimited);
        Verdict::Pass
    }

    #[cold]
    #[inline(never)]
    fn limited(&self, level: usize, g: usize, rate: u64, limit: u64) -> Verdict {
        let coin = self.random.next_u32();
        // coin / 2³² < limit / rate, without a division.
        let pass = u128::from(coin) * u128::from(rate) < u128::from(limit) << 32;
        let why = Limited {
            level: level as u8,
            generalisation: Generalisation::ALL[g],
            rate: FixedRate::from_bits(rate),
            limit: FixedRate::from_bits(limit),
        };
        let counters = self.counters.get_or_default();
        #[cfg(feature = "metrics")]
        bump(&counters.by_generalisation[g][usize::from(!pass)]);
        if pass {
            bump(&counters.passed[level]);
            Verdict::Sampled(why)
        } else {
            bump(&counters.dropped[level]);
            Verdict::Drop(why)
        }
    }

    #[inline(always)]
    fn digest(&self, tuple: &FourTuple) -> (Digest, &[(u64, u64); GENERALISATIONS]) {
        digest(&self.keys, &self.v4_masks, &self.v6_masks, tuple)
    }

    #[inline(always)]
    fn cell(&self, index: usize) -> &Cell {
        cell_at(&self.blocks, index)
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
    /// not a consistent snapshot while packets are being classified).
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
    pub fn set_limit(&self, limit_pps: u64) -> Result<(), ClassifierConfigError> {
        if limit_pps == 0 {
            return Err(ClassifierConfigError::ZeroLimit);
        }
        self.limit.store(
            FixedRate::from_per_second(limit_pps).to_bits(),
            Ordering::Relaxed,
        );
        Ok(())
    }

    /// The EWMA window of level 0.
    pub fn window(&self) -> Duration {
        self.windows[0].window().window()
    }

    /// The EWMA window of each level.
    pub fn level_windows(&self) -> [Duration; LEVELS] {
        self.windows.map(|w| w.window().window())
    }

    /// The source prefix lengths.
    pub fn prefixes(&self) -> Prefixes {
        self.prefixes
    }

    /// The shape of each of the twelve sketches.
    pub fn locator(&self) -> &Locator {
        &self.locator
    }

    /// The clock the classifier reads.
    pub fn clock(&self) -> &C {
        &self.clock
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

/// Ask the CPU to start loading a cell's cache line (a hint: no effect on
/// correctness, and a no-op off x86-64).
#[inline(always)]
fn prefetch(cell: &Cell) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        // SAFETY: SSE is part of the x86-64 baseline, so the instruction
        // exists; a prefetch only hints the cache and never dereferences
        // or faults (the pointer is a valid reference anyway).
        unsafe { _mm_prefetch::<_MM_HINT_T0>((cell as *const Cell).cast::<i8>()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = cell;
}

/// Cell `index` of the sketches.
#[inline(always)]
fn cell_at(blocks: &[Block], index: usize) -> &Cell {
    &blocks[index / BLOCK_CELLS].0[index % BLOCK_CELLS]
}

/// One event now in one cell; returns the cell's new rate (bits). `clock`
/// is read only when `now` is a window or more behind the cell's stamp.
#[inline(always)]
fn touch_cell<C: Clock>(ewma: &OneEventUpdate, cell: &Cell, now: u64, clock: &C) -> u64 {
    let old = cell.rate.load(Ordering::Relaxed);
    let stamp = cell.stamp.load(Ordering::Relaxed);
    // One unsigned comparison catches both rare cases: a cell idle for a
    // window or more, and time behind the cell's (the difference wraps).
    let elapsed = now.wrapping_sub(stamp);
    let window = ewma.window_nanos();
    let (rate, stamp) = if elapsed < window {
        (ewma.within_window(old, elapsed), now)
    } else if now >= stamp {
        (ewma.update(old, elapsed), now)
    } else if stamp - now < window || !is_wild(clock, stamp, window) {
        // Behind (threads racing, a stale batch time): no time passed.
        (ewma.update(old, 0), stamp)
    } else {
        // The cell's stamp is a wild time's, a window or more ahead of the
        // clock (see the module docs): no time passed, and the stamp comes
        // back here.
        (ewma.update(old, 0), now)
    };
    cell.rate.store(rate, Ordering::Relaxed);
    cell.stamp.store(stamp, Ordering::Relaxed);
    rate
}

/// Whether a cell's `stamp`, a window or more ahead of a packet's time, is
/// a wild time's: a window or more ahead of the clock as well. Otherwise
/// the packet's time is merely stale. Reads the clock, so kept off the hot
/// path.
#[cold]
#[inline(never)]
fn is_wild<C: Clock>(clock: &C, stamp: u64, window: u64) -> bool {
    stamp.saturating_sub(clock.now_nanos()) >= window
}

// `classify_cells` spells the levels out; they must match the lattice.
const _: () = assert!(
    LEVEL_RANGES[0].0 == 0
        && LEVEL_RANGES[0].1 == 1
        && LEVEL_RANGES[1].1 == 4
        && LEVEL_RANGES[2].1 == 8
        && LEVEL_RANGES[3].1 == 11
        && LEVEL_RANGES[4].1 == 12
);

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::random::{ConstantRandom, SeededRandom};
    use std::net::{Ipv4Addr, SocketAddrV4};

    fn t4(src: [u8; 4], sp: u16, dst: [u8; 4], dp: u16) -> FourTuple {
        FourTuple::v4(
            SocketAddrV4::new(Ipv4Addr::from(src), sp),
            SocketAddrV4::new(Ipv4Addr::from(dst), dp),
        )
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

        /// Any traffic, with time jumping back and forth: no panic, every
        /// packet counted once, and every limited verdict consistent (its
        /// generalisation sits at its level, its rate is over the limit).
        #[test]
        fn verdicts_are_consistent_for_any_traffic(
            limit in 1u64..200,
            hashes in 1usize..=5,
            packets in proptest::collection::vec((0u8..4, 0u16..3, 0u8..2, -2_000_000i64..20_000_000), 1..300),
        ) {
            let rake = Classifier::builder(limit)
                .shape(Shape::try_new(hashes, 16, weir_limits::Layout::Rows).unwrap())
                .seed(5)
                .random(SeededRandom::new(5))
                .build()
                .unwrap();
            let mut now: u64 = 1_000_000_000;
            for &(host, sport, v6, step) in &packets {
                now = now.saturating_add_signed(step);
                let tuple = if v6 == 0 {
                    t4([10, 0, host / 2, host], 1000 + sport, [10, 9, 9, 9], 53)
                } else {
                    FourTuple::from_socket_addrs(
                        std::net::SocketAddr::new(std::net::IpAddr::V6(std::net::Ipv6Addr::new(0x2001, 0xdb8, u16::from(host / 2), 0, 0, 0, 0, u16::from(host))), 1000 + sport),
                        "[2001:db8:ffff::1]:53".parse().unwrap(),
                    )
                };
                if let Some(why) = rake.classify_at(&tuple, Timestamp::from_nanos(now)).limited() {
                    proptest::prop_assert_eq!(why.generalisation.level(), why.level);
                    proptest::prop_assert!(why.rate > why.limit);
                    proptest::prop_assert_eq!(why.limit, FixedRate::from_per_second(limit));
                }
            }
            proptest::prop_assert_eq!(rake.stats().total(), packets.len() as u64);
        }

    }

    #[test]
    fn stats_sum_every_thread() {
        let rake = std::sync::Arc::new(Classifier::builder(1_000_000).seed(1).build().unwrap());
        let threads: Vec<_> = (0..3u64)
            .map(|i| {
                let rake = std::sync::Arc::clone(&rake);
                std::thread::spawn(move || {
                    let t = t4([10, 0, 0, i as u8], 1, [10, 0, 0, 200], 2);
                    for k in 0..1000 {
                        let _ = rake.classify_at(&t, Timestamp::from_nanos(k * 10_000_000));
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let s = rake.stats();
        assert_eq!((s.total(), s.unlimited), (3000, 3000));
    }

    #[test]
    fn classifier_is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<Classifier>();
        check::<Classifier<weir_limits::clock::ManualClock, SeededRandom>>();
    }

    #[test]
    fn bad_configurations_are_typed_errors() {
        assert_eq!(
            Classifier::try_new(0).unwrap_err(),
            ClassifierConfigError::ZeroLimit
        );
        assert_eq!(
            Classifier::builder(1)
                .window(Duration::ZERO)
                .build()
                .unwrap_err(),
            ClassifierConfigError::Limits(weir_limits::ConfigError::ZeroInterval)
        );
        assert_eq!(
            Classifier::builder(1).window_growth(0).build().unwrap_err(),
            ClassifierConfigError::ZeroWindowGrowth
        );
        assert_eq!(
            Classifier::builder(1)
                .window(Duration::from_secs(1 << 40))
                .window_growth(1 << 20)
                .build()
                .unwrap_err(),
            ClassifierConfigError::Limits(weir_limits::ConfigError::IntervalTooLong)
        );
        // One sketch of 2³⁰ cells is valid; twelve are more than the
        // classifier's table addresses: an error, not an allocation abort.
        let huge = Shape::try_new(1, 1 << 30, weir_limits::Layout::Rows).unwrap();
        assert!(matches!(
            Classifier::builder(1).shape(huge).build(),
            Err(ClassifierConfigError::Limits(
                weir_limits::ConfigError::TooManyCells { .. }
            ))
        ));
        // A shape without a seed keeps the one set before it.
        let shape = Shape::rows::<2, 64>();
        let seeded = |b: ClassifierBuilder| b.build().unwrap().locator().shape().seed();
        assert_eq!(seeded(Classifier::builder(1).seed(3).shape(shape)), Some(3));
        assert_eq!(
            seeded(Classifier::builder(1).seed(3).shape(shape.with_seed(4))),
            Some(4)
        );
        assert!(matches!(
            Classifier::builder(1)
                .prefixes(Prefixes {
                    v6_subnet: 129,
                    v6_exact: 130,
                    ..Prefixes::default()
                })
                .build(),
            Err(ClassifierConfigError::InvalidPrefix { family: "IPv6", .. })
        ));
        let rake = Classifier::try_new(5).unwrap();
        assert_eq!(rake.set_limit(0), Err(ClassifierConfigError::ZeroLimit));
        assert_eq!(rake.limit(), FixedRate::from_per_second(5));
    }

    #[test]
    fn time_going_backwards_is_no_time() {
        let rake = Classifier::builder(1_000_000).seed(3).build().unwrap();
        let t = t4([10, 0, 0, 1], 1, [10, 0, 0, 2], 2);
        let _ = rake.classify_at(&t, Timestamp::from_nanos(50_000_000));
        // Earlier timestamps: rates only grow by 1/window, never wrap.
        for _ in 0..10 {
            assert!(rake.classify_at(&t, Timestamp::from_nanos(1_000)).is_pass());
        }
        let r = rake
            .estimate_at(
                &t,
                Generalisation::ALL[0],
                Timestamp::from_nanos(50_000_000),
            )
            .as_f64();
        assert!((r - 110.0).abs() < 1.0, "{r}");
    }

    #[test]
    fn coin_decides_limited_packets() {
        let t = t4([10, 0, 0, 1], 1, [10, 0, 0, 2], 2);
        for (coin, expect_pass) in [(0, true), (u32::MAX, false)] {
            let rake = Classifier::builder(10)
                .seed(1)
                .random(ConstantRandom(coin))
                .build()
                .unwrap();
            let v: Vec<Verdict> = (0..50)
                .map(|i| rake.classify_at(&t, Timestamp::from_nanos(i * 1000)))
                .collect();
            // The first packet makes 10 pps: at, not over, the limit.
            assert_eq!(v[0], Verdict::Pass);
            assert!(v[1..].iter().all(|v| v.is_pass() == expect_pass), "{v:?}");
            let s = rake.stats();
            assert_eq!(s.total(), 50);
            assert_eq!(s.unlimited, 1);
        }
    }

    #[test]
    fn a_drop_explains_itself() {
        let rake = Classifier::builder(10)
            .seed(1)
            .random(ConstantRandom(u32::MAX))
            .build()
            .unwrap();
        let t = t4([10, 0, 0, 1], 53, [10, 0, 0, 2], 53);
        let mut last = Verdict::Pass;
        for i in 0..5 {
            last = rake.classify_at(&t, Timestamp::from_nanos(i * 1000));
        }
        let why = *last.limited().unwrap();
        assert_eq!(why.level, 0);
        assert_eq!(why.generalisation, Generalisation::ALL[0]);
        assert_eq!(why.limit, FixedRate::from_per_second(10));
        assert!(why.rate.whole_per_second() >= 49, "{why}");
        assert!(
            last.to_string()
                .starts_with("drop: level 0 (src:sport -> dst:dport) at 50.0 pps"),
            "{last}"
        );
    }
}
