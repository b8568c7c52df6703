//! Reading what a traced process asked for, and reaching its objects:
//! memory, working directory, root, descriptors, umask.

use std::ffi::{CStr, CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::PathBuf;

/// The longest path read from a tracee (PATH_MAX).
const PATH_MAX: usize = 4096;

fn last_error() -> io::Error {
    io::Error::last_os_error()
}

/// Reads a NUL-terminated string at `addr` in `pid`'s memory, once. The
/// copy is what gets checked *and* used, so the tracee changing its memory
/// afterwards changes nothing.
pub fn read_string(pid: u32, addr: u64) -> io::Result<CString> {
    if addr == 0 {
        return Err(io::Error::from_raw_os_error(libc::EFAULT));
    }
    let mut out = Vec::with_capacity(256);
    let mut at = addr;
    let mut page = [0u8; 4096];
    // Most paths are short: a first read of this much, then the rest of
    // the page (copying up to a page for every path cost more than the
    // call itself).
    let mut chunk = 256;
    while out.len() < PATH_MAX {
        // Never read across a page boundary: the next page may be unmapped
        // even when the string ends before it.
        let page_left = 4096 - (at % 4096) as usize;
        let want = page_left.min(chunk).min(PATH_MAX - out.len());
        chunk = 4096;
        let buf = &mut page[..want];
        let local = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: want,
        };
        let remote = libc::iovec {
            iov_base: at as *mut libc::c_void,
            iov_len: want,
        };
        // SAFETY: one local iovec over `buf`, one remote iovec; the kernel
        // validates the remote range.
        let n = unsafe { libc::process_vm_readv(pid as libc::pid_t, &local, 1, &remote, 1, 0) };
        if n <= 0 {
            return Err(io::Error::from_raw_os_error(libc::EFAULT));
        }
        let got = &buf[..n as usize];
        if let Some(end) = got.iter().position(|&b| b == 0) {
            out.extend_from_slice(&got[..end]);
            return CString::new(out).map_err(|_| io::Error::from_raw_os_error(libc::EFAULT));
        }
        out.extend_from_slice(got);
        at += n as u64;
    }
    Err(io::Error::from_raw_os_error(libc::ENAMETOOLONG))
}

/// Reads `len` bytes at `addr` in `pid`'s memory, once (an extended
/// attribute's value): what is read is what is used.
pub fn read_bytes(pid: u32, addr: u64, len: usize) -> io::Result<Vec<u8>> {
    let mut out = vec![0u8; len];
    let mut done = 0;
    while done < len {
        let local = libc::iovec {
            iov_base: out[done..].as_mut_ptr().cast(),
            iov_len: len - done,
        };
        let remote = libc::iovec {
            iov_base: (addr + done as u64) as *mut libc::c_void,
            iov_len: len - done,
        };
        // SAFETY: one local iovec over the rest of `out`, one remote
        // iovec; the kernel validates the remote range.
        let n = unsafe { libc::process_vm_readv(pid as libc::pid_t, &local, 1, &remote, 1, 0) };
        if n <= 0 {
            return Err(io::Error::from_raw_os_error(libc::EFAULT));
        }
        done += n as usize;
    }
    Ok(out)
}

/// Opens a path of ours `O_PATH` (for `/proc/<tid>/…`).
pub fn open_path(path: &str, directory: bool) -> io::Result<OwnedFd> {
    let c = CString::new(path).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let flags = libc::O_PATH | libc::O_CLOEXEC | if directory { libc::O_DIRECTORY } else { 0 };
    // SAFETY: open with a valid C string.
    let fd = unsafe { libc::open(c.as_ptr(), flags) };
    if fd < 0 {
        return Err(last_error());
    }
    // SAFETY: a fresh descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// How many threads' `/proc` directories a supervisor keeps open.
const PROC_DIRS_KEPT: usize = 128;

thread_local! {
    /// `/proc/<tid>` of the threads this supervisor thread served lately.
    static PROC_DIRS: std::cell::RefCell<std::collections::HashMap<u32, OwnedFd>> =
        std::cell::RefCell::new(std::collections::HashMap::new());
}

/// Opens `entry` (`cwd`, `root`, `fd/3`) of thread `tid`'s `/proc`
/// directory, `O_PATH`, the way `open("/proc/<tid>/<entry>")` does —
/// with one name to walk instead of three: `/proc/<tid>` itself is kept
/// per thread id (on this supervisor thread). A kept directory names the
/// very task it was opened for (a procfs directory holds its task's pid,
/// not the number), so once that task is gone it answers ENOENT and is
/// opened afresh: a tid reused by a new process never reaches the old
/// one's entries.
pub fn open_proc_entry(tid: u32, entry: &str, directory: bool) -> io::Result<OwnedFd> {
    let entry = CString::new(entry).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let flags = libc::O_PATH | libc::O_CLOEXEC | if directory { libc::O_DIRECTORY } else { 0 };
    let open_in = |dir: &OwnedFd| {
        // SAFETY: openat relative to a descriptor we hold, with a valid C string.
        let fd = unsafe { libc::openat(dir.as_raw_fd(), entry.as_ptr(), flags) };
        if fd < 0 {
            return Err(last_error());
        }
        // SAFETY: a fresh descriptor we own.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    };
    PROC_DIRS.with(|dirs| {
        let mut dirs = dirs.borrow_mut();
        if let Some(dir) = dirs.get(&tid) {
            match open_in(dir) {
                Ok(fd) => return Ok(fd),
                // Gone (or never ours to open): ask the number afresh.
                Err(_) => drop(dirs.remove(&tid)),
            }
        }
        let dir = open_path(&format!("/proc/{tid}"), true)?;
        let fd = open_in(&dir)?;
        if dirs.len() >= PROC_DIRS_KEPT {
            dirs.clear();
        }
        dirs.insert(tid, dir);
        Ok(fd)
    })
}

/// Our own `/proc/self/fd`, opened once (the descriptor table is the
/// process's, shared by every thread).
pub fn own_fd_dir() -> io::Result<RawFd> {
    static DIR: std::sync::OnceLock<Option<OwnedFd>> = std::sync::OnceLock::new();
    DIR.get_or_init(|| open_path("/proc/self/fd", true).ok())
        .as_ref()
        .map(AsRawFd::as_raw_fd)
        .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOENT))
}

/// The name of descriptor `fd` in [`own_fd_dir`].
pub fn fd_name(fd: RawFd) -> CString {
    // Digits hold no NUL: the default (empty) is never used.
    CString::new(fd.to_string()).unwrap_or_default()
}

/// The path the kernel gives an open descriptor of ours
/// (`readlink("/proc/self/fd/<fd>")`).
pub fn fd_path(fd: RawFd) -> io::Result<PathBuf> {
    let name = fd_name(fd);
    let mut buf = vec![0u8; PATH_MAX];
    // SAFETY: readlinkat into our buffer, relative to a descriptor we hold.
    let n = unsafe {
        libc::readlinkat(
            own_fd_dir()?,
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if n < 0 {
        return Err(last_error());
    }
    if n as usize >= buf.len() {
        return Err(io::Error::from_raw_os_error(libc::ENAMETOOLONG));
    }
    buf.truncate(n as usize);
    Ok(PathBuf::from(OsString::from_vec(buf)))
}

/// What `getcwd` puts before a directory outside our root's mount tree.
const UNREACHABLE: &[u8] = b"(unreachable)";

thread_local! {
    /// Whether this thread's working directory is its own (see
    /// [`own_working_directory`]): only then may [`dir_path`] move it.
    static OWN_CWD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Gives this thread a working directory of its own (`unshare(CLONE_FS)`),
/// so [`dir_path`] can `fchdir` without moving any other thread's.
/// `false` when the kernel refused: then `dir_path` reads `/proc` as before.
pub fn own_working_directory() -> bool {
    // SAFETY: plain syscall; CLONE_FS affects only this thread's fs state.
    let own = unsafe { libc::unshare(libc::CLONE_FS) } == 0;
    OWN_CWD.with(|c| c.set(own));
    own
}

/// The path of a directory we hold. On a thread with a working directory of its
/// own, `fchdir` there and `getcwd`: the same `d_path` as reading
/// `/proc/self/fd/<fd>`, without the three procfs lookups and the access check
/// — about a third of the time, and a guarded call resolves one or two parents
/// (docs/measurements.md). Anything `getcwd` will not name plainly (a removed
/// directory, one outside our root) is read from `/proc` as before, so both
/// give the same answers.
pub fn dir_path(fd: RawFd) -> io::Result<PathBuf> {
    if OWN_CWD.with(std::cell::Cell::get) {
        let mut buf = [0u8; PATH_MAX];
        // SAFETY: fchdir on a descriptor we hold; this thread's cwd is its own.
        let moved = unsafe { libc::fchdir(fd) } == 0;
        // SAFETY: the raw getcwd syscall into our buffer (glibc's wrapper
        // would treat an unreachable directory differently).
        let n =
            moved.then(|| unsafe { libc::syscall(libc::SYS_getcwd, buf.as_mut_ptr(), buf.len()) });
        if let Some(n) = n.filter(|&n| n > 1) {
            // The length counts the closing NUL.
            let path = &buf[..n as usize - 1];
            // A command's files are on the mounts of its own mount
            // namespace, which our root does not reach: `getcwd` names
            // them from that namespace's root, after this prefix — the
            // same path reading `/proc/self/fd/<fd>` gives.
            let path = path.strip_prefix(UNREACHABLE).unwrap_or(path);
            if path.first() == Some(&b'/') {
                return Ok(PathBuf::from(OsString::from_vec(path.to_vec())));
            }
        }
    }
    fd_path(fd)
}

/// `openat2(dir, path, flags, resolve)`.
pub fn openat2(
    dir: RawFd,
    path: &CStr,
    flags: i32,
    mode: u32,
    resolve: u64,
) -> io::Result<OwnedFd> {
    // SAFETY: an all-zero open_how is valid; we set its fields.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = flags as u64;
    how.mode = u64::from(mode);
    how.resolve = resolve;
    // SAFETY: valid descriptor number, C string and open_how of the right size.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir,
            path.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    if fd < 0 {
        return Err(last_error());
    }
    // SAFETY: a fresh descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// A pidfd for thread `tid` itself (`PIDFD_THREAD`, Linux 6.9), as
/// `notif.pid` names a thread: it stays that thread's even once the number
/// is reused.
pub fn thread_pidfd(tid: u32) -> io::Result<OwnedFd> {
    // PIDFD_THREAD is O_EXCL.
    // SAFETY: plain syscall with integer arguments.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, tid as libc::pid_t, libc::O_EXCL) };
    if pidfd < 0 {
        return Err(last_error());
    }
    // SAFETY: a fresh descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(pidfd as RawFd) })
}

/// Whether the thread of `pidfd` has exited (its pidfd reads ready).
pub fn exited(pidfd: &OwnedFd) -> bool {
    let mut p = libc::pollfd {
        fd: pidfd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, no waiting.
    let n = unsafe { libc::poll(&mut p, 1, 0) };
    // An error says nothing of the thread: count it as gone (forget, reopen).
    n != 0
}

/// A copy of descriptor `n` of thread `tid` (its very file, not a reopen).
pub fn steal_fd(tid: u32, n: i32) -> io::Result<OwnedFd> {
    let pidfd = thread_pidfd(tid)?;
    // SAFETY: plain syscall on our pidfd.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), n, 0) };
    if fd < 0 {
        return Err(last_error());
    }
    // SAFETY: a fresh descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// The umask of thread `tid`.
pub fn umask(tid: u32) -> u32 {
    std::fs::read_to_string(format!("/proc/{tid}/status"))
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("Umask:"))
                .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
        })
        .unwrap_or(0o022)
}

/// The process (thread group) thread `tid` belongs to.
pub fn tgid(tid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Tgid:"))
        .and_then(|v| v.trim().parse().ok())
}

/// The command name of thread `tid`, for violation reports.
pub fn comm(tid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{tid}/comm"))
        .map(|c| c.trim_end().to_owned())
        .unwrap_or_else(|_| "?".to_owned())
}

/// Splits a path into the directory part and the final name, the way the
/// kernel sees it: trailing slashes belong to the name's directory-ness,
/// `"a/b/"` is `("a", "b")`, `"x"` is `("", "x")`, `"/x"` is `("/", "x")`.
pub fn split(path: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let mut end = path.len();
    while end > 1 && path[end - 1] == b'/' {
        end -= 1;
    }
    let trimmed = &path[..end];
    match trimmed.iter().rposition(|&b| b == b'/') {
        Some(0) => (b"/".to_vec(), trimmed[1..].to_vec()),
        Some(i) => (trimmed[..i].to_vec(), trimmed[i + 1..].to_vec()),
        None => (Vec::new(), trimmed.to_vec()),
    }
}

/// Joins a canonical directory and a name.
pub fn join(parent: &std::path::Path, name: &[u8]) -> PathBuf {
    parent.join(OsStr::from_bytes(name))
}

/// Bytes of a path.
pub fn bytes(path: &std::path::Path) -> Vec<u8> {
    OsString::from(path.as_os_str()).into_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_like_the_kernel() {
        assert_eq!(split(b"a/b/c"), (b"a/b".to_vec(), b"c".to_vec()));
        assert_eq!(split(b"c"), (b"".to_vec(), b"c".to_vec()));
        assert_eq!(split(b"/c"), (b"/".to_vec(), b"c".to_vec()));
        assert_eq!(split(b"a/dir//"), (b"a".to_vec(), b"dir".to_vec()));
        assert_eq!(split(b"/"), (b"/".to_vec(), b"".to_vec()));
    }

    #[test]
    fn reads_our_own_strings() {
        let text = CString::new("hello/world.pem").unwrap();
        let pid = std::process::id();
        let got = read_string(pid, text.as_ptr() as u64).unwrap();
        assert_eq!(got, text);
        assert!(read_string(pid, 0).is_err());
        // Longer than the first read, and across a page boundary.
        let mut pages = vec![b'a'; 3 * 4096];
        let start = pages.as_ptr() as usize;
        // The second page boundary inside the buffer: at least a page in,
        // wherever the allocation starts.
        let boundary = (start / 4096 + 2) * 4096 - start;
        for (at, len) in [(0, 1000), (boundary - 100, 600), (boundary - 300, 300)] {
            pages[at + len] = 0;
            let got = read_string(pid, (start + at) as u64).unwrap();
            assert_eq!(got.as_bytes(), &pages[at..at + len], "{len} bytes at {at}");
            pages[at + len] = b'a';
        }
        // PATH_MAX bytes and no end: too long.
        let long = vec![b'a'; PATH_MAX + 16];
        assert_eq!(
            read_string(pid, long.as_ptr() as u64)
                .unwrap_err()
                .raw_os_error(),
            Some(libc::ENAMETOOLONG)
        );
    }

    #[test]
    fn proc_entries_and_descriptor_paths_of_ourselves() {
        let tid = std::process::id();
        let here = std::env::current_dir().unwrap();
        for _ in 0..2 {
            // Opened afresh, then through the kept directory.
            let cwd = open_proc_entry(tid, "cwd", true).unwrap();
            assert_eq!(fd_path(cwd.as_raw_fd()).unwrap(), here);
        }
        assert!(open_proc_entry(tid, "no-such-entry", false).is_err());
        assert!(open_proc_entry(u32::MAX - 1, "cwd", true).is_err());
        let file = std::fs::File::open("/proc/version").unwrap();
        assert_eq!(
            fd_path(file.as_raw_fd()).unwrap(),
            PathBuf::from("/proc/version")
        );
        assert!(fd_path(-1).is_err());
    }

    #[test]
    fn umask_and_comm_of_ourselves() {
        let tid = std::process::id();
        assert!(umask(tid) <= 0o777);
        assert_eq!(tgid(tid), Some(tid));
        assert!(!comm(tid).is_empty());
    }
}
