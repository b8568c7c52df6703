//! Rules a front-end applies when it builds a spec of its own (`run` from
//! the current directory, and the front-ends that take `run`'s flags).

use std::path::{Path, PathBuf};

use sandbox_plugin_api::SandboxSpec;

/// What a front-end's commands may execute from unless told otherwise
/// (`run --no-exec-grant`; SPEC F5):
/// the working directory when a writable bind holds it — builds run what
/// they build (`make && ./a.out`, `cargo test`, a venv's scripts) — and the
/// sandbox's private `/tmp`, `/var/tmp` and `$HOME` (when no bind shows it),
/// which are thrown away with the sandbox. Nothing in read-only modes.
pub fn default_exec_grants(spec: &SandboxSpec, home: Option<&Path>) -> Vec<PathBuf> {
    if !spec.binds_writable() {
        return Vec::new();
    }
    let shown_by = |path: &Path| {
        spec.bind_mounts
            .iter()
            .filter(|b| path.starts_with(b.guest_path()))
            .max_by_key(|b| b.guest_path().components().count())
    };
    let mut grants = Vec::new();
    if let Some(workdir) = &spec.guest_workdir
        && shown_by(workdir).is_some_and(|b| !b.read_only)
    {
        grants.push(workdir.clone());
    }
    grants.extend(["/tmp", "/var/tmp"].map(PathBuf::from));
    if let Some(home) = home.filter(|h| h.is_absolute() && shown_by(h).is_none()) {
        grants.push(home.to_path_buf());
    }
    grants
}
