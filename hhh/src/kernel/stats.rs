//! The kernel filter's counters: kept per CPU by the program, summed here.

use super::abi::RawStats;
use crate::classifier::LevelStats;
use crate::classifier::Stats;

/// The kernel filter's counters, summed over CPUs
/// ([`KernelFilter::stats`](super::KernelFilter::stats)).
///
/// ```
/// use weir_hhh::kernel::KernelStats;
///
/// let s = KernelStats::default();
/// assert_eq!((s.levels.total(), s.unparsed, s.ports_unknown), (0, 0, 0));
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
    /// docs](super)), judged by their addresses alone; they are in
    /// [`levels`](Self::levels) too.
    pub ports_unknown: u64,
}

impl KernelStats {
    /// The sum of every CPU's counters.
    pub(super) fn sum<'a>(per_cpu: impl IntoIterator<Item = &'a RawStats>) -> Self {
        let mut out = Self::default();
        for s in per_cpu {
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
        out
    }
}
