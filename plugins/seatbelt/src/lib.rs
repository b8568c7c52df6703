//! The `seatbelt` backend: macOS `sandbox-exec` with a profile generated per
//! launch (SPEC C1, D2, F12).
//!
//! This version builds the parts that can be tested anywhere:
//!
//! - [`profile`]: the profile generator, a pure function of the spec, the
//!   home directory, the proxy ports and a [`profile::PathResolver`];
//! - [`sexpr`]: a reader and checker for the profile language, run on every
//!   generated profile and used by the tests to prove each rule is there;
//! - [`logparse`]: the parser for `log stream` lines that turns denials into
//!   violations (noise filtered, storms folded, per-session tags);
//! - [`probe`]: honest about the rest.
//!
//! Launching is **not built**: it cannot be verified on the Linux machine
//! this was written on. The probe reports the backend unavailable on every
//! platform (on macOS with a hint saying why), and `launch` refuses with
//! [`ErrorCode::UNAVAILABLE`]. The plugin builds and loads everywhere.

#![forbid(unsafe_code)]

pub mod lists;
pub mod logparse;
pub mod probe;
pub mod profile;
pub mod sexpr;

use sandbox_plugin_api::sdk::{BackendImpl, EventSender, SandboxImpl};
use sandbox_plugin_api::{ErrorCode, PluginError, ProbeContext, ProbeReport, SandboxSpec};

/// The `seatbelt` backend.
#[derive(Default)]
pub struct SeatbeltBackend;

/// What `launch` says in this version.
pub const LAUNCH_UNAVAILABLE: &str = "the seatbelt backend cannot launch in this version: only its profile generator \
     and log parser are built; use `--backend none` or a host with another native backend";

impl BackendImpl for SeatbeltBackend {
    fn name(&self) -> &str {
        "seatbelt"
    }

    fn probe(&self, _ctx: &ProbeContext) -> ProbeReport {
        probe::probe()
    }

    fn launch(
        &self,
        spec: SandboxSpec,
        _events: EventSender,
    ) -> Result<Box<dyn SandboxImpl>, PluginError> {
        tracing::debug!(session = %spec.session_id, "seatbelt launch refused: not built");
        Err(PluginError::new(ErrorCode::UNAVAILABLE, LAUNCH_UNAVAILABLE))
    }
}

sandbox_plugin_api::export_backend!(SeatbeltBackend);

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use sandbox_plugin_api::host::BackendObject;
    use sandbox_plugin_api::testkit::Recorder;

    use super::*;

    #[test]
    fn probe_on_this_host_is_unavailable_with_the_platform_hint() {
        let backend = BackendObject::builtin(SeatbeltBackend).unwrap();
        assert_eq!(backend.name(), "seatbelt");
        let report = backend.probe(&ProbeContext::default()).unwrap();
        assert!(!report.available);
        assert_eq!(report.kind, sandbox_plugin_api::SandboxBackend::Native);
        let expected = if cfg!(target_os = "macos") {
            probe::LAUNCH_NOT_BUILT
        } else {
            probe::NOT_THIS_PLATFORM
        };
        assert_eq!(report.hint, expected);
    }

    #[test]
    fn launch_is_refused_as_unavailable() {
        let backend = BackendObject::builtin(SeatbeltBackend).unwrap();
        let err = backend
            .launch(&SandboxSpec::default(), Arc::new(Recorder::default()))
            .err()
            .unwrap();
        assert_eq!(err.code, ErrorCode::UNAVAILABLE);
        assert!(
            err.message.contains("not") && err.message.contains("seatbelt"),
            "{err}"
        );
    }
}
