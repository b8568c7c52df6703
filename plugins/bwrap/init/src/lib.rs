//! `sandbox-init`, PID 1 of a bwrap sandbox, and the protocol the bwrap
//! backend speaks with it.
//!
//! The backend starts one long-lived `bwrap` per sandbox whose command is
//! this binary; each exec is then a message on a socket pair, not a new
//! sandbox (SPEC G2). The binary's `main` is [`run::main`]; run as
//! `sandbox-init call NAME …` it is the server channel's client ([`call`]).

pub mod args;
pub mod caches;
pub mod call;
pub mod caps;
pub mod commands_proc;
pub mod control;
pub mod counters;
pub mod forker;
pub mod forward;
pub mod guard;
pub mod landlock;
pub mod layout;
pub mod masks;
mod mount;
pub mod namespaces;
pub mod open_files;
pub mod outbox;
pub mod proto;
pub mod reap;
pub mod run;
pub mod seccomp;
pub mod spawn;
