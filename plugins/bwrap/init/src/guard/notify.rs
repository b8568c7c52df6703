//! The seccomp user-notification listener: receive, check, inject, answer.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use super::emulate::Call;

/// A listener descriptor returned by installing a `NEW_LISTENER` filter.
pub struct Listener {
    fd: OwnedFd,
}

/// A received notification: its id and the call.
pub struct Notification {
    pub id: u64,
    pub call: Call,
}

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

impl Listener {
    pub fn new(fd: OwnedFd) -> Self {
        Self { fd }
    }

    /// Asks the kernel to wake the supervisor and the caller on the same CPU
    /// (`SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP`, Linux 6.6): it roughly halves
    /// the round trip on small machines. Older kernels ignore it: no harm.
    pub fn sync_wake_up(&self) {
        let flags: u64 = 1;
        // SAFETY: ioctl with an integer argument on our listener.
        unsafe {
            libc::ioctl(
                self.fd.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_SET_FLAGS,
                flags,
            )
        };
    }

    /// Waits until a notification is pending; `false` once no process uses
    /// the filter any more (every command of the exec has exited).
    pub fn wait(&self) -> io::Result<bool> {
        loop {
            let mut p = libc::pollfd {
                fd: self.fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            let n = unsafe { libc::poll(&mut p, 1, -1) };
            if n < 0 {
                let err = io::Error::last_os_error();
                if err.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(err);
            }
            if p.revents & libc::POLLIN != 0 {
                return Ok(true);
            }
            if p.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0 {
                return Ok(false);
            }
        }
    }

    /// Receives one notification (call only after `wait` said one is pending).
    pub fn recv(&self) -> io::Result<Notification> {
        // SAFETY: the kernel requires a zeroed seccomp_notif.
        let mut notif: libc::seccomp_notif = unsafe { std::mem::zeroed() };
        // SAFETY: ioctl with a pointer to a correctly sized struct.
        check(unsafe {
            libc::ioctl(
                self.fd.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_RECV,
                &mut notif,
            )
        })?;
        Ok(Notification {
            id: notif.id,
            call: Call {
                tid: notif.pid,
                nr: i64::from(notif.data.nr),
                args: notif.data.args,
            },
        })
    }

    /// Whether the notification is still pending (its task alive and waiting).
    pub fn id_valid(&self, id: u64) -> bool {
        let mut id = id;
        // SAFETY: ioctl with a pointer to a u64.
        unsafe {
            libc::ioctl(
                self.fd.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_ID_VALID,
                &mut id,
            ) == 0
        }
    }

    /// Installs `fd` in the tracee; returns its number there. Without
    /// `ADDFD_FLAG_SEND`: the caller closes its copy before answering, so no
    /// extra writable reference outlives the tracee's (ETXTBSY on exec).
    pub fn add_fd(&self, id: u64, fd: RawFd, cloexec: bool) -> io::Result<i32> {
        // SAFETY: zeroed then filled.
        let mut add: libc::seccomp_notif_addfd = unsafe { std::mem::zeroed() };
        add.id = id;
        add.srcfd = fd as u32;
        add.newfd_flags = if cloexec { libc::O_CLOEXEC as u32 } else { 0 };
        // SAFETY: ioctl with a pointer to a correctly sized struct.
        let rc = unsafe {
            libc::ioctl(
                self.fd.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_ADDFD,
                &mut add,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(rc)
    }

    /// Lets the call run as the caller made it (only for calls that carry no
    /// path, where there is nothing to race: `umask`).
    pub fn continue_call(&self, id: u64) -> io::Result<()> {
        // SAFETY: zeroed then filled.
        let mut resp: libc::seccomp_notif_resp = unsafe { std::mem::zeroed() };
        resp.id = id;
        resp.flags = libc::SECCOMP_USER_NOTIF_FLAG_CONTINUE as u32;
        // SAFETY: ioctl with a pointer to a correctly sized struct.
        check(unsafe {
            libc::ioctl(
                self.fd.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_SEND,
                &mut resp,
            )
        })
    }

    /// Answers: `val` as the syscall's result, or `-errno`.
    pub fn respond(&self, id: u64, val: i64, errno: i32) -> io::Result<()> {
        // SAFETY: zeroed then filled.
        let mut resp: libc::seccomp_notif_resp = unsafe { std::mem::zeroed() };
        resp.id = id;
        resp.val = val;
        resp.error = if errno == 0 { 0 } else { -errno };
        // SAFETY: ioctl with a pointer to a correctly sized struct.
        check(unsafe {
            libc::ioctl(
                self.fd.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_SEND,
                &mut resp,
            )
        })
    }
}
