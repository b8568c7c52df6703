//! Start-up: find, load and probe every backend once (SPEC B1), then the
//! sessions that launch in them. Every front-end that runs commands starts
//! here, so `run`, the API and the ones to come share one start-up.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use sandbox_paths::state_dirs::runtime_dir;
use sandbox_plugin_api::host::BackendObject;
use sandbox_registry::select::{Platform, SandboxSwitch, startup_line};
use sandbox_registry::{
    Builtin, DiscoverOptions, PLUGIN_PATH_ENV, Registry, TracingLogger, search_path,
};

use crate::command_policy::{Approver, CommandPolicy, PolicySettings};
use crate::dispatch_policy::DispatchPolicy;
use crate::egress::EgressSettings;
use crate::sessions::budget::OutputBudget;
use crate::sessions::{LaunchSettings, SessionError, Sessions};
use sandbox_paths::binds::ServerPaths;

// `none` is compiled in, so the fallback never depends on a file (SPEC C4).
inventory::submit! {
    Builtin { make: || BackendObject::builtin(sandbox_backend_none::NoneBackend) }
}

/// What a front-end starts the runtime with: the server's settings,
/// resolved by its config (flags over environment over file).
#[derive(Debug, Clone)]
pub struct StartOptions {
    /// `--sandbox on|off` (SPEC B5).
    pub switch: SandboxSwitch,
    /// The backend sessions use when they name none.
    pub default_backend: Option<String>,
    /// `--plugins-dir`; else `CC_SERVER_PLUGIN_PATH`, else beside the executable.
    pub plugins_dir: Option<PathBuf>,
    pub probe_timeout: Duration,
    /// `[backends.<name>]` tables, passed to each backend's probe.
    pub backend_options: BTreeMap<String, serde_json::Value>,
    pub dispatch: DispatchPolicy,
    pub policy: PolicySettings,
    pub egress: EgressSettings,
    /// What every session's exec streams may hold together (`[output] budget_mib`).
    pub output_budget_bytes: usize,
    /// The API token file (for `run` too: a command must not read it).
    pub token_file: Option<PathBuf>,
    /// The server's other credential files, with the config key of each
    /// (never shown to a sandbox).
    pub secret_files: Vec<(PathBuf, &'static str)>,
    /// The config file, when one was given.
    pub config_file: Option<PathBuf>,
    /// `[api] bind_roots`.
    pub bind_roots: Vec<PathBuf>,
    /// Called on a blocking thread after each sandbox is destroyed (the
    /// binary gives memory back to the system there).
    pub after_destroy: Option<fn()>,
    /// The workspaces layer (SPEC H1, H10, H11), when the server keeps
    /// workspaces; its state and data directories are never bound.
    pub workspaces: Option<crate::layout::Layer>,
    /// The state directory (the workspaces database).
    pub state_dir: Option<PathBuf>,
    /// The data directory (conversations' clones and agents' dirs).
    pub data_dir: Option<PathBuf>,
}

/// Discovers and probes; every skipped file is logged as one warning line.
/// `fresh`: the backends drop what earlier probes kept and check
/// everything now (`cc_server probe --fresh`).
pub fn discover(options: &StartOptions, fresh: bool) -> Registry {
    let exe_dir = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(Path::to_path_buf));
    let discover = DiscoverOptions {
        search_path: search_path(
            options.plugins_dir.as_deref(),
            std::env::var_os(PLUGIN_PATH_ENV).as_deref(),
            exe_dir.as_deref(),
        ),
        probe_timeout: options.probe_timeout,
        backend_options: options.backend_options.clone(),
        fresh,
        logger: Arc::new(TracingLogger),
    };
    let registry = Registry::discover(&discover);
    for problem in &registry.problems {
        tracing::warn!("skipped plugin {problem}");
    }
    registry
}

/// Sweeps what killed servers left, discovers and probes the backends on a
/// blocking thread, and returns the sessions ready to launch. `approver`
/// answers the command policy's prompts instead of the API's owners (`run
/// --ask`: the person at the terminal).
pub async fn start(
    options: &StartOptions,
    approver: Option<Arc<dyn Approver>>,
) -> Result<Sessions, SessionError> {
    crate::egress::sweep_stale_dirs();
    let for_discovery = options.clone();
    let registry = tokio::task::spawn_blocking(move || discover(&for_discovery, false))
        .await
        .map_err(SessionError::Join)?;
    let mut launch = launch_settings(options, &registry);
    if let Some(approver) = approver {
        launch.commands =
            Arc::new(CommandPolicy::from_settings(&options.policy).answered_by(approver));
    }
    Ok(Sessions::new(Arc::new(registry), launch))
}

/// The one line of SPEC B3.
pub fn startup(switch: SandboxSwitch, registry: &Registry) -> String {
    startup_line(switch, Platform::current(), &registry.offers())
}

/// What sessions launch with, from the options and the registry (whose
/// search path the bind rules protect).
pub fn launch_settings(options: &StartOptions, registry: &Registry) -> LaunchSettings {
    LaunchSettings {
        paths: server_paths(options, registry),
        switch: options.switch,
        default_backend: options.default_backend.clone(),
        platform: Platform::current(),
        dispatch: options.dispatch.clone(),
        commands: Arc::new(CommandPolicy::from_settings(&options.policy)),
        egress: options.egress.clone(),
        output_budget: Arc::new(OutputBudget::new(options.output_budget_bytes)),
        feed: Arc::default(),
        after_destroy: options.after_destroy,
        workspaces: options.workspaces.clone(),
    }
}

/// The server's own paths, for the bind rules: the token file, the
/// backends' runtime dir, the temp dir of the egress directories, the
/// config and guardrails files, every plugins directory searched.
fn server_paths(options: &StartOptions, registry: &Registry) -> ServerPaths {
    let temp_dir = std::env::temp_dir();
    // SAFETY: geteuid cannot fail.
    let uid = unsafe { libc::geteuid() };
    // Relative flags (`--plugins-dir plugins`) name paths from here; a bind
    // is compared with absolute paths.
    let absolute = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let mut config_files = Vec::new();
    if let Some(file) = &options.config_file {
        config_files.push((
            absolute(file),
            "the server's config file: changed, it loosens the next start's policy",
        ));
    }
    if let Some(file) = &options.policy.guardrails_file {
        config_files.push((
            absolute(file),
            "the guardrails file: changed, it loosens the next start's command policy",
        ));
    }
    ServerPaths {
        home: std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .map(PathBuf::from),
        token_file: options.token_file.as_deref().map(absolute),
        secret_files: options
            .secret_files
            .iter()
            .map(|(p, key)| (absolute(p), *key))
            .collect(),
        runtime_dir: Some(runtime_dir(
            uid,
            std::env::var_os("XDG_RUNTIME_DIR").as_deref(),
            &temp_dir,
        )),
        temp_dir,
        config_files,
        plugin_dirs: registry.search_path.iter().map(|d| absolute(d)).collect(),
        bind_roots: options.bind_roots.clone(),
        config_file: options.config_file.clone(),
        // What does not exist holds nothing yet (and a protected path must
        // exist for a backend to keep it read-only).
        state_dir: options
            .state_dir
            .as_deref()
            .map(absolute)
            .filter(|p| p.exists()),
        data_dir: options
            .data_dir
            .as_deref()
            .map(absolute)
            .filter(|p| p.exists()),
    }
}
