//! Which socket files belong to unix sockets made inside the sandbox: the
//! kernel's list of the unix sockets of our network namespace
//! (`NETLINK_SOCK_DIAG`, `UDIAG_SHOW_VFS`), each with the device and inode
//! of the file it is bound to. A host service's socket seen through a bind
//! lives in the host's namespace and is never on that list; a socket a
//! command bound (in `/tmp`, in its workdir) always is. The sandbox has a
//! network namespace of its own (bubblewrap's `--unshare-net`) and PID 1,
//! whose supervisor asks, is in it.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// `SOCK_DIAG_BY_FAMILY`.
const SOCK_DIAG_BY_FAMILY: u16 = 20;
/// `UDIAG_SHOW_VFS`: the bound file's device and inode.
const UDIAG_SHOW_VFS: u32 = 0x2;
/// The `UNIX_DIAG_VFS` attribute.
const UNIX_DIAG_VFS: u16 = 1;
/// `sizeof(struct unix_diag_msg)`.
const DIAG_MSG_LEN: usize = 16;
/// `sizeof(struct nlmsghdr)`.
const NLMSG_HDR_LEN: usize = 16;

/// A bound file as the kernel reports it: `s_dev` in the kernel's own
/// encoding (major << 20 | minor) and the inode's low 32 bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct VfsId {
    pub dev: u32,
    pub ino: u32,
}

impl VfsId {
    /// The id of a file `fstat` describes.
    pub fn of_stat(st: &libc::stat) -> Self {
        let (major, minor) = (libc::major(st.st_dev), libc::minor(st.st_dev));
        Self {
            dev: (major << 20) | minor,
            ino: st.st_ino as u32,
        }
    }
}

/// The request: every unix socket of the namespace, in any state, with its
/// bound file. Pure, so it can be tested.
pub fn request() -> Vec<u8> {
    let len = (NLMSG_HDR_LEN + 24) as u32;
    let mut out = Vec::with_capacity(len as usize);
    out.extend_from_slice(&len.to_ne_bytes());
    out.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    let flags = (libc::NLM_F_REQUEST | libc::NLM_F_DUMP) as u16;
    out.extend_from_slice(&flags.to_ne_bytes());
    out.extend_from_slice(&1u32.to_ne_bytes()); // seq
    out.extend_from_slice(&0u32.to_ne_bytes()); // pid: the kernel
    // struct unix_diag_req
    out.push(libc::AF_UNIX as u8);
    out.push(0); // protocol
    out.extend_from_slice(&0u16.to_ne_bytes()); // pad
    out.extend_from_slice(&u32::MAX.to_ne_bytes()); // every state
    out.extend_from_slice(&0u32.to_ne_bytes()); // any inode
    out.extend_from_slice(&UDIAG_SHOW_VFS.to_ne_bytes());
    out.extend_from_slice(&[0xff; 8]); // no cookie
    out
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// What one buffer of the answer holds: the bound files found, and whether
/// the dump is over (`NLMSG_DONE`). An error message is an error. Pure.
pub fn parse(buf: &[u8], found: &mut Vec<VfsId>) -> io::Result<bool> {
    let bad = || io::Error::from_raw_os_error(libc::EPROTO);
    let mut at = 0;
    while at + NLMSG_HDR_LEN <= buf.len() {
        let len = u32_at(buf, at).ok_or_else(bad)? as usize;
        let kind = u16_at(buf, at + 4).ok_or_else(bad)?;
        if len < NLMSG_HDR_LEN || at + len > buf.len() {
            return Err(bad());
        }
        match i32::from(kind) {
            libc::NLMSG_DONE => return Ok(true),
            libc::NLMSG_ERROR => {
                let errno = u32_at(buf, at + NLMSG_HDR_LEN).ok_or_else(bad)? as i32;
                return Err(io::Error::from_raw_os_error(errno.unsigned_abs() as i32));
            }
            _ if kind == SOCK_DIAG_BY_FAMILY => {
                let mut attr = at + NLMSG_HDR_LEN + DIAG_MSG_LEN;
                while attr + 4 <= at + len {
                    let attr_len = usize::from(u16_at(buf, attr).ok_or_else(bad)?);
                    let attr_kind = u16_at(buf, attr + 2).ok_or_else(bad)?;
                    if attr_len < 4 {
                        return Err(bad());
                    }
                    if attr_kind == UNIX_DIAG_VFS && attr_len >= 12 {
                        found.push(VfsId {
                            ino: u32_at(buf, attr + 4).ok_or_else(bad)?,
                            dev: u32_at(buf, attr + 8).ok_or_else(bad)?,
                        });
                    }
                    attr += (attr_len + 3) & !3;
                }
            }
            _ => {}
        }
        at += (len + 3) & !3;
    }
    Ok(false)
}

/// Whether `file` is the bound file of a unix socket of our network
/// namespace. Asked afresh each time (a few sockets, one round trip).
pub fn bound_here(file: VfsId) -> io::Result<bool> {
    Ok(bound_files()?.contains(&file))
}

/// The bound files of every unix socket of our network namespace.
pub fn bound_files() -> io::Result<Vec<VfsId>> {
    // SAFETY: plain syscall.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            libc::NETLINK_SOCK_DIAG,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor we own.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    let req = request();
    // SAFETY: zeroed sockaddr_nl is the kernel's address.
    let mut kernel: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    kernel.nl_family = libc::AF_NETLINK as u16;
    // SAFETY: sendto from our buffer to a sockaddr of its size.
    let sent = unsafe {
        libc::sendto(
            sock.as_raw_fd(),
            req.as_ptr().cast(),
            req.len(),
            0,
            (&kernel as *const libc::sockaddr_nl).cast(),
            std::mem::size_of::<libc::sockaddr_nl>() as u32,
        )
    };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut found = Vec::new();
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        // SAFETY: recv into our buffer.
        let n = unsafe { libc::recv(sock.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n < 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(err);
        }
        if n == 0 || parse(&buf[..n as usize], &mut found)? {
            return Ok(found);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;

    fn id_of(path: &std::path::Path) -> VfsId {
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: zeroed stat is a valid out-parameter.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: lstat into `st` with a valid C string.
        assert_eq!(unsafe { libc::lstat(c.as_ptr(), &mut st) }, 0);
        VfsId::of_stat(&st)
    }

    #[test]
    fn the_request_is_one_whole_message() {
        let req = request();
        assert_eq!(req.len(), 40);
        assert_eq!(u32_at(&req, 0), Some(40));
        assert_eq!(u16_at(&req, 4), Some(SOCK_DIAG_BY_FAMILY));
        assert_eq!(req[16], libc::AF_UNIX as u8);
    }

    #[test]
    fn a_short_or_broken_answer_is_an_error() {
        let mut found = Vec::new();
        assert!(parse(&[], &mut found).is_ok_and(|done| !done));
        let mut broken = vec![0u8; 16];
        broken[0] = 200; // longer than the buffer
        assert!(parse(&broken, &mut found).is_err());
    }

    /// A socket this test binds is on the list of its namespace, by the
    /// device and inode of its file; a plain file is not.
    #[test]
    fn a_socket_bound_here_is_listed_by_its_file() {
        let dir = std::env::temp_dir().join(format!("sock-diag-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("s.sock");
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path).unwrap();
        assert!(bound_here(id_of(&path)).unwrap(), "our own socket");
        let plain = dir.join("plain");
        std::fs::write(&plain, b"").unwrap();
        assert!(!bound_here(id_of(&plain)).unwrap(), "a plain file");
        drop(listener);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
