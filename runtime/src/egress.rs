//! Per-session egress (SPEC E1–E5): for a backend that routes its sandbox
//! through the host's proxies (`net.proxy-only`), the session gets its own
//! HTTP and SOCKS proxies on unix sockets in a private directory, with a
//! policy built from the spec and the server's settings. They live and die
//! with the session. A `none` session gets them on credentialed loopback
//! ports, named in each command's proxy variables: advisory only, since
//! nothing stops a command on the host going direct (SPEC E6).

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;

use sandbox_egress::local::Local;
use sandbox_egress::policy::PatternError;
use sandbox_egress::server::{Credential, Endpoints, Listen, SessionProxies, ViolationSink};
use sandbox_egress::{Policy, PolicyConfig};
use sandbox_plugin_api::{EgressEndpoints, SandboxSpec, SandboxViolation};

/// Why a session's proxies could not be set up or started.
#[derive(Debug, thiserror::Error)]
pub enum EgressError {
    #[error("resolve `{text}`: {problem}")]
    Resolve { text: String, problem: String },
    #[error(transparent)]
    Pattern(#[from] PatternError),
    #[error("creating the egress directory")]
    Dir(#[source] std::io::Error),
    #[error("a proxy credential")]
    Credential(#[source] std::io::Error),
    #[error("starting the egress proxies")]
    Start(#[source] std::io::Error),
    #[error("the proxies did not listen on {0}")]
    Listen(&'static str),
    #[error("writing {}", path.display())]
    KnownHosts {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The server's egress settings (config `[egress]`, `run` flags); a spec
/// adds its own `egressAllowlist`.
#[derive(Debug, Clone, PartialEq, Eq)]
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
    /// `[egress] max_connections`: open connections through one session's
    /// proxies at most; past it each is refused with a violation.
    pub max_connections: usize,
}

impl Default for EgressSettings {
    fn default() -> Self {
        Self {
            allow: Vec::new(),
            allow_private: Vec::new(),
            resolve: Vec::new(),
            ssh_known_hosts: Vec::new(),
            max_connections: sandbox_egress::server::DEFAULT_MAX_CONNECTIONS,
        }
    }
}

impl EgressSettings {
    /// Whether every pattern is valid (at start, before any session).
    pub fn check(&self) -> Result<(), PatternError> {
        self.policy(&SandboxSpec::default()).map(|_| ())
    }

    /// The policy for one sandbox.
    pub fn policy(&self, spec: &SandboxSpec) -> Result<Policy, PatternError> {
        let mut allow = self.allow.clone();
        allow.extend(spec.egress_allowlist.iter().cloned());
        Policy::new(PolicyConfig {
            network_enabled: spec.network_enabled,
            allow,
            allow_private: self.allow_private.clone(),
            resolve: self.resolve.clone(),
            open: spec.network_open,
        })
    }
}

/// `HOST:ADDR` (ADDR may be IPv6), as `--resolve` and the config take it.
pub fn parse_resolve(text: &str) -> Result<(String, IpAddr), EgressError> {
    let problem = |problem: String| EgressError::Resolve {
        text: text.to_owned(),
        problem,
    };
    let (host, addr) = text
        .split_once(':')
        .ok_or_else(|| problem("use HOST:ADDR, e.g. mirror.test:127.0.0.1".into()))?;
    let addr = addr.trim_start_matches('[').trim_end_matches(']');
    let addr: IpAddr = addr
        .parse()
        .map_err(|_| problem(format!("`{addr}` is not an IP address")))?;
    if host.is_empty() {
        return Err(problem("the host name is empty".into()));
    }
    Ok((host.to_ascii_lowercase(), addr))
}

/// Removes the egress directories of servers that are gone (killed: a
/// server that stops cleans up its own), those whose owner file names a
/// process that no longer runs; a live server's, or one without an owner
/// file, stays. Run once at start.
pub fn sweep_stale_dirs() {
    // In the runtime dir, and in the temp dir where older servers made them.
    let parents = sandbox_paths::state_dirs::own_runtime_dir()
        .into_iter()
        .chain([std::env::temp_dir()]);
    let removed = parents.flat_map(|parent| {
        sandbox_paths::state_dirs::sweep_gone_owners(
            &parent,
            sandbox_paths::state_dirs::EGRESS_DIR_PREFIX,
        )
    });
    for dir in removed {
        tracing::info!(dir = %dir.display(), "removed the egress directory a gone server left");
    }
}

/// One session's proxies (and the private directory of their sockets).
pub struct SessionEgress {
    proxies: Option<SessionProxies>,
    _dir: Option<tempfile::TempDir>,
}

/// What a sandbox gets of its session's proxies.
pub enum Reach {
    /// Unix sockets for the backend to bind in (`net.proxy-only`).
    Endpoints(EgressEndpoints),
    /// Credentialed loopback ports, as proxy variables for each command
    /// (`none`: advisory — nothing stops a command going direct).
    Env(Vec<(String, String)>),
}

impl SessionEgress {
    /// Starts the proxies on unix sockets in a fresh 0700 directory in the
    /// runtime dir (where a backend hides it, with every other session's,
    /// inside a bind that holds it); the endpoints go into the spec the
    /// backend gets.
    pub async fn start(
        policy: Policy,
        known_hosts: &[String],
        max_connections: usize,
        on_violation: ViolationSink,
        local: Local,
    ) -> Result<(Self, Reach), EgressError> {
        let parent = sandbox_paths::state_dirs::own_runtime_dir().map_err(EgressError::Dir)?;
        let dir = tempfile::Builder::new()
            .prefix(sandbox_paths::state_dirs::EGRESS_DIR_PREFIX)
            .tempdir_in(&parent)
            .map_err(EgressError::Dir)?;
        // Names this server, so a start after it was killed removes the
        // directory (`sweep_stale_dirs`); never shown to a sandbox (only
        // the sockets are bound).
        sandbox_paths::state_dirs::write_owner(dir.path()).map_err(EgressError::Dir)?;
        let listen = Listen::Unix {
            dir: dir.path().to_path_buf(),
        };
        let mut proxies = SessionProxies::start_with_local(
            Arc::new(policy),
            listen,
            on_violation,
            max_connections,
            local,
        )
        .await
        .map_err(EgressError::Start)?;
        let Endpoints::Unix { http, socks } = proxies.endpoints().clone() else {
            return Err(EgressError::Listen("unix sockets"));
        };
        let forwarder = proxies.accept_forwarders().map_err(EgressError::Start)?;
        let endpoints = EgressEndpoints {
            http_socket: http,
            socks_socket: socks,
            ssh_known_hosts: write_known_hosts(dir.path(), known_hosts)?,
            forwarder_socket: Some(forwarder),
        };
        let egress = Self {
            proxies: Some(proxies),
            _dir: Some(dir),
        };
        Ok((egress, Reach::Endpoints(endpoints)))
    }

    /// Starts the proxies on loopback ports that require a fresh
    /// per-session credential (SPEC E1, for backends sharing the host's
    /// loopback); the credential travels in the proxy URLs.
    pub async fn start_tcp(
        policy: Policy,
        max_connections: usize,
        on_violation: ViolationSink,
        local: Local,
    ) -> Result<(Self, Reach), EgressError> {
        let password = crate::random::hex(16).map_err(EgressError::Credential)?;
        let credential = Credential {
            user: "cc".into(),
            password,
        };
        let listen = Listen::Tcp { credential };
        let proxies = SessionProxies::start_with_local(
            Arc::new(policy),
            listen,
            on_violation,
            max_connections,
            local,
        )
        .await
        .map_err(EgressError::Start)?;
        let Endpoints::Tcp {
            http,
            socks,
            credential,
        } = proxies.endpoints().clone()
        else {
            return Err(EgressError::Listen("loopback ports"));
        };
        let auth = format!("{}:{}", credential.user, credential.password);
        let http = format!("http://{auth}@{http}");
        let socks = format!("socks5h://{auth}@{socks}");
        let env = sandbox_plugin_api::proxy::variables(&http, &socks);
        let egress = Self {
            proxies: Some(proxies),
            _dir: None,
        };
        Ok((egress, Reach::Env(env)))
    }

    /// Stops the proxies and every live tunnel.
    pub async fn shutdown(&mut self) {
        if let Some(proxies) = self.proxies.take() {
            proxies.shutdown().await;
        }
    }
}

/// The rule and the remedy of a connection the session's proxies refused
/// past its connection cap: the generic `network-outbound` explanation
/// (the allowlist) does not fit it. The sink writes `raw` as
/// `<tag> (<ingress>): <rule>`.
pub fn cap_explanation(violation: &SandboxViolation) -> Option<(String, &'static str)> {
    let raw = violation.raw.as_deref()?;
    let rest = raw.strip_prefix(sandbox_egress::server::CAP_TAG)?;
    let (_, rule) = rest.split_once("): ")?;
    Some((
        rule.to_owned(),
        "`[egress] max_connections` (config), or fewer connections at once",
    ))
}

fn write_known_hosts(
    dir: &std::path::Path,
    lines: &[String],
) -> Result<Option<PathBuf>, EgressError> {
    if lines.is_empty() {
        return Ok(None);
    }
    let path = dir.join("known_hosts");
    let mut text = lines.join("\n");
    text.push('\n');
    std::fs::write(&path, text).map_err(|source| EgressError::KnownHosts {
        path: path.clone(),
        source,
    })?;
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
