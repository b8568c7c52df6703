//! The agent tools over the Model Context Protocol (SPEC H2, H3, H4, H12,
//! B10): what makes `cc_server` the tool runtime of any agent.
//!
//! - **`exec`** runs a command through `Session::exec`, the one dispatch
//!   path: the mode's command policy, the sanitized environment, the
//!   sandbox ([`exec`]).
//! - **The file tools** — `read`, `write`, `edit`, `apply_patch`,
//!   `search`, `find`, `search_files` — act in the server process, so
//!   every file operation goes through `sandbox-paths`' jail over the
//!   sandbox's roots, judged by the sandbox's own rules ([`files`]).
//! - **The mode's surface**: read-only modes list no mutating tool
//!   ([`surface`]).
//! - **Guardrails**: each change a mutating tool would make is an effect
//!   with a class, resolved before the call like a command's classes, a
//!   prompt answered by the server's owners or denied ([`effects`]).
//!
//! Two transports carry the same tools ([`server::AgentTools`]): stdio
//! (`cc_server mcp`, one sandbox for the process) and streamable HTTP
//! (`/mcp` in the API, the sandbox named by the agent credential each
//! request carries), both on the official Rust SDK, `rmcp`.

pub mod args;
pub mod effects;
pub mod events;
pub mod exec;
pub mod failure;
pub mod files;
pub mod http;
pub mod server;
pub mod surface;

use std::sync::Arc;

use sandbox_runtime::Session;

pub use files::roots::{GuestRoot, Roots};
pub use server::{AgentTools, CallerSandbox};

/// Where the file tools of a sandbox may act. The plain sandbox's binds by
/// default ([`plain_roots`]); the workspaces layer plugs in a
/// conversation's `repos/` and attachments directory here.
pub type RootsOf = Arc<dyn Fn(&Session) -> Roots + Send + Sync>;

/// The roots of a plain sandbox: its binds and runner state dirs.
pub fn plain_roots() -> RootsOf {
    Arc::new(|session: &Session| Roots::of_spec(session.launched_spec()))
}
