//! What the plan keeps read-only inside writable binds and what it masks:
//! the write-protected paths (protected paths, the mandatory denies that
//! exist, a repository's git pointers) and the secrets (SPEC F3, C1, G5).

use super::*;

/// Host paths (resolved) to keep read-only: `protectedPaths` and the
/// mandatory denies that exist in `$HOME` and at the top of writable roots.
pub(super) fn write_protected(
    spec: &SandboxSpec,
    home: Option<&Path>,
    views: &[View],
    kept: &Kept,
    host: &dyn HostFacts,
) -> Result<Vec<PathBuf>, PlanError> {
    let mut out = BTreeSet::new();
    for path in &spec.protected_paths {
        if !path.is_absolute() {
            return Err(PlanError::NotAbsolute("protectedPaths entry", path.clone()));
        }
        match host.resolve(path) {
            Some(resolved) => {
                out.insert(resolved);
            }
            None => {
                let exposed = views
                    .iter()
                    .any(|v| v.writable && path.starts_with(&v.host));
                if exposed {
                    return Err(PlanError::ProtectedMissing(path.clone()));
                }
            }
        }
    }
    let mut roots: Vec<PathBuf> = views
        .iter()
        .filter(|v| v.writable)
        .map(|v| v.host.clone())
        .collect();
    roots.extend(home.map(Path::to_path_buf));
    for root in &roots {
        for (name, _why) in MANDATORY_WRITE_DENY {
            if let Some(resolved) = host.resolve(&root.join(name)) {
                out.insert(resolved);
            }
        }
        out.extend(git_internals(root, host));
    }
    if let Some(home) = home {
        for (name, _why) in HOME_WRITE_DENY {
            if let Some(resolved) = host.resolve(&home.join(name)) {
                out.insert(resolved);
            }
        }
    }
    for path in kept.home.iter().chain(&kept.path_dirs) {
        out.extend(host.resolve(path));
    }
    Ok(out.into_iter().collect())
}

/// What the allowlists keep read-only by mounts besides the named lists
/// (`plan_allowlists`): a bound home's kept top-level entries, and the
/// `PATH` directories inside writable binds (resolved).
pub(super) struct Kept {
    pub(super) home: Vec<PathBuf>,
    pub(super) path_dirs: Vec<PathBuf>,
}

/// Secrets that exist, resolved, with their kind: the system's, `$HOME`'s
/// and the toolchains' credential files (`toolchain_secrets`).
pub(super) fn secrets(
    home: Option<&Path>,
    toolchain_secrets: &[PathBuf],
    server_state: &[PathBuf],
    host: &dyn HostFacts,
) -> Vec<(PathBuf, Kind)> {
    let mut candidates: Vec<PathBuf> = SYSTEM_SECRETS
        .iter()
        .map(|(p, _)| PathBuf::from(p))
        .collect();
    candidates.extend(toolchain_secrets.iter().cloned());
    candidates.extend(server_state.iter().cloned());
    if let Some(home) = home {
        candidates.extend(HOME_SECRETS.iter().map(|(p, _)| home.join(p)));
    }
    let key_dir = Path::new(SSH_HOST_KEY_DIR);
    for name in host.list(key_dir) {
        let text = name.to_string_lossy();
        if sandbox_paths::secrets::is_ssh_host_key(&text) {
            candidates.push(key_dir.join(&name));
        }
    }
    let mut out: Vec<(PathBuf, Kind)> = candidates
        .into_iter()
        .filter_map(|p| Some((host.resolve(&p)?, host.kind(&p)?)))
        .collect();
    out.sort();
    out.dedup();
    out
}
