//! The directory part of a path walked one name at a time, where the
//! kernel's one walk (`openat2`) cannot do it for the supervisor as it does
//! for the tracee:
//! - `self` and `thread-self` of the tracee's `/proc` name nothing for the
//!   supervisor, which is not in the tracee's pid namespace; here they are
//!   the tracee's numbers there (`super::view`), so `/dev/fd/3/x` (`/dev/fd`
//!   is a symlink to `/proc/self/fd`) is walked as the tracee's;
//! - a magic link (`/proc/self/fd/12`, `/proc/<pid>/cwd`), which the kernel
//!   follows for the tracee to the file the link's process holds, is
//!   followed here to that very directory — the caller's own process's by
//!   the supervisor, another process's only as a command could
//!   ([`AsCommand`]: the kernel's ptrace check, for a command) — so a name
//!   created below it is judged where it really lands, as for
//!   `openat(fd, …)` (a program that names a directory by its descriptor's
//!   path, as Claude Code's Bash tool does for its temporary files).
//!
//! Every other symlink is read and followed as the kernel would (at most
//! [`MAX_HOPS`](super::MAX_HOPS)); `..` never climbs above the tracee's root.

use std::collections::VecDeque;
use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::rc::Rc;

use super::{AsCommand, MAX_HOPS, Outcome, Step, errno_of, fd_result, io, on_procfs, readlink};
use crate::guard::bases::{self, Base};
use crate::guard::{tracee, view};

/// The inode number of a procfs root (`PROC_ROOT_INO`).
const PROC_ROOT_INO: u64 = 1;

/// Walks `dir` (the directory part of a tracee's path) from `base`, the
/// way the kernel walks it for the tracee; the directory it leads to.
pub(super) fn by_hand(
    tid: u32,
    as_command: &dyn AsCommand,
    base: &Rc<OwnedFd>,
    dir: &[u8],
) -> Step<Rc<OwnedFd>> {
    let root = io(bases::open(tid, Base::Root))?;
    let root_id = identity(&root);
    let mut names: VecDeque<Vec<u8>> = components(dir);
    let mut at = Rc::clone(if dir.first() == Some(&b'/') {
        &root
    } else {
        base
    });
    let mut hops = 0;
    while let Some(name) = names.pop_front() {
        match name.as_slice() {
            b"" | b"." => continue,
            b".." => {
                if root_id.is_some() && identity(&at) == root_id {
                    continue; // the tracee's root is as high as it goes
                }
                at = Rc::new(open_here(&at, b"..", libc::O_DIRECTORY)?);
                continue;
            }
            _ => {}
        }
        if is_proc_root(&at) && (name == b"self" || name == b"thread-self") {
            let ids = view::ids(tid).ok_or_else(|| Outcome::error(libc::ENOENT))?;
            let mut theirs = vec![ids.tgid.to_string().into_bytes()];
            if name == b"thread-self" {
                theirs.push(b"task".to_vec());
                theirs.push(ids.tid.to_string().into_bytes());
            }
            for part in theirs.into_iter().rev() {
                names.push_front(part);
            }
            continue;
        }
        let next = open_here(&at, &name, libc::O_NOFOLLOW)?;
        if !is_symlink(&next) {
            at = Rc::new(next);
            continue;
        }
        hops += 1;
        if hops > MAX_HOPS {
            return Err(Outcome::error(libc::ELOOP));
        }
        if let Some(owner) = magic_owner(&at) {
            at = Rc::new(follow_magic(tid, as_command, &at, &name, owner)?);
            continue;
        }
        let cname = CString::new(name).map_err(|_| Outcome::error(libc::EINVAL))?;
        let text = readlink(&at, &cname)?;
        if text.first() == Some(&b'/') {
            at = Rc::clone(&root);
        }
        for part in components(&text).into_iter().rev() {
            names.push_front(part);
        }
    }
    if !is_dir(&at) {
        return Err(Outcome::error(libc::ENOTDIR));
    }
    Ok(at)
}

/// The names of a path, in order (empty ones and `.` are skipped later).
fn components(path: &[u8]) -> VecDeque<Vec<u8>> {
    path.split(|&b| b == b'/').map(<[u8]>::to_vec).collect()
}

/// `openat(at, name, O_PATH | extra)`, as the supervisor.
fn open_here(at: &OwnedFd, name: &[u8], extra: i32) -> Step<OwnedFd> {
    let cname = CString::new(name).map_err(|_| Outcome::error(libc::EINVAL))?;
    // SAFETY: openat relative to a directory we hold, with a valid C string.
    fd_result(unsafe {
        libc::openat(
            at.as_raw_fd(),
            cname.as_ptr(),
            libc::O_PATH | libc::O_CLOEXEC | extra,
        )
    })
}

fn stat(fd: &OwnedFd) -> Option<libc::stat> {
    // SAFETY: zeroed stat is a valid out-parameter.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat on a descriptor we hold, writing into `st`.
    (unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } == 0).then_some(st)
}

fn is_symlink(fd: &OwnedFd) -> bool {
    stat(fd).is_some_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFLNK)
}

fn is_dir(fd: &OwnedFd) -> bool {
    stat(fd).is_some_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFDIR)
}

fn is_proc_root(fd: &OwnedFd) -> bool {
    on_procfs(fd.as_raw_fd()) && stat(fd).is_some_and(|st| st.st_ino == PROC_ROOT_INO)
}

/// What tells a directory from another: its mount and its inode.
fn identity(fd: &OwnedFd) -> Option<(u64, u64, u64)> {
    // SAFETY: zeroed statx is a valid out-parameter.
    let mut st: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: statx of the descriptor itself (AT_EMPTY_PATH) into `st`.
    let done = unsafe {
        libc::statx(
            fd.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            libc::STATX_INO | libc::STATX_MNT_ID,
            &mut st,
        )
    };
    (done == 0).then(|| {
        let dev = (u64::from(st.stx_dev_major) << 32) | u64::from(st.stx_dev_minor);
        (st.stx_mnt_id, dev, st.stx_ino)
    })
}

/// The process whose `/proc` directory `at` is (`/proc/<n>`, or anything
/// below it: `fd`, `task/<m>`, …), as the tracee numbers it: a symlink there
/// is a magic link.
fn magic_owner(at: &OwnedFd) -> Option<u32> {
    if !on_procfs(at.as_raw_fd()) {
        return None;
    }
    let path = tracee::dir_path(at.as_raw_fd()).ok()?;
    let mut parts = path.strip_prefix("/proc").ok()?.components();
    parts.next()?.as_os_str().to_str()?.parse().ok()
}

/// Follows the magic link `name` in `at`, a `/proc` directory of process
/// `owner`: by the supervisor when that is the caller's own process (which
/// may follow its own links), else with a command's credentials.
fn follow_magic(
    tid: u32,
    as_command: &dyn AsCommand,
    at: &OwnedFd,
    name: &[u8],
    owner: u32,
) -> Step<OwnedFd> {
    if view::is_own(tid, owner) {
        return open_here(at, name, 0);
    }
    let cname = CString::new(name).map_err(|_| Outcome::error(libc::EINVAL))?;
    as_command
        .openat(at.as_raw_fd(), &cname, libc::O_PATH, 0)
        .map_err(|e| Outcome::error(errno_of(&e)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_is_split_into_its_names() {
        let names: Vec<Vec<u8>> = components(b"/a//b/./c").into_iter().collect();
        assert_eq!(
            names,
            [&b""[..], b"a", b"", b"b", b".", b"c"].map(<[u8]>::to_vec)
        );
    }
}
