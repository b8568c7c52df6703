//! The push gateway (SPEC H8, docs/design.md §18): every push of a sandbox
//! arrives here as git's smart HTTP (`info/refs?service=git-receive-pack`,
//! `git-receive-pack`). The command list and push options are read before
//! any pack byte ([`receive`]), each ref update is judged by the server's
//! policy (a [`Judge`]), and then either git's own report-status is
//! answered ([`report`]: ` ! [remote rejected] main -> main (reason)`) and
//! nothing is forwarded, or the push is forwarded to the repository's
//! upstream with a credential the sandbox never sees ([`forward`]), its
//! answer streamed back.
//!
//! - [`pktline`]: the pkt-line framing, strict (a malformed stream is an
//!   error naming the offset, never a guess).
//! - [`receive`]: the receive-pack request head, and what each update is
//!   (create, update, delete; branch or tag).
//! - [`report`]: report-status (v1 and v2), inside side-band when asked,
//!   `--atomic` worded as git words it.
//! - [`forward`]: the HTTP side — discovery, the judged push, the upstream.
//! - [`app`]: GitHub App installation tokens: the JWT, mint, revoke.
//! - [`credential`]: the read token, handed to git by a credential helper
//!   over the channel.
//! - [`target`]: http or https to the forge (system roots, a CA file).
//! - [`pack`]: the commits of a pushed pack, where most fast-forwards are
//!   told without the upstream.
//! - [`mirror`]: the server's mirrors, where the other force pushes are found.
//! - [`spool`]: a push read whole before its verdict, in an unlinked file.
//! - [`session`]: mounted on the server channel, judged by the session's
//!   guardrails (`push_remote`), prompts to its owner.

#![forbid(unsafe_code)]

pub mod app;
pub mod credential;
pub mod forward;
pub mod mirror;
pub mod pack;
pub mod pktline;
pub mod receive;
pub mod report;
pub mod session;
pub mod spool;
pub mod target;

pub use forward::{Gateway, GatewayConfig, Judge, Verdict};
pub use receive::{PushHead, RefUpdate, UpdateKind};
