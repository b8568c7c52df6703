//! Who may use the listeners. On loopback (the default) anyone who can
//! reach the pod's loopback may — the official client sends no credential
//! on either transport (no call metadata on its gRPC channel, no extra
//! headers on its sandboxd REST session), and the reference daemon asks
//! for none. Beyond loopback (and on loopback when a credential file is
//! given) `cc_server sandboxd` asks every request for the sandbox's agent
//! credential as a bearer token (SPEC H4, H12): it opens this sandbox's
//! commands and files and nothing of the server. `/v1/health` stays open,
//! for the kubelet's readiness probe. Without a credential the REST
//! listener answers loopback `Host` names only, so a web page that
//! rebinds its own name to 127.0.0.1 cannot read or write the files.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tonic::Status;

use crate::Daemon;
use crate::status::RestError;

/// Whether `given` (an `Authorization` value) carries `credential`,
/// compared in constant time.
pub fn carries(given: Option<&str>, credential: &str) -> bool {
    let Some(token) = given.and_then(|g| g.strip_prefix("Bearer ")) else {
        return false;
    };
    let (a, b) = (token.as_bytes(), credential.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

const MISSING: &str = "every request here needs the sandbox's agent credential as \
     `authorization: Bearer …` (in the file `cc_server sandboxd --credential-file` names)";

/// The REST side.
pub async fn rest_credential(
    State(daemon): State<Arc<Daemon>>,
    request: Request,
    next: Next,
) -> Response {
    if let Some(credential) = &daemon.credential
        && request.uri().path() != "/v1/health"
    {
        let given = request
            .headers()
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        if !carries(given, credential) {
            return RestError::new(StatusCode::UNAUTHORIZED, "UNAUTHENTICATED", MISSING)
                .into_response();
        }
    }
    if daemon.credential.is_none()
        && request.uri().path() != "/v1/health"
        && let Some(host) = request.headers().get(http::header::HOST)
        && !loopback_host(host.to_str().unwrap_or(""))
    {
        return RestError::new(
            StatusCode::FORBIDDEN,
            "PERMISSION_DENIED",
            format!(
                "the Host `{}` is not a loopback name: without a credential this listener \
                 answers loopback names only (a web page's DNS rebinding must not reach it); \
                 give `--credential-file` to be reached by another name",
                host.to_str().unwrap_or("?")
            ),
        )
        .into_response();
    }
    next.run(request).await
}

/// `localhost`, `127.x.y.z` or `[::1]`, with or without a port (pure).
pub fn loopback_host(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host, |(h, _)| h),
    };
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The gRPC side: an interceptor over every call.
#[derive(Clone)]
pub struct GrpcCredential(pub Option<String>);

impl tonic::service::Interceptor for GrpcCredential {
    fn call(&mut self, request: tonic::Request<()>) -> Result<tonic::Request<()>, Status> {
        let Some(credential) = &self.0 else {
            return Ok(request);
        };
        let given = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok());
        if carries(given, credential) {
            Ok(request)
        } else {
            Err(Status::unauthenticated(MISSING))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_names_only() {
        for ok in [
            "127.0.0.1:8080",
            "localhost",
            "LOCALHOST:1",
            "[::1]:80",
            "127.1.2.3",
        ] {
            assert!(loopback_host(ok), "{ok}");
        }
        for no in [
            "evil.example:8080",
            "10.0.0.1",
            "localhost.evil.example",
            "[::2]:1",
            "",
        ] {
            assert!(!loopback_host(no), "{no}");
        }
    }

    #[test]
    fn only_the_exact_bearer_passes() {
        assert!(carries(Some("Bearer abc"), "abc"));
        assert!(!carries(Some("Bearer abd"), "abc"));
        assert!(!carries(Some("Bearer ab"), "abc"));
        assert!(!carries(Some("abc"), "abc"));
        assert!(!carries(None, "abc"));
    }
}
