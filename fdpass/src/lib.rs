//! Descriptors passed over a Unix socket as `SCM_RIGHTS`: the one `sendmsg`
//! and the one `recvmsg` every crate here uses (sandbox-init's wire to the
//! bwrap backend, the microvm engine's `getfd` to QEMU); and the process's
//! descriptor table grown ahead of need ([`reserve_table`]).
//!
//! A crate of its own, with only `libc` under it, so that `sandbox-init`
//! (which must stay small) and the microvm backend can both use it without
//! either depending on the other.
//!
//! ```
//! use std::os::fd::{AsFd, AsRawFd};
//! use std::os::unix::net::UnixStream;
//!
//! let (a, b) = UnixStream::pair().unwrap();
//! let (keep, _peer) = UnixStream::pair().unwrap();
//! sandbox_fdpass::send(a.as_raw_fd(), b"x", &[keep.as_fd().as_raw_fd()]).unwrap();
//! let (mut buf, mut fds) = ([0u8; 1], Vec::new());
//! assert_eq!(sandbox_fdpass::recv(b.as_raw_fd(), &mut buf, &mut fds).unwrap(), 1);
//! assert_eq!(fds.len(), 1);
//! ```

#![cfg(target_os = "linux")]

use std::io;
use std::mem;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

/// The most descriptors one message may carry (sandbox-init's exec sends
/// stdout, stderr, stdin, the exec's `cgroup.procs` and its directory).
pub const MAX_FDS: usize = 8;

const CMSG_SPACE: usize = {
    // CMSG_SPACE(MAX_FDS * sizeof(int)) on Linux: header + data, aligned to usize.
    let align = mem::size_of::<usize>();
    let header = (mem::size_of::<libc::cmsghdr>() + align - 1) & !(align - 1);
    let data = (MAX_FDS * mem::size_of::<RawFd>() + align - 1) & !(align - 1);
    header + data
};

/// Ancillary space, aligned for `cmsghdr`.
#[repr(C, align(8))]
struct CmsgBuf([u8; CMSG_SPACE]);

/// A close-on-exec `SOCK_SEQPACKET` pair: each answer one message, its
/// descriptors with it (sandbox-init's opener, start reports, the reaper).
pub fn seqpacket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut pair = [0 as RawFd; 2];
    // SAFETY: socketpair writes two descriptors into `pair`.
    if unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            pair.as_mut_ptr(),
        )
    } != 0
    {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both were just created and are ours.
    Ok(unsafe { (OwnedFd::from_raw_fd(pair[0]), OwnedFd::from_raw_fd(pair[1])) })
}

/// One `sendmsg` of `data` with `fds` attached (none: a plain send);
/// `MSG_NOSIGNAL`, retried on EINTR. Returns the bytes sent, which may be
/// fewer than `data` (a stream socket): the descriptors went with the first.
/// More than [`MAX_FDS`] descriptors is EINVAL.
///
/// It allocates nothing and takes no lock on any path, so a forked child
/// may call it (async-signal-safe).
pub fn send(socket: RawFd, data: &[u8], fds: &[RawFd]) -> io::Result<usize> {
    if fds.len() > MAX_FDS {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    let mut cmsg = CmsgBuf([0; CMSG_SPACE]);
    // SAFETY: an all-zero msghdr is a valid empty message.
    let mut msg: libc::msghdr = unsafe { mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if !fds.is_empty() {
        let payload = mem::size_of_val(fds);
        msg.msg_control = cmsg.0.as_mut_ptr().cast();
        // SAFETY: CMSG_SPACE only computes a size.
        msg.msg_controllen = unsafe { libc::CMSG_SPACE(payload as u32) } as usize;
        // SAFETY: msg_control points at a buffer of at least CMSG_SPACE(payload)
        // bytes (fds.len() <= MAX_FDS), so the first header and its data fit.
        unsafe {
            let header = libc::CMSG_FIRSTHDR(&msg);
            (*header).cmsg_level = libc::SOL_SOCKET;
            (*header).cmsg_type = libc::SCM_RIGHTS;
            (*header).cmsg_len = libc::CMSG_LEN(payload as u32) as usize;
            std::ptr::copy_nonoverlapping(
                fds.as_ptr().cast::<u8>(),
                libc::CMSG_DATA(header),
                payload,
            );
        }
    }
    loop {
        // SAFETY: msg describes valid buffers that outlive the call.
        let n = unsafe { libc::sendmsg(socket, &msg, libc::MSG_NOSIGNAL) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// One `recvmsg` into `buf`, the descriptors that came with it appended to
/// `fds` (close-on-exec); retried on EINTR; a message whose descriptors did
/// not fit (more than [`MAX_FDS`], `MSG_CTRUNC`) is an error — the ones
/// that did fit are in `fds` and are closed with it.
pub fn recv(socket: RawFd, buf: &mut [u8], fds: &mut Vec<OwnedFd>) -> io::Result<usize> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut cmsg = CmsgBuf([0; CMSG_SPACE]);
    // SAFETY: an all-zero msghdr is a valid empty message.
    let mut msg: libc::msghdr = unsafe { mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cmsg.0.as_mut_ptr().cast();
    msg.msg_controllen = CMSG_SPACE;
    let n = loop {
        // SAFETY: msg describes valid buffers that outlive the call.
        let n = unsafe { libc::recvmsg(socket, &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n >= 0 {
            break n as usize;
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    };
    // SAFETY: the kernel filled msg_control/msg_controllen; the CMSG macros walk
    // only within it, and every SCM_RIGHTS entry holds descriptors now ours.
    unsafe {
        let mut header = libc::CMSG_FIRSTHDR(&msg);
        while !header.is_null() {
            if (*header).cmsg_level == libc::SOL_SOCKET && (*header).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(header);
                let bytes = (*header).cmsg_len as usize - (data as usize - header as usize);
                for i in 0..bytes / mem::size_of::<RawFd>() {
                    let fd = std::ptr::read_unaligned(data.cast::<RawFd>().add(i));
                    fds.push(OwnedFd::from_raw_fd(fd));
                }
            }
            header = libc::CMSG_NXTHDR(&msg, header);
        }
    }
    if msg.msg_flags & libc::MSG_CTRUNC != 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "too many descriptors in one frame",
        ));
    }
    Ok(n)
}

/// The bytes of the egress hand-off (SPEC E1, T8), between the bwrap
/// forwarder (`sandbox-init`) and the session's proxy (`sandbox-egress`),
/// here because both sides use them and neither depends on the other.
///
/// The forwarder holds a *channel* to the proxy that no command can reach
/// (a connected socket the backend passed down, never a path in the
/// sandbox). For each connection it makes a socket pair and sends one end
/// over the channel as a message whose bytes are the name of the proxy's
/// socket it means (`http.sock`, `socks.sock`): such a connection may be
/// handed its upstream. After a CONNECT or SOCKS request is decided,
/// dialled and answered, the proxy sends [`HANDED`] with the upstream
/// socket attached; the forwarder writes what came before it to the
/// command, stops reading the command, flushes what it has, and shuts its
/// write side; the proxy passes what it read from then on to the upstream
/// and answers [`DRAINED`]; the forwarder then splices between the
/// command and the upstream. The proxy keeps a duplicate of the upstream
/// until the forwarder closes its end of the pair, so ending the session
/// still ends the connection.
pub mod handoff {
    /// Sent by the proxy with the upstream socket attached.
    pub const HANDED: u8 = b'H';
    /// Sent by the proxy when it has passed on every byte the command sent
    /// before the hand-off.
    pub const DRAINED: u8 = b'D';
}

/// Grows this process's descriptor table to `slots` (or the soft
/// `RLIMIT_NOFILE`, if lower) now. Call it while the process has one thread:
/// the kernel grows a table shared by threads only after an RCU grace period
/// (`expand_fdtable`) — milliseconds, see docs/measurements.md — in the middle
/// of whatever call crossed the old size (64, then 128, …); a table of one
/// thread grows without waiting. Best effort: nothing is lost when it cannot.
pub fn reserve_table(slots: u64) {
    // SAFETY: an all-zero rlimit is a valid out-parameter.
    let mut limit: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: getrlimit writes into `limit`.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 || limit.rlim_cur < 2 {
        return;
    }
    let top = limit.rlim_cur.min(slots).min(i32::MAX as u64) - 1;
    // SAFETY: open of a constant C string; the descriptor is closed below.
    let any = unsafe { libc::open(c"/".as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
    if any < 0 {
        return;
    }
    // SAFETY: F_DUPFD_CLOEXEC of a descriptor we hold, at `top` or above.
    let high = unsafe { libc::fcntl(any, libc::F_DUPFD_CLOEXEC, top as libc::c_int) };
    // SAFETY: closing the two descriptors opened here.
    unsafe {
        if high >= 0 {
            libc::close(high);
        }
        libc::close(any);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::fd::{AsFd, AsRawFd};
    use std::os::unix::net::UnixStream;

    #[test]
    fn descriptors_cross_and_too_many_are_refused() {
        let (a, b) = UnixStream::pair().unwrap();
        let (mut keep, peer) = UnixStream::pair().unwrap();
        assert_eq!(send(a.as_raw_fd(), b"hi", &[peer.as_raw_fd()]).unwrap(), 2);
        let (mut buf, mut fds) = ([0u8; 8], Vec::new());
        assert_eq!(recv(b.as_raw_fd(), &mut buf, &mut fds).unwrap(), 2);
        assert_eq!(&buf[..2], b"hi");
        assert_eq!(fds.len(), 1);
        // The received descriptor is the same socket: a write on it arrives.
        assert_eq!(send(fds[0].as_raw_fd(), b"!", &[]).unwrap(), 1);
        let mut one = [0u8; 1];
        keep.read_exact(&mut one).unwrap();
        assert_eq!(&one, b"!");

        let many = [keep.as_fd().as_raw_fd(); MAX_FDS + 1];
        let e = send(a.as_raw_fd(), b"x", &many).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
    }

    fn table_slots() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        status
            .lines()
            .find_map(|line| line.strip_prefix("FDSize:"))
            .and_then(|n| n.trim().parse().ok())
            .expect("FDSize in /proc/self/status")
    }

    /// The table is grown (the test process has threads, so this waits for
    /// RCU once; the binaries call it before they have any).
    #[test]
    fn the_descriptor_table_is_grown_ahead() {
        super::reserve_table(1024);
        // SAFETY: an all-zero rlimit is a valid out-parameter.
        let mut limit: libc::rlimit = unsafe { std::mem::zeroed() };
        // SAFETY: getrlimit writes into `limit`.
        let read = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
        assert_eq!(read, 0);
        assert!(table_slots() >= limit.rlim_cur.min(1024));
    }
}
