//! The node-to-node channel's mutual TLS (`--peer-cacert`, `--peer-cert`,
//! `--peer-key`): every node presents a certificate signed by the
//! cluster's CA, naming the node (a DNS name, its `--node`), and accepts
//! only peers that present one. A connection without a certificate, or
//! with one of another CA, is refused before any request is read; a node
//! asking another checks that the certificate it is shown names that node.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::net::TcpStream;
use tokio_rustls::{TlsAcceptor, TlsConnector};

/// The files of a node's peer TLS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerTlsFiles {
    /// The cluster's CA certificate (PEM).
    pub ca: PathBuf,
    /// This node's certificate (PEM), signed by the CA, naming the node.
    pub cert: PathBuf,
    /// Its private key (PEM).
    pub key: PathBuf,
}

/// Why the peer TLS files cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum PeerTlsError {
    /// A file cannot be read, or holds no PEM of its kind.
    #[error("{flag} {path}: {reason}")]
    File {
        /// The flag that named it.
        flag: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The files do not make a TLS configuration (a key that is not the
    /// certificate's, a CA that is no CA).
    #[error("the peer certificates cannot be used together: {0} — check that --peer-key is --peer-cert's key and --peer-cacert the CA that signed it")]
    Config(String),
}

/// Both ends of the channel's TLS.
pub struct PeerTls {
    acceptor: TlsAcceptor,
    connector: TlsConnector,
}

impl std::fmt::Debug for PeerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PeerTls")
    }
}

/// The PEM certificates in `path`, named by `flag`.
fn certificates(
    flag: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, PeerTlsError> {
    let problem = |reason: String| PeerTlsError::File {
        flag,
        path: path.to_owned(),
        reason,
    };
    let found: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
        .map_err(|error| problem(error.to_string()))?
        .collect::<Result<_, _>>()
        .map_err(|error| problem(error.to_string()))?;
    if found.is_empty() {
        return Err(problem("it holds no PEM certificate".to_owned()));
    }
    Ok(found)
}

/// The channel's crypto: ring, which builds with a C compiler only, as
/// the rest of voodu's TLS (rustls marks it deprecated for lacking
/// post-quantum key exchange).
#[allow(deprecated)]
fn crypto() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl PeerTls {
    /// Both ends, from `files`.
    pub fn from_files(files: &PeerTlsFiles) -> Result<PeerTls, PeerTlsError> {
        let provider = crypto();
        let mut roots = rustls::RootCertStore::empty();
        for ca in certificates("--peer-cacert", &files.ca)? {
            roots
                .add(ca)
                .map_err(|error| PeerTlsError::Config(error.to_string()))?;
        }
        let roots = Arc::new(roots);
        let chain = certificates("--peer-cert", &files.cert)?;
        let key = PrivateKeyDer::from_pem_file(&files.key).map_err(|error| PeerTlsError::File {
            flag: "--peer-key",
            path: files.key.clone(),
            reason: error.to_string(),
        })?;
        let config = |error: rustls::Error| PeerTlsError::Config(error.to_string());
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            roots.clone(),
            provider.clone(),
        )
        .build()
        .map_err(|error| PeerTlsError::Config(error.to_string()))?;
        let server = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(config)?
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain.clone(), key.clone_key())
            .map_err(config)?;
        let client = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(config)?
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)
            .map_err(config)?;
        Ok(PeerTls {
            acceptor: TlsAcceptor::from(Arc::new(server)),
            connector: TlsConnector::from(Arc::new(client)),
        })
    }

    /// Accepts a peer's connection: its certificate must be the CA's.
    pub(crate) async fn accept(
        &self,
        stream: TcpStream,
    ) -> std::io::Result<tokio_rustls::server::TlsStream<TcpStream>> {
        self.acceptor.accept(stream).await
    }

    /// Opens the channel to node `node` on `stream`: its certificate must
    /// be the CA's and name it.
    pub(crate) async fn connect(
        &self,
        node: &str,
        stream: TcpStream,
    ) -> Result<tokio_rustls::client::TlsStream<TcpStream>, String> {
        let name = ServerName::try_from(node.to_owned()).map_err(|_| {
            format!(
                "its name {node:?} cannot be checked against a certificate (a DNS name is needed)"
            )
        })?;
        self.connector
            .connect(name, stream)
            .await
            .map_err(|error| format!("the TLS handshake failed: {error}"))
    }
}
