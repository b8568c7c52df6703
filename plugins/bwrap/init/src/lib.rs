//! `sandbox-init`, PID 1 of a bwrap sandbox, and the protocol the bwrap
//! backend speaks with it.
//!
//! The backend starts one long-lived `bwrap` per sandbox whose command is
//! this binary; each exec is then a message on a socket pair, not a new
//! sandbox (SPEC G2).

pub mod caches;
pub mod caps;
pub mod forker;
pub mod forward;
pub mod guard;
pub mod landlock;
pub mod layout;
mod mount;
pub mod proto;
pub mod seccomp;
