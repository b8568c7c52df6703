//! The dispatch form (SPEC H1, H10, H11): a spec that names a conversation
//! and an agent instead of binds. The server resolves the binds itself, at
//! launch, from the workspaces layer (a crate of its own that depends on
//! this one, never the reverse): this module is the seam.
//!
//! How the two forms relate. A raw spec names its own `bindMounts`; none
//! may lie below the data directory (`sandbox_paths::binds`). A spec with
//! `conversationId` (and `agentId`) names none: the server binds exactly
//! the agent's workdir (writable, the default working directory), its
//! config dir (read-only), the conversation's `repos/` (writable, when the
//! workspace has repositories) and the workspace's attachments (read-only,
//! when set and present) — at most four — grants exec in the workdir and
//! `repos/`, and sets `workspaceId`. Everything else of the spec (mode,
//! network, egress, limits, protected paths) is the client's, as in a raw
//! spec. In both forms every registered checkout joins `protectedPaths`.

use std::path::PathBuf;

use sandbox_plugin_api::{SandboxBindMount, SandboxSpec};

/// A spec the dispatch form cannot take: the field to blame and why (the
/// API answers 400 naming it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the sandbox spec: {message}")]
pub struct FormError {
    pub field: &'static str,
    pub message: String,
}

/// What a launch asks the layer to resolve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayoutRequest {
    pub conversation: String,
    pub agent: String,
    /// The session that will use it (held until it is destroyed).
    pub session: String,
}

/// The binds of one agent of one conversation, resolved now.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Layout {
    pub workspace: String,
    /// At most four (SPEC H10), host path = guest path.
    pub binds: Vec<SandboxBindMount>,
    /// The agent's workdir: the commands' default working directory.
    pub workdir: PathBuf,
    /// Where commands may execute what they wrote: the workdir and `repos/`.
    pub exec_grants: Vec<PathBuf>,
    /// What the handle's `details` show (`conversation`, `agent`, `binds`).
    pub details: serde_json::Map<String, serde_json::Value>,
}

/// Held while a session uses a conversation: the layer refuses to delete a
/// conversation while one is held. Dropping it lets go.
pub trait Lease: Send + Sync {}

/// A resolved layout and the lease on its conversation.
pub struct Leased {
    pub layout: Layout,
    pub lease: Box<dyn Lease>,
}

/// Why a layout could not be resolved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct LayoutError {
    pub kind: LayoutErrorKind,
    /// The spec field to blame, where one is.
    pub field: Option<&'static str>,
    pub message: String,
}

/// What kind of failure: the API's status follows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayoutErrorKind {
    /// No such conversation or agent.
    NotFound,
    /// The request cannot be resolved as asked.
    Invalid,
    /// The conversation is being removed, or not ready.
    Conflict,
    /// The state store or the filesystem failed.
    Internal,
}

/// What the runtime asks of the workspaces layer at every launch. Calls do
/// I/O (a database, the filesystem): the runtime makes them on a blocking
/// thread.
pub trait WorkspaceLayer: Send + Sync {
    /// Resolves the dispatch form's binds and holds the conversation.
    fn lease(&self, request: &LayoutRequest) -> Result<Leased, LayoutError>;
    /// Every registered checkout that exists now (SPEC H11); one that has
    /// vanished is reported by the layer and left out.
    fn registered_checkouts(&self) -> Result<Vec<PathBuf>, LayoutError>;
}

/// The layer as the launch settings hold it.
#[derive(Clone)]
pub struct Layer(pub std::sync::Arc<dyn WorkspaceLayer>);

impl std::fmt::Debug for Layer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Layer(workspaces)")
    }
}

/// The spec of the dispatch form with its layout applied. Pure. Refuses
/// (400, naming the field) what the client may not give in this form: its
/// own binds, state dirs, working directory or exec grants, and a
/// `workspaceId` other than the conversation's.
pub fn apply_layout(mut spec: SandboxSpec, layout: Layout) -> Result<SandboxSpec, FormError> {
    check_dispatch_form(&spec)?;
    if !spec.workspace_id.is_empty() && spec.workspace_id != layout.workspace {
        return Err(FormError {
            field: "workspaceId",
            message: format!(
                "`workspaceId` is {:?}, but the conversation belongs to the workspace {:?}; \
                 leave it out (the server sets it)",
                spec.workspace_id, layout.workspace
            ),
        });
    }
    spec.workspace_id = layout.workspace;
    spec.bind_mounts = layout.binds;
    spec.guest_workdir = Some(layout.workdir);
    spec.exec_grant_roots = layout.exec_grants;
    Ok(spec)
}

/// What the dispatch form takes no client value for; the client's
/// mistakes before anything is resolved. Pure.
pub fn check_dispatch_form(spec: &SandboxSpec) -> Result<(), FormError> {
    let refuse = |field: &'static str, what: &str| {
        Err(FormError {
            field,
            message: format!(
                "a spec with `conversationId` takes no {what} (`{field}`): the server binds the \
                 agent's workdir, its config dir, the conversation's `repos/` and the \
                 workspace's attachments itself; leave `{field}` out, or send a spec without \
                 `conversationId`"
            ),
        })
    };
    if !spec.bind_mounts.is_empty() {
        return refuse("bindMounts", "binds of its own");
    }
    if !spec.runner_state_dirs.is_empty() {
        return refuse("runnerStateDirs", "writable directories of its own");
    }
    if spec.guest_workdir.is_some() {
        return refuse("guestWorkdir", "working directory (give `cwd` per exec)");
    }
    if !spec.exec_grant_roots.is_empty() {
        return refuse("execGrantRoots", "exec grants of its own");
    }
    if spec.agent_id.as_deref().is_none_or(str::is_empty) {
        return Err(FormError {
            field: "agentId",
            message: "a spec with `conversationId` names the agent too (`agentId`): each agent \
                      has its own workdir"
                .into(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> Layout {
        Layout {
            workspace: "w".into(),
            binds: vec![SandboxBindMount {
                host_path: "/d/c/agents/a/work".into(),
                guest_path: None,
                read_only: false,
            }],
            workdir: "/d/c/agents/a/work".into(),
            exec_grants: vec!["/d/c/agents/a/work".into()],
            details: serde_json::Map::new(),
        }
    }

    fn dispatch() -> SandboxSpec {
        SandboxSpec {
            conversation_id: Some("c".into()),
            agent_id: Some("a".into()),
            ..SandboxSpec::default()
        }
    }

    /// SPEC H10: the layout's binds, workdir and grants, the workspace set.
    #[test]
    fn the_layout_is_the_specs_binds() {
        let spec = apply_layout(dispatch(), layout()).unwrap();
        assert_eq!(spec.bind_mounts, layout().binds);
        assert_eq!(spec.guest_workdir, Some(layout().workdir));
        assert_eq!(spec.workspace_id, "w");
    }

    /// SPEC H10: the form takes no client binds; each refusal names its field.
    #[test]
    fn client_binds_are_refused_naming_the_field() {
        let with = |f: &dyn Fn(&mut SandboxSpec)| {
            let mut spec = dispatch();
            f(&mut spec);
            match apply_layout(spec, layout()) {
                Err(FormError { field, .. }) => field,
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(
            with(&|s| s.bind_mounts.push(SandboxBindMount::default())),
            "bindMounts"
        );
        assert_eq!(
            with(&|s| s.runner_state_dirs.push("/x".into())),
            "runnerStateDirs"
        );
        assert_eq!(
            with(&|s| s.guest_workdir = Some("/x".into())),
            "guestWorkdir"
        );
        assert_eq!(
            with(&|s| s.exec_grant_roots.push("/x".into())),
            "execGrantRoots"
        );
        assert_eq!(with(&|s| s.agent_id = None), "agentId");
        assert_eq!(with(&|s| s.workspace_id = "other".into()), "workspaceId");
    }
}
