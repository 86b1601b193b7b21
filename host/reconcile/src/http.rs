//! The reconciler's HTTP client, for probes and webhooks: HTTP/1.1 over
//! hyper, one request per connection, TLS by rustls with ring and the
//! system's roots.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::rt::TokioIo;

/// The TLS settings of an https request: the system's roots, as voodu's
/// default TLS verification (a self-signed certificate fails), read once.
pub(crate) fn system_tls() -> Result<Arc<rustls::ClientConfig>, String> {
    static TLS: std::sync::OnceLock<Result<Arc<rustls::ClientConfig>, String>> =
        std::sync::OnceLock::new();
    TLS.get_or_init(|| {
        let mut roots = rustls::RootCertStore::empty();
        let found = rustls_native_certs::load_native_certs();
        for certificate in found.certs {
            // A root the system lists but rustls cannot read is skipped.
            let _ = roots.add(certificate);
        }
        if roots.is_empty() {
            return Err(
                "this host lists no trusted TLS roots (install ca-certificates)".to_owned(),
            );
        }
        tls_trusting(roots)
    })
    .clone()
}

/// The crypto of https requests: ring, which builds with a C compiler only
/// (aws-lc-rs, rustls' default, wants more). rustls marks it deprecated
/// for lacking post-quantum key exchange, which a health probe on a
/// private network does not need.
#[allow(deprecated)]
pub(crate) fn crypto() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A TLS client that trusts `roots`.
pub(crate) fn tls_trusting(
    roots: rustls::RootCertStore,
) -> Result<Arc<rustls::ClientConfig>, String> {
    let config = rustls::ClientConfig::builder_with_provider(crypto())
        .with_safe_default_protocol_versions()
        .map_err(|error| format!("TLS cannot be set up: {error}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// One request: where it goes and what it carries.
pub(crate) struct HttpRequest<'a> {
    /// `GET`, `POST`, ...
    pub method: &'a str,
    /// The host to connect to (a name or an address).
    pub host: &'a str,
    /// Its port.
    pub port: u16,
    /// The path and query.
    pub path: &'a str,
    /// Extra headers.
    pub headers: &'a BTreeMap<String, String>,
    /// The body (empty for none).
    pub body: Bytes,
    /// TLS, when the request is https (`host` is the name its certificate
    /// must hold).
    pub tls: Option<&'a Arc<rustls::ClientConfig>>,
}

/// Sends `request`; returns the status code.
pub(crate) async fn send(request: HttpRequest<'_>) -> Result<u16, String> {
    let stream = tokio::net::TcpStream::connect((request.host, request.port))
        .await
        .map_err(|error| format!("cannot connect: {error}"))?;
    match request.tls {
        None => send_over(stream, &request).await,
        Some(config) => {
            let name = rustls::pki_types::ServerName::try_from(request.host.to_owned())
                .map_err(|error| format!("{} is not a TLS server name: {error}", request.host))?;
            let stream = tokio_rustls::TlsConnector::from(config.clone())
                .connect(name, stream)
                .await
                .map_err(|error| format!("TLS handshake failed: {error}"))?;
            send_over(stream, &request).await
        }
    }
}

/// One HTTP/1.1 GET with extra headers, over TLS when `tls` is given (the
/// replica's address is the name its certificate must hold); returns the
/// status code.
pub async fn http_get(
    ip: &str,
    port: u16,
    path: &str,
    headers: &BTreeMap<String, String>,
    tls: Option<&Arc<rustls::ClientConfig>>,
) -> Result<u16, String> {
    send(HttpRequest {
        method: "GET",
        host: ip,
        port,
        path,
        headers,
        body: Bytes::new(),
        tls,
    })
    .await
}

/// The request itself, over a plain or a TLS stream.
async fn send_over<S>(stream: S, request: &HttpRequest<'_>) -> Result<u16, String>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|error| format!("HTTP handshake failed: {error}"))?;
    let driver = tokio::spawn(connection);
    // An IPv6 address is written in brackets; a Host or Connection header
    // the caller gives replaces this one.
    let host = if request.host.contains(':') {
        format!("[{}]:{}", request.host, request.port)
    } else {
        format!("{}:{}", request.host, request.port)
    };
    let given = |name: &hyper::header::HeaderName| {
        request
            .headers
            .keys()
            .any(|written| written.eq_ignore_ascii_case(name.as_str()))
    };
    let mut built = hyper::Request::builder()
        .method(request.method)
        .uri(request.path);
    if !given(&hyper::header::HOST) {
        built = built.header(hyper::header::HOST, host);
    }
    if !given(&hyper::header::CONNECTION) {
        built = built.header(hyper::header::CONNECTION, "close");
    }
    for (name, value) in request.headers {
        built = built.header(name.as_str(), value.as_str());
    }
    let built = built
        .body(Full::new(request.body.clone()))
        .map_err(|error| format!("bad request: {error}"))?;
    let answered = sender.send_request(built).await;
    driver.abort();
    answered
        .map(|response| response.status().as_u16())
        .map_err(|error| format!("no HTTP answer: {error}"))
}
