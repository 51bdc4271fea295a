//! What a [`Target`](crate::Target) is, apart from the connection its
//! clones share: the nodes it names, its TLS settings ([`Tls`]) and the
//! credentials of a Sentinel-named master. Both the target and the
//! connection (`link`) read it.

#[cfg(feature = "tls")]
use std::fmt;

/// What a target is, apart from its connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Spec {
    pub(crate) nodes: Nodes,
    /// Certificates for `rediss://` connections (system roots without).
    #[cfg(feature = "tls")]
    pub(crate) tls: Option<Tls>,
    /// The user and password of a Sentinel-named master.
    pub(crate) master_auth: Option<(String, String)>,
}

impl Spec {
    /// Every URL the target names.
    #[cfg_attr(feature = "tls", allow(dead_code))]
    pub(crate) fn urls(&self) -> impl Iterator<Item = &str> {
        let urls: &[String] = match &self.nodes {
            Nodes::Server(url) => std::slice::from_ref(url),
            Nodes::Cluster(nodes) => nodes,
            Nodes::Sentinel { sentinels, .. } => sentinels,
        };
        urls.iter().map(String::as_str)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Nodes {
    Server(String),
    Cluster(Vec<String>),
    Sentinel {
        sentinels: Vec<String>,
        master: String,
    },
}

/// TLS settings of a [`Target`](crate::Target) (feature `tls`): whom to trust, and who
/// the client is. Certificates and keys are PEM. The TLS implementation is
/// rustls with the *ring* provider, installed as the process default
/// unless one already is.
///
/// ```
/// use weir_redis::Tls;
///
/// let system_roots = Tls::new();
/// let private_ca = Tls::new().root_certificate(b"-----BEGIN CERTIFICATE-----\n...".to_vec());
/// assert_ne!(system_roots, private_ca);
/// ```
#[cfg(feature = "tls")]
#[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Tls {
    pub(crate) root: Option<Vec<u8>>,
    pub(crate) client: Option<(Vec<u8>, Vec<u8>)>,
}

#[cfg(feature = "tls")]
impl Tls {
    /// Trust the system's certificate authorities.
    pub fn new() -> Self {
        Self::default()
    }

    /// Trust the authority whose certificate this is (PEM), and no other.
    pub fn root_certificate(mut self, pem: Vec<u8>) -> Self {
        self.root = Some(pem);
        self
    }

    /// Present this certificate chain and private key (PEM) to servers
    /// that authenticate clients (`tls-auth-clients yes`).
    pub fn client_certificate(mut self, chain: Vec<u8>, key: Vec<u8>) -> Self {
        self.client = Some((chain, key));
        self
    }

    pub(crate) fn certificates(&self) -> redis::TlsCertificates {
        redis::TlsCertificates {
            client_tls: self
                .client
                .as_ref()
                .map(|(chain, key)| redis::ClientTlsConfig {
                    client_cert: chain.clone(),
                    client_key: key.clone(),
                }),
            root_cert: self.root.clone(),
        }
    }
}

#[cfg(feature = "tls")]
impl fmt::Debug for Tls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tls")
            .field("root_certificate", &self.root.as_ref().map(|_| "<pem>"))
            .field("client_certificate", &self.client.as_ref().map(|_| "<pem>"))
            .finish()
    }
}
