//! TLS for private servers: a certificate authority made by the test,
//! certificates it issues, and a [`RedisServer`] that serves TLS with them.

use super::RedisServer;
use crate::process::{FixtureError, free_port, temp_dir};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use std::path::PathBuf;

/// A certificate authority that lives as long as the test: nothing on
/// disk outlives it and nothing expires under it.
pub struct CertificateAuthority {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// A certificate chain and its private key, both PEM.
#[derive(Clone)]
pub struct Issued {
    /// The certificate (PEM).
    pub chain: String,
    /// Its private key (PEM, PKCS #8).
    pub key: String,
}

fn fixture(e: rcgen::Error) -> FixtureError {
    FixtureError::NotReady(format!("certificate: {e}"))
}

impl CertificateAuthority {
    /// A new authority with a fresh key.
    pub fn new() -> Result<Self, FixtureError> {
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(fixture)?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "weir test authority");
        let key = KeyPair::generate().map_err(fixture)?;
        let issuer = CertifiedIssuer::self_signed(params, key).map_err(fixture)?;
        Ok(Self { issuer })
    }

    /// The authority's certificate (PEM): what a client trusts.
    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// A certificate for `names` (host names, or IP addresses as text),
    /// signed by this authority.
    pub fn issue(&self, names: &[&str]) -> Result<Issued, FixtureError> {
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let params = CertificateParams::new(names).map_err(fixture)?;
        let key = KeyPair::generate().map_err(fixture)?;
        let cert = params.signed_by(&key, &self.issuer).map_err(fixture)?;
        Ok(Issued {
            chain: cert.pem(),
            key: key.serialize_pem(),
        })
    }
}

/// How a TLS server treats clients' certificates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientCertificates {
    /// Not asked for.
    Ignored,
    /// Required, and checked against the server's authority.
    Required,
}

/// A TLS server's files, in a directory removed with the server.
#[derive(Debug)]
pub(crate) struct TlsPort {
    pub(crate) port: u16,
    pub(crate) dir: PathBuf,
}

impl RedisServer {
    /// A server that also serves TLS on a port of its own
    /// ([`tls_url`](Self::tls_url)), with a certificate for `127.0.0.1`
    /// and `localhost` issued by `authority`. Its plain port stays open to
    /// the fixture itself (readiness, `redis-cli`).
    pub fn start_tls(
        authority: &CertificateAuthority,
        clients: ClientCertificates,
    ) -> Result<Self, FixtureError> {
        let port = free_port()?;
        let dir = temp_dir("redis-tls", port)?;
        let issued = authority.issue(&["127.0.0.1", "localhost"])?;
        let write = |name: &str, text: &str| -> Result<String, FixtureError> {
            let path = dir.join(name);
            std::fs::write(&path, text)?;
            Ok(path.to_string_lossy().into_owned())
        };
        let (cert, key, ca) = (
            write("server.pem", &issued.chain)?,
            write("server.key", &issued.key)?,
            write("ca.pem", &authority.pem())?,
        );
        let auth = match clients {
            ClientCertificates::Ignored => "no",
            ClientCertificates::Required => "yes",
        };
        let port_text = port.to_string();
        let args = [
            "--tls-port",
            &port_text,
            "--tls-cert-file",
            &cert,
            "--tls-key-file",
            &key,
            "--tls-ca-cert-file",
            &ca,
            "--tls-auth-clients",
            auth,
        ];
        let mut server = Self::start_with(&args)?;
        server.tls = Some(TlsPort { port, dir });
        Ok(server)
    }

    /// `rediss://127.0.0.1:<tls port>/`, for a server started with
    /// [`start_tls`](Self::start_tls).
    pub fn tls_url(&self) -> Option<String> {
        self.tls
            .as_ref()
            .map(|t| format!("rediss://127.0.0.1:{}/", t.port))
    }
}
