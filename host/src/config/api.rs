//! `[api]`: who may reach the API (bind roots, origins, hosts), how its
//! connections are treated, and how long terminals and console sign-ins
//! live.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

/// `[api]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiSection {
    /// When set, every bind's `hostPath` lies at or below one of these.
    #[serde(default)]
    pub bind_roots: Vec<PathBuf>,
    /// Origins (`https://app.example.com`) whose browser requests are let
    /// through; any other request with an `Origin` header is refused.
    #[serde(default)]
    pub allowed_origins: Vec<String>,
    /// Host names, besides loopback and the listen address, that requests
    /// may carry in `Host` (DNS-rebinding defence).
    #[serde(default)]
    pub allowed_hosts: Vec<String>,
    /// A request's headers must arrive within this time (of the
    /// connection's opening, for its first request; of their first byte,
    /// after that).
    pub header_read_timeout_secs: Option<f64>,
    /// A keep-alive connection with no request for this long is closed.
    pub idle_timeout_secs: Option<f64>,
    /// Open connections at most.
    pub max_connections: Option<usize>,
    /// How many of them only connections that sent the token may hold.
    pub authenticated_reserve: Option<usize>,
    /// How long open connections get to finish at SIGTERM/SIGINT.
    pub shutdown_timeout_secs: Option<f64>,
    /// How long a terminal lives on after its last client left.
    pub terminal_grace_secs: Option<f64>,
    /// How long a web console sign-in lasts.
    pub console_session_secs: Option<f64>,
}

/// `[api]`, checked.
#[derive(Debug, Clone, Default)]
pub struct ApiSettings {
    pub bind_roots: Vec<PathBuf>,
    /// Lower-case, `scheme://host[:port]`.
    pub allowed_origins: Vec<String>,
    /// Lower-case names, without a port.
    pub allowed_hosts: Vec<String>,
    /// How the server treats connections (timeouts, caps, shutdown).
    pub connections: ConnectionSettings,
    /// How long a terminal lives on after its last client left (`None`:
    /// the terminals' default).
    pub terminal_grace: Option<Duration>,
    /// How long a web console sign-in lasts (`None`: 8 hours).
    pub console_session: Option<Duration>,
}

/// `[api]`'s connection keys, checked (see README, Configuration).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionSettings {
    pub header_read_timeout: Duration,
    pub idle_timeout: Duration,
    pub max_connections: usize,
    pub authenticated_reserve: usize,
    pub shutdown_timeout: Duration,
}

impl Default for ConnectionSettings {
    /// Headers take milliseconds on loopback, so 10 s is generous; a
    /// keep-alive client idle for a minute reconnects cheaply. 512
    /// connections, a quarter of them for clients that sent the token: an
    /// agent's client opens a handful.
    fn default() -> Self {
        Self {
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            max_connections: 512,
            authenticated_reserve: 128,
            shutdown_timeout: Duration::from_secs(5),
        }
    }
}

/// `[api]`, checked now: a root that is not absolute, or an origin that is
/// not `scheme://host[:port]`, stops the start.
pub(super) fn resolve_api(section: Option<&ApiSection>) -> Result<ApiSettings, String> {
    let Some(section) = section else {
        return Ok(ApiSettings::default());
    };
    if let Some(root) = section.bind_roots.iter().find(|r| !r.is_absolute()) {
        return Err(format!(
            "[api] bind_roots: `{}` is not an absolute path",
            root.display()
        ));
    }
    let mut origins = Vec::new();
    for origin in &section.allowed_origins {
        let lower = origin.trim().to_ascii_lowercase();
        let well_formed = lower.split_once("://").is_some_and(|(scheme, rest)| {
            !scheme.is_empty() && !rest.is_empty() && !rest.contains(['/', '?', '#', ' '])
        });
        if !well_formed {
            return Err(format!(
                "[api] allowed_origins: `{origin}` is not an origin; write it as a browser sends \
                 it, `scheme://host[:port]` (no path, no trailing slash)"
            ));
        }
        origins.push(lower);
    }
    let mut hosts = Vec::new();
    for host in &section.allowed_hosts {
        let lower = host.trim().to_ascii_lowercase();
        if lower.is_empty() || lower.contains(['/', ':', ' ']) {
            return Err(format!(
                "[api] allowed_hosts: `{host}` is not a host name; give the name alone, without \
                 scheme or port"
            ));
        }
        hosts.push(lower);
    }
    Ok(ApiSettings {
        bind_roots: section.bind_roots.clone(),
        allowed_origins: origins,
        allowed_hosts: hosts,
        connections: resolve_connections(section)?,
        terminal_grace: match section.terminal_grace_secs {
            None => None,
            Some(v) if v.is_finite() && v > 0.0 && v < 1e9 => Some(Duration::from_secs_f64(v)),
            Some(_) => {
                return Err(
                    "[api] terminal_grace_secs must be a positive number of seconds".into(),
                );
            }
        },
        console_session: match section.console_session_secs {
            None => None,
            Some(v) if (1.0..1e9).contains(&v) => Some(Duration::from_secs_f64(v)),
            Some(_) => return Err("[api] console_session_secs must be 1 or more seconds".into()),
        },
    })
}

/// `[api]`'s connection keys: positive times, a cap of at least one
/// connection for clients without the token.
fn resolve_connections(section: &ApiSection) -> Result<ConnectionSettings, String> {
    let default = ConnectionSettings::default();
    let secs = |value: Option<f64>, key: &str, default: Duration| match value {
        None => Ok(default),
        Some(v) if v.is_finite() && v > 0.0 && v < 1e9 => Ok(Duration::from_secs_f64(v)),
        Some(_) => Err(format!("[api] {key} must be a positive number of seconds")),
    };
    let max_connections = section.max_connections.unwrap_or(default.max_connections);
    let authenticated_reserve = section
        .authenticated_reserve
        .unwrap_or(default.authenticated_reserve.min(max_connections / 4));
    if authenticated_reserve >= max_connections {
        return Err(format!(
            "[api] authenticated_reserve ({authenticated_reserve}) must be below max_connections \
             ({max_connections}): clients without the token (`/healthz`, a first request) need \
             at least one connection"
        ));
    }
    Ok(ConnectionSettings {
        header_read_timeout: secs(
            section.header_read_timeout_secs,
            "header_read_timeout_secs",
            default.header_read_timeout,
        )?,
        idle_timeout: secs(
            section.idle_timeout_secs,
            "idle_timeout_secs",
            default.idle_timeout,
        )?,
        max_connections,
        authenticated_reserve,
        shutdown_timeout: secs(
            section.shutdown_timeout_secs,
            "shutdown_timeout_secs",
            default.shutdown_timeout,
        )?,
    })
}
