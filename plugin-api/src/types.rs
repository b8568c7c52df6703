//! The data that crosses the plugin boundary as JSON.
//!
//! Names and defaults follow the seeds (SPEC F1–F11): camelCase on the wire,
//! every field defaulted, unknown fields ignored. Never add
//! `deny_unknown_fields` here: a host and a plugin of different minor versions
//! must understand each other (SPEC A2). Strictness towards *users* (typos in
//! a spec) is the host's job, at its own API.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// What a sandbox is asked to be (SPEC F1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SandboxSpec {
    /// The session this sandbox belongs to; the host's id for it.
    pub session_id: String,
    /// The workspace the session runs in.
    pub workspace_id: String,
    /// The agent, when the session runs one.
    pub agent_id: Option<String>,
    /// The conversation, when the server resolves the sandbox's binds
    /// (SPEC H1, H10): with `agentId`, the server binds that agent's
    /// workdir, its config dir, the conversation's `repos/` and the
    /// workspace's attachments, and the client gives no binds of its own.
    /// Backends never see it set to something they must act on: the host
    /// has turned it into `bindMounts` by then.
    pub conversation_id: Option<String>,
    /// Host paths made visible inside the sandbox.
    pub bind_mounts: Vec<SandboxBindMount>,
    /// Whether outbound connections may be made at all (SPEC E5).
    #[serde(default = "default_true")]
    pub network_enabled: bool,
    /// Network open (SPEC D2): the session's proxies let through every
    /// destination except the fixed deny list and non-public addresses,
    /// instead of the allowlist. Never the default; needs `networkEnabled`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub network_open: bool,
    /// Extra domain patterns allowed on top of the baseline (SPEC E4).
    pub egress_allowlist: Vec<String>,
    /// Working directory inside the sandbox; each exec may override it.
    pub guest_workdir: Option<PathBuf>,
    /// Chat keeps binds writable; the other modes are read-only (SPEC F2).
    pub mode: SandboxMode,
    /// Never writable inside the sandbox, in any mode (SPEC F3).
    pub protected_paths: Vec<PathBuf>,
    /// Writable in every mode (SPEC F4).
    pub runner_state_dirs: Vec<PathBuf>,
    /// Re-open the exec block on writable dirs on macOS; ignored on Linux (SPEC F5).
    pub exec_grant_roots: Vec<PathBuf>,
    /// Filename globs no command may create or write, relative to each
    /// writable root and `$HOME` (see [`crate::write_deny`]). The host sets
    /// them from its dispatch policy; a backend that cannot enforce them at
    /// creation time does not list `fs.deny-glob-on-create` and is refused.
    pub write_deny_globs: Vec<String>,
    /// The session's egress proxies (SPEC E1, E2), for backends listing
    /// `net.proxy-only`. Set by the host, never taken from a user's spec.
    pub egress: Option<EgressEndpoints>,
    /// Resource limits this spec asks for (SPEC G6). A limit set here is a
    /// requirement: a backend that cannot enforce it refuses the spec. What
    /// is left unset comes from the backend's configured defaults, which it
    /// reports in the handle's `details` as enforced or not.
    pub limits: SandboxLimits,
    /// Set by the host, never taken from a user's spec: each bind's and
    /// runner state dir's host path, as written, with the symlink-resolved
    /// spelling the host's path rules checked (SPEC G5). A backend mounts
    /// the object found there and nothing else: a path that resolves
    /// elsewhere by launch time is refused, not followed.
    pub checked_host_paths: BTreeMap<PathBuf, PathBuf>,
    /// Host paths of unix sockets below a bind that commands may connect
    /// to (SPEC G5). Any other pathname socket not made inside the sandbox
    /// — a host service's (Docker, D-Bus, X11, an agent) — is refused at
    /// `connect` with a violation naming it.
    pub unix_sockets: Vec<PathBuf>,
}

/// Resource limits of one sandbox, all its processes together (SPEC G6).
/// `None` leaves a limit to the backend's configured default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SandboxLimits {
    /// Memory, page cache and tmpfs contents included; exceeding it ends
    /// the command that allocated with `killed` reason `oom`.
    pub memory_bytes: Option<u64>,
    /// Processes and threads, the sandbox's own included.
    pub tasks: Option<u64>,
    /// CPU time in thousandths of one CPU: 500 is half a CPU, 2000 two.
    pub cpu_millis: Option<u64>,
    /// The size of each writable tmpfs (`/tmp`, `/var/tmp`, a private
    /// `$HOME`, `/dev/shm`).
    pub tmpfs_bytes: Option<u64>,
}

impl SandboxLimits {
    /// Whether the spec asks for any limit at all.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// Each limit from `self`, else from `defaults`.
    pub fn or(self, defaults: SandboxLimits) -> SandboxLimits {
        SandboxLimits {
            memory_bytes: self.memory_bytes.or(defaults.memory_bytes),
            tasks: self.tasks.or(defaults.tasks),
            cpu_millis: self.cpu_millis.or(defaults.cpu_millis),
            tmpfs_bytes: self.tmpfs_bytes.or(defaults.tmpfs_bytes),
        }
    }
}

/// Where a session's egress proxies listen on the host: the backend makes
/// them the sandbox's only way out (SPEC E2).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct EgressEndpoints {
    /// A unix socket speaking the HTTP proxy protocol (CONNECT and
    /// absolute-form requests).
    pub http_socket: PathBuf,
    /// A unix socket speaking SOCKS5 and SOCKS4a.
    pub socks_socket: PathBuf,
    /// A `known_hosts` file ssh inside the sandbox trusts (git over ssh goes
    /// through the SOCKS proxy; `~/.ssh` is masked).
    pub ssh_known_hosts: Option<PathBuf>,
    /// A unix socket for the backend's own in-sandbox forwarder: the backend
    /// connects to it on the host and passes the connection down as the
    /// forwarder's channel, whose connections the proxy hands their
    /// upstream socket once decided (SCM_RIGHTS) instead of relaying them.
    /// Never bind it into a sandbox: whoever holds a channel can be handed
    /// host sockets.
    pub forwarder_socket: Option<PathBuf>,
}

fn default_true() -> bool {
    true
}

impl Default for SandboxSpec {
    /// The seeds' defaults: network on, chat mode, every list empty.
    fn default() -> Self {
        Self {
            session_id: String::new(),
            workspace_id: String::new(),
            agent_id: None,
            conversation_id: None,
            bind_mounts: Vec::new(),
            network_enabled: true,
            network_open: false,
            egress_allowlist: Vec::new(),
            guest_workdir: None,
            mode: SandboxMode::Chat,
            protected_paths: Vec::new(),
            runner_state_dirs: Vec::new(),
            exec_grant_roots: Vec::new(),
            write_deny_globs: Vec::new(),
            egress: None,
            limits: SandboxLimits::default(),
            checked_host_paths: BTreeMap::new(),
            unix_sockets: Vec::new(),
        }
    }
}

impl SandboxSpec {
    /// Whether the bind mounts of this spec are writable (SPEC F2).
    pub fn binds_writable(&self) -> bool {
        !self.mode.is_read_only()
    }
}

/// One host path made visible inside the sandbox (SPEC F7).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SandboxBindMount {
    /// The path on the host.
    pub host_path: PathBuf,
    /// Where it appears inside; `None` means the same path (native backends).
    pub guest_path: Option<PathBuf>,
    /// Read-only even in a writable mode.
    pub read_only: bool,
}

impl SandboxBindMount {
    /// The path inside the sandbox: `guest_path`, or the host path.
    pub fn guest_path(&self) -> &std::path::Path {
        self.guest_path.as_deref().unwrap_or(&self.host_path)
    }
}

/// The agent's mode; decides whether binds are writable (SPEC F2).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum SandboxMode {
    /// The default: binds writable.
    #[default]
    Chat,
    /// Read-only.
    Review,
    /// Read-only.
    Plan,
    /// Read-only.
    Orchestrate,
}

impl SandboxMode {
    /// Every mode, in the order the seeds list them.
    pub const ALL: [SandboxMode; 4] = [Self::Chat, Self::Review, Self::Plan, Self::Orchestrate];

    /// `review`, `plan` and `orchestrate` keep every bind read-only.
    pub fn is_read_only(self) -> bool {
        !matches!(self, Self::Chat)
    }

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Chat => "chat",
            Self::Review => "review",
            Self::Plan => "plan",
            Self::Orchestrate => "orchestrate",
        }
    }
}

impl fmt::Display for SandboxMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for SandboxMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| {
                format!("unknown mode `{s}`; expected one of chat, review, plan, orchestrate")
            })
    }
}

/// The kind of isolation a session has, as reported to clients (SPEC B6, B8).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum SandboxBackend {
    /// The platform's own sandbox: bubblewrap on Linux, Seatbelt on macOS.
    Native,
    /// No sandbox: the process runs on the host.
    #[default]
    None,
    /// A virtual machine: the only kind with a kernel boundary.
    Microvm,
}

impl SandboxBackend {
    /// Parses a stored value (SPEC B6): `None` or an unknown name is `none`,
    /// and the retired `"docker"` means `native`.
    pub fn from_name(name: Option<&str>) -> Self {
        match name {
            Some("native" | "docker") => Self::Native,
            Some("microvm") => Self::Microvm,
            _ => Self::None,
        }
    }

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Native => "native",
            Self::None => "none",
            Self::Microvm => "microvm",
        }
    }
}

impl fmt::Display for SandboxBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The life of a sandbox (SPEC F9).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum SandboxState {
    /// Accepted, not started yet.
    #[default]
    Created,
    /// Running and ready to exec.
    Warm,
    /// Executing at least one command.
    Active,
    /// Paused or checkpointed to save memory.
    Suspended,
    /// Gone; nothing of it is left on the host.
    Destroyed,
    /// Failed; `error` says why.
    Error,
}

impl SandboxState {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Created => "created",
            Self::Warm => "warm",
            Self::Active => "active",
            Self::Suspended => "suspended",
            Self::Destroyed => "destroyed",
            Self::Error => "error",
        }
    }
}

impl fmt::Display for SandboxState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the host reports about a sandbox to its client (SPEC F8).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SandboxHandle {
    /// The session (and sandbox) id.
    pub session_id: String,
    /// The kind of isolation really in place (SPEC B8): the client's badge.
    pub backend: SandboxBackend,
    /// The name of the backend really running it (`bwrap`, `none`, …).
    pub backend_name: String,
    /// The backend's own description of what it enforces.
    pub note: String,
    /// Whether a kernel boundary separates the sandbox from the host.
    pub kernel_boundary: bool,
    /// Where the sandbox is in its life.
    pub state: SandboxState,
    /// Why, when `state` is `error`.
    pub error: Option<String>,
    /// Backend bookkeeping: workdir, PID, profile path, …
    pub details: serde_json::Map<String, serde_json::Value>,
}

/// What a backend says about itself on this host (SPEC B2).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ProbeReport {
    /// Whether the backend can run sandboxes here, now.
    pub available: bool,
    /// Unavailable only because something must be installed.
    pub requires_install: bool,
    /// What the backend enforces, for the startup line and the badge.
    pub note: String,
    /// What to do when unavailable (packages to install, the failing check).
    pub hint: String,
    /// Whether a kernel boundary separates sandbox and host (only microVMs).
    pub kernel_boundary: bool,
    /// Which kind of isolation this backend is reported as.
    pub kind: SandboxBackend,
    /// What the backend can enforce; see [`capability`].
    pub capabilities: Vec<String>,
    /// Which checks of this probe were not run now but taken from an
    /// earlier probe of this boot, and where that is kept — or that they
    /// ran now and why nothing was kept. Empty: the backend keeps nothing.
    pub kept: String,
}

impl ProbeReport {
    /// An unavailable report with a reason.
    pub fn unavailable(note: impl Into<String>, hint: impl Into<String>) -> Self {
        Self {
            available: false,
            note: note.into(),
            hint: hint.into(),
            ..Self::default()
        }
    }

    /// Whether the backend lists a capability.
    pub fn has(&self, capability: &str) -> bool {
        self.capabilities.iter().any(|c| c == capability)
    }
}

/// Capability names a backend lists in [`ProbeReport::capabilities`]. The host
/// refuses work that needs one the backend does not list (SPEC C3: fail closed).
pub mod capability {
    /// `write_stdin` / `close_stdin` work.
    pub const STDIN: &str = "stdin";
    /// Execs may ask for a pseudo-terminal, and the sandbox answers
    /// [`super::calls::RESIZE`].
    pub const PTY: &str = "pty";
    /// `suspend` / `resume` work (SPEC G3).
    pub const SUSPEND: &str = "suspend";
    /// Per-exec timeouts end in a `killed` event with reason `timeout`.
    pub const EXEC_TIMEOUT: &str = "exec.timeout";
    /// Only bound paths are visible; binds follow the spec's modes.
    pub const FS_ISOLATION: &str = "fs.isolation";
    /// Filename-glob write denies are enforced when a name is created (SPEC G1).
    pub const FS_DENY_GLOB_ON_CREATE: &str = "fs.deny-glob-on-create";
    /// The session's proxies are the only way out (SPEC E2): the backend
    /// takes `spec.egress` and routes the sandbox's traffic through it.
    pub const NET_PROXY_ONLY: &str = "net.proxy-only";
    /// The backend honours [`super::ExecRequest::host_fds`]: it copies
    /// between descriptors of the host process and the command's own pipes
    /// at pipe speed (SPEC F10). Only in-process plugins can announce it.
    pub const HOST_FDS: &str = "exec.host-fds";
}

/// Names of the optional sandbox `call`s (SPEC A3), each behind the
/// capability that says a backend answers it.
pub mod calls {
    /// With [`super::capability::PTY`]: a new size for an exec's terminal;
    /// the JSON is a [`super::ResizeRequest`], the answer empty.
    pub const RESIZE: &str = "resize";
}

/// The body of [`calls::RESIZE`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ResizeRequest {
    /// The exec, started with a terminal.
    pub exec_id: u64,
    /// Columns (at least 1).
    pub cols: u16,
    /// Rows (at least 1).
    pub rows: u16,
}

/// What the host tells a backend when probing it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ProbeContext {
    /// `std::env::consts::OS` of the host.
    pub os: String,
    /// The host's plugin-api version.
    pub host_api_version: String,
    /// The backend's section of the server config (`[backends.<name>]`), if any.
    pub options: serde_json::Value,
    /// Drop what earlier probes kept and run every check now
    /// (`cc_server probe --fresh`).
    pub fresh: bool,
}

/// One command to run in a sandbox.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ExecRequest {
    /// Program and arguments; `argv[0]` is looked up in `PATH`.
    pub argv: Vec<String>,
    /// The complete environment of the process. The host computes it
    /// (sanitized, SPEC H5); backends add nothing of their own.
    pub env: BTreeMap<String, String>,
    /// Working directory; `None` means the spec's `guestWorkdir`.
    pub cwd: Option<PathBuf>,
    /// Keep stdin open for `write_stdin`; otherwise it reads as empty.
    pub stdin: bool,
    /// Kill the command after this long (`killed`, reason `timeout`).
    pub timeout_ms: Option<u64>,
    /// Run under a pseudo-terminal of this size (needs [`capability::PTY`]).
    pub pty: Option<PtySize>,
    /// Descriptors of the host process to copy the command's stdin from and
    /// its stdout to, instead of `write_stdin` and `stdout` events (needs
    /// [`capability::HOST_FDS`]; the host sets it only then). Left out of
    /// the JSON when `None`, so backends that do not know it see nothing new.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_fds: Option<HostFds>,
}

/// Host-process descriptors for one exec ([`ExecRequest::host_fds`]).
///
/// The backend duplicates them before `exec` returns (the host may close
/// its own afterwards) and copies on a thread of its own, in the host
/// process. They never enter the sandbox: the command keeps its own pipes,
/// so it cannot `fchmod` a host file behind its stdout or inject input into
/// a host terminal.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HostFds {
    /// Copied into the command's stdin until end of file, then its stdin
    /// closes; `write_stdin` is refused for the exec.
    pub stdin: Option<i32>,
    /// The command's stdout is written here, and no `stdout` events come.
    /// Once it refuses bytes (its reader left) the command's pipe is closed:
    /// the command gets what a pipe would give it (SIGPIPE).
    pub stdout: Option<i32>,
}

/// A terminal size.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct PtySize {
    /// Columns.
    pub cols: u16,
    /// Rows.
    pub rows: u16,
}

/// The live state of a sandbox as the backend sees it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SandboxInfo {
    /// Where the sandbox is in its life.
    pub state: SandboxState,
    /// Why, when `state` is `error`.
    pub error: Option<String>,
    /// Backend bookkeeping: workdir, PID, profile path, …
    pub details: serde_json::Map<String, serde_json::Value>,
}

/// Something the sandbox refused (SPEC F11).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SandboxViolation {
    /// What was attempted, e.g. `file-write-create`, `network-outbound`.
    pub action: String,
    /// The path or `host:port`.
    pub target: String,
    /// The raw log line it came from, when there is one.
    pub raw: Option<String>,
}

/// Why a command was killed by the sandbox rather than ending on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KillReason {
    /// Its `timeoutMs` ran out.
    Timeout,
    /// Someone asked: `kill`.
    Manual,
    /// It ran out of memory.
    Oom,
    /// Its sandbox was destroyed under it.
    Destroyed,
    /// A reason this version does not know.
    #[serde(other)]
    Other,
}

impl KillReason {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Timeout => "timeout",
            Self::Manual => "manual",
            Self::Oom => "oom",
            Self::Destroyed => "destroyed",
            Self::Other => "other",
        }
    }
}

/// One event on a sandbox's stream (SPEC F10).
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// The exec it belongs to; 0 for the sandbox as a whole.
    pub exec_id: u64,
    /// What happened.
    pub body: EventBody,
}

/// What happened (SPEC F10).
#[derive(Debug, Clone, PartialEq)]
pub enum EventBody {
    /// The sandbox is being started.
    Starting,
    /// The sandbox is ready to exec.
    Ready,
    /// Output on stdout.
    Stdout(Vec<u8>),
    /// Output on stderr.
    Stderr(Vec<u8>),
    /// The command ended on its own. Last event of its exec.
    Exit {
        /// Its exit code; 128 + signal when a signal ended it.
        code: i32,
        /// The signal that ended it, if one did.
        signal: Option<i32>,
    },
    /// The sandbox killed the command. Last event of its exec.
    Killed {
        /// Why.
        reason: KillReason,
        /// The signal used, if any.
        signal: Option<i32>,
    },
    /// Something was refused.
    Violation(SandboxViolation),
    /// The sandbox changed state.
    State(SandboxState),
}

impl EventBody {
    /// Whether this event ends its exec.
    pub fn is_terminal(&self) -> bool {
        matches!(self, Self::Exit { .. } | Self::Killed { .. })
    }

    /// The wire name of the event type.
    pub fn type_name(&self) -> &'static str {
        match self {
            Self::Starting => "starting",
            Self::Ready => "ready",
            Self::Stdout(_) => "stdout",
            Self::Stderr(_) => "stderr",
            Self::Exit { .. } => "exit",
            Self::Killed { .. } => "killed",
            Self::Violation(_) => "violation",
            Self::State(_) => "state",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request without host descriptors is the JSON every backend knew
    /// before `exec.host-fds`; one with them round-trips.
    #[test]
    fn host_fds_are_left_out_unless_given() {
        let plain = serde_json::to_value(ExecRequest::default()).unwrap();
        assert!(plain.get("hostFds").is_none(), "{plain}");
        let request = ExecRequest {
            host_fds: Some(HostFds {
                stdin: None,
                stdout: Some(1),
            }),
            ..ExecRequest::default()
        };
        let json = serde_json::to_string(&request).unwrap();
        assert!(
            json.contains(r#""hostFds":{"stdin":null,"stdout":1}"#),
            "{json}"
        );
        assert_eq!(serde_json::from_str::<ExecRequest>(&json).unwrap(), request);
    }

    #[test]
    fn spec_defaults_follow_the_seeds() {
        let spec: SandboxSpec =
            serde_json::from_str(r#"{"sessionId":"s","workspaceId":"w"}"#).unwrap();
        assert!(spec.network_enabled, "F1: networkEnabled defaults to true");
        assert_eq!(spec.mode, SandboxMode::Chat, "F1: mode defaults to chat");
        assert!(spec.egress_allowlist.is_empty() && spec.protected_paths.is_empty());
        assert!(spec.runner_state_dirs.is_empty() && spec.exec_grant_roots.is_empty());
        assert_eq!(spec.agent_id, None);
        assert_eq!(spec.guest_workdir, None);
        assert_eq!(
            spec,
            SandboxSpec {
                session_id: "s".into(),
                workspace_id: "w".into(),
                ..SandboxSpec::default()
            }
        );
    }

    /// G6: limits are optional camelCase fields; a spec without them (an
    /// older host's) asks for none.
    #[test]
    fn spec_limits_are_camel_case_and_optional() {
        let json = r#"{"limits": {"memoryBytes": 1048576, "tasks": 10, "cpuMillis": 500, "tmpfsBytes": 4096}}"#;
        let spec: SandboxSpec = serde_json::from_str(json).unwrap();
        assert_eq!(
            spec.limits,
            SandboxLimits {
                memory_bytes: Some(1 << 20),
                tasks: Some(10),
                cpu_millis: Some(500),
                tmpfs_bytes: Some(4096),
            }
        );
        let old: SandboxSpec = serde_json::from_str("{}").unwrap();
        assert!(old.limits.is_empty());
        let merged = SandboxLimits {
            tasks: Some(3),
            ..SandboxLimits::default()
        }
        .or(spec.limits);
        assert_eq!(
            (merged.tasks, merged.memory_bytes),
            (Some(3), Some(1 << 20))
        );
    }

    #[test]
    fn spec_uses_the_seeds_camel_case_names() {
        let json = r#"{
            "sessionId": "s1", "workspaceId": "w1", "agentId": "a1",
            "bindMounts": [{"hostPath": "/h", "guestPath": "/g", "readOnly": true}],
            "networkEnabled": false, "egressAllowlist": ["*.example.com"],
            "guestWorkdir": "/g", "mode": "review", "protectedPaths": ["/p"],
            "runnerStateDirs": ["/r"], "execGrantRoots": ["/e"]
        }"#;
        let spec: SandboxSpec = serde_json::from_str(json).unwrap();
        assert_eq!(spec.agent_id.as_deref(), Some("a1"));
        assert_eq!(spec.bind_mounts[0].guest_path(), std::path::Path::new("/g"));
        assert!(spec.bind_mounts[0].read_only);
        assert!(!spec.network_enabled);
        assert_eq!(spec.mode, SandboxMode::Review);
        assert!(!spec.binds_writable(), "F2: review is read-only");
        let back = serde_json::to_value(&spec).unwrap();
        for key in [
            "sessionId",
            "workspaceId",
            "agentId",
            "bindMounts",
            "networkEnabled",
            "egressAllowlist",
            "guestWorkdir",
            "mode",
            "protectedPaths",
            "runnerStateDirs",
            "execGrantRoots",
        ] {
            assert!(back.get(key).is_some(), "{key} missing from {back}");
        }
    }

    #[test]
    fn unknown_fields_are_tolerated_across_the_boundary() {
        let spec: SandboxSpec =
            serde_json::from_str(r#"{"sessionId":"s","fromTheFuture":{"x":1}}"#).unwrap();
        assert_eq!(spec.session_id, "s");
        let report: ProbeReport =
            serde_json::from_str(r#"{"available":true,"newField":3}"#).unwrap();
        assert!(report.available);
    }

    #[test]
    fn guest_path_defaults_to_host_path() {
        let bind = SandboxBindMount {
            host_path: "/work".into(),
            ..Default::default()
        };
        assert_eq!(bind.guest_path(), std::path::Path::new("/work"));
    }

    #[test]
    fn only_chat_mode_is_writable() {
        for mode in SandboxMode::ALL {
            assert_eq!(mode.is_read_only(), mode != SandboxMode::Chat, "{mode}");
            assert_eq!(mode.as_str().parse::<SandboxMode>(), Ok(mode));
        }
        let err = "write".parse::<SandboxMode>().unwrap_err();
        assert!(err.contains("chat, review, plan, orchestrate"), "{err}");
    }

    #[test]
    fn backend_from_name_follows_b6() {
        assert_eq!(SandboxBackend::from_name(None), SandboxBackend::None);
        assert_eq!(
            SandboxBackend::from_name(Some("bogus")),
            SandboxBackend::None
        );
        assert_eq!(
            SandboxBackend::from_name(Some("docker")),
            SandboxBackend::Native
        );
        assert_eq!(
            SandboxBackend::from_name(Some("native")),
            SandboxBackend::Native
        );
        assert_eq!(
            SandboxBackend::from_name(Some("microvm")),
            SandboxBackend::Microvm
        );
        assert_eq!(
            SandboxBackend::from_name(Some("none")),
            SandboxBackend::None
        );
    }

    #[test]
    fn unknown_kill_reason_is_tolerated() {
        let r: KillReason = serde_json::from_str(r#""cosmic-ray""#).unwrap();
        assert_eq!(r, KillReason::Other);
    }
}
