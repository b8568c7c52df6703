//! How the agent ends. As PID 1 it must never exit (the kernel would
//! panic): it kills everything, syncs and powers the VM off. Hosted (the
//! tests' `--serve-stdio`), it kills the commands it started and exits.

use std::thread;
use std::time::Duration;

use crate::{log, reaper};

/// What the agent is to its machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// `/init` of the guest.
    Init,
    /// A process on the host serving stdin/stdout.
    Hosted,
}

/// Ends the agent; `clean` picks the hosted exit code.
pub fn halt(role: Role, clean: bool) -> ! {
    match role {
        Role::Init => power_off(),
        Role::Hosted => {
            for pid in reaper::children() {
                // SAFETY: plain syscalls; the pid is our unreaped child, so
                // neither it nor its group can be a stranger.
                unsafe {
                    libc::kill(-pid, libc::SIGKILL);
                    libc::kill(pid, libc::SIGKILL);
                }
            }
            std::process::exit(if clean { 0 } else { 1 })
        }
    }
}

fn power_off() -> ! {
    // SAFETY: plain syscalls. From PID 1, kill(-1) reaches every process
    // but PID 1 itself.
    unsafe {
        libc::kill(-1, libc::SIGKILL);
        libc::sync();
        libc::reboot(libc::RB_POWER_OFF);
    }
    log!("cannot power off: {}", std::io::Error::last_os_error());
    // Still PID 1: exiting would panic the kernel.
    loop {
        thread::sleep(Duration::from_secs(3600));
    }
}
