//! The contract between `cc_server` and its sandbox backends.
//!
//! A backend is a dynamic library (`libsandbox_backend_<name>.so`) that the
//! server loads from its plugins directory at start-up, probes once, and
//! drives through a stable ABI. You write one by implementing two plain Rust
//! traits, [`sdk::BackendImpl`] and [`sdk::SandboxImpl`], and naming your
//! backends in [`export_backend!`]. You never touch abi_stable types.
//!
//! # A complete backend
//!
//! This one "runs" a command by echoing its arguments. It is a real backend:
//! put it in a crate with `crate-type = ["cdylib"]`, build, and drop the
//! library into the plugins directory.
//!
//! ```
//! use std::sync::atomic::{AtomicU64, Ordering};
//! use sandbox_plugin_api::sdk::{BackendImpl, EventSender, SandboxImpl};
//! use sandbox_plugin_api::{
//!     ExecRequest, PluginError, ProbeContext, ProbeReport, SandboxInfo, SandboxSpec, SandboxState,
//! };
//!
//! struct Echo;
//!
//! impl BackendImpl for Echo {
//!     fn name(&self) -> &str {
//!         "echo"
//!     }
//!
//!     fn probe(&self, _ctx: &ProbeContext) -> ProbeReport {
//!         ProbeReport { available: true, note: "echo — no isolation at all".into(), ..Default::default() }
//!     }
//!
//!     fn launch(&self, _spec: SandboxSpec, events: EventSender) -> Result<Box<dyn SandboxImpl>, PluginError> {
//!         events.starting();
//!         events.ready();
//!         Ok(Box::new(EchoSandbox { events, next: AtomicU64::new(1) }))
//!     }
//! }
//!
//! struct EchoSandbox {
//!     events: EventSender,
//!     next: AtomicU64,
//! }
//!
//! impl SandboxImpl for EchoSandbox {
//!     fn info(&self) -> SandboxInfo {
//!         SandboxInfo { state: SandboxState::Warm, ..Default::default() }
//!     }
//!
//!     fn exec(&self, request: ExecRequest) -> Result<u64, PluginError> {
//!         let id = self.next.fetch_add(1, Ordering::SeqCst);
//!         self.events.stdout(id, format!("{}\n", request.argv.join(" ")).into_bytes());
//!         self.events.exit(id, 0, None);
//!         Ok(id)
//!     }
//!
//!     fn kill(&self, _exec_id: u64, _signal: i32) -> Result<(), PluginError> {
//!         Ok(()) // every exec has already ended
//!     }
//!
//!     fn destroy(&self) -> Result<(), PluginError> {
//!         Ok(())
//!     }
//! }
//!
//! // The library's root module. Your crate must also depend on `abi_stable`
//! // directly: the attribute this expands to names `::abi_stable`.
//! sandbox_plugin_api::export_backend!(Echo);
//!
//! // A host drives it like this (the server does the same after dlopen):
//! use std::sync::{Arc, Mutex};
//! use sandbox_plugin_api::host::{BackendObject, EventHandler};
//! use sandbox_plugin_api::{Event, EventBody};
//!
//! #[derive(Default)]
//! struct Collect(Mutex<Vec<Event>>);
//! impl EventHandler for Collect {
//!     fn handle(&self, event: Event) -> bool {
//!         self.0.lock().unwrap().push(event);
//!         true
//!     }
//! }
//!
//! let backend = BackendObject::builtin(Echo).unwrap();
//! assert!(backend.probe(&ProbeContext::default()).unwrap().available);
//! let events = Arc::new(Collect::default());
//! let sandbox = backend.launch(&SandboxSpec::default(), events.clone()).unwrap();
//! let id = sandbox
//!     .exec(&ExecRequest { argv: vec!["hello".into(), "world".into()], ..Default::default() })
//!     .unwrap();
//! sandbox.destroy().unwrap();
//! let got = events.0.lock().unwrap();
//! assert_eq!(got.last().unwrap().body, EventBody::Exit { code: 0, signal: None });
//! assert!(got.iter().any(|e| e.exec_id == id && e.body == EventBody::Stdout(b"hello world\n".to_vec())));
//! ```
//!
//! # The rules
//!
//! - **Versions.** This crate's version is the ABI version. A host accepts
//!   plugins built against the same major; within a major every ABI type is
//!   frozen, and new behaviour arrives as optional `call(method, json)`
//!   entries advertised in [`ProbeReport::capabilities`], and as new JSON
//!   fields (always defaulted, never refused).
//! - **Threads.** Every method is synchronous and may be called from any host
//!   thread. Own your threads; never rely on the host's async runtime.
//! - **Events.** Per exec, in order, ending with `exit` or `killed`; `ready`
//!   before the first exec is accepted; output streamed as it is produced,
//!   not held until the command ends; nothing after `destroy` returns (the
//!   SDK drops late events for you). Sending may block: that is backpressure.
//! - **Panics** in your code become [`ErrorCode::PANICKED`] errors; build with
//!   `panic = "unwind"` (the default) or the host refuses the library.
//! - **Fail closed.** If a spec asks for something you cannot enforce, refuse
//!   the launch with [`ErrorCode::INVALID_SPEC`] and say what is missing.
//!
//! The `testkit` feature provides the conformance suite every backend runs in
//! its own tests.

// No hand-written unsafe: abi_stable's derives in `abi` expand to unsafe impls,
// so that one module is allowed it and every other module is denied it.
#![deny(unsafe_code)]
#![deny(missing_docs)]

#[doc(hidden)]
#[allow(unsafe_code)]
pub mod abi;
mod error;
pub mod host;
mod layout_kept;
pub mod proxy;
pub mod sdk;
pub mod server_call;
#[cfg(feature = "testkit")]
pub mod testkit;
mod types;
pub mod violation;

/// The shared path lists, defined in `sandbox-paths` (one home for every
/// path rule) and re-exported here so plugins built against plugin-api 1.x
/// keep their imports.
pub use sandbox_paths::{secrets, state_dirs, write_deny};

pub use error::{ErrorCode, PluginError, chain as error_chain};
pub use types::{
    EgressEndpoints, Event, EventBody, ExecRequest, HostFds, KillReason, ProbeContext, ProbeReport,
    PtySize, ResizeRequest, SandboxBackend, SandboxBindMount, SandboxHandle, SandboxInfo,
    SandboxLimits, SandboxMode, SandboxSpec, SandboxState, SandboxViolation, calls, capability,
};

/// The plugin-api version this crate was built as: the ABI version.
pub const API_VERSION: &str = env!("CARGO_PKG_VERSION");

/// Exports a library's backends as its abi_stable root module.
///
/// Takes one or more expressions, each a value implementing
/// [`sdk::BackendImpl`]; they are constructed when the host loads the library
/// (a panic there is contained). The calling crate must list `abi_stable`
/// among its dependencies.
#[macro_export]
macro_rules! export_backend {
    ($($backend:expr),+ $(,)?) => {
        /// The root module `cc_server` loads.
        #[::abi_stable::export_root_module]
        pub fn sandbox_backend_root_module() -> $crate::abi::PluginModRef {
            extern "C" fn backends() -> ::abi_stable::std_types::RResult<
                ::abi_stable::std_types::RVec<$crate::abi::BackendBox>,
                $crate::abi::RawError,
            > {
                $crate::sdk::export_backends(|| {
                    ::std::vec![$(::std::boxed::Box::new($backend) as ::std::boxed::Box<dyn $crate::sdk::BackendImpl>),+]
                })
            }
            $crate::sdk::root_module(
                ::core::env!("CARGO_PKG_NAME"),
                ::core::env!("CARGO_PKG_VERSION"),
                ::core::cfg!(panic = "unwind"),
                backends,
            )
        }
    };
}
