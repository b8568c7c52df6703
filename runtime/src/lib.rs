//! The session runtime: what every way into `cc_server` drives.
//!
//! A front-end — `cc_server run`, the HTTP API, and every one to come (MCP,
//! terminals, the Kubernetes contract) — is thin: it turns its own input into
//! a [`SandboxSpec`](sandbox_plugin_api::SandboxSpec) and an
//! [`ExecRequest`](sandbox_plugin_api::ExecRequest), and hands them to this
//! crate. Everything that decides is here, so every front-end gets the same
//! decisions (SPEC B10).
//!
//! # What a front-end may rely on
//!
//! 1. **One start-up.** [`start::start`] sweeps what killed servers left,
//!    discovers and probes every backend once (SPEC B1) and returns the
//!    [`Sessions`]. Its [`start::StartOptions`] are the resolved settings;
//!    an [`Approver`] given there answers the command policy's prompts
//!    instead of the API's owners.
//! 2. **One launch path.** [`Sessions::create`] plans the launch as a pure
//!    function first — the bind rules (hostile specs refused, SPEC G5), the
//!    backend by the fallback rules (B5–B9), the dispatch policy's globs
//!    (C3), the network rule (E5) — then starts the session's egress proxies
//!    (E1) and the backend's sandbox. A failure on the way undoes what was
//!    started.
//! 3. **One dispatch path.** [`Session::exec`] is the only way a command
//!    reaches a backend: the command policy classifies it and asks the
//!    approver if it must (H3, H4, H6), the environment is cleaned (H5), the
//!    proxy variables are added. A refusal is a [`SessionError::Refused`]
//!    that never reached the backend.
//! 4. **Events in order.** An [`ExecStream`] yields a command's events,
//!    `exit` or `killed` last; dropping it before then kills the command.
//!    Violations of the session's proxies arrive on the streams of its
//!    running commands.
//! 5. **Teardown that always runs.** [`Sessions::destroy`] (or
//!    [`Session::destroy`]) stops the sandbox and its proxies together.
//!
//! 6. **Conversations.** A spec with `conversationId` and `agentId` gets
//!    its binds from the workspaces layer ([`layout`]), resolved at launch;
//!    every spec gets the registered checkouts as `protectedPaths` (SPEC
//!    H1, H10, H11).
//!
//! 7. **The server channel.** Handlers registered on [`Sessions::channel`]
//!    answer commands inside any session that call them
//!    (`sandbox-init call NAME`), with the calling session as identity
//!    ([`channel`]).
//!
//! Errors name the thing and the fix ([`SessionError`]); a front-end maps
//! them to its own codes and prints them with their sources. [`input`]
//! parses user JSON strictly (an unknown field is an error naming it), for
//! every front-end that takes JSON. Path rules (what may be bound, read or
//! created) are not here: they are `sandbox-paths`', which this crate asks.

pub mod channel;
pub mod command_policy;
pub mod dispatch_policy;
pub mod egress;
pub mod env;
pub mod feed;
pub mod input;
pub mod layout;
pub mod random;
pub mod sessions;
pub mod spec;
pub mod start;

pub use command_policy::{Approver, CommandPolicy, PolicySettings, Refusal};
pub use sessions::{ExecStream, LaunchSettings, Session, SessionError, Sessions};
pub use start::StartOptions;
