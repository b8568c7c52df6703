//! Reaping: SIGCHLD as a descriptor, the commands running by pid and by
//! exec id, and each ended child's report — a command's end to the backend,
//! the forwarder's to the log, the commands' reaper's as the sandbox's end.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use crate::outbox::Outbox;
use crate::proto::Reply;

/// Commands running, by pid and by exec id.
#[derive(Default)]
pub struct Running {
    pub by_pid: HashMap<i32, u64>,
    pub by_id: HashMap<u64, i32>,
}

/// Reaps every child that ended; reports the commands among them and logs
/// the end of the egress forwarder. The end of the commands' namespace
/// reaper ends the sandbox: the kernel killed every command with it, and
/// none can start again.
pub fn reap(
    outbox: &Outbox,
    running: &mut Running,
    forwarder: Option<i32>,
    reaper: libc::pid_t,
) -> io::Result<()> {
    loop {
        let mut status = 0;
        // SAFETY: plain syscall writing into `status`.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid <= 0 {
            return Ok(());
        }
        if pid == reaper {
            return Err(io::Error::other(format!(
                "the commands' pid namespace ended (its reaper: {}); the sandbox cannot run anything",
                describe_status(status)
            )));
        }
        if Some(pid) == forwarder {
            // Its listeners closed with it: connections are refused now.
            eprintln!(
                "sandbox-init: the egress forwarder ended ({}); the sandbox has no network",
                describe_status(status)
            );
            continue;
        }
        let Some(id) = running.by_pid.remove(&pid) else {
            continue; // an orphan, or a command that never started
        };
        running.by_id.remove(&id);
        let (code, signal) = if libc::WIFEXITED(status) {
            (Some(libc::WEXITSTATUS(status)), None)
        } else {
            (None, Some(libc::WTERMSIG(status)))
        };
        outbox.send(0, &Reply::Exited { id, code, signal })?;
    }
}

fn describe_status(status: i32) -> String {
    if libc::WIFEXITED(status) {
        format!("exit status {}", libc::WEXITSTATUS(status))
    } else {
        format!("signal {}", libc::WTERMSIG(status))
    }
}

/// SIGCHLD as a readable descriptor.
pub struct ChildSignals {
    pub fd: OwnedFd,
}

impl ChildSignals {
    pub fn new() -> io::Result<Self> {
        // SAFETY: sigset operations on a local set, then blocking SIGCHLD for
        // this process so it is only seen via the signalfd (threads started
        // later inherit the mask).
        let fd = unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGCHLD);
            if libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) != 0 {
                return Err(io::Error::last_os_error());
            }
            libc::signalfd(-1, &set, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK)
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: signalfd returned a fresh descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Self { fd })
    }

    pub fn drain(&self) {
        let mut info = [0u8; 128];
        // SAFETY: reads into a local buffer from our non-blocking signalfd.
        while unsafe { libc::read(self.fd.as_raw_fd(), info.as_mut_ptr().cast(), info.len()) } > 0 {
        }
    }
}
