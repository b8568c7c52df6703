//! What a backend author implements: two plain Rust traits and one macro.
//!
//! The SDK turns [`BackendImpl`] and [`SandboxImpl`] into the frozen ABI
//! objects, and guards every entry point: a panic in backend code becomes a
//! [`ErrorCode::PANICKED`] error instead of abi_stable's `exit(1)`
//! (docs/research/plugin-abi.md §1.8). It also enforces the event contract where
//! it can: nothing reaches the host after `destroy` returns, and a destroyed
//! sandbox refuses further calls.

mod adapter;
mod events;
pub(crate) mod log_bridge;

use std::panic::{AssertUnwindSafe, catch_unwind};

pub use events::EventSender;

pub(crate) use adapter::into_abi_backend;
#[doc(hidden)]
pub use adapter::{export_backends, root_module};

use crate::error::{ErrorCode, PluginError};
use crate::types::{ExecRequest, ProbeContext, ProbeReport, SandboxInfo, SandboxSpec};

/// One kind of sandbox. A library may export several (see [`crate::export_backend!`]).
///
/// Methods are synchronous: the host calls them from blocking threads, and a
/// backend owns whatever threads it needs. Never use the host's async runtime
/// (a plugin has its own copy of every static, tokio's included).
pub trait BackendImpl: Send + Sync + 'static {
    /// The name users select it by (`bwrap`, `none`, …). Must be stable.
    fn name(&self) -> &str;

    /// Checks, once at server start, whether this backend can run here.
    /// Unavailability is a report, not an error; say why in `hint`.
    fn probe(&self, ctx: &ProbeContext) -> ProbeReport;

    /// Starts a sandbox. Emit `starting`, then `ready` before the first exec
    /// is accepted. Events go to `events` until [`SandboxImpl::destroy`] returns.
    fn launch(
        &self,
        spec: SandboxSpec,
        events: EventSender,
    ) -> Result<Box<dyn SandboxImpl>, PluginError>;

    /// An optional, capability-flagged operation (SPEC A3).
    fn call(&self, method: &str, _json: &str) -> Result<String, PluginError> {
        Err(PluginError::unsupported(&format!(
            "backend call `{method}`"
        )))
    }
}

/// One running sandbox. Every method may be called from any thread.
///
/// Contract, checked by the conformance kit (`testkit` feature): per exec,
/// events arrive in order and `exit` or `killed` is the last one; `destroy`
/// kills everything the sandbox started and is idempotent.
pub trait SandboxImpl: Send + Sync + 'static {
    /// The state and bookkeeping of the sandbox.
    fn info(&self) -> SandboxInfo;

    /// Starts a command; returns its exec id (never 0).
    fn exec(&self, request: ExecRequest) -> Result<u64, PluginError>;

    /// Writes to the stdin of an exec started with `stdin: true`.
    fn write_stdin(&self, _exec_id: u64, _data: &[u8]) -> Result<(), PluginError> {
        Err(PluginError::unsupported("stdin"))
    }

    /// Closes the stdin of an exec.
    fn close_stdin(&self, _exec_id: u64) -> Result<(), PluginError> {
        Err(PluginError::unsupported("stdin"))
    }

    /// Sends a signal to an exec (its whole process group where possible).
    fn kill(&self, exec_id: u64, signal: i32) -> Result<(), PluginError>;

    /// Pauses the sandbox (SPEC G3).
    fn suspend(&self) -> Result<(), PluginError> {
        Err(PluginError::unsupported("suspend"))
    }

    /// Resumes a suspended sandbox.
    fn resume(&self) -> Result<(), PluginError> {
        Err(PluginError::unsupported("resume"))
    }

    /// Ends the sandbox: kills everything it started, removes everything it
    /// made. Events may be emitted until it returns, never after.
    fn destroy(&self) -> Result<(), PluginError>;

    /// An optional, capability-flagged operation (SPEC A3).
    fn call(&self, method: &str, _json: &str) -> Result<String, PluginError> {
        Err(PluginError::unsupported(&format!(
            "sandbox call `{method}`"
        )))
    }
}

/// Runs backend code so that a panic becomes a `PANICKED` error.
pub(crate) fn guard<T>(
    what: &str,
    f: impl FnOnce() -> Result<T, PluginError>,
) -> Result<T, PluginError> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(result) => result,
        Err(payload) => {
            let message = payload
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "non-string panic payload".to_owned());
            Err(PluginError::new(
                ErrorCode::PANICKED,
                format!("{what} panicked: {message}"),
            ))
        }
    }
}
