//! The server config: a TOML file, overridden by environment variables,
//! overridden by flags. Unknown keys are errors: a typo in a security setting
//! must not pass silently.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use sandbox_registry::select::SandboxSwitch;
use sandbox_runtime::StartOptions;
use serde::Deserialize;

use crate::cli::{Command, Common};
use sandbox_runtime::command_policy::{OFF_NOTICE, PolicySettings, approvals};
use sandbox_runtime::dispatch_policy::DispatchPolicy;
use sandbox_runtime::egress::{EgressError, EgressSettings};

mod api;

use api::resolve_api;
pub use api::{ApiSection, ApiSettings, ConnectionSettings};

/// The default listen port, on loopback only.
pub const DEFAULT_PORT: u16 = 7878;

// `[gateway]` and `[gateway.app]`, and mounting the gateway.
mod gateway;
pub use gateway::{GatewaySection, GatewaySettings};
use gateway::{gateway_secret_files, resolve_gateway};

/// The config file's contents.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// `on` or `off`.
    pub sandbox: Option<String>,
    /// The backend sessions use when they name none (a preference, stepped
    /// down from when unavailable).
    pub backend: Option<String>,
    /// Where backend libraries are loaded from.
    pub plugins_dir: Option<PathBuf>,
    /// The API's listen address.
    pub listen: Option<SocketAddr>,
    /// The bearer token file.
    pub token_file: Option<PathBuf>,
    /// How long one backend probe may take at start-up.
    pub probe_timeout_secs: Option<f64>,
    /// Per-backend options, passed to each backend's probe.
    #[serde(default)]
    pub backends: BTreeMap<String, toml::Value>,
    /// The dispatch policy (SPEC C3).
    pub dispatch_policy: Option<DispatchPolicySection>,
    /// The command policy (SPEC H3, H4, H6).
    pub policy: Option<PolicySection>,
    /// The egress proxies (SPEC E1–E5).
    pub egress: Option<EgressSection>,
    /// The HTTP API's request rules and what specs may bind.
    pub api: Option<ApiSection>,
    /// What the server holds of commands' output for their clients.
    pub output: Option<OutputSection>,
    /// Where workspaces keep their state and conversations (SPEC H1).
    pub workspaces: Option<WorkspacesSection>,
    /// The push gateway (SPEC H8).
    pub gateway: Option<GatewaySection>,
    /// What agent adapters get from the server (the brokered API key).
    pub agents: Option<crate::key_broker::AgentsSection>,
}

/// `[workspaces]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkspacesSection {
    /// The state directory (the database); default
    /// `$XDG_STATE_HOME/cc_server`, else `~/.local/state/cc_server`.
    pub state_dir: Option<PathBuf>,
    /// The data directory (conversations' clones, agents' dirs); default
    /// `$XDG_DATA_HOME/cc_server`, else `~/.local/share/cc_server`. It must
    /// be able to share extents with the registered checkouts.
    pub data_dir: Option<PathBuf>,
}

/// `[output]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputSection {
    /// MiB of output all exec streams together may hold for clients that
    /// have not read it yet; past it, commands wait (their pipes fill).
    pub budget_mib: Option<u64>,
}

/// `[output]`, checked.
#[derive(Debug, Clone)]
pub struct OutputSettings {
    pub budget_bytes: usize,
}

impl Default for OutputSettings {
    fn default() -> Self {
        Self {
            budget_bytes: sandbox_runtime::sessions::budget::DEFAULT_BYTES,
        }
    }
}

/// `[egress]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EgressSection {
    /// Domain patterns allowed on top of the baseline and GitHub lists.
    #[serde(default)]
    pub allow: Vec<String>,
    /// Allowed patterns whose names may resolve to private addresses.
    #[serde(default)]
    pub allow_private: Vec<String>,
    /// Resolver overrides, `HOST:ADDR`.
    #[serde(default)]
    pub resolve: Vec<String>,
    /// `known_hosts` lines for git over ssh inside sandboxes.
    #[serde(default)]
    pub ssh_known_hosts: Vec<String>,
    /// Open connections through one session's proxies at most.
    pub max_connections: Option<usize>,
}

/// `[policy]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicySection {
    /// `false` turns command classification off (logged at every start).
    pub enforce: Option<bool>,
    /// The guardrails file (TOML `[[rule]]`s); relative to the config file.
    pub guardrails: Option<PathBuf>,
    /// How long a prompt waits for an owner's answer before it is a deny.
    pub approval_timeout_secs: Option<f64>,
}

/// `[dispatch_policy]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DispatchPolicySection {
    /// Filename globs no sandboxed command may create; `[]` lowers the policy.
    pub write_deny_globs: Option<Vec<String>>,
}

/// The flags of one command that override the config file (the flags every
/// command takes are in [`Common`]).
#[derive(Debug, Clone, Default)]
pub struct CommandFlags {
    /// `serve --listen`.
    pub listen: Option<SocketAddr>,
    /// `serve --token-file`.
    pub token_file: Option<PathBuf>,
    /// `run --allow-domain`.
    pub allow_domains: Vec<String>,
    /// `run --allow-private`.
    pub allow_private: Vec<String>,
    /// `run --resolve`, unparsed.
    pub resolve: Vec<String>,
}

impl CommandFlags {
    pub fn of(command: &Command) -> Self {
        match command {
            Command::Serve(args) => Self {
                listen: args.listen,
                token_file: args.token_file.clone(),
                ..Self::default()
            },
            Command::Run(crate::cli::RunArgs { sandbox, .. })
            | Command::Shell(crate::cli::ShellArgs { sandbox, .. })
            | Command::Mcp(crate::cli::McpArgs { sandbox })
            | Command::Sandboxd(crate::cli::SandboxdArgs { sandbox, .. }) => Self {
                allow_domains: sandbox.allow_domains.clone(),
                allow_private: sandbox.allow_private.clone(),
                resolve: sandbox.resolve.clone(),
                ..Self::default()
            },
            Command::Probe { .. }
            | Command::Policy(_)
            | Command::Agent(_)
            | Command::Workspace(_)
            | Command::Conversation(_) => Self::default(),
        }
    }
}

/// The settings every command uses: flags, environment and file merged, here
/// and nowhere else.
#[derive(Debug, Clone)]
pub struct Settings {
    pub switch: SandboxSwitch,
    pub default_backend: Option<String>,
    pub plugins_dir: Option<PathBuf>,
    pub probe_timeout: Duration,
    pub backend_options: BTreeMap<String, serde_json::Value>,
    pub dispatch: DispatchPolicy,
    pub policy: PolicySettings,
    pub egress: EgressSettings,
    /// The API's listen address.
    pub listen: SocketAddr,
    /// The bearer token file: the one given, else the default
    /// ([`default_token_path`]); `None` only when neither `XDG_STATE_HOME`
    /// nor `HOME` is set.
    pub token_file: Option<PathBuf>,
    /// The config file, when one was given.
    pub config_file: Option<PathBuf>,
    /// `[api]`.
    pub api: ApiSettings,
    /// `[output]`.
    pub output: OutputSettings,
    /// `[workspaces] state_dir`, or its default; `None` without `HOME`.
    pub state_dir: Option<PathBuf>,
    /// `[workspaces] data_dir`, or its default; `None` without `HOME`.
    pub data_dir: Option<PathBuf>,
    /// `[gateway]`, its token read, and the push URL prefixes sent there.
    pub gateway: Option<GatewaySettings>,
    /// `[agents.claude]`, its key file read.
    pub claude: crate::key_broker::ClaudeSettings,
}

/// `$XDG_STATE_HOME/cc_server/token`, else `~/.local/state/cc_server/token`.
pub fn default_token_path() -> Option<PathBuf> {
    if let Some(state) = std::env::var_os("XDG_STATE_HOME").filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(state).join("cc_server/token"));
    }
    let home = std::env::var_os("HOME").filter(|v| !v.is_empty())?;
    Some(PathBuf::from(home).join(".local/state/cc_server/token"))
}

/// A config problem, naming the file and the fix.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read the config file {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the config file {path} is not valid: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("cannot read the guardrails file {path} (set by [policy] guardrails in the config)")]
    ReadGuardrails {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the guardrails file {path} is not valid: {message}")]
    Guardrails { path: PathBuf, message: String },
    /// A flag's value (`--resolve`); the text names the flag.
    #[error("--{0}")]
    Flag(EgressError),
    /// An egress pattern given by a flag (`--allow-domain`).
    #[error(transparent)]
    Pattern(#[from] sandbox_egress::policy::PatternError),
}

impl FileConfig {
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        toml::from_str(&text).map_err(|e| ConfigError::Parse {
            path: path.to_path_buf(),
            message: e.to_string().trim().replace('\n', " "),
        })
    }
}

impl Settings {
    pub fn resolve(common: &Common, flags: &CommandFlags) -> Result<Self, ConfigError> {
        let file = match &common.config {
            Some(path) => FileConfig::load(path)?,
            None => FileConfig::default(),
        };
        let config_path = common.config.clone().unwrap_or_default();
        let switch = match (common.sandbox, &file.sandbox) {
            (Some(switch), _) => switch,
            (None, Some(text)) => text.parse().map_err(|message| ConfigError::Parse {
                path: config_path.clone(),
                message: format!("sandbox: {message}"),
            })?,
            (None, None) => SandboxSwitch::On,
        };
        let probe_timeout = file.probe_timeout_secs.unwrap_or(10.0);
        if !(probe_timeout.is_finite() && probe_timeout > 0.0) {
            return Err(ConfigError::Parse {
                path: config_path,
                message: "probe_timeout_secs must be a positive number of seconds".into(),
            });
        }
        let backend_options = file
            .backends
            .iter()
            .filter_map(|(name, value)| serde_json::to_value(value).ok().map(|v| (name.clone(), v)))
            .collect();
        let dispatch = match file
            .dispatch_policy
            .as_ref()
            .and_then(|d| d.write_deny_globs.clone())
        {
            Some(globs) => DispatchPolicy {
                write_deny_globs: globs,
                set_by: common.config.clone(),
            },
            None => DispatchPolicy::default(),
        };
        let mut policy = resolve_policy(file.policy.as_ref(), common.config.as_deref())?;
        if file.gateway.is_some() {
            policy.guardrails = policy.guardrails.with_push_gateway();
        }
        let mut egress =
            resolve_egress(file.egress.as_ref()).map_err(|message| ConfigError::Parse {
                path: config_path.clone(),
                message,
            })?;
        add_egress_flags(&mut egress, flags)?;
        let api = resolve_api(file.api.as_ref()).map_err(|message| ConfigError::Parse {
            path: config_path.clone(),
            message,
        })?;
        let output =
            resolve_output(file.output.as_ref()).map_err(|message| ConfigError::Parse {
                path: config_path.clone(),
                message,
            })?;
        let section = file.workspaces.clone().unwrap_or_default();
        for (key, dir) in [
            ("state_dir", &section.state_dir),
            ("data_dir", &section.data_dir),
        ] {
            if dir.as_ref().is_some_and(|d| !d.is_absolute()) {
                return Err(ConfigError::Parse {
                    path: config_path,
                    message: format!("[workspaces] {key} must be an absolute path"),
                });
            }
        }
        let home = std::env::var_os("HOME").filter(|h| !h.is_empty());
        let state_dir = section.state_dir.or_else(|| {
            sandbox_workspaces::dirs::default_state_dir(
                std::env::var_os("XDG_STATE_HOME").as_deref(),
                home.as_deref(),
            )
        });
        let data_dir = section.data_dir.or_else(|| {
            sandbox_workspaces::dirs::default_data_dir(
                std::env::var_os("XDG_DATA_HOME").as_deref(),
                home.as_deref(),
            )
        });
        let gateway = match &file.gateway {
            Some(section) => {
                let config =
                    resolve_gateway(section, common.config.as_deref()).map_err(|message| {
                        ConfigError::Parse {
                            path: config_path.clone(),
                            message,
                        }
                    })?;
                let urls = section.push_urls.clone().unwrap_or_else(|| {
                    sandbox_gateway::session::GITHUB_PUSH_URLS
                        .iter()
                        .map(|u| (*u).to_owned())
                        .collect()
                });
                let bad = |message: String| ConfigError::Parse {
                    path: config_path.clone(),
                    message,
                };
                let url = section
                    .read_url
                    .clone()
                    .unwrap_or_else(|| "https://github.com".to_owned());
                let read = match (&config.app, &section.read_token_file) {
                    (Some(app), _) => Some(sandbox_gateway::credential::ReadToken {
                        url,
                        source: sandbox_gateway::credential::ReadSource::App(
                            Arc::clone(app),
                            section.repositories.clone(),
                        ),
                    }),
                    (None, Some(file)) => Some(sandbox_gateway::credential::ReadToken {
                        url,
                        source: sandbox_gateway::credential::ReadSource::Fixed(
                            read_private_token(file, common.config.as_deref())
                                .map_err(|m| bad(format!("[gateway] read_token_file: {m}")))?,
                        ),
                    }),
                    (None, None) => None,
                };
                Some(GatewaySettings {
                    config,
                    push_urls: urls,
                    read,
                    secret_files: gateway_secret_files(section, common.config.as_deref()),
                })
            }
            None => None,
        };
        let claude = crate::key_broker::ClaudeSettings::resolve(
            file.agents.as_ref(),
            common.config.as_deref(),
            read_private_token,
        )
        .map_err(|message| ConfigError::Parse {
            path: config_path.clone(),
            message,
        })?;
        let listen = match flags.listen.or(file.listen) {
            Some(addr) => addr,
            None => SocketAddr::from(([127, 0, 0, 1], DEFAULT_PORT)),
        };
        Ok(Self {
            dispatch,
            policy,
            egress,
            switch,
            default_backend: file.backend.clone(),
            plugins_dir: common
                .plugins_dir
                .clone()
                .or_else(|| file.plugins_dir.clone()),
            probe_timeout: Duration::from_secs_f64(probe_timeout),
            backend_options,
            listen,
            token_file: flags
                .token_file
                .clone()
                .or(file.token_file)
                .or_else(default_token_path),
            config_file: common.config.clone(),
            api,
            output,
            state_dir,
            data_dir,
            gateway,
            claude,
        })
    }

    /// What the runtime starts with (`sandbox_runtime::start`).
    pub fn start_options(&self) -> StartOptions {
        StartOptions {
            switch: self.switch,
            default_backend: self.default_backend.clone(),
            plugins_dir: self.plugins_dir.clone(),
            probe_timeout: self.probe_timeout,
            backend_options: self.backend_options.clone(),
            dispatch: self.dispatch.clone(),
            policy: self.policy.clone(),
            egress: self.egress.clone(),
            output_budget_bytes: self.output.budget_bytes,
            token_file: self.token_file.clone(),
            secret_files: self
                .gateway
                .as_ref()
                .map(|g| g.secret_files.clone())
                .unwrap_or_default()
                .into_iter()
                .chain(self.claude.secret_file())
                .collect(),
            config_file: self.config_file.clone(),
            bind_roots: self.api.bind_roots.clone(),
            after_destroy: Some(crate::heap::give_back),
            workspaces: None,
            state_dir: self.state_dir.clone(),
            data_dir: self.data_dir.clone(),
        }
    }

    /// The workspaces layer (SPEC H1): made when `create`, else only if a
    /// database exists (nothing was ever registered otherwise). `None`
    /// without a state directory.
    pub fn workspaces(
        &self,
        create: bool,
    ) -> Result<
        Option<std::sync::Arc<sandbox_workspaces::Workspaces>>,
        sandbox_workspaces::WorkspaceError,
    > {
        let (Some(state_dir), Some(data_dir)) = (&self.state_dir, &self.data_dir) else {
            return Ok(None);
        };
        let settings = sandbox_workspaces::Settings {
            state_dir: state_dir.clone(),
            data_dir: data_dir.clone(),
            home: std::env::var_os("HOME")
                .filter(|h| !h.is_empty())
                .map(PathBuf::from),
            write_deny_globs: self.dispatch.write_deny_globs.clone(),
        };
        Ok(sandbox_workspaces::Workspaces::open(settings, create)?.map(std::sync::Arc::new))
    }

    /// What the runtime starts with, the workspaces layer installed.
    pub fn start_options_with(
        &self,
        layer: Option<&std::sync::Arc<sandbox_workspaces::Workspaces>>,
    ) -> StartOptions {
        let mut options = self.start_options();
        options.workspaces = layer.map(|l| {
            sandbox_runtime::layout::Layer(std::sync::Arc::new(sandbox_workspaces::Layer(
                std::sync::Arc::clone(l),
            )))
        });
        options
    }

    /// The lines every start that loads backends logs: a lowered dispatch
    /// policy, the command policy off, the guardrails in force.
    pub fn log_notices(&self) {
        if let Some(notice) = self.dispatch.lowered_notice() {
            tracing::warn!("{notice}");
        }
        if !self.policy.enforce {
            tracing::warn!("{}", OFF_NOTICE);
        }
        if let Some(file) = &self.policy.guardrails_file {
            tracing::info!(
                "guardrails: {} rule(s) from {}",
                self.policy.guardrails.len(),
                file.display()
            );
        }
    }
}

/// `run`'s egress flags on top of the config's, checked (a bad pattern stops
/// the run before anything starts).
fn add_egress_flags(egress: &mut EgressSettings, flags: &CommandFlags) -> Result<(), ConfigError> {
    if flags.allow_domains.is_empty() && flags.allow_private.is_empty() && flags.resolve.is_empty()
    {
        return Ok(());
    }
    egress.allow.extend(flags.allow_domains.iter().cloned());
    egress
        .allow_private
        .extend(flags.allow_private.iter().cloned());
    for text in &flags.resolve {
        let pair = sandbox_runtime::egress::parse_resolve(text).map_err(ConfigError::Flag)?;
        egress.resolve.push(pair);
    }
    egress.check()?;
    Ok(())
}

/// `[egress]`, checked now: a bad pattern stops the start.
/// A token file (relative to the config file): the owner's alone (no
/// group or other bits), not empty; the token is opaque, of any length.
fn read_private_token(file: &Path, config: Option<&Path>) -> Result<String, String> {
    use std::os::unix::fs::MetadataExt;
    let path = beside_config(file, config);
    if let Some(problem) = sandbox_paths::system::credential_in_system_view(&path) {
        return Err(problem);
    }
    let meta = std::fs::metadata(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    if meta.mode() & 0o077 != 0 {
        return Err(format!(
            "{} is readable by others (mode {:o}); chmod 600 it",
            path.display(),
            meta.mode() & 0o777
        ));
    }
    let token = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let token = token.trim();
    if token.is_empty() {
        return Err(format!("{} is empty", path.display()));
    }
    Ok(token.to_owned())
}

/// A path of the config, relative to the config file's directory.
fn beside_config(file: &Path, config: Option<&Path>) -> PathBuf {
    match config.and_then(Path::parent) {
        Some(dir) if file.is_relative() => dir.join(file),
        _ => file.to_path_buf(),
    }
}

fn resolve_egress(section: Option<&EgressSection>) -> Result<EgressSettings, String> {
    let Some(section) = section else {
        return Ok(EgressSettings::default());
    };
    let settings = EgressSettings {
        allow: section.allow.clone(),
        allow_private: section.allow_private.clone(),
        resolve: section
            .resolve
            .iter()
            .map(|r| sandbox_runtime::egress::parse_resolve(r))
            .collect::<Result<_, _>>()
            .map_err(|e| format!("[egress] {}", sandbox_plugin_api::error_chain(&e)))?,
        ssh_known_hosts: section.ssh_known_hosts.clone(),
        max_connections: match section.max_connections {
            None => sandbox_egress::server::DEFAULT_MAX_CONNECTIONS,
            Some(0) => {
                return Err("[egress] max_connections must be at least 1".into());
            }
            Some(n) => n,
        },
    };
    settings.check().map_err(|e| format!("[egress] {e}"))?;
    Ok(settings)
}

/// `[output]`, checked now: a budget of 0 would hold every command at its
/// first chunk, and one past 1 TiB is a typo.
fn resolve_output(section: Option<&OutputSection>) -> Result<OutputSettings, String> {
    let Some(mib) = section.and_then(|s| s.budget_mib) else {
        return Ok(OutputSettings::default());
    };
    if !(1..=1 << 20).contains(&mib) {
        return Err(format!(
            "[output] budget_mib: {mib} is not between 1 and 1048576 (MiB of output all exec \
             streams together may hold; default {})",
            sandbox_runtime::sessions::budget::DEFAULT_BYTES >> 20
        ));
    }
    let budget_bytes = usize::try_from(mib << 20).map_err(|_| {
        format!("[output] budget_mib: {mib} MiB does not fit this machine's address space")
    })?;
    Ok(OutputSettings { budget_bytes })
}

/// `[policy]`, with the guardrails file read and checked now: a broken
/// rules file stops the start instead of being skipped.
fn resolve_policy(
    section: Option<&PolicySection>,
    config: Option<&Path>,
) -> Result<PolicySettings, ConfigError> {
    let section = section.cloned().unwrap_or_default();
    let config_path = config.map(Path::to_path_buf).unwrap_or_default();
    let timeout = section
        .approval_timeout_secs
        .unwrap_or(approvals::DEFAULT_TIMEOUT.as_secs_f64());
    if !(timeout.is_finite() && timeout > 0.0) {
        return Err(ConfigError::Parse {
            path: config_path,
            message: "[policy] approval_timeout_secs must be a positive number of seconds".into(),
        });
    }
    let (guardrails, guardrails_file) = match &section.guardrails {
        None => (sandbox_policy::Guardrails::default(), None),
        Some(file) => {
            let path = match config.and_then(Path::parent) {
                Some(dir) if file.is_relative() => dir.join(file),
                _ => file.clone(),
            };
            let text =
                std::fs::read_to_string(&path).map_err(|source| ConfigError::ReadGuardrails {
                    path: path.clone(),
                    source,
                })?;
            let rules = sandbox_policy::Guardrails::parse(&text).map_err(|message| {
                ConfigError::Guardrails {
                    path: path.clone(),
                    message,
                }
            })?;
            (rules, Some(path))
        }
    };
    Ok(PolicySettings {
        enforce: section.enforce.unwrap_or(true),
        guardrails,
        guardrails_file,
        approval_timeout: Duration::from_secs_f64(timeout),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn common(config: Option<PathBuf>, sandbox: Option<SandboxSwitch>) -> Common {
        Common {
            config,
            plugins_dir: None,
            sandbox,
        }
    }

    #[test]
    fn flags_beat_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(
            &path,
            "sandbox = \"off\"\nbackend = \"microvm\"\nplugins_dir = \"/p\"\n[backends.microvm]\naccel = \"tcg\"\n",
        )
        .unwrap();
        let from_file =
            Settings::resolve(&common(Some(path.clone()), None), &CommandFlags::default()).unwrap();
        assert_eq!(from_file.switch, SandboxSwitch::Off);
        assert_eq!(from_file.default_backend.as_deref(), Some("microvm"));
        assert_eq!(from_file.plugins_dir, Some(PathBuf::from("/p")));
        assert_eq!(from_file.backend_options["microvm"]["accel"], "tcg");
        let flagged = Settings::resolve(
            &common(Some(path), Some(SandboxSwitch::On)),
            &CommandFlags::default(),
        )
        .unwrap();
        assert_eq!(flagged.switch, SandboxSwitch::On);
    }

    #[test]
    fn an_app_without_an_installation_is_an_error_naming_the_keys() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("app.pem");
        std::fs::write(&key, "not a key").unwrap();
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(
            &path,
            "[gateway]\nupstream = \"http://127.0.0.1:9\"\n[gateway.app]\napp_id = \"1\"\nprivate_key_file = \"app.pem\"\n",
        )
        .unwrap();
        let err = Settings::resolve(&common(Some(path), None), &CommandFlags::default())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("[gateway.app] names no installation") && err.contains("installations"),
            "{err}"
        );
    }

    #[test]
    fn typos_are_errors_that_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(&path, "sandbx = \"off\"\n").unwrap();
        let err = Settings::resolve(&common(Some(path.clone()), None), &CommandFlags::default())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(&path.display().to_string()) && err.contains("sandbx"),
            "{err}"
        );
        std::fs::write(&path, "sandbox = \"maybe\"\n").unwrap();
        let err = Settings::resolve(&common(Some(path), None), &CommandFlags::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains("`on` or `off`"), "{err}");
    }

    #[test]
    fn the_api_section_is_checked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        let resolve = |text: &str| {
            std::fs::write(&path, text).unwrap();
            Settings::resolve(&common(Some(path.clone()), None), &CommandFlags::default())
        };
        let ok = resolve(
            "[api]\nbind_roots = [\"/w\"]\nallowed_origins = [\"HTTPS://App.example\"]\nallowed_hosts = [\"Box.lan\"]\n",
        )
        .unwrap();
        assert_eq!(ok.api.bind_roots, vec![PathBuf::from("/w")]);
        assert_eq!(ok.api.allowed_origins, vec!["https://app.example"]);
        assert_eq!(ok.api.allowed_hosts, vec!["box.lan"]);
        assert_eq!(ok.config_file.as_deref(), Some(path.as_path()));
        assert_eq!(ok.api.console_session, None);
        let console = resolve("[api]\nconsole_session_secs = 600\n").unwrap();
        assert_eq!(console.api.console_session, Some(Duration::from_secs(600)));
        for (text, needle) in [
            (
                "[api]\nconsole_session_secs = 0.5\n",
                "console_session_secs must be 1 or more seconds",
            ),
            ("[api]\nbind_roots = [\"rel\"]\n", "not an absolute path"),
            (
                "[api]\nallowed_origins = [\"https://a.example/\"]\n",
                "not an origin",
            ),
            (
                "[api]\nallowed_origins = [\"a.example\"]\n",
                "not an origin",
            ),
            (
                "[api]\nallowed_hosts = [\"a.example:80\"]\n",
                "not a host name",
            ),
            ("[api]\nbind_root = [\"/w\"]\n", "bind_root"),
            (
                "[api]\nheader_read_timeout_secs = 0\n",
                "header_read_timeout_secs must be a positive number",
            ),
            (
                "[api]\nshutdown_timeout_secs = -1\n",
                "shutdown_timeout_secs must be a positive number",
            ),
            (
                "[api]\nmax_connections = 4\nauthenticated_reserve = 4\n",
                "must be below max_connections",
            ),
            ("[egress]\nmax_connections = 0\n", "at least 1"),
        ] {
            let err = resolve(text).unwrap_err().to_string();
            assert!(err.contains(needle), "{text}: {err}");
        }
    }

    /// T28: the connection keys, their defaults, and a
    /// reserve that follows a smaller cap.
    #[test]
    fn the_connection_keys_resolve() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        let resolve = |text: &str| {
            std::fs::write(&path, text).unwrap();
            Settings::resolve(&common(Some(path.clone()), None), &CommandFlags::default()).unwrap()
        };
        let defaults = resolve("");
        assert_eq!(defaults.api.connections, ConnectionSettings::default());
        assert_eq!(
            defaults.egress.max_connections,
            sandbox_egress::server::DEFAULT_MAX_CONNECTIONS
        );
        let set = resolve(
            "[api]\nheader_read_timeout_secs = 1.5\nidle_timeout_secs = 2\nmax_connections = 20\n\
             shutdown_timeout_secs = 3\n[egress]\nmax_connections = 7\n",
        );
        let c = set.api.connections;
        assert_eq!(c.header_read_timeout, Duration::from_millis(1500));
        assert_eq!(c.idle_timeout, Duration::from_secs(2));
        assert_eq!((c.max_connections, c.authenticated_reserve), (20, 5));
        assert_eq!(c.shutdown_timeout, Duration::from_secs(3));
        assert_eq!(set.egress.max_connections, 7);
    }

    /// Every connection key is documented in the README's config example.
    #[test]
    fn the_connection_keys_are_documented() {
        let readme =
            std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"))
                .unwrap();
        let d = ConnectionSettings::default();
        for line in [
            format!(
                "header_read_timeout_secs = {}",
                d.header_read_timeout.as_secs()
            ),
            format!("idle_timeout_secs = {}", d.idle_timeout.as_secs()),
            format!("max_connections = {}", d.max_connections),
            format!("authenticated_reserve = {}", d.authenticated_reserve),
            format!("shutdown_timeout_secs = {}", d.shutdown_timeout.as_secs()),
            format!(
                "max_connections = {}",
                sandbox_egress::server::DEFAULT_MAX_CONNECTIONS
            ),
        ] {
            assert!(readme.contains(&line), "README.md does not show `{line}`");
        }
    }

    /// T33: `[output] budget_mib`, 64 MiB unless set, checked.
    #[test]
    fn the_output_budget_is_read_and_checked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        let resolve = |text: &str| {
            std::fs::write(&path, text).unwrap();
            Settings::resolve(&common(Some(path.clone()), None), &CommandFlags::default())
        };
        assert_eq!(resolve("").unwrap().output.budget_bytes, 64 << 20);
        assert_eq!(
            resolve("[output]\nbudget_mib = 4\n")
                .unwrap()
                .output
                .budget_bytes,
            4 << 20
        );
        for (text, needle) in [
            ("[output]\nbudget_mib = 0\n", "not between 1 and"),
            ("[output]\nbudget_mib = 2000000\n", "not between 1 and"),
            ("[output]\nbudget_mb = 4\n", "budget_mb"),
        ] {
            let err = resolve(text).unwrap_err().to_string();
            assert!(err.contains(needle), "{text}: {err}");
        }
        // Documented, with its default, in the README's config example.
        let readme =
            std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"))
                .unwrap();
        let line = format!(
            "budget_mib = {}",
            sandbox_runtime::sessions::budget::DEFAULT_BYTES >> 20
        );
        assert!(readme.contains(&line), "README.md does not show `{line}`");
    }
}
