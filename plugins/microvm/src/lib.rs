//! The `microvm` backend: sandboxes in a QEMU microVM, the only backend
//! with a kernel boundary (SPEC C5; research/microvm.md §4).
//!
//! This first slice builds only the probe, and makes it honest:
//!
//! - [`kvm`]: a functional accelerator test that runs a 64-bit ring-0 guest
//!   and times it, because on a PVM host `/dev/kvm` opens fine and then
//!   emulates every guest kernel;
//! - [`qemu`]: finds `qemu-system-x86_64`, its version, the `microvm`
//!   machine and its accelerators;
//! - [`probe`]: combines them with the TCG opt-in and says what is missing.
//!
//! The engine (QEMU over QMP), the guest image and the guest agent are
//! **not built**, so the probe never reports the backend available, and
//! `launch` refuses with [`ErrorCode::UNAVAILABLE`] and the probe's reason.
//! An explicit request for `microvm` therefore fails loudly, and a
//! configured default steps down (SPEC B7).

pub mod cache;
pub mod kvm;
pub mod probe;
pub mod qemu;

use std::sync::Mutex;

use sandbox_plugin_api::sdk::{BackendImpl, EventSender, SandboxImpl};
use sandbox_plugin_api::{ErrorCode, PluginError, ProbeContext, ProbeReport, SandboxSpec};

/// The `microvm` backend.
#[derive(Default)]
pub struct MicrovmBackend {
    /// The last probe's hint, so `launch` gives the same reason without
    /// running the KVM test again.
    last_hint: Mutex<Option<String>>,
}

/// How `launch` starts its refusal.
pub const LAUNCH_UNAVAILABLE: &str = "the microvm backend cannot launch in this version";

impl BackendImpl for MicrovmBackend {
    fn name(&self) -> &str {
        "microvm"
    }

    fn probe(&self, ctx: &ProbeContext) -> ProbeReport {
        let report = probe::probe(ctx);
        if let Ok(mut last) = self.last_hint.lock() {
            *last = Some(report.hint.clone());
        }
        report
    }

    fn launch(
        &self,
        spec: SandboxSpec,
        _events: EventSender,
    ) -> Result<Box<dyn SandboxImpl>, PluginError> {
        tracing::debug!(session = %spec.session_id, "microvm launch refused: not built");
        let known = self.last_hint.lock().ok().and_then(|last| last.clone());
        let why = known.unwrap_or_else(|| probe::probe(&ProbeContext::default()).hint);
        Err(PluginError::new(
            ErrorCode::UNAVAILABLE,
            format!("{LAUNCH_UNAVAILABLE}: {why}"),
        ))
    }
}

sandbox_plugin_api::export_backend!(MicrovmBackend::default());

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use sandbox_plugin_api::host::BackendObject;
    use sandbox_plugin_api::testkit::Recorder;

    use super::*;

    #[test]
    fn probe_on_this_host_is_unavailable_and_says_the_engine_is_missing() {
        let backend = BackendObject::builtin(MicrovmBackend::default()).unwrap();
        assert_eq!(backend.name(), "microvm");
        let report = backend.probe(&ProbeContext::default()).unwrap();
        assert!(!report.available, "{report:?}");
        assert_eq!(report.kind, sandbox_plugin_api::SandboxBackend::Microvm);
        assert!(
            report.hint.ends_with(probe::ENGINE_NOT_BUILT),
            "{}",
            report.hint
        );
        assert!(report.capabilities.is_empty() && !report.kernel_boundary);
    }

    #[test]
    fn launch_is_refused_as_unavailable_with_the_probes_reason() {
        let backend = MicrovmBackend::default();
        let report = backend.probe(&ProbeContext::default());
        let backend = BackendObject::builtin(backend).unwrap();
        let err = backend
            .launch(&SandboxSpec::default(), Arc::new(Recorder::default()))
            .err()
            .unwrap();
        assert_eq!(err.code, ErrorCode::UNAVAILABLE);
        assert_eq!(
            err.message,
            format!("{LAUNCH_UNAVAILABLE}: {}", report.hint)
        );
    }
}
