//! The flood filter in the kernel (feature `bpf`): the [`Classifier`]'s
//! algorithm as a BPF socket filter, so that flood packets are dropped
//! before they cost a wake-up, a copy or a system call.
//!
//! [`KernelFilter::load`] takes the same [`ClassifierBuilder`] as the
//! user-space classifier (limit, windows, sketch shape, prefixes, seed) and
//! loads the filter into the kernel; [`attach`](KernelFilter::attach) it to
//! any number of UDP sockets (`std` or tokio), which then share its
//! sketches and counters. Change the limit at run time with
//! [`set_limit`](KernelFilter::set_limit) and read the counters with
//! [`stats`](KernelFilter::stats).
//!
//! Building needs clang and the libbpf headers (Debian: `clang`,
//! `libbpf-dev`); loading needs `CAP_BPF` or root
//! ([`KernelError::is_permission_denied`] says when it is missing).
//!
//! # The same algorithm as the classifier
//!
//! The filter computes what [`Classifier::classify_at`] computes, bit for
//! bit: the same per-generalisation hash (the same keys, derived from the
//! same seed), the same cells (either sketch layout), the same fixed-point
//! EWMA with the same window per level, the same coin rule. Only its clock
//! (`bpf_ktime_get_ns`) and its coin (`bpf_get_prandom_u32`) are the
//! kernel's, and it supports at most 8 cells per key
//! ([`KernelError::Unsupported`] otherwise).
//!
//! # What it classifies
//!
//! The filter attributes a packet as
//! [`FourTuple::attribute`](crate::FourTuple::attribute) does, packet for
//! packet: what can be attributed to a source is never passed
//! unclassified. IPv4 options and up to eight IPv6 extension headers
//! (hop-by-hop, routing, fragment, destination options, authentication)
//! are walked to the UDP header; a packet whose UDP header cannot be
//! reached (more extension headers than that, a later fragment, another
//! protocol, lengths that end first) is classified by its addresses alone,
//! with both ports [`UNKNOWN_PORT`](crate::UNKNOWN_PORT), and counted in
//! [`KernelStats::ports_unknown`] as well. Only a packet that is not IPv4
//! or IPv6 or ends before its addresses passes whole, counted as
//! [`KernelStats::unparsed`]. Like `attribute`, the filter reads only
//! headers and trusts the IP length fields to describe bytes that are
//! present (the stack has checked them before a socket filter runs).
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

mod abi;
mod error;
mod stats;
#[cfg(any(test, feature = "test-util"))]
mod test_run;
#[cfg(test)]
mod tests;

pub use error::KernelError;
pub use stats::KernelStats;
// Hidden: a test fixture (feature `test-util`).
#[cfg(any(test, feature = "test-util"))]
#[doc(hidden)]
pub use test_run::TestRunResult;

#[cfg(doc)]
use crate::classifier::Classifier;
use crate::classifier::ClassifierBuilder;
use crate::error::ConfigError;
use crate::lattice::GENERALISATIONS;
use crate::random::RandomSource;
use abi::{Config, OBJECT, RawStats, State};
use aya::maps::{Array, MapData, MapError, PerCpuArray};
use aya::programs::SocketFilter;
use aya::{Ebpf, EbpfLoader};
use std::fmt;
use std::os::fd::AsFd;
use weir_limits::clock::Clock;
use weir_limits::ewma::FixedRate;

/// rakelimit's flood filter in the kernel: a BPF socket filter running the
/// [`Classifier`]'s algorithm, attachable to UDP sockets (see [the module
/// docs](self)). The example needs `CAP_BPF` or root.
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
    state: State,
    config: Config,
    /// The sketches and the configuration they were built from, which the
    /// test harness reads.
    #[cfg(any(test, feature = "test-util"))]
    cells_map: Array<MapData, abi::RawCell>,
    #[cfg(any(test, feature = "test-util"))]
    params: crate::classifier::Params,
}

impl KernelFilter {
    /// Load the filter with `builder`'s configuration (its clock and random
    /// source are not used: the kernel has its own).
    ///
    /// # Errors
    ///
    /// [`KernelError::Config`] for a configuration the classifier would
    /// refuse too, [`KernelError::Unsupported`] for one only the kernel
    /// cannot run (more than 8 cells per key, or more than 2³² cells in
    /// all),
    /// [`KernelError::PermissionDenied`] without `CAP_BPF` or root,
    /// [`KernelError::Verifier`] if the kernel's verifier refuses the
    /// program, and [`KernelError::Syscall`] / [`KernelError::Other`] for
    /// other failures of the BPF system calls.
    pub fn load<C: Clock, R: RandomSource>(
        builder: ClassifierBuilder<C, R>,
    ) -> Result<Self, KernelError> {
        let params = builder.params()?;
        let config = Config::new(&params)?;
        let cells = u32::try_from(config.cells_per_sketch * GENERALISATIONS as u64)
            .map_err(|_| KernelError::Unsupported("more than 2^32 cells in all"))?;
        let mut ebpf = EbpfLoader::new()
            .map_max_entries("weir_cells", cells)
            .override_global("weir_cfg", &config, true)
            .load(OBJECT)
            .map_err(|e| KernelError::ebpf("loading the filter's maps", e))?;
        let mut state_map: Array<MapData, State> = take_map(&mut ebpf, "weir_state")?;
        let stats_map: PerCpuArray<MapData, RawStats> = take_map(&mut ebpf, "weir_stats")?;
        #[cfg(any(test, feature = "test-util"))]
        let cells_map: Array<MapData, abi::RawCell> = take_map(&mut ebpf, "weir_cells")?;
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
            state,
            config,
            #[cfg(any(test, feature = "test-util"))]
            cells_map,
            #[cfg(any(test, feature = "test-util"))]
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
    ///
    /// # Errors
    ///
    /// [`KernelError::PermissionDenied`] or [`KernelError::Syscall`] if
    /// `setsockopt` refuses (e.g. `socket` is not a socket).
    pub fn attach<S: AsFd>(&self, socket: &S) -> Result<(), KernelError> {
        self.program()?
            .attach(socket.as_fd())
            .map_err(|e| KernelError::program("attaching the filter", e))
    }

    /// Remove whatever socket filter is attached to `socket`
    /// (`SO_DETACH_BPF`).
    ///
    /// # Errors
    ///
    /// [`KernelError::Syscall`] if `setsockopt` refuses, as it does when no
    /// filter is attached.
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
    ///
    /// # Errors
    ///
    /// [`KernelError::Config`] for a limit of 0 (the limit in force is
    /// kept), or a system call's error if the filter's state cannot be
    /// written.
    pub fn set_limit(&mut self, limit_pps: u64) -> Result<(), KernelError> {
        if limit_pps == 0 {
            return Err(ConfigError::ZeroLimit.into());
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

    /// The counters of every verdict so far, summed over CPUs (one system
    /// call).
    ///
    /// # Errors
    ///
    /// A system call's error if the counters cannot be read.
    pub fn stats(&self) -> Result<KernelStats, KernelError> {
        let per_cpu = self
            .stats_map
            .get(&0, 0)
            .map_err(|e| KernelError::map("reading the counters", e))?;
        Ok(KernelStats::sum(per_cpu.iter()))
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
    ///
    /// # Errors
    ///
    /// As [`stats`](Self::stats); nothing is published then.
    #[cfg(feature = "metrics")]
    #[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
    pub fn publish_metrics(&self, name: &str) -> Result<KernelStats, KernelError> {
        let stats = self.stats()?;
        let counts = crate::telemetry::KernelCounts {
            unlimited: stats.levels.unlimited,
            by_level: stats.levels.levels.map(|l| [l.passed, l.dropped]),
            ports_unknown: stats.ports_unknown,
            unparsed: stats.unparsed,
        };
        crate::telemetry::publish_kernel(name, &counts);
        Ok(stats)
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
