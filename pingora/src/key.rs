//! [`RequestKey`]: whom a request is counted for, from what pingora's
//! [`Session`] holds: the client's address ([`ClientIp`]), the client a
//! trusted proxy reports ([`ForwardedIp`]), a header with a fallback
//! ([`HeaderKey`]), or a closure of your own.

use pingora::proxy::Session;
use weir_rate::client::{ClientPrefixes, ForwardedHeader, Forwarding, IpNet};

/// Whom a request is counted for; `None` when the request has no key
/// (the filter then answers 500: a request it cannot count must not pass
/// uncounted).
///
/// Implemented for [`ClientIp`], [`HeaderKey`] and every
/// `Fn(&Session) -> Option<String>`.
pub trait RequestKey: Send + Sync + 'static {
    /// The key of the request in `session`.
    fn key(&self, session: &Session) -> Option<String>;
}

impl<F: Fn(&Session) -> Option<String> + Send + Sync + 'static> RequestKey for F {
    fn key(&self, session: &Session) -> Option<String> {
        self(session)
    }
}

/// Keys requests by the client's address, as weir's other integrations
/// do ([`ClientPrefixes`]): IPv4 clients by address, IPv6 clients by their
/// /64 (or the prefix set), NAT64 and mapped IPv4 clients by their IPv4
/// address. A request over a Unix socket has no key.
///
/// ```
/// use weir_pingora::ClientIp;
///
/// // A provider delegating a /56 to each subscriber.
/// let per_subscriber = ClientIp::new().ipv6_prefix(56);
/// # let _ = per_subscriber;
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct ClientIp {
    prefixes: ClientPrefixes,
}

impl ClientIp {
    /// IPv4 clients by address, IPv6 clients by their /64.
    pub fn new() -> Self {
        Self::default()
    }

    /// Key IPv6 clients by their first `prefix` bits.
    ///
    /// # Panics
    ///
    /// If `prefix` is over 128.
    pub fn ipv6_prefix(self, prefix: u8) -> Self {
        Self {
            prefixes: self.prefixes.ipv6(prefix),
        }
    }
}

impl RequestKey for ClientIp {
    fn key(&self, session: &Session) -> Option<String> {
        let addr = session.client_addr()?.as_inet()?;
        Some(self.prefixes.key(addr.ip()).to_string())
    }
}

/// Keys requests by the client a trusted proxy reports in
/// `X-Forwarded-For` (the default) or RFC 7239 `Forwarded`, by the rules
/// every weir integration shares ([`Forwarding`]): the header is read only
/// from a trusted peer, walked from the right past every trusted proxy, and
/// what a client wrote left of its own entry is never read. A peer outside
/// the trusted networks is keyed by its own address.
///
/// ```
/// use weir_pingora::ForwardedIp;
///
/// // Behind load balancers in 10.0.0.0/8.
/// let clients = ForwardedIp::trusting(["10.0.0.0/8".parse().unwrap()]);
/// # let _ = clients;
/// ```
#[derive(Debug, Clone, Default)]
pub struct ForwardedIp {
    forwarding: Forwarding,
}

impl ForwardedIp {
    /// Trust forwarded headers from peers in these networks.
    pub fn trusting(trusted: impl IntoIterator<Item = IpNet>) -> Self {
        Self {
            forwarding: Forwarding::trusting(trusted),
        }
    }

    /// Read `header` (default `X-Forwarded-For`): only ever the one your
    /// proxies write.
    pub fn reading(self, header: ForwardedHeader) -> Self {
        Self {
            forwarding: self.forwarding.reading(header),
        }
    }

    /// Key IPv6 clients by their first `prefix` bits (default 64).
    ///
    /// # Panics
    ///
    /// If `prefix` is over 128.
    pub fn ipv6_prefix(self, prefix: u8) -> Self {
        Self {
            forwarding: self.forwarding.ipv6_prefix(prefix),
        }
    }
}

impl RequestKey for ForwardedIp {
    fn key(&self, session: &Session) -> Option<String> {
        let peer = session.client_addr()?.as_inet()?.ip();
        let lines = session
            .req_header()
            .headers
            .get_all(self.forwarding.header().name())
            .iter()
            .map(|line| line.as_bytes());
        Some(self.forwarding.client(peer, lines).to_string())
    }
}

/// Keys requests by a header's value (an API key, a tenant), or, without
/// the header, by a fallback key.
///
/// ```
/// use weir_pingora::{ClientIp, HeaderKey};
///
/// // `x-api-key` when given, else the client's address.
/// let key = HeaderKey::new("x-api-key").or(ClientIp::new());
/// # let _ = key;
/// ```
#[derive(Debug, Clone)]
pub struct HeaderKey<F = NoKey> {
    name: String,
    fallback: F,
}

/// No key: what a [`HeaderKey`] without a fallback gives a request
/// without the header.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoKey;

impl RequestKey for NoKey {
    fn key(&self, _: &Session) -> Option<String> {
        None
    }
}

impl HeaderKey {
    /// Keys by the value of header `name` (bytes that are not UTF-8 read
    /// lossily; a request without the header has no key).
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            fallback: NoKey,
        }
    }

    /// Keys a request without the header by `fallback`. The two key
    /// spaces never meet: a header value is prefixed `h:`, the fallback's
    /// key `f:`, so a client cannot send a header naming another's address.
    pub fn or<F: RequestKey>(self, fallback: F) -> HeaderKey<F> {
        HeaderKey {
            name: self.name,
            fallback,
        }
    }
}

impl<F: RequestKey> RequestKey for HeaderKey<F> {
    fn key(&self, session: &Session) -> Option<String> {
        match session.get_header(self.name.as_str()) {
            // Bytes beyond visible ASCII are the client's to send: they key
            // it (lossily) rather than leave its request unkeyed.
            Some(value) => Some(format!("h:{}", String::from_utf8_lossy(value.as_bytes()))),
            None => self.fallback.key(session).map(|k| format!("f:{k}")),
        }
    }
}
