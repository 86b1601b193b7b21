//! How a node gets into its etcd: TLS (the CA that signed etcd's
//! certificate, and the node's own client certificate) and etcd's user
//! auth; and, when etcd refuses it, which of them failed and the fix,
//! never a hint about the quorum.

use std::path::{Path, PathBuf};

use etcd_client::{Certificate, ConnectOptions, Identity, TlsOptions};
use voodu_store::StoreError;

/// TLS to etcd (`--cluster-cacert`, `--cluster-cert`, `--cluster-key`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EtcdTls {
    /// The CA certificate (PEM) that signed etcd's server certificates.
    pub ca: Option<PathBuf>,
    /// This node's client certificate and its key (PEM), for an etcd that
    /// asks for one (`--client-cert-auth`).
    pub identity: Option<(PathBuf, PathBuf)>,
}

/// An etcd user (`--cluster-user`, the password from a file or the
/// environment, never an argument).
#[derive(Clone, PartialEq, Eq)]
pub struct EtcdUser {
    /// The user's name.
    pub name: String,
    /// The password.
    pub password: String,
}

impl std::fmt::Debug for EtcdUser {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("EtcdUser")
            .field("name", &self.name)
            .field("password", &"(hidden)")
            .finish()
    }
}

fn read(path: &Path, what: &str) -> Result<Vec<u8>, StoreError> {
    std::fs::read(path).map_err(|error| {
        StoreError::ClusterAccess(format!("cannot read {what} {}: {error}", path.display()))
    })
}

/// The client's connect options for `tls` and `user` on `endpoints`.
pub(crate) fn connect_options(
    endpoints: &[String],
    tls: Option<&EtcdTls>,
    user: Option<&EtcdUser>,
) -> Result<ConnectOptions, StoreError> {
    let mut options = ConnectOptions::new();
    let https = endpoints.iter().any(|url| url.starts_with("https://"));
    match tls {
        Some(tls) => {
            if !https {
                return Err(StoreError::ClusterAccess(
                    "TLS options were given, but the cluster URLs are http:// — write them as https://HOST:2379".into(),
                ));
            }
            let mut config = TlsOptions::new();
            if let Some(ca) = &tls.ca {
                config = config.ca_certificate(Certificate::from_pem(read(ca, "--cluster-cacert")?));
            }
            if let Some((cert, key)) = &tls.identity {
                let pem = read(cert, "--cluster-cert")?;
                if let Some(expired) = expired(&pem) {
                    return Err(StoreError::ClusterAccess(format!(
                        "this node's client certificate {} expired at {expired} — make a new one, signed by the cluster's CA",
                        cert.display()
                    )));
                }
                config = config.identity(Identity::from_pem(pem, read(key, "--cluster-key")?));
            }
            options = options.with_tls(config);
        }
        None if https => {
            return Err(StoreError::ClusterAccess(
                "an https:// cluster needs --cluster-cacert FILE, the CA certificate that signed etcd's (and --cluster-cert and --cluster-key when etcd asks for a client certificate)".into(),
            ))
        }
        None => {}
    }
    if let Some(user) = user {
        options = options.with_user(user.name.clone(), user.password.clone());
    }
    Ok(options)
}

/// When the first certificate in `pem` is past its validity: its end,
/// RFC 3339.
fn expired(pem: &[u8]) -> Option<String> {
    let (_, pem) = x509_parser::pem::parse_x509_pem(pem).ok()?;
    let certificate = pem.parse_x509().ok()?;
    let not_after = certificate.validity().not_after;
    (not_after.timestamp() < x509_parser::time::ASN1Time::now().timestamp())
        .then(|| not_after.to_string())
}

/// What refused this node, when the error is etcd (or its TLS) refusing
/// access rather than being unreachable: the message, with the fix.
pub(crate) fn refusal(
    error: &etcd_client::Error,
    user: Option<&EtcdUser>,
    tls: Option<&EtcdTls>,
) -> Option<String> {
    if let Some(problem) = tls_error(error) {
        return Some(tls_refusal(problem));
    }
    if let etcd_client::Error::GRpcStatus(status) = error {
        // etcd's own errors for auth (rpctypes: ErrGRPCAuthFailed,
        // ErrGRPCUserEmpty, ErrGRPCPermissionDenied): the gRPC code alone
        // does not tell them from others.
        let message = status.message();
        if message.contains("authentication failed") {
            let name = user.map_or("(none)", |user| user.name.as_str());
            return Some(format!(
                "etcd refused user {name}: wrong user or password — check --cluster-user and the password in --cluster-password-file (or VOODU_CLUSTER_PASSWORD)"
            ));
        }
        if message.contains("user name is empty") {
            return Some(
                "etcd asks for a user (its auth is on) — start the node with --cluster-user NAME and the password in --cluster-password-file FILE (or VOODU_CLUSTER_PASSWORD)".into(),
            );
        }
        if status.code() == tonic::Code::PermissionDenied {
            return Some(format!(
                "etcd denied the user what voodu needs ({message}) — grant the user's role read and write on the cluster prefix"
            ));
        }
    }
    let tls = tls?;
    // TLS 1.3: etcd checks the client's certificate after the handshake,
    // and then closes the connection without an alert.
    closed_by_peer(error).then(|| match tls.identity {
        None => "etcd closed the TLS connection: it asks for a client certificate (its --client-cert-auth) — give --cluster-cert and --cluster-key, signed by the CA etcd trusts".to_owned(),
        Some(_) => "etcd closed the TLS connection: it did not accept this node's client certificate — give one signed by the CA etcd trusts (its --trusted-ca-file)".to_owned(),
    })
}

/// A TLS failure, named with its fix.
fn tls_refusal(problem: &rustls::Error) -> String {
    match problem {
        rustls::Error::InvalidCertificate(problem) => match problem {
            rustls::CertificateError::Expired | rustls::CertificateError::ExpiredContext { .. } => {
                "etcd's certificate has expired — renew it".to_owned()
            }
            // Unknown issuer; or an issuer of the same name whose key did
            // not sign it (another CA made with the same subject).
            rustls::CertificateError::UnknownIssuer | rustls::CertificateError::BadSignature => {
                "etcd's certificate is not signed by the CA in --cluster-cacert — give the CA that signed it".to_owned()
            }
            rustls::CertificateError::NotValidForName
            | rustls::CertificateError::NotValidForNameContext { .. } => {
                "etcd's certificate is not valid for the address in --cluster (its names do not include it) — use an address the certificate names, or add it to the certificate".to_owned()
            }
            other => format!("etcd's certificate was refused: {other:?}"),
        },
        rustls::Error::AlertReceived(alert) => format!(
            "etcd refused this node's TLS ({alert:?}): it asks for a client certificate signed by its CA — give --cluster-cert and --cluster-key, signed by the CA etcd trusts (--trusted-ca-file)"
        ),
        other => format!("TLS to etcd failed: {other}"),
    }
}

/// Where the chain of causes beneath `error` starts: a gRPC status's own
/// source (the transport's error), or the transport error itself.
fn first_source(error: &etcd_client::Error) -> Option<&(dyn std::error::Error + 'static)> {
    match error {
        etcd_client::Error::GRpcStatus(status) => std::error::Error::source(status),
        etcd_client::Error::TransportError(transport) => Some(transport),
        other => std::error::Error::source(other),
    }
}

/// Whether `error` is a connection the other end closed (not one refused,
/// nor one that timed out): a transport error with no I/O error of
/// another kind beneath it.
fn closed_by_peer(error: &etcd_client::Error) -> bool {
    let mut source = first_source(error);
    let mut transport = false;
    while let Some(current) = source {
        if current.downcast_ref::<tonic::transport::Error>().is_some() {
            transport = true;
        }
        if let Some(io) = current.downcast_ref::<std::io::Error>() {
            if matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::TimedOut
            ) {
                return false;
            }
        }
        source = current.source();
    }
    transport
}

/// The rustls error somewhere in `error`'s chain of sources.
fn tls_error(error: &etcd_client::Error) -> Option<&rustls::Error> {
    let mut source = first_source(error);
    while let Some(current) = source {
        if let Some(tls) = current.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        if let Some(io) = current.downcast_ref::<std::io::Error>() {
            if let Some(tls) = io
                .get_ref()
                .and_then(|inner| inner.downcast_ref::<rustls::Error>())
            {
                return Some(tls);
            }
        }
        source = current.source();
    }
    None
}
