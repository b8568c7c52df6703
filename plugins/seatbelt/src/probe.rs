//! Whether this host can run seatbelt sandboxes (SPEC B2).
//!
//! macOS with `/usr/bin/sandbox-exec` is where the backend belongs — but
//! this version builds only the profile generator and the log parser (they
//! are tested on any OS); launching is not built, because it cannot be
//! verified where this was written. So the probe says so, honestly, instead
//! of reporting a backend that would fail every launch. Everywhere else the
//! native sandbox is not offered.

use std::path::Path;

use sandbox_plugin_api::{ProbeReport, SandboxBackend};

/// The badge (SPEC B2).
pub const NOTE: &str = "sandbox-exec (Seatbelt) — namespace isolation, no kernel boundary";

/// Where `sandbox-exec` lives on every macOS.
pub const SANDBOX_EXEC: &str = "/usr/bin/sandbox-exec";

/// The hint on any platform but macOS (SPEC B2).
pub const NOT_THIS_PLATFORM: &str = "native sandbox is not offered on this platform";

/// The hint on macOS in this version.
pub const LAUNCH_NOT_BUILT: &str =
    "the seatbelt backend's launch is not built yet; only its profile generator is";

/// Probes for the running host.
pub fn probe() -> ProbeReport {
    probe_for(std::env::consts::OS, &|p| p.is_file())
}

/// Probes for a given OS name (`std::env::consts::OS`), asking `exists`
/// whether a file is there.
pub fn probe_for(os: &str, exists: &dyn Fn(&Path) -> bool) -> ProbeReport {
    let hint = if os != "macos" {
        NOT_THIS_PLATFORM.to_owned()
    } else if !exists(Path::new(SANDBOX_EXEC)) {
        format!(
            "{SANDBOX_EXEC} is missing; it ships with every macOS, so this system is damaged or locked down"
        )
    } else {
        LAUNCH_NOT_BUILT.to_owned()
    };
    ProbeReport {
        kind: SandboxBackend::Native,
        ..ProbeReport::unavailable(NOTE, hint)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unavailable_on_every_platform_in_this_version() {
        for os in ["linux", "windows", "freebsd"] {
            let r = probe_for(os, &|_| true);
            assert!(!r.available, "{os}");
            assert_eq!(r.hint, NOT_THIS_PLATFORM, "{os}");
        }
        let r = probe_for("macos", &|p| p == Path::new(SANDBOX_EXEC));
        assert!(!r.available);
        assert_eq!(r.hint, LAUNCH_NOT_BUILT);
        let r = probe_for("macos", &|_| false);
        assert!(!r.available);
        assert!(
            r.hint.contains("/usr/bin/sandbox-exec is missing"),
            "{}",
            r.hint
        );
        for r in [probe_for("linux", &|_| true), probe_for("macos", &|_| true)] {
            assert_eq!(r.kind, SandboxBackend::Native);
            assert!(!r.kernel_boundary && !r.requires_install);
            assert!(
                r.capabilities.is_empty(),
                "nothing is promised while launch is not built"
            );
            assert_eq!(r.note, NOTE);
        }
    }
}
