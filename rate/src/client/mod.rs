//! Who a request is counted for, by address: [`ClientPrefixes`] makes a
//! client's address a limit key, [`IpNet`] names the networks of proxies
//! whose forwarding headers are trusted, and [`Forwarding`] finds the
//! client those proxies report ([`ClientKey`], [`ForwardedHeader`]). Every weir integration
//! (weir-tower's layers, the pingora filters) keys peers by these rules.

mod forwarded;
mod ipnet;

pub use forwarded::{ClientKey, ForwardedHeader, Forwarding};
pub use ipnet::{IpNet, IpNetParseError};

use ipnet::{prefix_eq, prefix_mask};
use std::net::{IpAddr, Ipv4Addr};

/// Which bits of a client's address make its key: IPv4 clients by their
/// address, IPv6 clients by their network (a /64 unless set otherwise),
/// since one subscriber usually holds a whole /64 and could rotate through
/// its addresses to escape a per-address limit (and grow the limiter's map
/// with every one). An IPv4-mapped IPv6 address (`::ffff:192.0.2.7`, what
/// a dual-stack listener reports for IPv4 clients) counts as the IPv4
/// address. IPv4 clients behind a NAT64/SIIT translator are keyed apart:
/// under the well-known prefix `64:ff9b::/96` (RFC 6052) by the IPv4
/// address embedded, under the local-use `64:ff9b:1::/48` (RFC 8215) by the
/// whole address (where the IPv4 address sits depends on the operator's
/// prefix length, which an address does not tell).
///
/// ```
/// use weir_rate::client::ClientPrefixes;
///
/// let keys = ClientPrefixes::new();
/// assert_eq!(keys.key("192.0.2.7".parse().unwrap()), "192.0.2.7".parse::<std::net::IpAddr>().unwrap());
/// assert_eq!(keys.key("2001:db8:7:1::99".parse().unwrap()), "2001:db8:7:1::".parse::<std::net::IpAddr>().unwrap());
/// assert_eq!(keys.key("::ffff:192.0.2.7".parse().unwrap()), "192.0.2.7".parse::<std::net::IpAddr>().unwrap());
/// assert_eq!(keys.key("64:ff9b::192.0.2.7".parse().unwrap()), "192.0.2.7".parse::<std::net::IpAddr>().unwrap());
/// // A provider delegating a /56 to each subscriber:
/// assert_eq!(keys.ipv6(56).key("2001:db8:7:1::99".parse().unwrap()), "2001:db8:7::".parse::<std::net::IpAddr>().unwrap());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientPrefixes {
    ipv6: u8,
}

impl Default for ClientPrefixes {
    fn default() -> Self {
        Self { ipv6: 64 }
    }
}

impl ClientPrefixes {
    /// IPv4 clients by address, IPv6 clients by their /64.
    pub fn new() -> Self {
        Self::default()
    }

    /// Key IPv6 clients by their first `prefix` bits (128 keys every
    /// address apart); translated IPv4 clients stay keyed apart.
    ///
    /// # Panics
    ///
    /// If `prefix` is over 128.
    pub fn ipv6(self, prefix: u8) -> Self {
        assert!(
            prefix <= 128,
            "an IPv6 prefix is at most 128 bits, got {prefix}"
        );
        Self { ipv6: prefix }
    }

    /// The key of a client at `ip`.
    pub fn key(&self, ip: IpAddr) -> IpAddr {
        match ip.to_canonical() {
            IpAddr::V4(v4) => IpAddr::V4(v4),
            IpAddr::V6(v6) => {
                let bits = u128::from(v6);
                if prefix_eq(bits, NAT64_WELL_KNOWN, 96) {
                    let [.., a, b, c, d] = v6.octets();
                    IpAddr::V4(Ipv4Addr::new(a, b, c, d))
                } else if prefix_eq(bits, NAT64_LOCAL_USE, 48) {
                    IpAddr::V6(v6)
                } else {
                    IpAddr::V6((bits & prefix_mask(self.ipv6)).into())
                }
            }
        }
    }
}

/// `64:ff9b::/96`, the well-known prefix of IPv4/IPv6 translation (NAT64,
/// SIIT; RFC 6052): an IPv4 client behind a translator appears as this
/// prefix followed by its IPv4 address, and is keyed by that address.
const NAT64_WELL_KNOWN: u128 = 0x0064_ff9b_0000_0000_0000_0000_0000_0000;

/// `64:ff9b:1::/48`, the local-use translation prefix (RFC 8215): operators
/// take a network-specific prefix of their own inside it, and RFC 6052
/// embeds the IPv4 address at a place that depends on that prefix's length
/// (/32 to /96), which an address does not tell. Whatever the length, a
/// translator gives each IPv4 client one address and leaves the suffix
/// zero, so clients here are keyed by the whole address: one key per IPv4
/// client, as the well-known prefix gives, and nothing for a client to
/// rotate through (only the operator's translator sources from it).
const NAT64_LOCAL_USE: u128 = 0x0064_ff9b_0001_0000_0000_0000_0000_0000;
