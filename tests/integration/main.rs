//! Black-box tests: the built `cc_server` binary and plugin libraries, real
//! processes, real sockets. Build the workspace first (`cargo build
//! --workspace`): `cargo test` does not build cdylibs.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[macro_use]
mod util;

mod allowlists;
mod api;
mod bwrap;
mod cdp;
mod channel;
mod claude;
mod claude_api;
mod claude_key;
mod conformance;
mod console;
mod counters;
mod egress;
mod escape;
mod gateway;
mod guard;
mod limits;
#[macro_use]
mod mcp_util;
mod mcp;
mod microvm;
mod mount_race;
mod net;
mod openapi;
mod pipes;
mod plugins;
mod policy;
mod pty;
mod realwork;
mod run;
mod sandboxd;
mod shell;
mod soak;
mod sockets;
mod structure;
mod terminals;
mod toolchains;
mod workspaces;
