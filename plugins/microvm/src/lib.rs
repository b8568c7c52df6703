//! The `microvm` backend: sandboxes in a QEMU microVM, the only backend
//! with a kernel boundary (SPEC C5; docs/research/microvm.md §4).
//!
//! - [`kvm`]: a functional accelerator test that runs a 64-bit ring-0 guest
//!   and times it, because on a PVM host `/dev/kvm` opens fine and then
//!   emulates every guest kernel;
//! - [`qemu`]: finds `qemu-system-x86_64`, its `microvm` machine and its
//!   accelerators; [`image`]: the guest image, verified;
//! - [`probe`]: combines them with the TCG opt-in and says what is missing;
//! - [`engine`]: boots a VM per sandbox and runs commands through the guest
//!   agent (`sandbox-microvm-agent`, the image's `/init`).
//!
//! Without a hardware accelerator the backend is available only with the
//! TCG opt-in, and then says everywhere that it is emulated and not an
//! isolation boundary. An explicit request that cannot run fails loudly; a
//! configured default steps down (SPEC B7).

pub mod cache;
pub mod engine;
pub mod image;
pub mod kvm;
pub mod options;
pub mod probe;
pub mod qemu;
pub mod tsc;

use std::sync::Mutex;

use sandbox_plugin_api::sdk::{BackendImpl, EventSender, SandboxImpl};
use sandbox_plugin_api::{ErrorCode, PluginError, ProbeContext, ProbeReport, SandboxSpec};

use crate::engine::Engine;

/// The `microvm` backend.
#[derive(Default)]
pub struct MicrovmBackend {
    /// The last probe's hint and, when it could run, its engine.
    last: Mutex<Option<(String, Option<Engine>)>>,
}

/// How `launch` starts its refusal.
pub const LAUNCH_UNAVAILABLE: &str = "the microvm backend cannot run here";

impl BackendImpl for MicrovmBackend {
    fn name(&self) -> &str {
        "microvm"
    }

    fn probe(&self, ctx: &ProbeContext) -> ProbeReport {
        let (report, engine) = probe::probe(ctx);
        if let Ok(mut last) = self.last.lock() {
            *last = Some((report.hint.clone(), engine));
        }
        report
    }

    fn launch(
        &self,
        spec: SandboxSpec,
        events: EventSender,
    ) -> Result<Box<dyn SandboxImpl>, PluginError> {
        let last = self.last.lock().ok().and_then(|last| last.clone());
        let (hint, engine) = match last {
            Some(last) => last,
            None => {
                let (report, engine) = probe::probe(&ProbeContext::default());
                (report.hint, engine)
            }
        };
        let Some(engine) = engine else {
            return Err(PluginError::new(
                ErrorCode::UNAVAILABLE,
                format!("{LAUNCH_UNAVAILABLE}: {hint}"),
            ));
        };
        let vm = engine.launch(&spec, events)?;
        Ok(Box::new(vm))
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
    fn probe_on_this_host_without_opt_in_is_unavailable() {
        let backend = BackendObject::builtin(MicrovmBackend::default()).unwrap();
        assert_eq!(backend.name(), "microvm");
        let report = backend.probe(&ProbeContext::default()).unwrap();
        assert!(!report.available, "{report:?}");
        assert_eq!(report.kind, sandbox_plugin_api::SandboxBackend::Microvm);
        assert!(
            report.hint.contains("ring-0") || report.hint.contains("image"),
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
