//! Start-up: find, load and probe every backend (SPEC B1), once.

use std::sync::Arc;

use sandbox_plugin_api::host::BackendObject;
use sandbox_registry::select::{Platform, startup_line};
use sandbox_registry::{
    Builtin, DiscoverOptions, PLUGIN_PATH_ENV, Registry, Source, TracingLogger, search_path,
};
use serde_json::{Value, json};

use crate::config::Settings;
use crate::sessions::LaunchSettings;
use crate::sessions::binds::ServerPaths;
use sandbox_plugin_api::state_dirs::runtime_dir;

// `none` is compiled in, so the fallback never depends on a file (SPEC C4).
inventory::submit! {
    Builtin { make: || BackendObject::builtin(sandbox_backend_none::NoneBackend) }
}

/// Discovers and probes; every skipped file is logged as one warning line.
/// The settings' own notices are [`Settings::log_notices`]'.
pub fn discover(settings: &Settings) -> Registry {
    discover_with(settings, false)
}

/// [`discover`]; `fresh`: the backends drop what earlier probes kept and
/// check everything now (`cc_server probe --fresh`).
pub fn discover_with(settings: &Settings, fresh: bool) -> Registry {
    let exe_dir = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(std::path::Path::to_path_buf));
    let options = DiscoverOptions {
        search_path: search_path(
            settings.plugins_dir.as_deref(),
            std::env::var_os(PLUGIN_PATH_ENV).as_deref(),
            exe_dir.as_deref(),
        ),
        probe_timeout: settings.probe_timeout,
        backend_options: settings.backend_options.clone(),
        fresh,
        logger: Arc::new(TracingLogger),
    };
    let registry = Registry::discover(&options);
    for problem in &registry.problems {
        tracing::warn!("skipped plugin {problem}");
    }
    registry
}

/// What sessions launch with, from the settings and the registry (whose
/// search path the bind rules protect).
pub fn launch_settings(settings: &Settings, registry: &Registry) -> LaunchSettings {
    LaunchSettings {
        paths: server_paths(settings, registry),
        switch: settings.switch,
        default_backend: settings.default_backend.clone(),
        platform: Platform::current(),
        dispatch: settings.dispatch.clone(),
        commands: std::sync::Arc::new(crate::command_policy::CommandPolicy::from_settings(
            &settings.policy,
        )),
        egress: settings.egress.clone(),
        output_budget: std::sync::Arc::new(crate::sessions::budget::OutputBudget::new(
            settings.output.budget_bytes,
        )),
    }
}

/// The server's own paths, for the bind rules (`sessions::binds`): the token
/// file (`run` has none of its own, so the default one), the backends'
/// runtime dir, the temp dir of the egress directories, the config and
/// guardrails files, every plugins directory searched.
fn server_paths(settings: &Settings, registry: &Registry) -> ServerPaths {
    let temp_dir = std::env::temp_dir();
    // SAFETY: geteuid cannot fail.
    let uid = unsafe { libc::geteuid() };
    // Relative flags (`--plugins-dir plugins`) name paths from here; a bind
    // is compared with absolute paths.
    let absolute = |p: &std::path::Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let mut config_files = Vec::new();
    if let Some(file) = &settings.config_file {
        config_files.push((
            absolute(file),
            "the server's config file: changed, it loosens the next start's policy",
        ));
    }
    if let Some(file) = &settings.policy.guardrails_file {
        config_files.push((
            absolute(file),
            "the guardrails file: changed, it loosens the next start's command policy",
        ));
    }
    ServerPaths {
        home: std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .map(std::path::PathBuf::from),
        token_file: settings
            .token_file
            .clone()
            .or_else(|| crate::api::token::default_path().ok())
            .map(|t| absolute(&t)),
        runtime_dir: Some(runtime_dir(
            uid,
            std::env::var_os("XDG_RUNTIME_DIR").as_deref(),
            &temp_dir,
        )),
        temp_dir,
        config_files,
        plugin_dirs: registry.search_path.iter().map(|d| absolute(d)).collect(),
        bind_roots: settings.api.bind_roots.clone(),
        config_file: settings.config_file.clone(),
    }
}

/// The one line of SPEC B3.
pub fn startup(settings: &Settings, registry: &Registry) -> String {
    startup_line(settings.switch, Platform::current(), &registry.offers())
}

/// The default selection, or why there is none.
pub type Default =
    Result<sandbox_registry::select::Selection, sandbox_registry::select::SelectError>;

/// Where a backend came from, as JSON.
pub fn source_json(source: &Source) -> Value {
    match source {
        Source::Builtin => json!({"kind": "builtin"}),
        Source::File {
            path,
            plugin,
            version,
            api_version,
        } => json!({
            "kind": "file", "path": path, "plugin": plugin, "pluginVersion": version, "apiVersion": api_version,
        }),
    }
}

/// Every backend with its probe, as JSON.
pub fn backends_json(registry: &Registry) -> Value {
    registry
        .entries
        .iter()
        .map(|e| json!({"name": e.name(), "source": source_json(&e.source), "probe": e.report}))
        .collect()
}

/// Every skipped file, as JSON.
pub fn problems_json(registry: &Registry) -> Value {
    registry
        .problems
        .iter()
        .map(|p| json!({"path": p.path, "error": p.error.to_string()}))
        .collect()
}

/// The default selection, as JSON.
pub fn default_json(default: &Default) -> Value {
    match default {
        Ok(sel) => json!({"backend": sel.backend, "kind": sel.kind, "notice": sel.notice()}),
        Err(e) => json!({"error": e.to_string()}),
    }
}
