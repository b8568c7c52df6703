//! The frozen v1 ABI: every type that crosses the boundary. abi_stable's
//! types are defined here; besides this module, only the code that converts
//! to and from them names abi_stable — [`crate::host`] (loading),
//! `sdk::adapter` and `sdk::log_bridge` (the plugin's side), the `testkit`,
//! and the [`crate::export_backend!`] macro.
//!
//! Everything here is fixed for the life of plugin-api 1.x, because abi_stable
//! refuses a plugin whose prefix types have *fewer* fields than the host's
//! (docs/research/plugin-abi.md §1.3). New behaviour arrives through the
//! capability-flagged `call(method, json)` entries and new JSON fields; a real
//! change is plugin-api 2.0.0.
//!
//! Backend authors never use this module: they implement [`crate::sdk`] traits
//! and call [`crate::export_backend!`]. Hosts use [`crate::host`].

// Every `#[sabi_trait]` expands to impls that rustc 1.95 flags as non-local.
#![allow(non_local_definitions)]
// The generated trait objects carry no docs of their own.
#![allow(missing_docs)]

use std::fmt;
use std::path::Path;

use abi_stable::StableAbi;
use abi_stable::library::{
    LibHeader, LibraryError, RootModule, RootModuleError, lib_header_from_path,
};
use abi_stable::sabi_trait;
use abi_stable::sabi_types::VersionStrings;
use abi_stable::std_types::{RBox, RResult, RSlice, RStr, RString, RVec};

use crate::types::{Event, EventBody, KillReason, SandboxState, SandboxViolation};

/// An open code naming a kind of event. Unknown values are legal and ignored.
#[repr(transparent)]
#[derive(StableAbi, Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EventKind(pub u32);

impl EventKind {
    pub const STDOUT: Self = Self(1);
    pub const STDERR: Self = Self(2);
    pub const EXIT: Self = Self(3);
    pub const STARTING: Self = Self(4);
    pub const READY: Self = Self(5);
    pub const KILLED: Self = Self(6);
    pub const VIOLATION: Self = Self(7);
    pub const STATE: Self = Self(8);
}

/// An open code naming a kind of failure. Unknown values are legal.
#[repr(transparent)]
#[derive(StableAbi, Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ErrorCode(pub u32);

impl ErrorCode {
    /// Anything not covered below.
    pub const OTHER: Self = Self(0);
    /// The backend does not offer this operation.
    pub const UNSUPPORTED: Self = Self(1);
    /// The spec cannot be honoured by this backend as written.
    pub const INVALID_SPEC: Self = Self(2);
    /// The plugin panicked; the panic was contained.
    pub const PANICKED: Self = Self(3);
    /// No such exec, sandbox or method.
    pub const NOT_FOUND: Self = Self(4);
    /// The backend cannot run here (missing tools, failed probe).
    pub const UNAVAILABLE: Self = Self(5);
    /// A malformed or impossible request.
    pub const INVALID_REQUEST: Self = Self(6);
    /// The sandbox was destroyed.
    pub const DESTROYED: Self = Self(7);
    /// The command to exec does not exist.
    pub const COMMAND_NOT_FOUND: Self = Self(8);
    /// The command to exec may not be executed.
    pub const PERMISSION_DENIED: Self = Self(9);

    /// A short name for logs.
    pub fn name(self) -> &'static str {
        match self {
            Self::OTHER => "other",
            Self::UNSUPPORTED => "unsupported",
            Self::INVALID_SPEC => "invalid-spec",
            Self::PANICKED => "panicked",
            Self::NOT_FOUND => "not-found",
            Self::UNAVAILABLE => "unavailable",
            Self::INVALID_REQUEST => "invalid-request",
            Self::DESTROYED => "destroyed",
            Self::COMMAND_NOT_FOUND => "command-not-found",
            Self::PERMISSION_DENIED => "permission-denied",
            _ => "unknown",
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            "unknown" => write!(f, "code {}", self.0),
            name => f.write_str(name),
        }
    }
}

/// Whether the host still wants events. An open code.
#[repr(transparent)]
#[derive(StableAbi, Debug, Clone, Copy, PartialEq, Eq)]
pub struct SinkStatus(pub u8);

impl SinkStatus {
    pub const ACCEPTED: Self = Self(0);
    /// The host has stopped listening (the sandbox is being destroyed).
    pub const CLOSED: Self = Self(1);
}

/// [`PluginError`](crate::PluginError) on the wire.
#[repr(C)]
#[derive(StableAbi, Debug, Clone)]
pub struct RawError {
    pub code: ErrorCode,
    pub message: RString,
    /// Extensible payload; unused in 1.0.
    pub json: RString,
}

/// One event on the wire. `json` carries the extensible part of the payload.
#[repr(C)]
#[derive(StableAbi, Debug, Clone)]
pub struct RawEvent {
    pub kind: EventKind,
    /// 0 for the sandbox as a whole.
    pub exec_id: u64,
    /// EXIT: exit code; KILLED: signal (0 for none).
    pub code: i32,
    /// STDOUT / STDERR bytes.
    pub data: RVec<u8>,
    /// KILLED: `{reason}`; EXIT: `{signal?}`; VIOLATION: the violation; STATE: `{state}`.
    pub json: RString,
}

#[derive(serde::Serialize, serde::Deserialize, Default)]
#[serde(default)]
struct KilledJson {
    reason: Option<KillReason>,
}

#[derive(serde::Serialize, serde::Deserialize, Default)]
#[serde(default)]
struct ExitJson {
    #[serde(skip_serializing_if = "Option::is_none")]
    signal: Option<i32>,
}

#[derive(serde::Serialize, serde::Deserialize, Default)]
#[serde(default)]
struct StateJson {
    state: SandboxState,
}

impl RawEvent {
    /// Encodes a typed event.
    pub fn from_event(event: Event) -> Self {
        let (kind, code, data, json) = match event.body {
            EventBody::Starting => (EventKind::STARTING, 0, Vec::new(), String::new()),
            EventBody::Ready => (EventKind::READY, 0, Vec::new(), String::new()),
            EventBody::Stdout(d) => (EventKind::STDOUT, 0, d, String::new()),
            EventBody::Stderr(d) => (EventKind::STDERR, 0, d, String::new()),
            EventBody::Exit { code, signal } => (
                EventKind::EXIT,
                code,
                Vec::new(),
                to_json(&ExitJson { signal }),
            ),
            EventBody::Killed { reason, signal } => (
                EventKind::KILLED,
                signal.unwrap_or(0),
                Vec::new(),
                to_json(&KilledJson {
                    reason: Some(reason),
                }),
            ),
            EventBody::Violation(v) => (EventKind::VIOLATION, 0, Vec::new(), to_json(&v)),
            EventBody::State(state) => (
                EventKind::STATE,
                0,
                Vec::new(),
                to_json(&StateJson { state }),
            ),
        };
        Self {
            kind,
            exec_id: event.exec_id,
            code,
            data: data.into(),
            json: json.into(),
        }
    }

    /// Decodes into a typed event; `None` for a kind this version does not
    /// know (the caller ignores it, SPEC A3).
    pub fn into_event(self) -> Option<Event> {
        let json = self.json.as_str();
        let body = match self.kind {
            EventKind::STARTING => EventBody::Starting,
            EventKind::READY => EventBody::Ready,
            EventKind::STDOUT => EventBody::Stdout(self.data.into_vec()),
            EventKind::STDERR => EventBody::Stderr(self.data.into_vec()),
            EventKind::EXIT => EventBody::Exit {
                code: self.code,
                signal: from_json::<ExitJson>(json).signal,
            },
            EventKind::KILLED => EventBody::Killed {
                reason: from_json::<KilledJson>(json)
                    .reason
                    .unwrap_or(KillReason::Other),
                signal: (self.code != 0).then_some(self.code),
            },
            EventKind::VIOLATION => EventBody::Violation(from_json::<SandboxViolation>(json)),
            EventKind::STATE => EventBody::State(from_json::<StateJson>(json).state),
            _ => return None,
        };
        Some(Event {
            exec_id: self.exec_id,
            body,
        })
    }
}

fn to_json<T: serde::Serialize>(value: &T) -> String {
    // Serializing these plain structs cannot fail.
    serde_json::to_string(value).unwrap_or_default()
}

/// Lenient: a payload we cannot read becomes the default, never an error.
fn from_json<T: serde::de::DeserializeOwned + Default>(json: &str) -> T {
    if json.is_empty() {
        return T::default();
    }
    serde_json::from_str(json).unwrap_or_default()
}

/// Implemented by the host: where a sandbox's events go.
#[sabi_trait]
pub trait EventSink: Send + Sync + 'static {
    /// May block (backpressure); may be called from any plugin thread.
    #[sabi(last_prefix_field)]
    fn emit(&self, event: RawEvent) -> SinkStatus;
}

/// Implemented by the host: services a plugin may use.
#[sabi_trait]
pub trait HostServices: Send + Sync + 'static {
    /// A log record from the plugin; `level` is 1 (error) … 5 (trace).
    fn log(&self, level: u8, target: RStr<'_>, message: RStr<'_>);

    #[sabi(last_prefix_field)]
    fn call(&self, method: RStr<'_>, json: RStr<'_>) -> RResult<RString, RawError>;
}

/// Implemented by the plugin: one kind of sandbox.
#[sabi_trait]
pub trait Backend: Send + Sync + 'static {
    fn name(&self) -> RString;
    /// ProbeContext JSON in, ProbeReport JSON out.
    fn probe(&self, ctx_json: RStr<'_>) -> RResult<RString, RawError>;
    /// SandboxSpec JSON in.
    fn launch(
        &self,
        spec_json: RStr<'_>,
        sink: EventSink_TO<RBox<()>>,
    ) -> RResult<Sandbox_TO<RBox<()>>, RawError>;

    #[sabi(last_prefix_field)]
    fn call(&self, method: RStr<'_>, json: RStr<'_>) -> RResult<RString, RawError>;
}

/// Implemented by the plugin: one running sandbox.
#[sabi_trait]
pub trait Sandbox: Send + Sync + 'static {
    /// SandboxInfo JSON.
    fn info_json(&self) -> RString;
    /// ExecRequest JSON in, exec id out.
    fn exec(&self, req_json: RStr<'_>) -> RResult<u64, RawError>;
    fn write_stdin(&self, exec_id: u64, data: RSlice<'_, u8>) -> RResult<(), RawError>;
    fn close_stdin(&self, exec_id: u64) -> RResult<(), RawError>;
    fn kill(&self, exec_id: u64, signal: i32) -> RResult<(), RawError>;
    fn suspend(&self) -> RResult<(), RawError>;
    fn resume(&self) -> RResult<(), RawError>;
    fn destroy(&self) -> RResult<(), RawError>;

    #[sabi(last_prefix_field)]
    fn call(&self, method: RStr<'_>, json: RStr<'_>) -> RResult<RString, RawError>;
}

pub type BackendBox = Backend_TO<RBox<()>>;
pub type SandboxBox = Sandbox_TO<RBox<()>>;
pub type SinkBox = EventSink_TO<RBox<()>>;
pub type HostServicesBox = HostServices_TO<RBox<()>>;

/// The root module every backend library exports.
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = PluginModRef)))]
#[sabi(missing_field(panic))]
pub struct PluginMod {
    /// The plugin-api version the plugin was built against.
    pub api_version: RStr<'static>,
    pub plugin_name: RStr<'static>,
    pub plugin_version: RStr<'static>,
    /// `cfg!(panic = "unwind")` of the plugin build; the host refuses `abort`.
    pub panic_unwind: bool,
    /// Called once, before anything else.
    pub init: extern "C" fn(HostServicesBox) -> RResult<(), RawError>,
    pub backends: extern "C" fn() -> RResult<RVec<BackendBox>, RawError>,
    #[sabi(last_prefix_field)]
    pub call: extern "C" fn(RStr<'_>, RStr<'_>) -> RResult<RString, RawError>,
}

impl RootModule for PluginModRef {
    abi_stable::declare_root_module_statics! {PluginModRef}
    const BASE_NAME: &'static str = "sandbox_backend";
    const NAME: &'static str = "sandbox backend";
    const VERSION_STRINGS: VersionStrings = abi_stable::package_version_strings!();
}

// ---- Host side: loading ---------------------------------------------------

/// Why a library could not become a plugin. Messages are one line: abi_stable's
/// layout dumps run to thousands of lines and are kept in `detail`.
#[derive(Debug)]
pub(crate) enum OpenFailure {
    Open(String),
    NotAPlugin,
    AbiStableVersion(String),
    ApiVersion { found: String, expected: String },
    Layout { summary: String, detail: String },
    Init(String),
    Other(String),
}

/// A library whose header was read but whose plugin code has not run yet.
pub(crate) struct OpenedLibrary {
    header: &'static LibHeader,
    /// The file as it was before it was opened (`crate::layout_kept`).
    file: Option<crate::layout_kept::Identity>,
}

impl OpenedLibrary {
    /// dlopens the file and reads the abi_stable header. Static initialisers
    /// of the library run here; the plugin's own code does not.
    pub(crate) fn open(path: &Path) -> Result<Self, OpenFailure> {
        let file = crate::layout_kept::identity(path);
        lib_header_from_path(path)
            .map(|header| Self { header, file })
            .map_err(map_library_error)
    }

    /// The plugin-api version the library was built against.
    pub(crate) fn api_version(&self) -> String {
        self.header.version_strings().version.as_str().to_owned()
    }

    /// Checks the layout of every type against ours — unless this very file
    /// passed against this very server before (`crate::layout_kept`) — and
    /// runs the root module constructor. Never calls `load_from_file`,
    /// which caches per type.
    pub(crate) fn init(self) -> Result<PluginModRef, OpenFailure> {
        let marker = self.file.as_ref().and_then(crate::layout_kept::marker);
        if let Some(marker) = &marker
            && crate::layout_kept::passed(marker)
        {
            // SAFETY: the layouts are those that were checked: the same
            // plugin file and the same server binary (identities in the
            // marker's name); the version is still checked.
            return unsafe {
                self.header
                    .init_root_module_with_unchecked_layout::<PluginModRef>()
            }
            .map_err(map_library_error);
        }
        let module = self
            .header
            .init_root_module::<PluginModRef>()
            .map_err(map_library_error)?;
        if let Some(marker) = &marker {
            crate::layout_kept::record(marker);
        }
        Ok(module)
    }
}

fn map_library_error(e: LibraryError) -> OpenFailure {
    match e {
        LibraryError::OpenError { path, err } => {
            // dlerror() repeats the path; the caller prints it already.
            let message = err.to_string();
            let prefix = format!("{}: ", path.display());
            let reason = message
                .find(&prefix)
                .map_or(message.as_str(), |at| &message[at + prefix.len()..]);
            OpenFailure::Open(reason.to_owned())
        }
        LibraryError::GetSymbolError { .. } => OpenFailure::NotAPlugin,
        LibraryError::InvalidAbiHeader(h) => OpenFailure::AbiStableVersion(format!(
            "built with abi_stable ABI {}.{}",
            h.abi_major, h.abi_minor
        )),
        LibraryError::IncompatibleVersionNumber {
            expected_version,
            actual_version,
            ..
        } => OpenFailure::ApiVersion {
            found: actual_version.to_string(),
            expected: expected_version.to_string(),
        },
        LibraryError::AbiInstability(err) => {
            let detail = err.to_string();
            OpenFailure::Layout {
                summary: summarize_layout_error(&detail),
                detail,
            }
        }
        LibraryError::RootModule { err, .. } => OpenFailure::Init(match err {
            RootModuleError::Unwound => "its root module panicked".to_owned(),
            RootModuleError::Returned(e) => e.to_string(),
        }),
        LibraryError::Many(mut errs) if !errs.is_empty() => map_library_error(errs.remove(0)),
        other => OpenFailure::Other(first_line(&other.to_string())),
    }
}

fn first_line(s: &str) -> String {
    s.lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim()
        .to_owned()
}

/// The first `Error:` of a layout dump with the two lines that explain it
/// ("Expected …", "Found …"), on one line.
pub(crate) fn summarize_layout_error(dump: &str) -> String {
    let mut lines = dump
        .lines()
        .map(str::trim)
        .skip_while(|l| !l.starts_with("Error:"));
    let mut parts: Vec<&str> = Vec::new();
    if let Some(first) = lines.next() {
        parts.push(first);
        parts.extend(lines.filter(|l| !l.is_empty()).take(2));
    }
    if parts.is_empty() {
        return first_line(dump);
    }
    parts.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_event_survives_the_wire() {
        let bodies = vec![
            EventBody::Starting,
            EventBody::Ready,
            EventBody::Stdout(b"out\x00\xff".to_vec()),
            EventBody::Stderr(b"err".to_vec()),
            EventBody::Exit {
                code: 3,
                signal: None,
            },
            EventBody::Exit {
                code: 137,
                signal: Some(9),
            },
            EventBody::Killed {
                reason: KillReason::Timeout,
                signal: Some(9),
            },
            EventBody::Killed {
                reason: KillReason::Manual,
                signal: None,
            },
            EventBody::Violation(SandboxViolation {
                action: "file-write-create".into(),
                target: "/w/.env".into(),
                raw: Some("raw line".into()),
            }),
            EventBody::State(SandboxState::Active),
        ];
        for body in bodies {
            let event = Event { exec_id: 7, body };
            let back = RawEvent::from_event(event.clone()).into_event();
            assert_eq!(back.as_ref(), Some(&event));
        }
    }

    #[test]
    fn unknown_event_kinds_and_payloads_are_tolerated() {
        let raw = RawEvent {
            kind: EventKind(999),
            exec_id: 1,
            code: 0,
            data: RVec::new(),
            json: "{}".into(),
        };
        assert_eq!(raw.into_event(), None);
        let raw = RawEvent {
            kind: EventKind::KILLED,
            exec_id: 1,
            code: 9,
            data: RVec::new(),
            json: r#"{"reason":"solar-flare","extra":1}"#.into(),
        };
        let event = raw.into_event().unwrap();
        assert_eq!(
            event.body,
            EventBody::Killed {
                reason: KillReason::Other,
                signal: Some(9)
            }
        );
        let raw = RawEvent {
            kind: EventKind::VIOLATION,
            exec_id: 1,
            code: 0,
            data: RVec::new(),
            json: "not json".into(),
        };
        assert!(matches!(
            raw.into_event().unwrap().body,
            EventBody::Violation(_)
        ));
    }

    #[test]
    fn unknown_error_codes_print_their_number() {
        assert_eq!(ErrorCode(4242).to_string(), "code 4242");
        assert_eq!(ErrorCode::PANICKED.to_string(), "panicked");
    }

    #[test]
    fn layout_dumps_are_summarised_on_one_line() {
        let dump = "lots of context\n  nested\nError: too many fields\n  Expected: 4\n  Found: 3\nmore\nmore";
        assert_eq!(
            summarize_layout_error(dump),
            "Error: too many fields; Expected: 4; Found: 3"
        );
        assert_eq!(summarize_layout_error("\n  odd failure\nx"), "odd failure");
    }
}
