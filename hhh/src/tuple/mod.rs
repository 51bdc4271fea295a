//! The 4-tuple a packet is judged by: the type and its constructors here,
//! reading it from a raw IP packet in `parse.rs`, attributing a packet to
//! a source for the limiter in `attribute.rs`.

mod attribute;
mod parse;
#[cfg(test)]
mod tests;

pub use attribute::{Attribution, UNKNOWN_PORT};
#[cfg(any(test, feature = "test-util"))]
pub(crate) use parse::UDP;
pub use parse::{Layer, ParseError};

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

/// An IPv4 4-tuple: the payload of [`FourTuple::V4`].
///
/// ```
/// use weir_hhh::{FourTuple, TupleV4};
///
/// let t = FourTuple::from_socket_addrs("192.0.2.7:5353".parse().unwrap(), "198.51.100.1:53".parse().unwrap());
/// let FourTuple::V4(TupleV4 { src, dst_port, .. }) = t else { unreachable!() };
/// assert_eq!((src.octets(), dst_port), ([192, 0, 2, 7], 53));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TupleV4 {
    /// Source address.
    pub src: Ipv4Addr,
    /// Source port.
    pub src_port: u16,
    /// Destination address.
    pub dst: Ipv4Addr,
    /// Destination port.
    pub dst_port: u16,
}

/// An IPv6 4-tuple: the payload of [`FourTuple::V6`].
///
/// ```
/// use std::net::Ipv6Addr;
/// use weir_hhh::{FourTuple, TupleV6};
///
/// let t = FourTuple::V6(TupleV6 {
///     src: "2001:db8::7".parse().unwrap(),
///     src_port: 5353,
///     dst: Ipv6Addr::LOCALHOST,
///     dst_port: 53,
/// });
/// assert_eq!(t.to_string(), "[2001:db8::7]:5353 -> [::1]:53");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TupleV6 {
    /// Source address.
    pub src: Ipv6Addr,
    /// Source port.
    pub src_port: u16,
    /// Destination address.
    pub dst: Ipv6Addr,
    /// Destination port.
    pub dst_port: u16,
}

/// (source address, source port, destination address, destination port) of
/// one packet, IPv4 or IPv6: what a [`Classifier`](crate::Classifier)
/// judges a packet by.
///
/// Build one from the socket addresses a receive loop sees
/// ([`from_socket_addrs`](Self::from_socket_addrs)), or read one from a
/// raw IP packet ([`parse`](Self::parse); for a limiter,
/// [`attribute`](Self::attribute)).
///
/// ```
/// use std::net::SocketAddr;
/// use weir_hhh::FourTuple;
///
/// let peer: SocketAddr = "192.0.2.7:5353".parse().unwrap();
/// let local: SocketAddr = "198.51.100.1:53".parse().unwrap();
/// let tuple = FourTuple::from_socket_addrs(peer, local);
/// assert_eq!(tuple.src(), peer);
/// assert_eq!(tuple.dst(), local);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FourTuple {
    /// Both addresses IPv4.
    V4(TupleV4),
    /// Both addresses IPv6.
    V6(TupleV6),
}

impl FourTuple {
    /// An IPv4 tuple.
    pub(crate) fn v4(src: SocketAddrV4, dst: SocketAddrV4) -> Self {
        Self::V4(TupleV4 {
            src: *src.ip(),
            src_port: src.port(),
            dst: *dst.ip(),
            dst_port: dst.port(),
        })
    }

    /// An IPv6 tuple.
    pub(crate) fn v6(src: SocketAddrV6, dst: SocketAddrV6) -> Self {
        Self::V6(TupleV6 {
            src: *src.ip(),
            src_port: src.port(),
            dst: *dst.ip(),
            dst_port: dst.port(),
        })
    }

    /// The tuple of a datagram from `src` to `dst`, as a socket reports them.
    ///
    /// IPv4-mapped IPv6 addresses (`::ffff:a.b.c.d`, what a dual-stack socket
    /// reports for IPv4 peers) become plain IPv4, so that an IPv4 peer's
    /// subnet is its /24 and not a /48 holding all of IPv4. If the families
    /// still differ (an IPv4 peer on a socket bound to `[::]`), an unspecified
    /// destination becomes `0.0.0.0`; otherwise the IPv4 side is mapped into
    /// IPv6.
    ///
    /// ```
    /// use std::net::SocketAddr;
    /// use weir_hhh::FourTuple;
    ///
    /// let peer: SocketAddr = "[::ffff:192.0.2.7]:4000".parse().unwrap();
    /// let local: SocketAddr = "[::]:53".parse().unwrap();
    /// let tuple = FourTuple::from_socket_addrs(peer, local);
    /// assert_eq!(tuple.src(), "192.0.2.7:4000".parse::<SocketAddr>().unwrap());
    /// assert!(matches!(tuple, FourTuple::V4(_)));
    /// ```
    pub fn from_socket_addrs(src: SocketAddr, dst: SocketAddr) -> Self {
        let (s, d) = (src.ip().to_canonical(), dst.ip().to_canonical());
        let (sp, dp) = (src.port(), dst.port());
        match (s, d) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                Self::v4(SocketAddrV4::new(s, sp), SocketAddrV4::new(d, dp))
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => Self::v6(
                SocketAddrV6::new(s, sp, 0, 0),
                SocketAddrV6::new(d, dp, 0, 0),
            ),
            (IpAddr::V4(s), IpAddr::V6(d)) if d.is_unspecified() => Self::v4(
                SocketAddrV4::new(s, sp),
                SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, dp),
            ),
            (IpAddr::V6(s), IpAddr::V4(d)) if s.is_unspecified() => Self::v4(
                SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, sp),
                SocketAddrV4::new(d, dp),
            ),
            (IpAddr::V4(s), IpAddr::V6(d)) => Self::v6(
                SocketAddrV6::new(s.to_ipv6_mapped(), sp, 0, 0),
                SocketAddrV6::new(d, dp, 0, 0),
            ),
            (IpAddr::V6(s), IpAddr::V4(d)) => Self::v6(
                SocketAddrV6::new(s, sp, 0, 0),
                SocketAddrV6::new(d.to_ipv6_mapped(), dp, 0, 0),
            ),
        }
    }

    /// Source address and port.
    pub fn src(&self) -> SocketAddr {
        match self {
            Self::V4(t) => SocketAddr::new(IpAddr::V4(t.src), t.src_port),
            Self::V6(t) => SocketAddr::new(IpAddr::V6(t.src), t.src_port),
        }
    }

    /// Destination address and port.
    pub fn dst(&self) -> SocketAddr {
        match self {
            Self::V4(t) => SocketAddr::new(IpAddr::V4(t.dst), t.dst_port),
            Self::V6(t) => SocketAddr::new(IpAddr::V6(t.dst), t.dst_port),
        }
    }

    /// The same addresses with these ports.
    fn with_ports(self, (src_port, dst_port): (u16, u16)) -> Self {
        match self {
            Self::V4(t) => Self::V4(TupleV4 {
                src_port,
                dst_port,
                ..t
            }),
            Self::V6(t) => Self::V6(TupleV6 {
                src_port,
                dst_port,
                ..t
            }),
        }
    }
}

impl fmt::Display for FourTuple {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} -> {}", self.src(), self.dst())
    }
}
