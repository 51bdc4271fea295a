//! [`IpNet`]: IP networks, such as those of the proxies a server trusts.

use std::net::IpAddr;

/// An IP network (`addr/prefix`): the proxies whose forwarding headers a
/// server trusts.
///
/// ```
/// use weir_rate::client::IpNet;
///
/// let net: IpNet = "192.0.2.0/24".parse().unwrap();
/// assert!(net.contains("192.0.2.200".parse().unwrap()));
/// assert!(!net.contains("192.0.3.1".parse().unwrap()));
/// assert!("192.0.2.0/33".parse::<IpNet>().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpNet {
    addr: IpAddr,
    prefix: u8,
}

impl IpNet {
    /// Whether `ip` is inside this network. An IPv4-mapped IPv6 address
    /// (`::ffff:a.b.c.d`) is the IPv4 address it maps.
    pub fn contains(&self, ip: IpAddr) -> bool {
        // Compared in IPv6 space, IPv4 as its mapped form, so a mapped peer
        // and its IPv4 network (or a mapped network and an IPv4 peer) meet.
        let (net, prefix) = match self.addr {
            IpAddr::V4(net) => (u128::from(net.to_ipv6_mapped()), self.prefix + 96),
            IpAddr::V6(net) => (u128::from(net), self.prefix),
        };
        let ip = match ip {
            IpAddr::V4(ip) => u128::from(ip.to_ipv6_mapped()),
            IpAddr::V6(ip) => u128::from(ip),
        };
        prefix_eq(net, ip, prefix)
    }
}

pub(crate) fn prefix_eq(a: u128, b: u128, prefix: u8) -> bool {
    let mask = prefix_mask(prefix);
    a & mask == b & mask
}

/// The first `prefix` bits of a 128-bit address (`prefix` ≤ 128).
pub(crate) fn prefix_mask(prefix: u8) -> u128 {
    u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0)
}

/// A network that could not be parsed.
///
/// ```
/// use weir_rate::client::IpNet;
///
/// let err = "10.0.0.0/33".parse::<IpNet>().unwrap_err();
/// println!("{err}");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpNetParseError(String);

impl std::fmt::Display for IpNetParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "invalid network `{}`: expected ADDRESS/PREFIX", self.0)
    }
}

impl std::error::Error for IpNetParseError {}

impl std::str::FromStr for IpNet {
    type Err = IpNetParseError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let error = || IpNetParseError(text.to_string());
        let (addr, prefix) = match text.split_once('/') {
            Some((a, p)) => (a.parse::<IpAddr>().map_err(|_| error())?, Some(p)),
            None => (text.parse::<IpAddr>().map_err(|_| error())?, None),
        };
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            Some(p) => p.parse::<u8>().map_err(|_| error())?,
            None => max,
        };
        if prefix > max {
            return Err(error());
        }
        Ok(Self { addr, prefix })
    }
}
