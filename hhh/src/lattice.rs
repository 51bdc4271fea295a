//! The lattice of generalisations of a 4-tuple (rakelimit's hierarchy):
//! its twelve nodes in level order, and the source prefixes that define
//! "exact" and "subnet" addresses.

use crate::error::ConfigError;
use crate::tuple::{FourTuple, TupleV4, TupleV6};
use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

/// How much of the source address a generalisation keeps.
///
/// ```
/// use weir_hhh::{AddrScope, Generalisation};
///
/// let subnets = Generalisation::ALL.iter().filter(|g| g.src == AddrScope::Subnet).count();
/// assert_eq!(subnets, 4);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AddrScope {
    /// The "exact" prefix (`/32` and `/128` by default).
    Exact,
    /// The subnet prefix (`/24` and `/48` by default).
    Subnet,
    /// Nothing (`/0`).
    Any,
}

/// Whether a generalisation keeps a port.
///
/// ```
/// use weir_hhh::{Generalisation, PortScope};
///
/// // The most general node keeps neither port.
/// let everything = Generalisation::ALL[11];
/// assert_eq!((everything.src_port, everything.dst_port), (PortScope::Any, PortScope::Any));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PortScope {
    /// The port as sent.
    Exact,
    /// Any port.
    Any,
}

/// One node of rakelimit's lattice: which parts of the source address and
/// which ports a sketch keys its packets by.
///
/// The destination address always stays exact (a limiter protects its own
/// addresses). The other three fields may each be generalised:
///
/// | field | steps |
/// |---|---|
/// | source address | exact (`/32`, `/128`) → subnet (`/24`, `/48`) → any (`/0`) |
/// | source port | exact → any |
/// | destination port | exact → any |
///
/// That gives 3 × 2 × 2 = 12 generalisations ([`ALL`](Self::ALL)). The
/// **level** of a generalisation is the number of steps taken: 1 at level 0
/// (the exact 4-tuple), 3 at level 1, 4 at level 2, 3 at level 3 and 1 at
/// level 4 (everything sent to one destination address). The prefix lengths
/// of "exact" and "subnet" source addresses are configurable
/// ([`Prefixes`]).
///
/// ```
/// use weir_hhh::{AddrScope, Generalisation, PortScope};
///
/// let g = Generalisation { src: AddrScope::Subnet, src_port: PortScope::Any, dst_port: PortScope::Exact };
/// assert_eq!(g.level(), 2);
/// assert!(Generalisation::ALL.contains(&g));
/// assert_eq!(g.to_string(), "src/subnet:* -> dst:dport");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Generalisation {
    /// How much of the source address is kept.
    pub src: AddrScope,
    /// Whether the source port is kept.
    pub src_port: PortScope,
    /// Whether the destination port is kept.
    pub dst_port: PortScope,
}

/// Number of generalisations in the lattice.
pub(crate) const GENERALISATIONS: usize = 12;

/// Number of levels in the lattice (0 to 4).
pub(crate) const LEVELS: usize = 5;

/// For each level, the range of indices into [`Generalisation::ALL`].
pub(crate) const LEVEL_RANGES: [(usize, usize); LEVELS] =
    [(0, 1), (1, 4), (4, 8), (8, 11), (11, 12)];

const fn g(src: AddrScope, src_port: PortScope, dst_port: PortScope) -> Generalisation {
    Generalisation {
        src,
        src_port,
        dst_port,
    }
}

impl Generalisation {
    /// All twelve, ordered by level (the order rakelimit walks them).
    pub const ALL: [Generalisation; GENERALISATIONS] = {
        use AddrScope::{Any as A, Exact as E, Subnet as S};
        use PortScope::{Any as W, Exact as P};
        [
            // level 0
            g(E, P, P),
            // level 1
            g(S, P, P),
            g(E, W, P),
            g(E, P, W),
            // level 2
            g(A, P, P),
            g(S, W, P),
            g(S, P, W),
            g(E, W, W),
            // level 3
            g(A, W, P),
            g(A, P, W),
            g(S, W, W),
            // level 4
            g(A, W, W),
        ]
    };

    /// Number of generalisation steps taken (0–4).
    pub const fn level(self) -> u8 {
        let src = match self.src {
            AddrScope::Exact => 0,
            AddrScope::Subnet => 1,
            AddrScope::Any => 2,
        };
        src + matches!(self.src_port, PortScope::Any) as u8
            + matches!(self.dst_port, PortScope::Any) as u8
    }

    /// Position in [`Generalisation::ALL`].
    pub(crate) fn index(self) -> usize {
        // Twelve entries: a scan is as fast as anything cleverer.
        Self::ALL
            .iter()
            .position(|&g| g == self)
            .unwrap_or_default()
    }

    /// The generalisations of one level (empty above level 4).
    ///
    /// ```
    /// use weir_hhh::Generalisation;
    ///
    /// let sizes: Vec<usize> = (0..5).map(|l| Generalisation::at_level(l).len()).collect();
    /// assert_eq!(sizes, [1, 3, 4, 3, 1]);
    /// ```
    pub fn at_level(level: u8) -> &'static [Generalisation] {
        match LEVEL_RANGES.get(usize::from(level)) {
            Some(&(a, b)) => &Self::ALL[a..b],
            None => &[],
        }
    }

    /// The tuple as this generalisation sees it: the source address masked
    /// to the kept prefix, dropped ports set to 0.
    ///
    /// With the classifier's [`prefixes`](crate::Classifier::prefixes),
    /// this names the aggregate a drop was charged to:
    ///
    /// ```
    /// use weir_hhh::{AddrScope, Classifier, FourTuple, Generalisation, PortScope};
    ///
    /// let rake = Classifier::try_new(1_000).unwrap();
    /// let t = FourTuple::from_socket_addrs("10.1.2.3:999".parse().unwrap(), "10.0.0.1:53".parse().unwrap());
    /// let g = Generalisation { src: AddrScope::Subnet, src_port: PortScope::Any, dst_port: PortScope::Exact };
    /// assert_eq!(g.apply(&t, &rake.prefixes()).to_string(), "10.1.2.0:0 -> 10.0.0.1:53");
    /// ```
    pub fn apply(self, tuple: &FourTuple, prefixes: &Prefixes) -> FourTuple {
        let port = |scope: PortScope, p: u16| match scope {
            PortScope::Exact => p,
            PortScope::Any => 0,
        };
        match tuple {
            FourTuple::V4(t) => FourTuple::V4(TupleV4 {
                src: Ipv4Addr::from(u32::from(t.src) & prefixes.v4_mask(self.src)),
                src_port: port(self.src_port, t.src_port),
                dst: t.dst,
                dst_port: port(self.dst_port, t.dst_port),
            }),
            FourTuple::V6(t) => FourTuple::V6(TupleV6 {
                src: Ipv6Addr::from(u128::from(t.src) & prefixes.v6_mask(self.src)),
                src_port: port(self.src_port, t.src_port),
                dst: t.dst,
                dst_port: port(self.dst_port, t.dst_port),
            }),
        }
    }
}

impl fmt::Display for Generalisation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let src = match self.src {
            AddrScope::Exact => "src",
            AddrScope::Subnet => "src/subnet",
            AddrScope::Any => "*",
        };
        let sport = match self.src_port {
            PortScope::Exact => "sport",
            PortScope::Any => "*",
        };
        let dport = match self.dst_port {
            PortScope::Exact => "dport",
            PortScope::Any => "*",
        };
        write!(f, "{src}:{sport} -> dst:{dport}")
    }
}

/// Prefix lengths of "exact" and "subnet" source addresses
/// ([`ClassifierBuilder::prefixes`](crate::ClassifierBuilder::prefixes)):
/// `subnet ≤ exact ≤` the address length, for both families.
///
/// ```
/// use weir_hhh::{Classifier, ConfigError, Prefixes};
///
/// let p = Prefixes::default();
/// assert_eq!((p.v4_exact, p.v4_subnet, p.v6_exact, p.v6_subnet), (32, 24, 128, 48));
/// // rakelimit's IPv6 choice: a /64 counts as one host.
/// let rake = Classifier::builder(1_000).prefixes(Prefixes { v6_exact: 64, ..p }).build();
/// assert!(rake.is_ok());
/// let bad = Classifier::builder(1_000).prefixes(Prefixes { v4_subnet: 33, ..p }).build();
/// assert!(matches!(bad, Err(ConfigError::InvalidPrefix { family: "IPv4", .. })));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prefixes {
    /// IPv4 "exact" source prefix (default 32).
    pub v4_exact: u8,
    /// IPv4 subnet prefix (default 24).
    pub v4_subnet: u8,
    /// IPv6 "exact" source prefix (default 128; rakelimit uses 64).
    pub v6_exact: u8,
    /// IPv6 subnet prefix (default 48).
    pub v6_subnet: u8,
}

impl Default for Prefixes {
    fn default() -> Self {
        Self {
            v4_exact: 32,
            v4_subnet: 24,
            v6_exact: 128,
            v6_subnet: 48,
        }
    }
}

impl Prefixes {
    /// Check `subnet ≤ exact ≤ address length` for both families.
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if self.v4_subnet > self.v4_exact || self.v4_exact > 32 {
            return Err(ConfigError::InvalidPrefix {
                family: "IPv4",
                exact: self.v4_exact,
                subnet: self.v4_subnet,
            });
        }
        if self.v6_subnet > self.v6_exact || self.v6_exact > 128 {
            return Err(ConfigError::InvalidPrefix {
                family: "IPv6",
                exact: self.v6_exact,
                subnet: self.v6_subnet,
            });
        }
        Ok(())
    }

    /// The IPv4 mask for a scope (assumes a validated configuration).
    pub(crate) fn v4_mask(&self, scope: AddrScope) -> u32 {
        let bits = match scope {
            AddrScope::Exact => self.v4_exact,
            AddrScope::Subnet => self.v4_subnet,
            AddrScope::Any => 0,
        };
        u32::MAX
            .checked_shl(32 - u32::from(bits.min(32)))
            .unwrap_or(0)
    }

    /// The IPv6 mask for a scope (assumes a validated configuration).
    pub(crate) fn v6_mask(&self, scope: AddrScope) -> u128 {
        let bits = match scope {
            AddrScope::Exact => self.v6_exact,
            AddrScope::Subnet => self.v6_subnet,
            AddrScope::Any => 0,
        };
        u128::MAX
            .checked_shl(128 - u32::from(bits.min(128)))
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn the_lattice_has_twelve_distinct_nodes_in_level_order() {
        let set: HashSet<_> = Generalisation::ALL.iter().collect();
        assert_eq!(set.len(), 12);
        for (level, &(a, b)) in LEVEL_RANGES.iter().enumerate() {
            for g in &Generalisation::ALL[a..b] {
                assert_eq!(usize::from(g.level()), level, "{g}");
            }
        }
        for (i, g) in Generalisation::ALL.iter().enumerate() {
            assert_eq!(g.index(), i);
        }
        assert!(Generalisation::at_level(5).is_empty());
    }

    #[test]
    fn masks_follow_the_prefixes() {
        let p = Prefixes::default();
        assert_eq!(p.v4_mask(AddrScope::Exact), u32::MAX);
        assert_eq!(p.v4_mask(AddrScope::Subnet), 0xffff_ff00);
        assert_eq!(p.v4_mask(AddrScope::Any), 0);
        assert_eq!(p.v6_mask(AddrScope::Subnet), u128::MAX << 80);
        assert_eq!(p.v6_mask(AddrScope::Any), 0);
        let zero = Prefixes {
            v4_exact: 0,
            v4_subnet: 0,
            v6_exact: 0,
            v6_subnet: 0,
        };
        assert_eq!(zero.v4_mask(AddrScope::Exact), 0);
        assert_eq!(zero.v6_mask(AddrScope::Exact), 0);
    }
}
