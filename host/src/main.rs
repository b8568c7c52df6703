//! The `cc_server` binary: parse the arguments, run them with the library
//! (`lib.rs`), exit with its status.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    // Before any thread exists: malloc's settings apply to all of them.
    cc_server::heap::tune_malloc();
    // Before anything is spawned: what our caller left open stays ours.
    cc_server::descriptors::close_inherited_on_exec();
    cc_server::run(cc_server::cli::Cli::parse())
}
