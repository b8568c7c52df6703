//! `sandbox-init --control-fd N [--guard JSON]`: PID 1 of a bwrap sandbox.
//!
//! The body is in the library (`sandbox_init::run`), where its parts —
//! the arguments, the control server, reaping, fork and exec — are
//! modules of their own that unit tests can reach.

fn main() -> std::process::ExitCode {
    sandbox_init::run::main()
}
