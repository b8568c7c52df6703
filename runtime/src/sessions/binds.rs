//! A spec's binds through the path rules (`sandbox_paths::binds`): the
//! sources a spec shows, in the form the rules judge, and what they decide
//! applied to the spec.

use sandbox_paths::binds::{PathFacts, ServerPaths, Source, check_sources};
use sandbox_plugin_api::SandboxSpec;

use super::SessionError;

/// Every host path the spec shows, with how (SPEC F2, F4, F7). The binds
/// of a spec for a conversation are the server's own
/// ([`crate::layout::apply_layout`] refuses a client's there).
pub fn sources(spec: &SandboxSpec) -> Vec<Source<'_>> {
    let writable_mode = spec.binds_writable();
    let server_resolved = spec.conversation_id.is_some();
    let binds = spec.bind_mounts.iter().enumerate().map(|(i, b)| Source {
        name: format!("bindMounts[{i}].hostPath"),
        field: "bindMounts",
        path: &b.host_path,
        writable: writable_mode && !b.read_only,
        server_resolved,
    });
    let state = spec
        .runner_state_dirs
        .iter()
        .enumerate()
        .map(|(i, p)| Source {
            name: format!("runnerStateDirs[{i}]"),
            field: "runnerStateDirs",
            path: p,
            writable: true,
            server_resolved: false,
        });
    binds.chain(state).collect()
}

/// What the rules compare, resolved now (I/O).
pub fn gather(spec: &SandboxSpec, server: &ServerPaths) -> PathFacts {
    PathFacts::gather(sources(spec).iter().map(|s| s.path), server)
}

/// Refuses a spec whose binds show what no sandbox may see, or write what it
/// may only read (SPEC G5); adds to `protectedPaths` what the rules keep
/// read-only inside a writable bind, and returns one notice for each. Pure.
pub fn check_binds(
    spec: &mut SandboxSpec,
    server: &ServerPaths,
    facts: &PathFacts,
) -> Result<Vec<String>, SessionError> {
    let protect = check_sources(&sources(spec), server, facts).map_err(|refusal| {
        SessionError::InvalidSpec {
            field: refusal.field,
            message: refusal.message,
        }
    })?;
    // What was checked is what the backend mounts (SPEC G5): the resolved
    // spelling of each source goes with the spec, and whatever the client
    // put there is replaced.
    let checked = sources(spec)
        .iter()
        .filter_map(|s| Some((s.path.to_path_buf(), facts.resolve(s.path)?.clone())))
        .collect();
    spec.checked_host_paths = checked;
    let mut notices = Vec::new();
    for (path, notice) in protect {
        if !spec.protected_paths.contains(&path) {
            spec.protected_paths.push(path);
            notices.push(notice);
        }
    }
    Ok(notices)
}
