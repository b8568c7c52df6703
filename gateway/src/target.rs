//! Where the gateway and the App client connect: `http://` or `https://`
//! `host[:port][/prefix]`. HTTPS verifies the server against the system's
//! trust roots, plus a CA file the config adds (GitHub Enterprise behind a
//! private CA; the tests' stand-in forge).

use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};

/// A parsed base URL and, for HTTPS, its TLS client.
#[derive(Clone)]
pub struct Target {
    pub host: String,
    pub port: u16,
    /// The path prefix, without a trailing slash.
    pub prefix: String,
    tls: Option<Arc<rustls::ClientConfig>>,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("prefix", &self.prefix)
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

/// The TLS client: the system's roots and `extra_ca` (PEM).
fn tls_config(extra_ca: Option<&Path>) -> Result<Arc<rustls::ClientConfig>, String> {
    let mut roots = rustls::RootCertStore::empty();
    let system = rustls_native_certs::load_native_certs();
    for cert in system.certs {
        let _ = roots.add(cert);
    }
    if let Some(path) = extra_ca {
        let certs = CertificateDer::pem_file_iter(path)
            .map_err(|e| format!("the CA file {}: {e}", path.display()))?;
        for cert in certs {
            let cert = cert.map_err(|e| format!("the CA file {}: {e}", path.display()))?;
            roots
                .add(cert)
                .map_err(|e| format!("the CA file {}: {e}", path.display()))?;
        }
    }
    if roots.is_empty() {
        return Err("no trust roots: neither the system's nor a CA file".into());
    }
    // ring is the one provider compiled in: the builder's default.
    let config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

impl Target {
    pub fn parse(url: &str, extra_ca: Option<&Path>) -> Result<Self, String> {
        let (tls, rest, default_port) = if let Some(rest) = url.strip_prefix("https://") {
            (true, rest, 443)
        } else if let Some(rest) = url.strip_prefix("http://") {
            (false, rest, 80)
        } else {
            return Err(format!("`{url}`: use an http:// or https:// URL"));
        };
        let (authority, prefix) = match rest.find('/') {
            Some(at) => (&rest[..at], rest[at..].trim_end_matches('/')),
            None => (rest, ""),
        };
        let (host, port) = match authority.rsplit_once(':') {
            Some((h, p)) => (
                h,
                p.parse::<u16>().map_err(|_| format!("`{url}`: bad port"))?,
            ),
            None => (authority, default_port),
        };
        if host.is_empty() {
            return Err(format!("`{url}`: no host"));
        }
        let tls = match tls {
            true => Some(tls_config(extra_ca).map_err(|e| format!("`{url}`: {e}"))?),
            false => None,
        };
        Ok(Self {
            host: host.to_owned(),
            port,
            prefix: prefix.to_owned(),
            tls,
        })
    }

    /// `host:port`, for the `Host` header and messages.
    pub fn authority(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }

    /// One HTTP/1.1 connection (over TLS for https), its driver spawned.
    pub async fn connect(&self) -> Result<SendRequest<BoxBody<Bytes, hyper::Error>>, String> {
        let address = self.authority();
        let tcp = tokio::net::TcpStream::connect(&address)
            .await
            .map_err(|e| format!("cannot reach {address}: {e}"))?;
        let _ = tcp.set_nodelay(true);
        let Some(tls) = &self.tls else {
            let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
                .await
                .map_err(|e| format!("{address}: {e}"))?;
            tokio::spawn(async move {
                if let Err(e) = connection.await {
                    tracing::debug!("forge connection: {e}");
                }
            });
            return Ok(sender);
        };
        let name = ServerName::try_from(self.host.clone())
            .map_err(|e| format!("`{}` as a TLS name: {e}", self.host))?;
        let stream = tokio_rustls::TlsConnector::from(Arc::clone(tls))
            .connect(name, tcp)
            .await
            .map_err(|e| format!("TLS with {address}: {e}"))?;
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| format!("{address}: {e}"))?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!("forge connection: {e}");
            }
        });
        Ok(sender)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse() {
        let t = Target::parse("http://127.0.0.1:9/api/v3/", None).unwrap();
        assert_eq!(
            (t.host.as_str(), t.port, t.prefix.as_str()),
            ("127.0.0.1", 9, "/api/v3")
        );
        assert!(t.tls.is_none());
        assert!(Target::parse("ftp://x", None).is_err());
        assert!(Target::parse("http://:80", None).is_err());
        assert!(Target::parse("https://x", Some(Path::new("/nonexistent/ca.pem"))).is_err());
    }
}
