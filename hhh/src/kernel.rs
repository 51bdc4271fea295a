//! The flood filter in the kernel (feature `bpf`): the [`Classifier`]'s
//! algorithm as a BPF socket filter, so that flood packets are dropped
//! before they cost a wake-up, a copy or a system call.
//!
//! [`KernelFilter::load`] takes the same [`ClassifierBuilder`] as the user-space
//! classifier (limit, windows, sketch shape, prefixes, seed) and loads
//! `bpf/filter.c` (compiled by clang at build time) with aya; attach it to
//! any number of UDP sockets (`std` or tokio) with
//! [`attach`](KernelFilter::attach). All sockets it is attached to share its
//! sketches and counters.
//!
//! # One algorithm, twice
//!
//! The kernel program computes what [`Classifier::classify_at`] computes, bit
//! for bit: the same per-generalisation hash (the same keys, derived from the
//! same seed), the same cells (either [`Layout`]), the same division-free
//! fixed-point EWMA with the same window per level, the same coin rule
//! (`coin·rate < limit·2³²`). Every constant that must match comes from user
//! space in the program's read-only data, set before it is verified; the C
//! file holds only the arithmetic and the lattice (which is part of the
//! algorithm, not of the configuration). The object holds one program for
//! any layout and programs compiled for the common ones (1, 2, 3 or 4 cells
//! per key in rows, 1, 2 or 4 in blocks, a power-of-two width, the default
//! among them), in which the cell loop unrolls to straight-line code; the
//! loader picks the one that fits. With the time and the coin pinned ([`test_run_at`](KernelFilter::test_run_at)),
//! the kernel's verdicts equal the classifier's packet for packet; the tests
//! in `tests/kernel.rs` check it.
//!
//! Differences: the kernel reads its clock with `bpf_ktime_get_ns` and its
//! coin with `bpf_get_prandom_u32`, and it supports at most
//! [`MAX_KERNEL_HASHES`] cells per key.
//!
//! # What it classifies
//!
//! The filter attributes a packet as
//! [`FourTuple::attribute`](crate::FourTuple::attribute) does, packet for
//! packet: what can be attributed to a source is never passed
//! unclassified. IPv4 options and IPv6 extension headers (hop-by-hop,
//! routing, fragment, destination options, authentication; at most
//! [`MAX_EXTENSION_HEADERS`](crate::tuple::MAX_EXTENSION_HEADERS)) are
//! walked to the UDP header; a packet whose UDP header cannot be reached
//! (more extension headers than that, a later fragment, another protocol,
//! lengths that end first) is classified by its addresses alone, with both
//! ports [`UNKNOWN_PORT`](crate::tuple::UNKNOWN_PORT), and counted in
//! [`KernelStats::ports_unknown`] as well. Only a packet that is not IPv4 or
//! IPv6 or ends before its addresses passes whole, counted as
//! [`KernelStats::unparsed`]. Like `attribute`, the filter reads only
//! headers and trusts the IP length fields to describe bytes that are
//! present (the stack has checked them before a socket filter runs;
//! probing the end would fail on paged socket buffers).
//!
//! On a socket with `UDP_GRO` the kernel hands the filter one buffer per run
//! of coalesced datagrams of one flow; the filter counts each datagram in it
//! (as that many events at one instant) and passes or drops the buffer
//! whole, so a flood sent in runs is limited at its true rate. The
//! user-space `GuardedUdpSocket` (feature `tokio`) sees such a buffer as one
//! datagram: use the kernel filter on sockets with GRO on.
//!
//! ```no_run
//! use weir_hhh::Classifier;
//! use weir_hhh::kernel::KernelFilter;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let socket = std::net::UdpSocket::bind("127.0.0.1:5353")?;
//! let mut filter = KernelFilter::load(Classifier::builder(1_000))?;
//! filter.attach(&socket)?; // floods are now dropped in the kernel
//! filter.set_limit(2_000)?;
//! let stats = filter.stats()?;
//! println!("dropped {} packets", stats.levels.dropped());
//! KernelFilter::detach(&socket)?;
//! # Ok(())
//! # }
//! ```

#[cfg(doc)]
use crate::Classifier;
use crate::classifier::{ClassifierBuilder, Params};
use crate::lattice::{GENERALISATIONS, Generalisation, LEVELS};
use crate::random::RandomSource;
use crate::{ClassifierConfigError, FixedRate, LevelStats, Stats};
use aya::maps::{Array, MapData, MapError, PerCpuArray};
use aya::programs::{ProgramError, SocketFilter, TestRun, TestRunOptions};
use aya::{Ebpf, EbpfError, EbpfLoader};
use std::fmt;
use std::io;
use std::os::fd::AsFd;
use std::time::Duration;
use weir_limits::Layout;
use weir_limits::clock::Clock;
use weir_limits::sketch::{LANES, ROW_MULTIPLIERS};

/// The compiled filter (`bpf/filter.c`, built by `build.rs`).
static OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/filter.o"));

/// The most cells per key the kernel filter supports (`MAX_HASHES` in
/// `bpf/filter.c`).
pub const MAX_KERNEL_HASHES: usize = 8;

/// The general program, for any layout the kernel supports.
const GENERAL_PROGRAM: &str = "weir_filter_any";
const FLAG_REPLAY_CLOCK: u64 = 1;
const FLAG_REPLAY_COIN: u64 = 2;

/// `struct weir_level` in `bpf/filter.c`.
#[derive(Debug, Clone, Copy, Default)]
#[repr(C)]
struct Level {
    window: u64,
    recip: u64,
    inc: u64,
}

/// `struct weir_config`: the program's read-only global `weir_cfg`, set at
/// load (so the verifier sees every field as a constant).
#[derive(Debug, Clone, Copy)]
#[repr(C)]
struct Config {
    hashes: u64,
    slots: u64,
    slots_shift: u64,
    blocked: u64,
    cells_per_sketch: u64,
    one_per_ns: u64,
    v6_fold: [u64; 2],
    v4_mask: [u64; 3],
    v6_mask_hi: [u64; 3],
    v6_mask_lo: [u64; 3],
    row_mult: [u64; MAX_KERNEL_HASHES],
    keys_v4: [[u64; 2]; GENERALISATIONS],
    keys_v6: [[u64; 2]; GENERALISATIONS],
    levels: [Level; LEVELS],
}

/// `struct weir_state`: what changes at run time.
#[derive(Debug, Clone, Copy, Default)]
#[repr(C)]
struct State {
    limit: u64,
    flags: u64,
    now: u64,
    coin: u64,
}

/// `struct weir_stats`, one per CPU.
#[derive(Debug, Clone, Copy, Default)]
#[repr(C)]
struct RawStats {
    unlimited: u64,
    passed: [u64; LEVELS],
    dropped: [u64; LEVELS],
    unparsed: u64,
    ports_unknown: u64,
}

/// `struct weir_cell`: an EWMA rate (FixedRate bits) and its last update.
#[derive(Debug, Clone, Copy, Default)]
#[repr(C)]
struct RawCell {
    rate: u64,
    stamp: u64,
}

// The C structs have the same sizes (aya also checks each map's value size
// against these when the maps are opened).
const _: () = assert!(size_of::<Config>() == 704);
const _: () = assert!(size_of::<State>() == 32);
const _: () = assert!(size_of::<RawStats>() == 104);
const _: () = assert!(size_of::<RawCell>() == 16);

// SAFETY: plain `repr(C)` structs of integers with no padding (sizes
// asserted above); any bit pattern is a valid value.
unsafe impl aya::Pod for Config {}
// SAFETY: as above.
unsafe impl aya::Pod for State {}
// SAFETY: as above.
unsafe impl aya::Pod for RawStats {}
// SAFETY: as above (two u64, 16 bytes).
unsafe impl aya::Pod for RawCell {}

impl Config {
    fn new(p: &Params) -> Result<Self, KernelError> {
        let hashes = p.locator.hashes();
        if hashes > MAX_KERNEL_HASHES {
            return Err(KernelError::Unsupported(
                "more than 8 cells per key (MAX_KERNEL_HASHES)",
            ));
        }
        let blocked = p.locator.layout() == Layout::Blocked;
        // What `reduce` scales onto: a row's width, or the number of blocks.
        let slots = if blocked {
            (p.locator.cells() / LANES) as u64
        } else {
            p.locator.slots() as u64
        };
        // `params()` bounds the twelve sketches to u32::MAX cells.
        let cells_per_sketch = p.cells_per_sketch() as u64;
        // reduce(h, 2^k) = h >> (64 - k): one shift instead of a 128-bit product.
        let slots_shift = if slots >= 2 && slots.is_power_of_two() {
            64 - u64::from(slots.trailing_zeros())
        } else {
            0
        };
        let mut row_mult = [0; MAX_KERNEL_HASHES];
        row_mult.copy_from_slice(&ROW_MULTIPLIERS[..MAX_KERNEL_HASHES]);
        let key = |k: &(u64, u64)| [k.0, k.1];
        Ok(Self {
            hashes: hashes as u64,
            slots,
            slots_shift,
            blocked: u64::from(blocked),
            cells_per_sketch,
            one_per_ns: FixedRate::from_per_second(1_000_000_000).to_bits(),
            v6_fold: key(&p.keys.v6_addr),
            v4_mask: p.v4_masks.map(u64::from),
            v6_mask_hi: p.v6_masks.map(|m| (m >> 64) as u64),
            v6_mask_lo: p.v6_masks.map(|m| m as u64),
            row_mult,
            keys_v4: p.keys.v4.each_ref().map(key),
            keys_v6: p.keys.v6.each_ref().map(key),
            levels: p.windows.map(|w| Level {
                window: w.window_nanos(),
                recip: w.reciprocal(),
                inc: w.increment(),
            }),
        })
    }
}

impl Config {
    /// The program to run: one compiled for this layout when there is one
    /// (1–4 cells per key, a power-of-two width), else the general one.
    fn program(&self) -> &'static str {
        const ROWS: [&str; 4] = [
            "weir_filter_rows_1",
            "weir_filter_rows_2",
            "weir_filter_rows_3",
            "weir_filter_rows_4",
        ];
        // (Three cells per key never make a power-of-two number of blocks.)
        const BLOCKED: [&str; 4] = [
            "weir_filter_blocked_1",
            "weir_filter_blocked_2",
            GENERAL_PROGRAM,
            "weir_filter_blocked_4",
        ];
        let specialised = if self.blocked != 0 { &BLOCKED } else { &ROWS };
        match self.hashes {
            1..=4 if self.slots_shift != 0 => specialised[self.hashes as usize - 1],
            _ => GENERAL_PROGRAM,
        }
    }
}

/// Why the kernel filter could not be loaded, attached or read.
///
/// ```
/// use weir_hhh::ClassifierConfigError;
/// use weir_hhh::kernel::KernelError;
///
/// let e = KernelError::from(ClassifierConfigError::ZeroLimit);
/// assert!(e.to_string().contains("limit"));
/// assert!(!e.is_permission_denied());
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum KernelError {
    /// The configuration is invalid (as for the user-space classifier).
    Config(ClassifierConfigError),
    /// The configuration is valid for the classifier but not supported by
    /// the kernel filter.
    Unsupported(&'static str),
    /// The kernel refused for lack of privilege (`EPERM`/`EACCES`: loading
    /// needs `CAP_BPF` or root, and attaching a socket filter may too).
    PermissionDenied {
        /// What was being done.
        during: &'static str,
        /// The system call's error.
        source: io::Error,
    },
    /// The verifier rejected the program.
    Verifier {
        /// The system call's error.
        source: io::Error,
        /// The verifier's log.
        log: String,
    },
    /// Any other failure of a BPF or socket system call.
    Syscall {
        /// What was being done.
        during: &'static str,
        /// The system call's error.
        source: io::Error,
    },
    /// A failure aya reports without a system call error (a malformed
    /// object, a missing map, ...).
    Other {
        /// What was being done.
        during: &'static str,
        /// aya's message.
        message: String,
    },
}

impl KernelError {
    /// Whether the kernel refused for lack of privilege (callers and tests
    /// may then fall back to the user-space classifier).
    pub fn is_permission_denied(&self) -> bool {
        matches!(self, Self::PermissionDenied { .. })
    }

    fn io(during: &'static str, source: io::Error) -> Self {
        if source.kind() == io::ErrorKind::PermissionDenied {
            Self::PermissionDenied { during, source }
        } else {
            Self::Syscall { during, source }
        }
    }

    fn program(during: &'static str, e: ProgramError) -> Self {
        match e {
            ProgramError::LoadError {
                io_error,
                verifier_log,
            } => {
                // The verifier refuses a program with EACCES, the errno a
                // missing capability may also give: a refusal comes with a
                // log, a missing privilege without one.
                let log = verifier_log.to_string();
                if io_error.kind() == io::ErrorKind::PermissionDenied && log.trim().is_empty() {
                    Self::PermissionDenied {
                        during,
                        source: io_error,
                    }
                } else {
                    Self::Verifier {
                        source: io_error,
                        log,
                    }
                }
            }
            ProgramError::SyscallError(e) => Self::io(during, e.io_error),
            ProgramError::SocketFilterError(
                aya::programs::socket_filter::SocketFilterError::SetsockoptError {
                    io_error, ..
                },
            ) => Self::io(during, io_error),
            other => Self::Other {
                during,
                message: other.to_string(),
            },
        }
    }

    fn map(during: &'static str, e: MapError) -> Self {
        match e {
            MapError::CreateError { io_error, .. } => Self::io(during, io_error),
            MapError::SyscallError(e) => Self::io(during, e.io_error),
            other => Self::Other {
                during,
                message: other.to_string(),
            },
        }
    }

    fn ebpf(during: &'static str, e: EbpfError) -> Self {
        match e {
            EbpfError::MapError(e) => Self::map(during, e),
            EbpfError::ProgramError(e) => Self::program(during, e),
            other => Self::Other {
                during,
                message: other.to_string(),
            },
        }
    }
}

impl From<ClassifierConfigError> for KernelError {
    fn from(e: ClassifierConfigError) -> Self {
        Self::Config(e)
    }
}

impl fmt::Display for KernelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Config(e) => write!(f, "invalid configuration: {e}"),
            Self::Unsupported(what) => write!(f, "the kernel filter does not support {what}"),
            Self::PermissionDenied { during, source } => write!(
                f,
                "{during}: permission denied ({source}); loading BPF programs needs CAP_BPF or root"
            ),
            Self::Verifier { source, log } => {
                write!(f, "the verifier rejected the filter ({source}):\n{log}")
            }
            Self::Syscall { during, source } => write!(f, "{during}: {source}"),
            Self::Other { during, message } => write!(f, "{during}: {message}"),
        }
    }
}

impl std::error::Error for KernelError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Config(e) => Some(e),
            Self::PermissionDenied { source, .. }
            | Self::Verifier { source, .. }
            | Self::Syscall { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// The kernel filter's counters, summed over CPUs.
///
/// ```
/// use weir_hhh::kernel::KernelStats;
///
/// let s = KernelStats::default();
/// assert_eq!((s.levels.total(), s.unparsed), (0, 0));
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KernelStats {
    /// Classified datagrams (each of a coalesced buffer's), as the
    /// user-space [`Stats`].
    pub levels: Stats,
    /// Datagrams passed whole, unclassified: not IPv4 or IPv6, or ending
    /// before their addresses.
    pub unparsed: u64,
    /// Classified datagrams whose ports could not be read (see [the module
    /// docs](self)), judged by their addresses alone; they are in
    /// [`levels`](Self::levels) too.
    pub ports_unknown: u64,
}

/// One `BPF_PROG_TEST_RUN` of the filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TestRunResult {
    /// What the program returned: bytes to keep, 0 to drop.
    pub return_value: u32,
    /// Mean time per run, as the kernel measured it.
    pub duration: Duration,
}

impl TestRunResult {
    /// Whether the packet was kept.
    pub fn passed(&self) -> bool {
        self.return_value != 0
    }
}

/// rakelimit's flood filter in the kernel: a BPF socket filter running the
/// [`Classifier`]'s algorithm, attachable to UDP sockets.
///
/// ```no_run
/// use weir_hhh::Classifier;
/// use weir_hhh::kernel::KernelFilter;
///
/// # async fn serve() -> Result<(), Box<dyn std::error::Error>> {
/// let socket = tokio::net::UdpSocket::bind("[::1]:5353").await?;
/// let filter = KernelFilter::load(Classifier::builder(1_000).seed(7))?;
/// filter.attach(&socket)?;
/// let mut buf = [0u8; 1500];
/// let (len, peer) = socket.recv_from(&mut buf).await?; // floods never get here
/// # Ok(())
/// # }
/// ```
pub struct KernelFilter {
    ebpf: Ebpf,
    state_map: Array<MapData, State>,
    stats_map: PerCpuArray<MapData, RawStats>,
    cells_map: Array<MapData, RawCell>,
    state: State,
    config: Config,
    params: Params,
}

impl KernelFilter {
    /// Load the filter with `builder`'s configuration (its clock and random
    /// source are not used: the kernel has its own).
    pub fn load<C: Clock, R: RandomSource>(
        builder: ClassifierBuilder<C, R>,
    ) -> Result<Self, KernelError> {
        let params = builder.params()?;
        let config = Config::new(&params)?;
        let cells = u32::try_from(config.cells_per_sketch * GENERALISATIONS as u64)
            .expect("params() bounds the cells to u32::MAX");
        let mut ebpf = EbpfLoader::new()
            .map_max_entries("weir_cells", cells)
            .override_global("weir_cfg", &config, true)
            .load(OBJECT)
            .map_err(|e| KernelError::ebpf("loading the filter's maps", e))?;
        let mut state_map: Array<MapData, State> = take_map(&mut ebpf, "weir_state")?;
        let stats_map: PerCpuArray<MapData, RawStats> = take_map(&mut ebpf, "weir_stats")?;
        let cells_map: Array<MapData, RawCell> = take_map(&mut ebpf, "weir_cells")?;
        let state = State {
            limit: params.limit.to_bits(),
            ..State::default()
        };
        state_map
            .set(0, state, 0)
            .map_err(|e| KernelError::map("writing the limit", e))?;
        let program: &mut SocketFilter = ebpf
            .program_mut(config.program())
            .ok_or_else(|| KernelError::Other {
                during: "loading the filter",
                message: format!("the object has no program `{}`", config.program()),
            })?
            .try_into()
            .map_err(|e| KernelError::program("loading the filter", e))?;
        program
            .load()
            .map_err(|e| KernelError::program("loading the filter", e))?;
        Ok(Self {
            ebpf,
            state_map,
            stats_map,
            cells_map,
            state,
            config,
            params,
        })
    }

    fn program(&self) -> Result<&SocketFilter, KernelError> {
        self.ebpf
            .program(self.config.program())
            .ok_or_else(|| KernelError::Other {
                during: "finding the filter",
                message: format!("the object has no program `{}`", self.config.program()),
            })?
            .try_into()
            .map_err(|e| KernelError::program("finding the filter", e))
    }

    /// Attach the filter to a socket (`SO_ATTACH_BPF`): from now on the
    /// kernel drops what the filter drops before the socket sees it. It
    /// replaces any socket filter already attached.
    ///
    /// The socket holds the program once attached: dropping the
    /// `KernelFilter` leaves it filtering that socket at the last limit
    /// (a limit is never lifted by accident), with no handle left to change
    /// the limit or read the counters. [`detach`](Self::detach) first to
    /// stop filtering; closing the socket also releases the program.
    pub fn attach<S: AsFd>(&self, socket: &S) -> Result<(), KernelError> {
        self.program()?
            .attach(socket.as_fd())
            .map_err(|e| KernelError::program("attaching the filter", e))
    }

    /// Remove whatever socket filter is attached to `socket`
    /// (`SO_DETACH_BPF`; an error if there is none).
    pub fn detach<S: AsFd>(socket: &S) -> Result<(), KernelError> {
        SocketFilter::detach(socket.as_fd())
            .map_err(|e| KernelError::program("detaching the filter", e))
    }

    /// The limit in force.
    pub fn limit(&self) -> FixedRate {
        FixedRate::from_bits(self.state.limit)
    }

    /// Change the limit (packets per second per generalisation) for every
    /// socket the filter is attached to, from the next packet on.
    pub fn set_limit(&mut self, limit_pps: u64) -> Result<(), KernelError> {
        if limit_pps == 0 {
            return Err(ClassifierConfigError::ZeroLimit.into());
        }
        let state = State {
            limit: FixedRate::from_per_second(limit_pps).to_bits(),
            ..self.state
        };
        self.write_state(state)
    }

    fn write_state(&mut self, state: State) -> Result<(), KernelError> {
        self.state_map
            .set(0, state, 0)
            .map_err(|e| KernelError::map("writing the filter's state", e))?;
        self.state = state;
        Ok(())
    }

    /// The counters of every verdict so far, summed over CPUs.
    pub fn stats(&self) -> Result<KernelStats, KernelError> {
        let per_cpu = self
            .stats_map
            .get(&0, 0)
            .map_err(|e| KernelError::map("reading the counters", e))?;
        let mut out = KernelStats::default();
        for s in per_cpu.iter() {
            out.levels.unlimited += s.unlimited;
            for (l, level) in out.levels.levels.iter_mut().enumerate() {
                *level = LevelStats {
                    passed: level.passed + s.passed[l],
                    dropped: level.dropped + s.dropped[l],
                };
            }
            out.unparsed += s.unparsed;
            out.ports_unknown += s.ports_unknown;
        }
        Ok(out)
    }

    /// Publish the filter's counters through the
    /// [`metrics`](https://docs.rs/metrics) facade (feature `metrics`), to
    /// whatever recorder (exporter) is installed, and return them. Every
    /// series carries the label `filter` = `name`:
    ///
    /// | metric | kind | labels | what |
    /// |---|---|---|---|
    /// | `weir_hhh_kernel_unlimited_packets_total` | counter | | passed, no generalisation over the limit |
    /// | `weir_hhh_kernel_limited_packets_total` | counter | `level` (`0`–`4`), `outcome` (`passed`, `dropped`) | limited there, and let through by the lottery or dropped |
    /// | `weir_hhh_kernel_parsed_packets_total` | counter | `outcome`: `attributed` (with its ports), `ports_unknown` ([`KernelStats::ports_unknown`]), `unattributable` ([`KernelStats::unparsed`]) | what the filter made of each datagram |
    ///
    /// The names and labels are the user-space classifier's
    /// ([`Classifier::publish_metrics`]) with `kernel_` in the name; the
    /// kernel does not count by generalisation. The kernel counts in a
    /// per-CPU map as packets pass; this reads the map once (one system
    /// call, as [`stats`](Self::stats)) and sets the facade's counters to
    /// the totals (`absolute`), so call it where the values are wanted
    /// (before rendering a scrape, or from a periodic task), never per
    /// packet.
    ///
    /// ```no_run
    /// use weir_hhh::Classifier;
    /// use weir_hhh::kernel::KernelFilter;
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let socket = std::net::UdpSocket::bind("127.0.0.1:5353")?;
    /// let filter = KernelFilter::load(Classifier::builder(1_000))?;
    /// filter.attach(&socket)?;
    /// // ... later, with an exporter installed as the recorder:
    /// let stats = filter.publish_metrics("dns")?;
    /// println!("{} dropped in the kernel", stats.levels.dropped());
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "metrics")]
    pub fn publish_metrics(&self, name: &str) -> Result<KernelStats, KernelError> {
        let stats = self.stats()?;
        crate::telemetry::publish_kernel(name, &stats.levels, stats.ports_unknown, stats.unparsed);
        Ok(stats)
    }

    /// The kernel's estimated rate of `tuple` under one generalisation at
    /// `now_nanos` on the kernel clock (`CLOCK_MONOTONIC`, or the replayed
    /// time), decayed since the last update; as
    /// [`Classifier::estimate_at`], read
    /// from the kernel's sketches.
    pub fn estimate_at(
        &self,
        tuple: &crate::FourTuple,
        generalisation: Generalisation,
        now_nanos: u64,
    ) -> Result<FixedRate, KernelError> {
        let g = generalisation.index();
        let hash = self.params.hash(tuple, g);
        let window = self.params.windows[usize::from(generalisation.level())].window();
        let base = g * self.params.cells_per_sketch();
        let mut min = FixedRate::MAX;
        for i in self.params.locator.locate_hash(hash).iter() {
            let index = u32::try_from(base + i)
                .map_err(|_| KernelError::Unsupported("more cells than a BPF array holds"))?;
            let cell = self
                .cells_map
                .get(&index, 0)
                .map_err(|e| KernelError::map("reading the sketches", e))?;
            let rate = window.decay_fixed(
                FixedRate::from_bits(cell.rate),
                now_nanos.saturating_sub(cell.stamp),
            );
            min = min.min(rate);
        }
        Ok(min)
    }

    /// The EWMA window of each level (as the classifier's
    /// [`level_windows`](Classifier::level_windows)).
    pub fn level_windows(&self) -> [Duration; LEVELS] {
        self.config.levels.map(|l| Duration::from_nanos(l.window))
    }

    /// Run the filter `repeat` times on `frame` with `BPF_PROG_TEST_RUN`, on
    /// the kernel's clock and coin. The frame starts at the Ethernet header
    /// (see [`ethernet_frame`]): the kernel strips it and, as on a socket,
    /// the filter reads from the IP header. The reported duration is the
    /// kernel's mean per run.
    pub fn test_run(&self, frame: &[u8], repeat: u32) -> Result<TestRunResult, KernelError> {
        let opts = TestRunOptions {
            data_in: Some(frame),
            repeat: repeat.max(1),
            ..TestRunOptions::default()
        };
        let result = self
            .program()?
            .test_run(opts)
            .map_err(|e| KernelError::program("BPF_PROG_TEST_RUN", e))?;
        Ok(TestRunResult {
            return_value: result.return_value,
            duration: result.duration,
        })
    }

    /// Run the filter once on `frame` as if it arrived at `now_nanos`, with
    /// the lottery's coin fixed to `coin` if given (else
    /// `bpf_get_prandom_u32`): deterministic replays, e.g. to compare with
    /// [`Classifier::classify_at`] fed the
    /// same times and a [`ConstantRandom`](crate::random::ConstantRandom).
    /// The replayed time stands for the kernel clock's reading: a cell
    /// stamped a window or more after it is taken for a wild time's and
    /// moved back to it, where the classifier judges that against its own
    /// clock (a merely stale `classify_at` time keeps the stamp; see its
    /// docs). So replays agree when their times are in order, or when the
    /// classifier's clock reads the replayed times.
    /// The kernel clock is restored afterwards, but sockets the filter is
    /// attached to see the replayed time meanwhile: replay on a filter of
    /// its own.
    pub fn test_run_at(
        &mut self,
        frame: &[u8],
        now_nanos: u64,
        coin: Option<u32>,
    ) -> Result<TestRunResult, KernelError> {
        let live = self.state;
        self.write_state(State {
            flags: FLAG_REPLAY_CLOCK | coin.map_or(0, |_| FLAG_REPLAY_COIN),
            now: now_nanos,
            coin: u64::from(coin.unwrap_or(0)),
            ..live
        })?;
        let result = self.test_run(frame, 1);
        self.write_state(live)?;
        result
    }
}

impl fmt::Debug for KernelFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KernelFilter")
            .field("limit", &self.limit())
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

fn take_map<T>(ebpf: &mut Ebpf, name: &'static str) -> Result<T, KernelError>
where
    T: TryFrom<aya::maps::Map, Error = MapError>,
{
    let map = ebpf.take_map(name).ok_or_else(|| KernelError::Other {
        during: "opening the filter's maps",
        message: format!("the object has no map `{name}`"),
    })?;
    T::try_from(map).map_err(|e| KernelError::map("opening the filter's maps", e))
}

/// `packet` (an IPv4 or IPv6 packet) behind an Ethernet header with the
/// matching EtherType, as `BPF_PROG_TEST_RUN` wants a socket filter's input.
///
/// ```
/// use weir_hhh::FourTuple;
/// use weir_hhh::kernel::ethernet_frame;
/// use weir_hhh::tuple::udp_packet;
///
/// let t = FourTuple::from_socket_addrs("10.0.0.1:1".parse().unwrap(), "10.0.0.2:2".parse().unwrap());
/// let frame = ethernet_frame(&udp_packet(&t, b"abcd"));
/// assert_eq!(frame.len(), 46);
/// assert_eq!(frame[12..14], [0x08, 0x00]);
/// ```
pub fn ethernet_frame(packet: &[u8]) -> Vec<u8> {
    let ethertype: [u8; 2] = match packet.first().map(|b| b >> 4) {
        Some(6) => [0x86, 0xdd],
        _ => [0x08, 0x00],
    };
    let mut frame = Vec::with_capacity(14 + packet.len());
    // Destination and source MAC: locally administered, unicast.
    frame.extend_from_slice(&[0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2]);
    frame.extend_from_slice(&ethertype);
    frame.extend_from_slice(packet);
    frame
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Classifier;
    use weir_limits::Shape;

    /// A socket filter that reads a map value without a NULL check
    /// (`bpf/rejected.c`), which every kernel's verifier refuses.
    static REJECTED: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/rejected.o"));

    /// `Err(skip reason)` when the kernel refuses for lack of privilege and
    /// `CI` is not `true` (under CI that is a failure, as in the
    /// integration tests).
    fn or_skip<T>(test: &str, result: Result<T, KernelError>) -> Result<T, KernelError> {
        if let Err(e) = &result
            && e.is_permission_denied()
        {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "{test}: CI=true and BPF programs cannot be loaded: {e}"
            );
            eprintln!("\n*** SKIPPED {test}: no permission to load BPF programs ({e}) ***\n");
        }
        result
    }

    #[test]
    fn a_program_the_verifier_refuses_is_a_verifier_error_with_its_log() {
        let test = "a_program_the_verifier_refuses_is_a_verifier_error_with_its_log";
        let loaded = EbpfLoader::new()
            .load(REJECTED)
            .map_err(|e| KernelError::ebpf("loading the maps", e));
        let mut ebpf = match or_skip(test, loaded) {
            Ok(ebpf) => ebpf,
            Err(e) if e.is_permission_denied() => return,
            Err(e) => panic!("{test}: creating the test program's map failed: {e}"),
        };
        let program: &mut SocketFilter = ebpf
            .program_mut("rejected")
            .expect("the object has its program")
            .try_into()
            .expect("a socket filter");
        let refused = program
            .load()
            .map_err(|e| KernelError::program("loading the filter", e));
        match or_skip(test, refused) {
            Err(e @ KernelError::Verifier { .. }) => {
                // The log names the fault, and the message a caller prints
                // carries the log.
                let shown = e.to_string();
                let KernelError::Verifier { log, .. } = e else {
                    panic!("matched as a verifier error above")
                };
                assert!(log.contains("map_value_or_null"), "verifier log: {log}");
                assert!(shown.contains(log.as_str()), "{shown}");
            }
            Err(e) if e.is_permission_denied() => {}
            other => panic!("expected a verifier error, got {other:?}"),
        }
    }

    fn program_for(shape: Shape) -> &'static str {
        let params = Classifier::builder(1_000)
            .seed(1)
            .shape(shape)
            .params()
            .expect("a valid configuration");
        Config::new(&params).expect("supported").program()
    }

    #[test]
    fn common_layouts_run_a_program_compiled_for_them() {
        assert_eq!(program_for(Classifier::DEFAULT_SHAPE), "weir_filter_rows_2");
        assert_eq!(program_for(Shape::rows::<4, 4096>()), "weir_filter_rows_4");
        assert_eq!(program_for(Shape::rows::<1, 2>()), "weir_filter_rows_1");
        assert_eq!(
            program_for(Shape::blocked::<4, 1024>()),
            "weir_filter_blocked_4"
        );
        // Anything else runs the general program.
        assert_eq!(program_for(Shape::rows::<3, 1000>()), GENERAL_PROGRAM);
        assert_eq!(program_for(Shape::blocked::<2, 1000>()), GENERAL_PROGRAM);
        // 3 × 1024 cells are 384 blocks, no power of two.
        assert_eq!(program_for(Shape::blocked::<3, 1024>()), GENERAL_PROGRAM);
        assert_eq!(program_for(Shape::rows::<5, 1024>()), GENERAL_PROGRAM);
        assert_eq!(program_for(Shape::rows::<2, 1>()), GENERAL_PROGRAM);
        // Every name the loader can pick is a symbol of the object (the
        // integration tests load them).
        for shape in [
            Shape::rows::<1, 1024>(),
            Shape::rows::<2, 1024>(),
            Shape::rows::<3, 1024>(),
            Shape::rows::<4, 1024>(),
            Shape::blocked::<1, 1024>(),
            Shape::blocked::<2, 1024>(),
            Shape::blocked::<4, 1024>(),
            Shape::rows::<3, 1000>(),
        ] {
            let name = program_for(shape);
            let symbol = [b"\0", name.as_bytes(), b"\0"].concat();
            assert!(
                OBJECT.windows(symbol.len()).any(|w| w == symbol),
                "{name} is not in the object"
            );
        }
    }
}
