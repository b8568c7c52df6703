//! The sources a plan names and the points sandbox-init checks (SPEC G5,
//! threat model T40): each source where the server checked it, the
//! server's own ones resolved, so the launch can open every one with no
//! symlink followed (`crate::pinned`).

use super::*;

/// The resolved spelling of a source the server or its config names (not
/// the spec): the launch opens every source with no symlink followed
/// (`crate::pinned`), so a configured path through a symlink is given
/// resolved; one that does not resolve stays as it is (and fails there).
pub(super) fn canonical(path: &Path, host: &dyn HostFacts) -> PathBuf {
    host.resolve(path).unwrap_or_else(|| path.to_path_buf())
}

/// Refuses a source that resolves elsewhere than where the host's path
/// rules checked it (`checkedHostPaths`): a swap raced the launch.
pub(super) fn unchanged(
    spec: &SandboxSpec,
    literal: &Path,
    resolved: &Path,
) -> Result<(), PlanError> {
    match spec.checked_host_paths.get(literal) {
        Some(checked) if checked != resolved => Err(PlanError::Changed {
            path: literal.to_path_buf(),
            checked: checked.clone(),
            now: resolved.to_path_buf(),
        }),
        _ => Ok(()),
    }
}

/// The points sandbox-init checks are read-only mounts before anything
/// runs (`--protected`): the protections, and every read-only view inside a
/// writable one (its destination lies where other sessions may write, so a
/// swap under bubblewrap could mount it elsewhere).
pub(super) fn checked_points(
    protected: &[PathBuf],
    views: &[View],
    read_only_views: &[View],
) -> BTreeSet<PathBuf> {
    let nested_read_only = views
        .iter()
        .chain(read_only_views)
        .filter(|v| !v.writable)
        .filter(|v| {
            views
                .iter()
                .any(|w| w.writable && w.guest != v.guest && v.guest.starts_with(&w.guest))
        })
        .map(|v| v.guest.clone());
    protected.iter().cloned().chain(nested_read_only).collect()
}

/// Where each `unixSockets` entry appears inside (the deepest bind that
/// shows it), as the guard compares a socket's canonical path.
pub(super) fn allowed_sockets(
    spec: &SandboxSpec,
    views: &[View],
    host: &dyn HostFacts,
) -> Result<Vec<PathBuf>, PlanError> {
    spec.unix_sockets
        .iter()
        .map(|socket| {
            if !socket.is_absolute() {
                return Err(PlanError::NotAbsolute("unixSockets entry", socket.clone()));
            }
            let resolved = canonical(socket, host);
            views
                .iter()
                .filter_map(|v| v.guest_of(&resolved))
                .max_by_key(|g| depth(g))
                .ok_or_else(|| PlanError::SocketHidden(socket.clone()))
        })
        .collect()
}
