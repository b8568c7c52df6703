//! Every rule about paths, in one place.
//!
//! What a sandboxed command may not read, what it may not create or change
//! even inside a writable bind, which host paths a spec may bind, where the
//! server and its backends keep state: backends, the runtime and every
//! front-end ask this crate, and none keeps a copy of its own.
//!
//! - [`allowlists`] — what may change where the host keeps code: a bound
//!   home's dot-paths, the git directories of launch (SPEC G5).
//! - [`binds`] — which host paths a spec may bind, and how (SPEC G5, F7).
//! - [`secrets`] — what no command may read, and the names kept read-only in
//!   `$HOME` and every writable root (SPEC C1, D2, G5).
//! - [`write_deny`] — the dispatch policy's create-time globs and their glob
//!   language (SPEC C3, G1).
//! - [`state_dirs`] — the server's and the backends' state and runtime
//!   directories.
//! - [`system`] — the host's system view every sandbox sees read-only.
//! - [`toolchains`] — the toolchain homes and caches the backends show, and
//!   how.
//! - [`write_rules`] — what may not be created, changed or removed beneath
//!   a writable root, judged on a canonical path: the create-time guard's
//!   rules, and the jail's.
//! - [`jail`] (Linux) — every file operation the server itself makes on an
//!   agent's files: in-server file tools, clones, remote file APIs.
//!
//! The jail is how the server touches files outside any sandbox without
//! becoming a way around it (SPEC H2, G5): each root is opened once, every
//! path beneath it is resolved by the kernel (`openat2` with
//! `RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS`) from that descriptor, and
//! every change is judged on the canonical path the kernel reports by the
//! same [`write_rules`] the sandbox's create-time guard applies, and by
//! identity against the files protected at start and the registered
//! checkouts. Reads refuse [`secrets`]. A path is never judged as a string
//! alone, and a kernel without `openat2` is an error, not a fallback.
//!
//! `sandbox-plugin-api` re-exports `secrets`, `state_dirs` and `write_deny`
//! under their old paths, so backends built against plugin-api 1.x are
//! unchanged.

#![deny(missing_docs)]

pub mod allowlists;
pub mod binds;
#[cfg(target_os = "linux")]
pub mod jail;
pub mod secrets;
pub mod state_dirs;
pub mod system;
pub mod toolchains;
pub mod write_deny;
pub mod write_rules;
