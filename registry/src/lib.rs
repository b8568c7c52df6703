//! Finds sandbox backends, refuses the ones that cannot be trusted or loaded,
//! probes the rest once, and picks one per session.
//!
//! ```no_run
//! use sandbox_registry::{DiscoverOptions, Registry, select::{Platform, Request, select}};
//!
//! let registry = Registry::discover(&DiscoverOptions::default());
//! for problem in &registry.problems {
//!     eprintln!("skipped {problem}"); // one line each, the server keeps going
//! }
//! let choice = select(Request::default(), Platform::current(), &registry.offers()).unwrap();
//! println!("sessions run in {choice}");
//! ```

mod discovery;
mod load;
mod probe;
pub mod select;
mod trust;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use sandbox_plugin_api::host::{BackendObject, PluginLogger};
use sandbox_plugin_api::{PluginError, ProbeReport};

pub use discovery::{PLUGIN_PATH_ENV, STEM_PREFIX, is_plugin_file_name, search_path};
pub use load::{LoadError, accepted_api_versions};
pub use trust::Distrust;

/// A backend compiled into the host, registered with `inventory::submit!`.
/// Used when no plugin file provides a backend of the same name, so the
/// fallback never depends on a file being present (SPEC C4).
pub struct Builtin {
    /// Builds the backend.
    pub make: fn() -> Result<BackendObject, PluginError>,
}

inventory::collect!(Builtin);

/// Where a backend came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// Compiled into the server.
    Builtin,
    /// Loaded from a library.
    File {
        /// The library.
        path: PathBuf,
        /// The plugin package that built it, and its version.
        plugin: String,
        /// The plugin's own version.
        version: String,
        /// The plugin-api version it was built against.
        api_version: String,
    },
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Builtin => f.write_str("built in"),
            Self::File { path, .. } => write!(f, "{}", path.display()),
        }
    }
}

/// A backend that loaded, with its probe.
#[derive(Debug, Clone)]
pub struct Entry {
    /// The backend.
    pub backend: BackendObject,
    /// Where it came from.
    pub source: Source,
    /// What its probe said at start-up (SPEC B1: probed once).
    pub report: ProbeReport,
}

impl Entry {
    /// The backend's name.
    pub fn name(&self) -> &str {
        self.backend.name()
    }
}

/// A file or directory that was skipped, and why. Displays as one line.
#[derive(Debug)]
pub struct Problem {
    /// The file or directory.
    pub path: PathBuf,
    /// Why.
    pub error: LoadError,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.error)
    }
}

/// How to discover.
#[derive(Clone)]
pub struct DiscoverOptions {
    /// Directories to search, in order (see [`search_path`]).
    pub search_path: Vec<PathBuf>,
    /// How long one probe may take before its backend counts as unavailable.
    pub probe_timeout: Duration,
    /// Each backend's section of the server config, by backend name.
    pub backend_options: BTreeMap<String, serde_json::Value>,
    /// Ask every backend to drop what earlier probes kept and check afresh.
    pub fresh: bool,
    /// Where plugin log records go.
    pub logger: Arc<dyn PluginLogger>,
}

impl Default for DiscoverOptions {
    fn default() -> Self {
        let exe_dir = std::env::current_exe()
            .ok()
            .and_then(|p| p.parent().map(Path::to_path_buf));
        Self {
            search_path: search_path(
                None,
                std::env::var_os(PLUGIN_PATH_ENV).as_deref(),
                exe_dir.as_deref(),
            ),
            probe_timeout: Duration::from_secs(10),
            backend_options: BTreeMap::new(),
            fresh: false,
            logger: Arc::new(TracingLogger),
        }
    }
}

/// Every backend found, and every file that was skipped.
pub struct Registry {
    /// The backends, files first (in search order), then built-ins not shadowed by a file.
    pub entries: Vec<Entry>,
    /// What was skipped, one line each.
    pub problems: Vec<Problem>,
    /// Where it looked.
    pub search_path: Vec<PathBuf>,
}

impl Registry {
    /// Discovers, loads and probes (once, in parallel, each under a timeout;
    /// each probe starts as soon as its backend is loaded).
    /// Never fails: what cannot be used becomes a [`Problem`] or an
    /// unavailable probe.
    pub fn discover(options: &DiscoverOptions) -> Self {
        let mut problems = Vec::new();
        let mut found: Vec<(BackendObject, Source)> = Vec::new();
        let mut probes = probe::Probes::new(
            &options.backend_options,
            options.fresh,
            options.probe_timeout,
        );
        for dir in &options.search_path {
            load::load_dir(
                dir,
                &options.logger,
                &mut found,
                &mut problems,
                &mut |backend| probes.start(backend),
            );
        }
        for builtin in inventory::iter::<Builtin> {
            match (builtin.make)() {
                Ok(backend) if found.iter().any(|(b, _)| b.name() == backend.name()) => {
                    tracing::debug!(
                        backend = backend.name(),
                        "a plugin file replaces the built-in backend"
                    );
                }
                Ok(backend) => {
                    probes.start(&backend);
                    found.push((backend, Source::Builtin));
                }
                Err(e) => tracing::error!("a built-in backend failed to start: {e}"),
            }
        }
        let reports = probes.finish();
        let entries = found
            .into_iter()
            .zip(reports)
            .map(|((backend, source), report)| Entry {
                backend,
                source,
                report,
            })
            .collect();
        Self {
            entries,
            problems,
            search_path: options.search_path.clone(),
        }
    }

    /// The backend with this name.
    pub fn get(&self, name: &str) -> Option<&Entry> {
        self.entries.iter().find(|e| e.name() == name)
    }

    /// What [`select::select`] chooses from.
    pub fn offers(&self) -> Vec<select::Offer<'_>> {
        self.entries
            .iter()
            .map(|e| select::Offer {
                name: e.name(),
                report: &e.report,
            })
            .collect()
    }
}

/// Sends plugin log records to this process's `tracing` subscriber.
#[derive(Debug, Default)]
pub struct TracingLogger;

impl PluginLogger for TracingLogger {
    fn log(&self, plugin: &str, level: u8, target: &str, message: &str) {
        match level {
            1 => tracing::error!(target: "plugin", plugin, from = target, "{message}"),
            2 => tracing::warn!(target: "plugin", plugin, from = target, "{message}"),
            3 => tracing::info!(target: "plugin", plugin, from = target, "{message}"),
            4 => tracing::debug!(target: "plugin", plugin, from = target, "{message}"),
            _ => tracing::trace!(target: "plugin", plugin, from = target, "{message}"),
        }
    }

    fn max_level(&self) -> String {
        tracing::level_filters::LevelFilter::current()
            .to_string()
            .to_lowercase()
    }
}
