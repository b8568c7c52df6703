//! The few system calls that move a command's bytes between descriptors
//! without copying them through user space: pipe sizes, `poll` and
//! `splice(2)`, with a read/write fallback where `splice` is refused.

#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use sandbox_plugin_api::{HostFds, PluginError};

/// The pipe size asked for: Linux's default `fs.pipe-max-size`, the most an
/// unprivileged process may ask for. Sixteen 64 KiB pipes' worth, so a
/// command and its reader each run longer between two wake-ups.
pub const PIPE_SIZE: usize = 1 << 20;

/// The most one copy moves (what a pipe of [`PIPE_SIZE`] holds).
pub const COPY_MAX: usize = PIPE_SIZE;

/// Grows a pipe to [`PIPE_SIZE`]; where that is refused (a lower
/// `fs.pipe-max-size`, a per-user pipe quota) it keeps its size: only
/// speed depends on it. A pipe already that large is left as it is (a
/// caller's bigger pipe is never shrunk).
pub fn grow(pipe: BorrowedFd<'_>) {
    // SAFETY: fcntl on a descriptor we borrow; F_GETPIPE_SZ takes no argument.
    let size = unsafe { libc::fcntl(pipe.as_raw_fd(), libc::F_GETPIPE_SZ) };
    if size < 0 || size as usize >= PIPE_SIZE {
        return;
    }
    // SAFETY: fcntl on a descriptor we borrow; F_SETPIPE_SZ takes an int.
    let _ = unsafe {
        libc::fcntl(
            pipe.as_raw_fd(),
            libc::F_SETPIPE_SZ,
            PIPE_SIZE as libc::c_int,
        )
    };
}

/// Whether `fd` is a pipe or FIFO.
fn is_pipe(fd: BorrowedFd<'_>) -> bool {
    // SAFETY: an all-zero `stat` is a valid value of this plain C struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat of a descriptor we borrow into a `stat` we own.
    let rc = unsafe { libc::fstat(fd.as_raw_fd(), &mut st) };
    rc == 0 && st.st_mode & libc::S_IFMT == libc::S_IFIFO
}

/// A close-on-exec duplicate of a descriptor of this process (the host's:
/// the plugin runs in the host process), so the copy owns its own.
pub fn duplicate(fd: RawFd) -> io::Result<OwnedFd> {
    if fd < 0 {
        return Err(io::Error::from_raw_os_error(libc::EBADF));
    }
    // SAFETY: F_DUPFD_CLOEXEC on a plain number; the kernel checks it is open.
    let dup = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
    if dup < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `dup` is a fresh descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(dup) })
}

/// Close-on-exec duplicates of the host descriptors an exec asks for
/// ([`HostFds`]: stdin, stdout), taken before anything starts, so the
/// backend's copies are its own; the command is never given them.
pub fn duplicate_host_fds(
    fds: Option<HostFds>,
) -> Result<(Option<OwnedFd>, Option<OwnedFd>), PluginError> {
    let fds = fds.unwrap_or_default();
    let host = |fd: Option<i32>, what: &str| {
        fd.map(|fd| {
            let dup = duplicate(fd).map_err(|e| {
                PluginError::invalid(format!("the host's {what} descriptor {fd}: {e}"))
            })?;
            // A pipe the host was given (`producer | cc_server run …`) holds
            // one 64 KiB chunk by default: the producer, our copy and the
            // command would wake each other every 64 KiB. Only its size
            // changes; a file or terminal refuses, and keeps what it is.
            if is_pipe(dup.as_fd()) {
                grow(dup.as_fd());
            }
            Ok::<_, PluginError>(dup)
        })
        .transpose()
    };
    Ok((host(fds.stdin, "stdin")?, host(fds.stdout, "stdout")?))
}

/// Whether every write end of the pipe `read_end` reads is closed
/// (`POLLHUP`, which a pipe reports with data still in it). `false` when
/// that cannot be told: then the graces apply, as before.
pub fn hung_up(read_end: BorrowedFd<'_>) -> bool {
    poll_now(read_end).is_some_and(|revents| revents & libc::POLLHUP != 0)
}

/// Whether a read of `read_end` would return at once (bytes, end of
/// file, or an error), without waiting.
pub fn readable_now(read_end: BorrowedFd<'_>) -> bool {
    poll_now(read_end).is_some_and(|revents| revents != 0)
}

/// `revents` of a poll of `read_end` for input that does not wait; `None`
/// when the poll fails.
fn poll_now(read_end: BorrowedFd<'_>) -> Option<libc::c_short> {
    let mut fd = libc::pollfd {
        fd: read_end.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: poll of one pollfd we own, without waiting.
    let rc = unsafe { libc::poll(&raw mut fd, 1, 0) };
    (rc >= 0).then_some(fd.revents)
}

/// What [`wait`] saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ready {
    /// `from` has bytes, or its end of file (a read will not block).
    Readable,
    /// `watch` reports an error or hang-up: its other end is gone.
    Gone,
}

/// Blocks until `from` can be read, or `watch` (if any) has lost its other
/// end — a pipe's write end whose readers all closed.
pub fn wait(from: BorrowedFd<'_>, watch: Option<BorrowedFd<'_>>) -> io::Result<Ready> {
    let mut fds = [
        libc::pollfd {
            fd: from.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: watch.map_or(-1, |w| w.as_raw_fd()),
            events: 0,
            revents: 0,
        },
    ];
    loop {
        // SAFETY: poll over an array we own, with its true length.
        let rc = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, -1) };
        if rc < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if fds[1].revents & (libc::POLLERR | libc::POLLHUP) != 0 {
            return Ok(Ready::Gone);
        }
        if fds[0].revents != 0 {
            return Ok(Ready::Readable);
        }
    }
}

/// Moves bytes from one descriptor to another: `splice` while both sides
/// take it, then a read and a write through a buffer of its own.
pub struct Copier {
    buf: Option<Vec<u8>>,
}

impl Default for Copier {
    fn default() -> Self {
        Self::new()
    }
}

impl Copier {
    pub fn new() -> Self {
        Self { buf: None }
    }

    /// Moves at most `max` bytes; `Ok(0)` at end of file. Call when `from`
    /// is readable: then only the writing side can block (backpressure).
    pub fn copy(
        &mut self,
        from: BorrowedFd<'_>,
        to: BorrowedFd<'_>,
        max: usize,
    ) -> io::Result<usize> {
        let max = max.min(COPY_MAX);
        if self.buf.is_none() {
            match splice(from, to, max) {
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                    // Neither side moved a byte: a terminal, an O_APPEND file, …
                    self.buf = Some(vec![0u8; COPY_MAX.min(256 << 10)]);
                }
                done => return done,
            }
        }
        let buf = self.buf.as_mut().map_or(&mut [][..], |b| &mut b[..]);
        let len = buf.len().min(max);
        let n = retry(|| {
            // SAFETY: reads into our own buffer, at most its length.
            unsafe { libc::read(from.as_raw_fd(), buf.as_mut_ptr().cast(), len) }
        })?;
        write_all(to, &buf[..n])?;
        Ok(n)
    }
}

fn splice(from: BorrowedFd<'_>, to: BorrowedFd<'_>, max: usize) -> io::Result<usize> {
    retry(|| {
        // SAFETY: splice between two descriptors we borrow, no offsets.
        unsafe {
            libc::splice(
                from.as_raw_fd(),
                std::ptr::null_mut(),
                to.as_raw_fd(),
                std::ptr::null_mut(),
                max,
                libc::SPLICE_F_MOVE,
            )
        }
    })
}

fn write_all(to: BorrowedFd<'_>, mut data: &[u8]) -> io::Result<()> {
    while !data.is_empty() {
        let n = retry(|| {
            // SAFETY: writes from a slice we borrow, at most its length.
            unsafe { libc::write(to.as_raw_fd(), data.as_ptr().cast(), data.len()) }
        })?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        data = &data[n..];
    }
    Ok(())
}

/// Runs a system call again while it is interrupted.
fn retry(mut call: impl FnMut() -> isize) -> io::Result<usize> {
    loop {
        let rc = call();
        if rc >= 0 {
            return Ok(rc as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::fd::AsFd;

    #[test]
    fn pipes_grow_and_bytes_move_between_pipes_and_into_files() {
        let (mut r, mut w) = std::io::pipe().unwrap();
        grow(w.as_fd());
        // SAFETY: F_GETPIPE_SZ on our own pipe.
        let size = unsafe { libc::fcntl(r.as_raw_fd(), libc::F_GETPIPE_SZ) };
        assert!(size >= 64 << 10, "{size}");
        let (mut r2, w2) = std::io::pipe().unwrap();
        w.write_all(b"hello").unwrap();
        let mut copier = Copier::new();
        assert_eq!(wait(r.as_fd(), None).unwrap(), Ready::Readable);
        assert_eq!(copier.copy(r.as_fd(), w2.as_fd(), 100).unwrap(), 5);
        drop(w2);
        let mut got = String::new();
        r2.read_to_string(&mut got).unwrap();
        assert_eq!(got, "hello");
        // An O_APPEND file refuses splice: the fallback writes it.
        let dir = tempfile_dir("splice");
        let path = dir.join("out");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .unwrap();
        w.write_all(b"abc").unwrap();
        drop(w);
        assert_eq!(copier.copy(r.as_fd(), file.as_fd(), 100).unwrap(), 3);
        assert_eq!(copier.copy(r.as_fd(), file.as_fd(), 100).unwrap(), 0);
        assert_eq!(std::fs::read(&path).unwrap(), b"abc");
        let _ = r.read(&mut [0u8; 1]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn pipe_size(fd: BorrowedFd<'_>) -> i32 {
        // SAFETY: F_GETPIPE_SZ on a pipe of this test.
        unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETPIPE_SZ) }
    }

    #[test]
    fn a_host_pipe_is_grown_never_shrunk_and_a_file_is_left_alone() {
        // `producer | cc_server run …`: the host's stdin pipe grows, so the
        // producer and our copy wake each other every MiB, not every 64 KiB.
        let (r, _w) = std::io::pipe().unwrap();
        let (big_r, _big_w) = std::io::pipe().unwrap();
        // SAFETY: F_SETPIPE_SZ on a pipe of this test.
        let big =
            unsafe { libc::fcntl(big_r.as_raw_fd(), libc::F_SETPIPE_SZ, 2 * PIPE_SIZE as i32) };
        let dir = tempfile_dir("sizes");
        let file = std::fs::File::create(dir.join("plain")).unwrap();
        let (stdin, stdout) = duplicate_host_fds(Some(HostFds {
            stdin: Some(r.as_raw_fd()),
            stdout: Some(file.as_raw_fd()),
        }))
        .unwrap();
        assert!(pipe_size(stdin.unwrap().as_fd()) as usize >= PIPE_SIZE);
        assert_eq!(pipe_size(r.as_fd()) as usize, PIPE_SIZE, "the same pipe");
        assert!(pipe_size(stdout.unwrap().as_fd()) < 0, "a file is no pipe");
        if big > 0 {
            let (kept, _) = duplicate_host_fds(Some(HostFds {
                stdin: Some(big_r.as_raw_fd()),
                stdout: None,
            }))
            .unwrap();
            assert_eq!(pipe_size(kept.unwrap().as_fd()), big, "not shrunk");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_write_end_whose_reader_left_is_seen_as_gone() {
        let (idle_r, _idle_w) = std::io::pipe().unwrap();
        let (r, w) = std::io::pipe().unwrap();
        drop(r);
        assert_eq!(wait(idle_r.as_fd(), Some(w.as_fd())).unwrap(), Ready::Gone);
        assert!(duplicate(-1).is_err());
        assert!(duplicate(w.as_raw_fd()).is_ok());
    }

    /// A directory of this test's own: tests run in parallel in one
    /// process, and one removing a shared directory broke another's file.
    fn tempfile_dir(test: &str) -> std::path::PathBuf {
        let dir =
            std::env::temp_dir().join(format!("relay-pipe-test-{}-{test}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}
