//! Whether this host can run bwrap sandboxes (SPEC B2): `bwrap` and `socat`
//! on PATH, our `sandbox-init` beside the plugin, and a canary — bwrap with
//! every namespace unshared running `true` — that really succeeds.

use std::ffi::OsStr;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use sandbox_plugin_api::{ProbeContext, ProbeReport, SandboxBackend, capability};

/// The badge (SPEC B2).
pub const NOTE: &str = "bubblewrap — namespace isolation, no kernel boundary";

/// The file name of the helper that is PID 1 of every sandbox.
pub const INIT_NAME: &str = "sandbox-init";

/// What a launch needs, found by the probe.
#[derive(Debug, Clone)]
pub struct Tools {
    pub bwrap: PathBuf,
    pub init: PathBuf,
}

/// Probes; on success also returns the tools it found. `canary` runs the
/// canary for the bwrap found ([`canary`], or a kept result of it).
pub fn probe(
    ctx: &ProbeContext,
    canary: impl FnOnce(&Tools) -> Result<(), String>,
) -> (ProbeReport, Option<Tools>) {
    let unavailable = |hint: String| {
        (
            ProbeReport {
                note: NOTE.into(),
                kind: SandboxBackend::Native,
                ..ProbeReport::unavailable(NOTE, hint)
            },
            None,
        )
    };
    if std::env::consts::OS != "linux" {
        return unavailable("native sandbox is not offered on this platform".into());
    }
    if std::env::consts::ARCH != "x86_64" {
        return unavailable(format!(
            "the bwrap backend's seccomp filter is written for x86_64; this host is {}",
            std::env::consts::ARCH
        ));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    let bwrap = find_in_path(&path, "bwrap");
    let socat = find_in_path(&path, "socat");
    let missing: Vec<&str> = [("bubblewrap", bwrap.is_none()), ("socat", socat.is_none())]
        .into_iter()
        .filter_map(|(package, gone)| gone.then_some(package))
        .collect();
    if !missing.is_empty() {
        let (mut report, tools) = unavailable(format!(
            "install the Debian packages: {}",
            missing.join(" ")
        ));
        report.requires_install = true;
        return (report, tools);
    }
    let Some(bwrap) = bwrap else {
        return unavailable("bwrap is missing".into());
    };
    let init = match find_init(ctx) {
        Ok(init) => init,
        Err(hint) => return unavailable(hint),
    };
    let tools = Tools { bwrap, init };
    if let Err(hint) = canary(&tools) {
        return unavailable(hint);
    }
    let report = ProbeReport {
        available: true,
        note: NOTE.into(),
        kind: SandboxBackend::Native,
        capabilities: vec![
            capability::STDIN.into(),
            capability::PTY.into(),
            capability::EXEC_TIMEOUT.into(),
            capability::SUSPEND.into(),
            capability::FS_ISOLATION.into(),
            capability::HOST_FDS.into(),
            // An empty network namespace; sandbox-init's forwarder to the
            // session's proxies is the only way out (SPEC E2).
            capability::NET_PROXY_ONLY.into(),
        ],
        ..ProbeReport::default()
    };
    (report, Some(tools))
}

fn find_in_path(path: &OsStr, name: &str) -> Option<PathBuf> {
    std::env::split_paths(path)
        .map(|dir| dir.join(name))
        .find(|candidate| {
            candidate
                .metadata()
                .is_ok_and(|m| m.is_file() && m.mode() & 0o111 != 0)
        })
}

/// `sandbox-init`: the `init` option, else beside this library (or beside the
/// executable that links it, and its parent, for tests).
fn find_init(ctx: &ProbeContext) -> Result<PathBuf, String> {
    if let Some(explicit) = ctx.options.get("init").and_then(|v| v.as_str()) {
        let path = PathBuf::from(explicit);
        check_trusted(&path)?;
        return Ok(path);
    }
    let mut looked = Vec::new();
    let own = own_file();
    let dirs = own
        .iter()
        .flat_map(|file| file.parent())
        .flat_map(|dir| [Some(dir.to_path_buf()), dir.parent().map(Path::to_path_buf)])
        .flatten();
    for dir in dirs {
        let candidate = dir.join(INIT_NAME);
        if candidate.is_file() {
            check_trusted(&candidate)?;
            return Ok(candidate);
        }
        looked.push(candidate.display().to_string());
    }
    Err(format!(
        "the {INIT_NAME} helper was not found (looked at {}); build the workspace, or set `init` under [backends.bwrap]",
        looked.join(", ")
    ))
}

/// The file this code was loaded from: the plugin library, or the
/// executable it is linked into.
pub fn own_file() -> Option<PathBuf> {
    // SAFETY: an all-zero Dl_info is a valid out-parameter.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    let address = own_file as *const libc::c_void;
    // SAFETY: dladdr only reads the address and fills `info`.
    if unsafe { libc::dladdr(address, &mut info) } == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dladdr set dli_fname to a NUL-terminated string it owns.
    let name = unsafe { std::ffi::CStr::from_ptr(info.dli_fname) };
    let path = PathBuf::from(std::ffi::OsStr::new(
        std::str::from_utf8(name.to_bytes()).ok()?,
    ));
    std::fs::canonicalize(path).ok()
}

/// The helper runs every command: it must be as trusted as the plugin.
fn check_trusted(path: &Path) -> Result<(), String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    if !meta.is_file() || meta.mode() & 0o111 == 0 {
        return Err(format!("{} is not an executable file", path.display()));
    }
    if meta.mode() & 0o022 != 0 || (meta.uid() != 0 && meta.uid() != euid) {
        return Err(format!(
            "{} may be written by others (mode {:03o}, uid {}); it runs every sandboxed command, so it is refused",
            path.display(),
            meta.mode() & 0o777,
            meta.uid()
        ));
    }
    Ok(())
}

/// bwrap with every namespace unshared, running `true`.
pub fn canary(bwrap: &Path) -> Result<(), String> {
    let output = Command::new(bwrap)
        .args([
            "--unshare-all",
            "--unshare-user",
            "--die-with-parent",
            "--new-session",
            "--cap-drop",
            "ALL",
            "--cap-add",
            "CAP_SETFCAP",
            "--ro-bind",
            "/",
            "/",
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--",
            "true",
        ])
        .env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| format!("running {}: {e}", bwrap.display()))?;
    if output.status.success() {
        return Ok(());
    }
    let message = String::from_utf8_lossy(&output.stderr).trim().to_owned();
    Err(explain_canary_failure(&message))
}

/// Turns bwrap's complaint into the reason and the fix.
pub fn explain_canary_failure(message: &str) -> String {
    let lower = message.to_lowercase();
    let why = if lower.contains("no permissions to create")
        || lower.contains("uid map")
        || lower.contains("creating new namespace")
    {
        "user namespaces are blocked on this host (check kernel.unprivileged_userns_clone, user.max_user_namespaces, \
         and on Ubuntu kernel.apparmor_restrict_unprivileged_userns or an AppArmor profile for bwrap)"
    } else if lower.contains("mount") && lower.contains("proc") {
        "/proc cannot be mounted in a new namespace; this usually means a container without the needed privileges"
    } else if lower.contains("operation not permitted") {
        "namespaces cannot be created here (a container or a seccomp policy forbids it)"
    } else {
        "bwrap could not start a sandbox"
    };
    if message.is_empty() {
        why.to_owned()
    } else {
        format!("{why}; bwrap said: {message}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canary_failures_name_the_cause() {
        assert!(explain_canary_failure("bwrap: No permissions to creating new namespace, likely because the kernel does not allow non-privileged user namespaces").contains("user namespaces are blocked"));
        assert!(
            explain_canary_failure("bwrap: setting up uid map: Permission denied")
                .contains("user namespaces are blocked")
        );
        assert!(
            explain_canary_failure(
                "bwrap: Can't mount proc on /newroot/proc: Operation not permitted"
            )
            .contains("/proc cannot be mounted")
        );
        assert!(
            explain_canary_failure("bwrap: something new")
                .ends_with("bwrap said: bwrap: something new")
        );
    }

    #[test]
    fn missing_tools_name_their_packages() {
        let path = std::ffi::OsString::from("/nonexistent");
        assert_eq!(find_in_path(&path, "bwrap"), None);
    }
}
