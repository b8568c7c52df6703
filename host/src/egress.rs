//! Per-session egress (SPEC E1–E5): for a backend that routes its sandbox
//! through the host's proxies (`net.proxy-only`), the session gets its own
//! HTTP and SOCKS proxies on unix sockets in a private directory, with a
//! policy built from the spec and the server's settings. They live and die
//! with the session. Other backends get none: `none` has no boundary to
//! enforce them at (SPEC E6).

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;

use sandbox_egress::server::{Listen, SessionProxies, ViolationSink};
use sandbox_egress::{Policy, PolicyConfig};
use sandbox_plugin_api::{EgressEndpoints, SandboxSpec, SandboxViolation};

use crate::sessions::router::Router;

/// The server's egress settings (config `[egress]`, `run` flags); a spec
/// adds its own `egressAllowlist`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EgressSettings {
    /// Patterns allowed on top of the baseline and GitHub lists.
    pub allow: Vec<String>,
    /// Allowed patterns whose names may resolve to non-public addresses
    /// (an opt-in, not an allow).
    pub allow_private: Vec<String>,
    /// Resolver overrides, name → address.
    pub resolve: Vec<(String, IpAddr)>,
    /// `known_hosts` lines for git over ssh inside sandboxes.
    pub ssh_known_hosts: Vec<String>,
}

impl EgressSettings {
    /// Whether every pattern is valid (at start, before any session).
    pub fn check(&self) -> Result<(), String> {
        self.policy(&SandboxSpec::default()).map(|_| ())
    }

    /// The policy for one sandbox.
    pub fn policy(&self, spec: &SandboxSpec) -> Result<Policy, String> {
        let mut allow = self.allow.clone();
        allow.extend(spec.egress_allowlist.iter().cloned());
        Policy::new(PolicyConfig {
            network_enabled: spec.network_enabled,
            allow,
            allow_private: self.allow_private.clone(),
            resolve: self.resolve.clone(),
        })
        .map_err(|e| e.to_string())
    }
}

/// `HOST:ADDR` (ADDR may be IPv6), as `--resolve` and the config take it.
pub fn parse_resolve(text: &str) -> Result<(String, IpAddr), String> {
    let (host, addr) = text
        .split_once(':')
        .ok_or_else(|| format!("resolve `{text}`: use HOST:ADDR, e.g. mirror.test:127.0.0.1"))?;
    let addr = addr.trim_start_matches('[').trim_end_matches(']');
    let addr: IpAddr = addr
        .parse()
        .map_err(|_| format!("resolve `{text}`: `{addr}` is not an IP address"))?;
    if host.is_empty() {
        return Err(format!("resolve `{text}`: the host name is empty"));
    }
    Ok((host.to_ascii_lowercase(), addr))
}

/// One session's proxies and the private directory their sockets live in.
pub struct SessionEgress {
    proxies: Option<SessionProxies>,
    _dir: tempfile::TempDir,
}

impl SessionEgress {
    /// Starts the proxies; the endpoints go into the spec the backend gets.
    pub async fn start(
        policy: Policy,
        known_hosts: &[String],
        router: Arc<Router>,
    ) -> Result<(Self, EgressEndpoints), String> {
        // 0700, owned by us: only this server (and the sandbox it is bound
        // into) reaches the sockets.
        let dir = tempfile::Builder::new()
            .prefix("cc_server-egress-")
            .tempdir()
            .map_err(|e| format!("creating the egress directory: {e}"))?;
        let sink: ViolationSink = Arc::new(move |v: sandbox_egress::Violation| {
            router.broadcast(SandboxViolation {
                action: "network-outbound".into(),
                target: v.refusal.target.clone(),
                raw: Some(format!(
                    "{} ({}): {}",
                    v.refusal.tag, v.ingress, v.refusal.rule
                )),
            });
        });
        let proxies = SessionProxies::start(
            Arc::new(policy),
            Listen::Unix {
                dir: dir.path().to_path_buf(),
            },
            sink,
        )
        .await
        .map_err(|e| format!("starting the egress proxies: {e}"))?;
        let (http_socket, socks_socket) = match proxies.endpoints() {
            sandbox_egress::server::Endpoints::Unix { http, socks } => {
                (http.clone(), socks.clone())
            }
            other => return Err(format!("unexpected egress endpoints {other:?}")),
        };
        let ssh_known_hosts = write_known_hosts(dir.path(), known_hosts)?;
        let endpoints = EgressEndpoints {
            http_socket,
            socks_socket,
            ssh_known_hosts,
        };
        Ok((
            Self {
                proxies: Some(proxies),
                _dir: dir,
            },
            endpoints,
        ))
    }

    /// Stops the proxies and every live tunnel.
    pub async fn shutdown(&mut self) {
        if let Some(proxies) = self.proxies.take() {
            proxies.shutdown().await;
        }
    }
}

fn write_known_hosts(dir: &std::path::Path, lines: &[String]) -> Result<Option<PathBuf>, String> {
    if lines.is_empty() {
        return Ok(None);
    }
    let path = dir.join("known_hosts");
    let mut text = lines.join("\n");
    text.push('\n');
    std::fs::write(&path, text).map_err(|e| format!("writing {}: {e}", path.display()))?;
    Ok(Some(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolve_overrides_parse() {
        assert_eq!(
            parse_resolve("Mirror.test:127.0.0.1").unwrap(),
            ("mirror.test".to_owned(), "127.0.0.1".parse().unwrap())
        );
        assert_eq!(
            parse_resolve("a.test:::1").unwrap().1,
            "::1".parse::<IpAddr>().unwrap()
        );
        assert_eq!(
            parse_resolve("a.test:[::1]").unwrap().1,
            "::1".parse::<IpAddr>().unwrap()
        );
        for bad in ["a.test", ":127.0.0.1", "a.test:nope"] {
            assert!(parse_resolve(bad).is_err(), "{bad}");
        }
    }
}
