//! `cc-microvm-agent`: the guest agent of the microvm backend
//! (docs/research/microvm.md §4.3, §4.5).
//!
//! Booted as `/init` (PID 1) it mounts the kernel filesystems, loads the
//! modules the image lists, opens the virtio-serial port `agent0` and serves
//! the host's frames there (`sandbox-microvm-proto`) until told to shut
//! down, then powers the VM off. PID 1 must never exit — the kernel would
//! panic — so every failure, a panic included, ends in a power-off.
//!
//! `cc-microvm-agent --serve-stdio` serves the same protocol on stdin/stdout
//! without the PID-1 steps, so the host's tests can drive the real binary.

mod boot;
mod command;
mod modules;
mod outbox;
mod port;
mod power;
mod reaper;
mod restored;
mod serve;
mod share;
mod spawn;
mod tunnel;

use std::fmt;
use std::io::{self, Write};
use std::os::fd::AsFd;
use std::path::Path;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use power::Role;
use serve::End;

/// Logs one line to stderr: the serial console as PID 1. Never panics.
macro_rules! log {
    ($($arg:tt)*) => { $crate::log_line(format_args!($($arg)*)) };
}
pub(crate) use log;

/// The port the host names for the agent.
const PORT_NAME: &str = "agent0";
/// How long the port may take to appear after the modules load.
const PORT_WAIT: Duration = Duration::from_secs(10);
/// The image's module list, in load order.
const MODULES_ORDER: &str = "/modules.order";

fn main() {
    // As PID 1, whatever the arguments: the kernel hands init the command
    // line words it does not know, and exiting would panic it.
    if std::process::id() == 1 {
        init();
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [flag] if flag == "--serve-stdio" => hosted(),
        _ => {
            log!("usage: run as /init (PID 1) in the guest, or `cc-microvm-agent --serve-stdio`");
            std::process::exit(2);
        }
    }
}

/// PID 1 in the guest.
fn init() -> ! {
    halt_on_panic(Role::Init);
    boot::prepare();
    modules::load_listed(Path::new(MODULES_ORDER));
    let port = match port::open(PORT_NAME, PORT_WAIT) {
        Ok(port) => port,
        Err(e) => {
            log!("{e}");
            power::halt(Role::Init, false)
        }
    };
    let input = match port.try_clone() {
        Ok(input) => input,
        Err(e) => {
            log!("cannot duplicate the port's descriptor: {e}");
            power::halt(Role::Init, false)
        }
    };
    finish(Role::Init, serve::serve(input, port, Role::Init))
}

/// `--serve-stdio`: the protocol on stdin/stdout, for tests on the host.
fn hosted() -> ! {
    halt_on_panic(Role::Hosted);
    // Like PID 1, adopt the orphans of the commands and reap them.
    // SAFETY: plain prctl call.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong, 0, 0, 0) } != 0 {
        log!("cannot become a subreaper: {}", io::Error::last_os_error());
    }
    // Close-on-exec duplicates: commands must not inherit the transport.
    let transport = io::stdin()
        .as_fd()
        .try_clone_to_owned()
        .and_then(|input| Ok((input, io::stdout().as_fd().try_clone_to_owned()?)));
    match transport {
        Ok((input, output)) => finish(
            Role::Hosted,
            serve::serve(
                std::fs::File::from(input),
                std::fs::File::from(output),
                Role::Hosted,
            ),
        ),
        Err(e) => {
            log!("cannot duplicate stdin/stdout: {e}");
            power::halt(Role::Hosted, false)
        }
    }
}

/// Logs why serving ended and halts.
fn finish(role: Role, end: End) -> ! {
    match end {
        End::Shutdown => power::halt(role, true),
        End::Closed => {
            log!("the host closed the port");
            power::halt(role, true)
        }
        End::Broken(e) => {
            log!("the port failed: {e}");
            power::halt(role, false)
        }
    }
}

/// A panic anywhere is logged and halts: as PID 1, unwinding out of `main`
/// would panic the kernel, and a dead thread could leave a stream hanging.
fn halt_on_panic(role: Role) {
    std::panic::set_hook(Box::new(move |info| {
        log!("{info}");
        power::halt(role, false)
    }));
}

pub(crate) fn log_line(args: fmt::Arguments<'_>) {
    // A console that cannot be written to is no reason to stop.
    let _ = writeln!(io::stderr().lock(), "cc-microvm-agent: {args}");
}

/// Locks, ignoring poison: a panic halts the agent anyway.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
