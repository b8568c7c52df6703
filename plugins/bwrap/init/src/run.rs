//! `sandbox-init --control-fd N [--guard JSON]`: PID 1 of a bwrap sandbox.
//!
//! It installs the hardening seccomp filter on itself first (everything it
//! starts inherits it and cannot remove it; if it cannot, it refuses to run
//! anything), announces `ready`, then serves the backend's requests: start a
//! command with the descriptors it was sent, signal a command's process
//! group, freeze or thaw the sandbox. It reaps every process (commands and
//! the orphans they leave) and reports each command's end. When the backend
//! goes away — destroy, or the server dying — it kills everything and exits,
//! and the kernel tears the namespaces down with it.
//!
//! With `--guard`, it is also the create-time guard's supervisor (see
//! `sandbox_init::guard`): every command installs the guard filter between
//! fork and exec and hands its listener here, where a thread serves it.
//!
//! With `--forward PORT=SOCKET`, it binds and listens on `127.0.0.1:PORT`
//! before `ready` and hands the listeners to the egress forwarder, this same
//! binary started as `sandbox-init --forwarder PORT=FD:SOCKET … [channel=FD]`
//! in a process of its own (see `sandbox_init::forward`), with the proxy's
//! channel if the backend passed one (`--egress-channel FD`).
//!
//! Commands are forked by the fork thread, in a pid namespace below ours
//! (`sandbox_init::forker`), so none can name PID 1; the forwarder is forked
//! on the main thread. The code between fork and exec makes only
//! async-signal-safe calls on memory prepared before the fork, so the
//! supervisor threads cannot leave it a held lock.

use std::io;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::process::ExitCode;
use std::sync::Arc;

use sandbox_plugin_api::error_chain;

use crate::args;
use crate::control::{FORWARDER, serve};
use crate::forward::{self, Route};
use crate::guard::{self, pending::PendingRules};
use crate::seccomp;

/// The whole of `sandbox-init`'s `main`: PID 1, or the forwarder when the
/// first argument says so.
pub fn main() -> ExitCode {
    // A command's call to the server, not PID 1: nothing below applies.
    let cli: Vec<String> = std::env::args().skip(1).collect();
    if let Some((first, rest)) = cli.split_first()
        && first == crate::call::CALL
    {
        return crate::call::main(rest);
    }
    // While we have one thread: PID 1's supervisor threads cross 64 and 128
    // descriptors as soon as a build has started a few dozen processes
    // (each keeps the `/proc` directories of the processes it served), the
    // forwarder's with its connections, and a shared table would grow in
    // the middle of a guarded call or a connect.
    sandbox_fdpass::reserve_table(1024);
    if std::env::args().nth(1).as_deref() == Some(FORWARDER) {
        return forwarder();
    }
    let parsed = args::parse(&cli).and_then(|parsed| {
        let control = args::adopt_control(parsed.control)?;
        let channel = parsed.channel.map(args::adopt_control).transpose()?;
        Ok((control, channel, parsed))
    });
    let (control, channel, parsed) = match parsed {
        Ok(parsed) => parsed,
        Err(message) => {
            eprintln!("sandbox-init: {message}");
            return ExitCode::from(125);
        }
    };
    // Before the fork thread that attaches the commands' filter starts.
    crate::seccomp::NO_UNIX_DATAGRAMS.store(
        parsed.no_unix_datagrams,
        std::sync::atomic::Ordering::Relaxed,
    );
    let args::Args {
        guard: guard_config,
        forwards,
        mut exec_from,
        exec_grants,
        caches,
        masks,
        counters,
        ..
    } = parsed;
    // First, while single-threaded: our own namespaces, writable mounts
    // noexec, no capabilities (see `sandbox_init::layout`). Fail closed.
    // PID 1's Landlock domain is entered in there, before anything is
    // forked: the supervisor, the forwarder and every command are in it.
    // Before anything else: the maker of the commands' /proc must be forked
    // while we are in bubblewrap's namespaces (`sandbox_init::commands_proc`).
    let proc_maker = match crate::commands_proc::ProcMaker::start() {
        Ok(maker) => maker,
        Err(e) => {
            eprintln!("sandbox-init: the maker of the commands' /proc: {e}");
            return ExitCode::from(125);
        }
    };
    let guarded = guard_config.is_some();
    exec_from.extend(exec_grants.iter().map(std::path::PathBuf::from));
    let forker = match crate::layout::enter(
        |namespaces| proc_maker.mount(namespaces),
        guarded,
        &exec_grants,
        &masks,
        &caches,
        &counters,
        |writable, commands_proc| enter_domain(&exec_from, writable, commands_proc, guarded),
    ) {
        Ok(forker) => forker,
        Err(e) => {
            eprintln!("sandbox-init: {}", error_chain(&e));
            return ExitCode::from(125);
        }
    };
    // SAFETY: plain prctl call. Not dumpable, guard or not: commands can
    // neither read PID 1's memory nor reach its descriptors through /proc/1.
    // (Not before the layout: it writes our own id maps in /proc, which a
    // non-dumpable process's are closed to.)
    unsafe {
        libc::prctl(libc::PR_SET_DUMPABLE, 0 as libc::c_ulong, 0, 0, 0);
    }
    if guard_config.is_some() && !seccomp::notify_available() {
        // Fail closed: a guard that cannot start means nothing runs.
        eprintln!(
            "sandbox-init: the create-time guard cannot start: this kernel offers no seccomp user notification"
        );
        return ExitCode::from(125);
    }
    // PID 1's own filter; every command runs under the full one (its fork
    // thread's, `seccomp::fork_thread_filter`, and its own `clone3` rule).
    let own_filter = if guard_config.is_some() {
        seccomp::supervisor_filter()
    } else {
        seccomp::hardening_filter()
    };
    if let Err(e) = seccomp::install(&own_filter) {
        eprintln!("sandbox-init: cannot install the seccomp filter: {e}");
        return ExitCode::from(125);
    }
    // The rules are made while we announce `ready` and the first command
    // starts; its guarded calls wait for them (see `guard::pending`).
    let rules = guard_config.map(|config| PendingRules::start(config, guard::pending::make));
    let open_files = counters
        .open_files_watermark
        .map(|watermark| crate::open_files::Budget {
            share: counters.open_files.unwrap_or(0),
            watermark,
        });
    match serve(
        control.as_fd(),
        rules,
        &forwards,
        channel,
        Arc::new(forker),
        open_files,
    ) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sandbox-init: {e}");
            ExitCode::from(125)
        }
    }
}

/// Builds PID 1's Landlock domain (`sandbox_init::landlock`) and enters it.
/// The guard needs the write rights covered: a supervisor that writes for
/// the commands must not be able to write where they could not.
fn enter_domain(
    exec_from: &[std::path::PathBuf],
    writable: &[String],
    commands_proc: &std::os::fd::OwnedFd,
    guarded: bool,
) -> Result<(), String> {
    if exec_from.is_empty() {
        return Err("no --exec-from: nothing could be executed".into());
    }
    let (ruleset, coverage) = crate::landlock::domain(exec_from, writable, &[commands_proc])
        .map_err(|e| format!("PID 1's Landlock domain: {e}"))?;
    if guarded && !coverage.writes {
        return Err(format!(
            "the create-time guard's supervisor cannot be confined: Landlock ABI {} lacks \
             REFER (ABI 2, Linux 5.19)",
            coverage.abi
        ));
    }
    if !crate::landlock::restrict_self(ruleset.as_raw_fd()) {
        return Err(format!(
            "entering PID 1's Landlock domain: {}",
            io::Error::last_os_error()
        ));
    }
    Ok(())
}

/// `sandbox-init --forwarder PORT=FD:SOCKET … [channel=FD]`: relays the
/// connections of the listeners PID 1 made and passed down to the proxy, by
/// the channel or the unix sockets. Runs under the hardening filter PID 1's
/// child installed before exec.
fn forwarder() -> ExitCode {
    // SAFETY: plain prctl call. Not dumpable: commands can neither read its
    // memory nor reach its descriptors through /proc.
    unsafe {
        libc::prctl(libc::PR_SET_DUMPABLE, 0 as libc::c_ulong, 0, 0, 0);
    }
    let mut routes: Vec<Route> = Vec::new();
    let mut channel = None;
    for arg in std::env::args().skip(2) {
        let mut taken: Vec<RawFd> = routes.iter().map(|r| r.listener.as_raw_fd()).collect();
        taken.extend(
            channel
                .as_ref()
                .map(|c: &std::os::fd::OwnedFd| c.as_raw_fd()),
        );
        let adopted = match forward::adopt_channel(&arg, &taken) {
            Some(adopted) => adopted.map(|fd| channel = Some(fd)),
            None => Route::adopt(&arg, &taken).map(|route| routes.push(route)),
        };
        if let Err(e) = adopted {
            eprintln!("sandbox-init forwarder: {}", error_chain(&e));
            return ExitCode::from(125);
        }
    }
    let error = forward::serve(routes, forward::connection_limit(), channel);
    eprintln!("sandbox-init forwarder: {error}");
    ExitCode::from(1)
}
