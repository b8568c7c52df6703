//! The host's side of the boundary: open a library, load its backends, and
//! drive them with typed calls.
//!
//! Every call here blocks and may run plugin code: call it from a blocking
//! thread (`tokio::task::spawn_blocking`), never from an async task, because
//! a plugin may emit events synchronously and the host's sink may block.

use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::sync::Arc;

use abi_stable::sabi_trait::TD_Opaque;
use abi_stable::std_types::{RResult, RSlice, RStr, RString};

use crate::abi::{
    self, BackendBox, HostServicesBox, OpenFailure, RawError, RawEvent, SandboxBox, SinkBox,
    SinkStatus,
};
use crate::error::{self, ErrorCode, PluginError};
use crate::sdk::BackendImpl;
use crate::types::{
    Event, ExecRequest, ProbeContext, ProbeReport, SandboxInfo, SandboxSpec, SandboxState,
};

/// Why a file did not become a plugin. One line each; the path is the caller's
/// to add.
#[derive(Debug)]
pub enum LoadError {
    /// The dynamic loader refused the file (not a library, wrong arch, …).
    Open(String),
    /// A library, but it exports no sandbox-backend root module.
    NotAPlugin,
    /// Built with an abi_stable whose ABI differs from ours.
    AbiStable(String),
    /// Built against a plugin-api that abi_stable refuses.
    ApiVersion {
        /// The plugin's plugin-api version.
        found: String,
        /// Ours.
        expected: String,
    },
    /// The types of the plugin's plugin-api differ from ours.
    Layout {
        /// The first difference, on one line.
        summary: String,
        /// abi_stable's whole report (thousands of lines).
        detail: String,
    },
    /// The plugin's constructor failed or panicked.
    Init(String),
    /// Built with `panic = "abort"`: one panic would end the server.
    PanicAbort,
    /// The plugin failed to build its backends.
    Backends(PluginError),
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Open(reason) => write!(f, "not a loadable library: {reason}"),
            Self::NotAPlugin => {
                f.write_str("a library, but not a sandbox backend (no abi_stable root module)")
            }
            Self::AbiStable(what) => write!(f, "{what}, which this host cannot load"),
            Self::ApiVersion { found, expected } => {
                write!(f, "built for plugin-api {found}; this host has {expected}")
            }
            Self::Layout { summary, .. } => {
                write!(f, "its plugin-api types differ from ours: {summary}")
            }
            Self::Init(reason) => write!(f, "its initialisation failed: {reason}"),
            Self::PanicAbort => {
                f.write_str("built with panic = \"abort\"; rebuild it with panic = \"unwind\"")
            }
            Self::Backends(e) => write!(f, "listing its backends failed: {e}"),
        }
    }
}

impl std::error::Error for LoadError {}

impl From<OpenFailure> for LoadError {
    fn from(f: OpenFailure) -> Self {
        match f {
            OpenFailure::Open(reason) => Self::Open(reason),
            OpenFailure::NotAPlugin => Self::NotAPlugin,
            OpenFailure::AbiStableVersion(what) => Self::AbiStable(what),
            OpenFailure::ApiVersion { found, expected } => Self::ApiVersion { found, expected },
            OpenFailure::Layout { summary, detail } => Self::Layout { summary, detail },
            OpenFailure::Init(reason) => Self::Init(reason),
            OpenFailure::Other(reason) => Self::Open(reason),
        }
    }
}

/// A library that was opened but whose plugin code has not run yet, so its
/// api version can be checked first.
pub struct OpenedPlugin {
    inner: abi::OpenedLibrary,
}

/// dlopens `path` and reads its header. The library is never unloaded
/// (abi_stable leaks every library on purpose).
///
/// Loading runs the library's static initialisers: only open files you trust
/// as much as the server binary (the registry checks ownership and modes first).
pub fn open(path: &Path) -> Result<OpenedPlugin, LoadError> {
    Ok(OpenedPlugin {
        inner: abi::OpenedLibrary::open(path)?,
    })
}

impl OpenedPlugin {
    /// The plugin-api version the plugin was built against.
    pub fn api_version(&self) -> String {
        self.inner.api_version()
    }

    /// Checks its types against ours, runs its constructor, hands it the host
    /// services (logging) and lists its backends.
    pub fn load(self, logger: Arc<dyn PluginLogger>) -> Result<LoadedPlugin, LoadError> {
        let api_version = self.inner.api_version();
        let module = self.inner.init()?;
        if !module.panic_unwind() {
            return Err(LoadError::PanicAbort);
        }
        let name = module.plugin_name().as_str().to_owned();
        let services = HostServicesBox::from_value(
            HostLogBridge {
                logger,
                plugin: name.clone(),
            },
            TD_Opaque,
        );
        error::from_rresult::<(), ()>((module.init())(services))
            .map_err(|e| LoadError::Init(e.to_string()))?;
        let backends = error::from_rresult::<_, abi_stable::std_types::RVec<BackendBox>>((module
            .backends())(
        ))
        .map_err(LoadError::Backends)?;
        Ok(LoadedPlugin {
            name,
            version: module.plugin_version().as_str().to_owned(),
            api_version,
            backends: backends.into_iter().map(BackendObject::from_abi).collect(),
        })
    }
}

/// A loaded library and the backends it provides.
pub struct LoadedPlugin {
    /// The plugin's package name.
    pub name: String,
    /// The plugin's own version.
    pub version: String,
    /// The plugin-api version it was built against.
    pub api_version: String,
    /// Its backends.
    pub backends: Vec<BackendObject>,
}

/// Where the host wants plugin log records.
pub trait PluginLogger: Send + Sync + 'static {
    /// One record; `level` is 1 (error) … 5 (trace).
    fn log(&self, plugin: &str, level: u8, target: &str, message: &str);

    /// The most verbose level the host wants, as `tracing` spells it
    /// (`error` … `trace`, or `off`).
    fn max_level(&self) -> String;
}

struct HostLogBridge {
    logger: Arc<dyn PluginLogger>,
    plugin: String,
}

impl abi::HostServices for HostLogBridge {
    fn log(&self, level: u8, target: RStr<'_>, message: RStr<'_>) {
        // A panic here would cross back into the plugin and abort.
        let _ = catch_unwind(AssertUnwindSafe(|| {
            self.logger
                .log(&self.plugin, level, target.as_str(), message.as_str());
        }));
    }

    fn call(&self, method: RStr<'_>, _json: RStr<'_>) -> RResult<RString, RawError> {
        if method.as_str() == crate::sdk::log_bridge::MAX_LEVEL_METHOD {
            let level = catch_unwind(AssertUnwindSafe(|| self.logger.max_level()))
                .unwrap_or_else(|_| "info".into());
            return RResult::ROk(level.into());
        }
        RResult::RErr(PluginError::unsupported(&format!("host call `{}`", method.as_str())).into())
    }
}

/// Receives a sandbox's events on the host.
pub trait EventHandler: Send + Sync + 'static {
    /// One event. May block to slow the plugin down. Returns `false` once the
    /// host no longer wants events from this sandbox.
    fn handle(&self, event: Event) -> bool;
}

pub(crate) struct HandlerSink {
    pub(crate) handler: Arc<dyn EventHandler>,
}

impl abi::EventSink for HandlerSink {
    fn emit(&self, event: RawEvent) -> SinkStatus {
        let kind = event.kind;
        let Some(event) = event.into_event() else {
            // A kind from a newer plugin-api: legal, and ignored (SPEC A3).
            tracing::debug!(kind = kind.0, "ignoring an event of unknown kind");
            return SinkStatus::ACCEPTED;
        };
        match catch_unwind(AssertUnwindSafe(|| self.handler.handle(event))) {
            Ok(true) => SinkStatus::ACCEPTED,
            Ok(false) => SinkStatus::CLOSED,
            Err(_) => {
                tracing::error!("the host's event handler panicked; closing this sandbox's stream");
                SinkStatus::CLOSED
            }
        }
    }
}

/// A backend, loaded from a library or built in. Cheap to clone.
#[derive(Clone)]
pub struct BackendObject {
    inner: Arc<BackendBox>,
    name: Arc<str>,
}

impl fmt::Debug for BackendObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BackendObject")
            .field("name", &self.name)
            .finish()
    }
}

impl BackendObject {
    fn from_abi(inner: BackendBox) -> Self {
        let name: Arc<str> = inner.name().as_str().into();
        Self {
            inner: Arc::new(inner),
            name,
        }
    }

    /// A backend compiled into the host, driven through the same ABI and
    /// guards as a loaded one.
    pub fn builtin(backend: impl BackendImpl) -> Result<Self, PluginError> {
        crate::sdk::into_abi_backend(Box::new(backend)).map(Self::from_abi)
    }

    /// The name users select it by.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Asks the backend whether it can run here.
    pub fn probe(&self, ctx: &ProbeContext) -> Result<ProbeReport, PluginError> {
        let ctx = to_json(ctx)?;
        let json: String =
            error::from_rresult::<_, RString>(self.inner.probe(RStr::from_str(&ctx)))?
                .into_string();
        from_plugin_json(&json, "probe report")
    }

    /// Starts a sandbox whose events go to `events`.
    pub fn launch(
        &self,
        spec: &SandboxSpec,
        events: Arc<dyn EventHandler>,
    ) -> Result<SandboxObject, PluginError> {
        let spec = to_json(spec)?;
        let sink = SinkBox::from_value(HandlerSink { handler: events }, TD_Opaque);
        let sandbox: SandboxBox =
            error::from_rresult(self.inner.launch(RStr::from_str(&spec), sink))?;
        Ok(SandboxObject {
            inner: Arc::new(sandbox),
        })
    }

    /// An optional operation; `UNSUPPORTED` when the backend does not offer it.
    pub fn call(&self, method: &str, json: &str) -> Result<String, PluginError> {
        error::from_rresult::<_, RString>(
            self.inner
                .call(RStr::from_str(method), RStr::from_str(json)),
        )
        .map(RString::into_string)
    }
}

/// A running sandbox. Cheap to clone; dropping the last clone destroys it.
#[derive(Clone)]
pub struct SandboxObject {
    inner: Arc<SandboxBox>,
}

impl SandboxObject {
    /// Its state and bookkeeping. A plugin answer we cannot read is an error state.
    pub fn info(&self) -> SandboxInfo {
        let json = self.inner.info_json();
        serde_json::from_str(json.as_str()).unwrap_or_else(|e| SandboxInfo {
            state: SandboxState::Error,
            error: Some(format!("the backend's sandbox info is unreadable: {e}")),
            ..SandboxInfo::default()
        })
    }

    /// Starts a command; returns its exec id.
    pub fn exec(&self, request: &ExecRequest) -> Result<u64, PluginError> {
        let request = to_json(request)?;
        error::from_rresult(self.inner.exec(RStr::from_str(&request)))
    }

    /// Writes to an exec's stdin.
    pub fn write_stdin(&self, exec_id: u64, data: &[u8]) -> Result<(), PluginError> {
        error::from_rresult(self.inner.write_stdin(exec_id, RSlice::from_slice(data)))
    }

    /// Closes an exec's stdin.
    pub fn close_stdin(&self, exec_id: u64) -> Result<(), PluginError> {
        error::from_rresult(self.inner.close_stdin(exec_id))
    }

    /// Signals an exec.
    pub fn kill(&self, exec_id: u64, signal: i32) -> Result<(), PluginError> {
        error::from_rresult(self.inner.kill(exec_id, signal))
    }

    /// Pauses the sandbox.
    pub fn suspend(&self) -> Result<(), PluginError> {
        error::from_rresult(self.inner.suspend())
    }

    /// Resumes the sandbox.
    pub fn resume(&self) -> Result<(), PluginError> {
        error::from_rresult(self.inner.resume())
    }

    /// Ends the sandbox. Idempotent; no event arrives after it returns.
    pub fn destroy(&self) -> Result<(), PluginError> {
        error::from_rresult(self.inner.destroy())
    }

    /// An optional operation.
    pub fn call(&self, method: &str, json: &str) -> Result<String, PluginError> {
        error::from_rresult::<_, RString>(
            self.inner
                .call(RStr::from_str(method), RStr::from_str(json)),
        )
        .map(RString::into_string)
    }
}

fn to_json<T: serde::Serialize>(value: &T) -> Result<String, PluginError> {
    serde_json::to_string(value)
        .map_err(|e| PluginError::other(format!("encoding for the plugin: {e}")))
}

fn from_plugin_json<T: serde::de::DeserializeOwned>(
    json: &str,
    what: &str,
) -> Result<T, PluginError> {
    serde_json::from_str(json).map_err(|e| {
        PluginError::new(
            ErrorCode::OTHER,
            format!("the backend returned an unreadable {what}: {e}"),
        )
    })
}
