//! Turns the SDK traits into ABI objects, with a panic guard on every entry.

use std::sync::atomic::{AtomicBool, Ordering};

use abi_stable::prefix_type::PrefixTypeTrait;
use abi_stable::sabi_trait::TD_Opaque;
use abi_stable::std_types::{RResult, RSlice, RStr, RString, RVec};

use super::{BackendImpl, EventSender, SandboxImpl, guard};
use crate::abi::{self, BackendBox, RawError, SandboxBox, SinkBox};
use crate::error::{self, ErrorCode, PluginError};
use crate::types::{ExecRequest, ProbeContext, SandboxInfo, SandboxSpec, SandboxState};

/// Wraps a backend for the host. Its name is read once, here, so that
/// `name()` over the ABI can never panic.
pub(crate) fn into_abi_backend(backend: Box<dyn BackendImpl>) -> Result<BackendBox, PluginError> {
    let name = guard("name", || Ok(backend.name().to_owned()))?;
    Ok(BackendBox::from_value(
        BackendAdapter {
            inner: backend,
            name: name.into(),
        },
        TD_Opaque,
    ))
}

/// Used by [`crate::export_backend!`]: builds the library's backends under a guard.
#[doc(hidden)]
pub fn export_backends(
    make: impl FnOnce() -> Vec<Box<dyn BackendImpl>>,
) -> RResult<RVec<BackendBox>, RawError> {
    let built = guard("backend constructor", || {
        make()
            .into_iter()
            .map(into_abi_backend)
            .collect::<Result<Vec<_>, _>>()
    });
    error::to_rresult::<_, RVec<BackendBox>>(built)
}

/// Builds the root module; used by [`crate::export_backend!`].
#[doc(hidden)]
pub fn root_module(
    plugin_name: &'static str,
    plugin_version: &'static str,
    panic_unwind: bool,
    backends: extern "C" fn() -> RResult<RVec<BackendBox>, RawError>,
) -> abi::PluginModRef {
    abi::PluginMod {
        api_version: RStr::from_str(crate::API_VERSION),
        plugin_name: RStr::from_str(plugin_name),
        plugin_version: RStr::from_str(plugin_version),
        panic_unwind,
        init: plugin_init,
        backends,
        call: plugin_call,
    }
    .leak_into_prefix()
}

extern "C" fn plugin_init(host: abi::HostServicesBox) -> RResult<(), RawError> {
    guard("init", || {
        super::log_bridge::install(host);
        Ok(())
    })
    .map_err(RawError::from)
    .into()
}

extern "C" fn plugin_call(method: RStr<'_>, _json: RStr<'_>) -> RResult<RString, RawError> {
    RResult::RErr(PluginError::unsupported(&format!("plugin call `{method}`")).into())
}

struct BackendAdapter {
    inner: Box<dyn BackendImpl>,
    name: RString,
}

impl abi::Backend for BackendAdapter {
    fn name(&self) -> RString {
        self.name.clone()
    }

    fn probe(&self, ctx_json: RStr<'_>) -> RResult<RString, RawError> {
        let result = guard("probe", || {
            let ctx: ProbeContext = serde_json::from_str(ctx_json.as_str())
                .map_err(|e| PluginError::invalid(format!("probe context: {e}")))?;
            let report = self.inner.probe(&ctx);
            serde_json::to_string(&report)
                .map_err(|e| PluginError::other(format!("probe report: {e}")))
        });
        error::to_rresult::<_, RString>(result)
    }

    fn launch(&self, spec_json: RStr<'_>, sink: SinkBox) -> RResult<SandboxBox, RawError> {
        let events = EventSender::new(sink);
        let result = guard("launch", || {
            let spec: SandboxSpec = serde_json::from_str(spec_json.as_str()).map_err(|e| {
                PluginError::new(ErrorCode::INVALID_SPEC, format!("sandbox spec: {e}"))
            })?;
            let sandbox = self.inner.launch(spec, events.clone())?;
            Ok(SandboxBox::from_value(
                SandboxAdapter {
                    inner: sandbox,
                    events: events.clone(),
                    destroyed: AtomicBool::new(false),
                },
                TD_Opaque,
            ))
        });
        if result.is_err() {
            // A failed launch has no sandbox to destroy: its events end here.
            events.close();
        }
        error::to_rresult::<_, SandboxBox>(result)
    }

    fn call(&self, method: RStr<'_>, json: RStr<'_>) -> RResult<RString, RawError> {
        let result = guard("call", || {
            self.inner
                .call(method.as_str(), json.as_str())
                .map(RString::from)
        });
        error::to_rresult::<_, RString>(result)
    }
}

struct SandboxAdapter {
    inner: Box<dyn SandboxImpl>,
    events: EventSender,
    destroyed: AtomicBool,
}

impl SandboxAdapter {
    fn alive(&self) -> Result<(), PluginError> {
        if self.destroyed.load(Ordering::SeqCst) {
            return Err(PluginError::new(
                ErrorCode::DESTROYED,
                "the sandbox was destroyed",
            ));
        }
        Ok(())
    }

    fn run<T>(
        &self,
        what: &str,
        f: impl FnOnce() -> Result<T, PluginError>,
    ) -> Result<T, PluginError> {
        self.alive()?;
        guard(what, f)
    }

    fn destroy_once(&self) -> Result<(), PluginError> {
        if self.destroyed.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        let result = guard("destroy", || self.inner.destroy());
        // Nothing may reach the host after destroy returns, whatever the
        // backend's threads are still doing.
        self.events.close();
        result
    }
}

impl abi::Sandbox for SandboxAdapter {
    fn info_json(&self) -> RString {
        let info = guard("info", || Ok(self.inner.info())).unwrap_or_else(|e| SandboxInfo {
            state: SandboxState::Error,
            error: Some(e.message),
            ..SandboxInfo::default()
        });
        serde_json::to_string(&info).unwrap_or_default().into()
    }

    fn exec(&self, req_json: RStr<'_>) -> RResult<u64, RawError> {
        let result = self.run("exec", || {
            let request: ExecRequest = serde_json::from_str(req_json.as_str())
                .map_err(|e| PluginError::invalid(format!("exec request: {e}")))?;
            if request.argv.is_empty() {
                return Err(PluginError::invalid("exec request: argv is empty"));
            }
            self.inner.exec(request)
        });
        error::to_rresult::<_, u64>(result)
    }

    fn write_stdin(&self, exec_id: u64, data: RSlice<'_, u8>) -> RResult<(), RawError> {
        error::to_rresult::<_, ()>(self.run("write_stdin", || {
            self.inner.write_stdin(exec_id, data.as_slice())
        }))
    }

    fn close_stdin(&self, exec_id: u64) -> RResult<(), RawError> {
        error::to_rresult::<_, ()>(self.run("close_stdin", || self.inner.close_stdin(exec_id)))
    }

    fn kill(&self, exec_id: u64, signal: i32) -> RResult<(), RawError> {
        error::to_rresult::<_, ()>(self.run("kill", || self.inner.kill(exec_id, signal)))
    }

    fn suspend(&self) -> RResult<(), RawError> {
        error::to_rresult::<_, ()>(self.run("suspend", || self.inner.suspend()))
    }

    fn resume(&self) -> RResult<(), RawError> {
        error::to_rresult::<_, ()>(self.run("resume", || self.inner.resume()))
    }

    fn destroy(&self) -> RResult<(), RawError> {
        error::to_rresult::<_, ()>(self.destroy_once())
    }

    fn call(&self, method: RStr<'_>, json: RStr<'_>) -> RResult<RString, RawError> {
        let result = self.run("call", || {
            self.inner
                .call(method.as_str(), json.as_str())
                .map(RString::from)
        });
        error::to_rresult::<_, RString>(result)
    }
}

impl Drop for SandboxAdapter {
    /// Teardown always runs: a host that drops a sandbox without destroying
    /// it still leaves nothing behind.
    fn drop(&mut self) {
        let _ = self.destroy_once();
    }
}
