//! `connect` (SPEC G5): a pathname unix socket that was not made inside the
//! sandbox — a host service's, shown by a bind (Docker, D-Bus, X11, an
//! agent) — is refused unless the spec allows it (`unixSockets`), with a
//! violation naming it.
//!
//! The address sits behind a pointer, so every `connect` comes here, and
//! the supervisor makes every one itself: it copies the address out of the
//! caller once, takes the caller's socket (`pidfd_getfd`, the very file)
//! and connects that. A call let through (`CONTINUE`) would have the kernel
//! read the address again, and a second thread could turn an address
//! judged harmless (TCP, abstract) into a host socket's path in between —
//! or `dup2` a unix socket onto the descriptor number of a TCP one.
//! A pathname is resolved the way the caller would resolve it, to an
//! `O_PATH` descriptor of the socket file; that file is judged (made here:
//! its device and inode among the bound files of our network namespace's
//! unix sockets, `super::super::sock_diag`; or allowed by the spec), and the
//! connect goes to that descriptor through our `/proc/self/fd`, so a name
//! swapped after the check changes nothing. Other addresses (TCP, abstract,
//! unnamed) are connected as copied.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;

use super::modes::file_of;
use super::{AsCommand, Call, Denial, Outcome, Step, arg_int, io};
use crate::guard::sock_diag::{self, VfsId};
use crate::guard::tracee;
use sandbox_paths::write_rules::Rules;

/// `offsetof(struct sockaddr_un, sun_path)`.
const SUN_PATH_AT: usize = 2;

/// The refusal's action (`sandbox_plugin_api::violation::NETWORK_UNIX_SOCKET`).
const ACTION: &str = "network-unix-socket";

/// The path of a pathname unix address (`None`: another family, an
/// abstract or an unnamed address). Pure.
pub fn unix_path(addr: &[u8]) -> Option<Vec<u8>> {
    let family = u16::from_ne_bytes(addr.get(..2)?.try_into().ok()?);
    if i32::from(family) != libc::AF_UNIX {
        return None;
    }
    let path = addr.get(SUN_PATH_AT..)?;
    if path.first().is_none_or(|b| *b == 0) {
        return None;
    }
    let end = path.iter().position(|b| *b == 0).unwrap_or(path.len());
    Some(path[..end].to_vec())
}

/// A `sockaddr_un` naming `path`, and its length.
fn unix_addr(path: &[u8]) -> Step<(libc::sockaddr_un, u32)> {
    // SAFETY: a zeroed sockaddr_un is valid.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    if path.len() >= addr.sun_path.len() {
        return Err(Outcome::error(libc::ENAMETOOLONG));
    }
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (to, from) in addr.sun_path.iter_mut().zip(path) {
        *to = *from as libc::c_char;
    }
    Ok((addr, (SUN_PATH_AT + path.len() + 1) as u32))
}

/// Connects `sock` to `addr` (`len` bytes; empty: none): at once when the
/// socket does not block, else on a thread of its own (a full backlog
/// would hold every other guarded call of the exec, the server's accept
/// among them, until it frees). `pinned` is the socket file `addr` names
/// through our `/proc/self/fd`, held until the connect is made.
fn connect_to(sock: OwnedFd, addr: Vec<u8>, pinned: Option<OwnedFd>) -> Outcome {
    let blocking = blocks(&sock);
    let make = move || {
        let ptr = if addr.is_empty() {
            std::ptr::null()
        } else {
            addr.as_ptr().cast()
        };
        // SAFETY: connect on a descriptor we hold, with an address of its length.
        let rc = unsafe { libc::connect(sock.as_raw_fd(), ptr, addr.len() as u32) };
        drop(pinned);
        if rc < 0 {
            Err(super::errno_of(&std::io::Error::last_os_error()))
        } else {
            Ok(0)
        }
    };
    if blocking {
        return Outcome {
            answer: super::Answer::Later(super::Deferred(Box::new(make))),
            denial: None,
        };
    }
    match make() {
        Ok(value) => Outcome::value(value),
        Err(errno) => Outcome::error(errno),
    }
}

/// Whether a connect on `sock` may wait (no `O_NONBLOCK`).
fn blocks(sock: &OwnedFd) -> bool {
    // SAFETY: F_GETFL on a descriptor we hold.
    let flags = unsafe { libc::fcntl(sock.as_raw_fd(), libc::F_GETFL) };
    flags >= 0 && flags & libc::O_NONBLOCK == 0
}

/// The socket file the caller's path names, judged: `Ok` with the file to
/// connect to, or the refusal.
fn judged(rules: &Rules, as_command: &dyn AsCommand, tid: u32, path: &[u8]) -> Step<OwnedFd> {
    let file = file_of(as_command, tid, libc::AT_FDCWD, path, true)?
        .ok_or_else(|| Outcome::error(libc::ELOOP))?;
    // SAFETY: zeroed stat is a valid out-parameter.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat on a descriptor we hold.
    if unsafe { libc::fstat(file.as_raw_fd(), &mut st) } != 0 {
        return Err(Outcome::error(libc::ECONNREFUSED));
    }
    let target = io(tracee::fd_path(file.as_raw_fd()))?;
    // Not a socket file, or a socket itself (`/proc/self/fd/N` of one):
    // nothing listens there, as the kernel would answer.
    if st.st_mode & libc::S_IFMT != libc::S_IFSOCK || !target.is_absolute() {
        return Err(Outcome::error(libc::ECONNREFUSED));
    }
    if rules.allows_socket(&target) || made_here(&st) {
        return Ok(file);
    }
    Err(refused(target))
}

/// Whether the socket file is bound by a socket of the sandbox's own network
/// namespace. When the kernel cannot say, it is not (closed).
fn made_here(st: &libc::stat) -> bool {
    sock_diag::bound_here(VfsId::of_stat(st)).unwrap_or(false)
}

fn refused(target: PathBuf) -> Outcome {
    Outcome {
        answer: super::Answer::Error(libc::EACCES),
        denial: Some(Denial {
            action: ACTION,
            rule: format!(
                "a unix socket not made in this sandbox (a host service's, below a bind); allow it \
                 by its host path with `--allow-socket PATH` (cc_server run) or `unixSockets` in \
                 the spec ({} inside)",
                target.display()
            ),
            target,
            syscall: "connect",
        }),
    }
}

/// `connect(fd, addr, len)`, judged and made here.
pub(super) fn connect(
    rules: &Rules,
    as_command: &dyn AsCommand,
    call: &Call,
    valid: &dyn Fn() -> Step<()>,
) -> Step<Outcome> {
    let (tid, a) = (call.tid, &call.args);
    let len = a[2] as u32 as i32;
    let most = std::mem::size_of::<libc::sockaddr_storage>() as i32;
    if !(0..=most).contains(&len) {
        return Err(Outcome::error(libc::EINVAL));
    }
    let addr = if len == 0 {
        Vec::new()
    } else {
        tracee::read_bytes(tid, a[1], len as usize).map_err(|_| Outcome::error(libc::EFAULT))?
    };
    valid()?;
    let sock = io(tracee::steal_fd(tid, arg_int(a, 0)))?;
    let Some(path) = unix_path(&addr) else {
        return Ok(connect_to(sock, addr, None));
    };
    let file = judged(rules, as_command, tid, &path)?;
    let pinned = format!("/proc/self/fd/{}", file.as_raw_fd());
    let (to, to_len) = unix_addr(pinned.as_bytes())?;
    // SAFETY: the first `to_len` bytes of a sockaddr_un we filled.
    let to = unsafe {
        std::slice::from_raw_parts(
            (&to as *const libc::sockaddr_un).cast::<u8>(),
            to_len as usize,
        )
    }
    .to_vec();
    Ok(connect_to(sock, to, Some(file)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(family: u16, path: &[u8]) -> Vec<u8> {
        let mut out = family.to_ne_bytes().to_vec();
        out.extend_from_slice(path);
        out
    }

    #[test]
    fn only_pathname_unix_addresses_have_a_path() {
        let unix = libc::AF_UNIX as u16;
        assert_eq!(
            unix_path(&addr(unix, b"/run/docker.sock\0")),
            Some(b"/run/docker.sock".to_vec())
        );
        assert_eq!(
            unix_path(&addr(unix, b"rel.sock")),
            Some(b"rel.sock".to_vec())
        );
        assert_eq!(unix_path(&addr(unix, b"\0abstract")), None);
        assert_eq!(unix_path(&addr(unix, b"")), None, "unnamed");
        assert_eq!(unix_path(&addr(libc::AF_INET as u16, b"/x")), None);
        assert_eq!(unix_path(&[1]), None);
    }

    #[test]
    fn a_pinned_address_fits_and_is_terminated() {
        let (a, len) = unix_addr(b"/proc/self/fd/12").unwrap();
        assert_eq!(len as usize, SUN_PATH_AT + 17);
        assert_eq!(a.sun_path[16], 0);
        assert!(unix_addr(&[b'x'; 200]).is_err());
    }
}
