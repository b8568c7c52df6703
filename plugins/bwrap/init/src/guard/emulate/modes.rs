//! Mode and extended-attribute changes (`chmod`, `fchmod`, `fchmodat`,
//! `fchmodat2` with a mode that has an execute bit — the filter sends only
//! those — and `setxattr`, `lsetxattr`, `fsetxattr`): judged as a change of
//! the file they act on — a disabled git hook made executable, an ACL that
//! grants an execute bit — and done by
//! the supervisor on the very file it judged: an `O_PATH` descriptor
//! reached hop by hop, changed through its `/proc/self/fd` link. A name
//! swapped after the check changes nothing.

use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd};

use super::{
    AsCommand, Call, MAX_HOPS, Outcome, Start, Step, arg_int, foreign_proc, io, judge_file,
    magic_file, proc_fd_owner, readlink, resolve, string, view,
};
use crate::guard::tracee;
use sandbox_paths::write_rules::Rules;

/// The largest extended attribute value (`XATTR_SIZE_MAX`).
const XATTR_SIZE_MAX: u64 = 65536;

/// The file a tracee's `(dirfd, path)` names, as an `O_PATH` descriptor;
/// symlinks followed here when `follow`. `Ok(None)`: the final name is a
/// symlink not to be followed.
pub(super) fn file_of(
    as_command: &dyn AsCommand,
    tid: u32,
    dirfd: i32,
    path: &[u8],
    follow: bool,
) -> Step<Option<OwnedFd>> {
    let mut text = path.to_vec();
    let mut holder: Option<std::rc::Rc<OwnedFd>> = None;
    for _ in 0..=MAX_HOPS {
        let start = holder.as_deref().map_or(Start::Tracee(dirfd), Start::Dir);
        let t = resolve(tid, as_command, start, &text)?;
        if let Some(owner) = proc_fd_owner(&t.parent_path) {
            // `/proc/self/fd/N`: the caller's own descriptor as it is;
            // another process's is never a command's to change.
            if !view::is_own(tid, owner) {
                return Err(Outcome::error(libc::EPERM));
            }
            return magic_file(as_command, tid, owner, &t).map(Some);
        }
        if foreign_proc(tid, t.parent.as_raw_fd(), &t.parent_path) {
            // Another process's /proc entry is never a command's to change.
            return Err(Outcome::error(libc::EPERM));
        }
        let name = t.name_c()?;
        // SAFETY: openat relative to a directory we hold.
        let fd = unsafe {
            libc::openat(
                t.parent.as_raw_fd(),
                name.as_ptr(),
                libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            )
        };
        let fd = super::fd_result(fd)?;
        if !is_symlink(&fd) {
            return Ok(Some(fd));
        }
        if !follow {
            return Ok(None);
        }
        text = readlink(&t.parent, &name)?;
        holder = Some(t.parent);
    }
    Err(Outcome::error(libc::ELOOP))
}

fn is_symlink(fd: &OwnedFd) -> bool {
    // SAFETY: zeroed stat is a valid out-parameter.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat on a descriptor we hold (O_PATH descriptors allow it).
    (unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } == 0)
        && st.st_mode & libc::S_IFMT == libc::S_IFLNK
}

/// `/proc/self/fd/N` of a descriptor we hold: a change through it acts on
/// that very file.
fn own_link(fd: &OwnedFd) -> Step<CString> {
    CString::new(format!("/proc/self/fd/{}", fd.as_raw_fd()))
        .map_err(|_| Outcome::error(libc::EINVAL))
}

fn unit(rc: libc::c_int) -> Outcome {
    super::unit_result(i64::from(rc))
}

/// The file a path call acts on, judged: refused when the rules keep it.
#[allow(clippy::too_many_arguments)]
fn judged_path(
    rules: &Rules,
    as_command: &dyn AsCommand,
    call: &Call,
    dirfd: i32,
    path_at: u64,
    follow: bool,
    syscall: &'static str,
    action: &'static str,
    valid: &dyn Fn() -> Step<()>,
) -> Step<Option<OwnedFd>> {
    let path = string(call.tid, path_at)?;
    valid()?;
    judged_name(
        rules, as_command, call.tid, dirfd, &path, follow, syscall, action,
    )
}

/// [`judged_path`] of a path already read.
#[allow(clippy::too_many_arguments)] // the call's parts, as `magic_open` takes them
fn judged_name(
    rules: &Rules,
    as_command: &dyn AsCommand,
    tid: u32,
    dirfd: i32,
    path: &[u8],
    follow: bool,
    syscall: &'static str,
    action: &'static str,
) -> Step<Option<OwnedFd>> {
    let Some(fd) = file_of(as_command, tid, dirfd, path, follow)? else {
        return Ok(None);
    };
    judged(rules, fd, syscall, action).map(Some)
}

/// Refuses a change of the file `fd` when its path or identity is kept.
fn judged(
    rules: &Rules,
    fd: OwnedFd,
    syscall: &'static str,
    action: &'static str,
) -> Step<OwnedFd> {
    judge_file(rules, &fd, syscall).map_err(|mut refused| {
        if let Some(denial) = &mut refused.denial {
            denial.action = action;
        }
        refused
    })?;
    Ok(fd)
}

/// `chmod`, `fchmod`, `fchmodat`, `fchmodat2`.
pub(super) fn chmod(
    rules: &Rules,
    as_command: &dyn AsCommand,
    call: &Call,
    valid: &dyn Fn() -> Step<()>,
) -> Step<Outcome> {
    const ACTION: &str = "file-write-mode";
    let a = &call.args;
    let (fd, mode) = match call.nr {
        libc::SYS_fchmod => {
            let file = io(tracee::steal_fd(call.tid, arg_int(a, 0)))?;
            (Some(judged(rules, file, "fchmod", ACTION)?), a[1])
        }
        libc::SYS_chmod => (
            judged_path(
                rules,
                as_command,
                call,
                libc::AT_FDCWD,
                a[0],
                true,
                "chmod",
                ACTION,
                valid,
            )?,
            a[1],
        ),
        libc::SYS_fchmodat => (
            judged_path(
                rules,
                as_command,
                call,
                arg_int(a, 0),
                a[1],
                true,
                "fchmodat",
                ACTION,
                valid,
            )?,
            a[2],
        ),
        _ => {
            let flags = arg_int(a, 3);
            if flags & !(libc::AT_SYMLINK_NOFOLLOW | libc::AT_EMPTY_PATH) != 0 {
                return Ok(Outcome::error(libc::EINVAL));
            }
            let path = if a[1] == 0 {
                Vec::new()
            } else {
                string(call.tid, a[1])?
            };
            valid()?;
            let dirfd = arg_int(a, 0);
            let file = if path.is_empty() && flags & libc::AT_EMPTY_PATH != 0 {
                if dirfd == libc::AT_FDCWD {
                    judged_name(
                        rules,
                        as_command,
                        call.tid,
                        dirfd,
                        b".",
                        true,
                        "fchmodat2",
                        ACTION,
                    )?
                } else {
                    let file = io(tracee::steal_fd(call.tid, dirfd))?;
                    Some(judged(rules, file, "fchmodat2", ACTION)?)
                }
            } else {
                let follow = flags & libc::AT_SYMLINK_NOFOLLOW == 0;
                judged_name(
                    rules,
                    as_command,
                    call.tid,
                    dirfd,
                    &path,
                    follow,
                    "fchmodat2",
                    ACTION,
                )?
            };
            (file, a[2])
        }
    };
    // A symlink has no mode of its own on Linux.
    let Some(fd) = fd else {
        return Ok(Outcome::error(libc::EOPNOTSUPP));
    };
    let mode = (mode as libc::mode_t) & 0o7777;
    let link = own_link(&fd)?;
    // SAFETY: chmod through the magic link of a descriptor we hold.
    Ok(unit(unsafe { libc::chmod(link.as_ptr(), mode) }))
}

/// `setxattr`, `lsetxattr`, `fsetxattr`: an ACL can give a file an execute
/// bit. `setxattrat` gets ENOSYS (its arguments sit behind a pointer;
/// callers fall back).
pub(super) fn setxattr(
    rules: &Rules,
    as_command: &dyn AsCommand,
    call: &Call,
    valid: &dyn Fn() -> Step<()>,
) -> Step<Outcome> {
    const ACTION: &str = "file-write-xattr";
    let a = &call.args;
    let (name_at, value_at, size, flags) = (a[1], a[2], a[3], arg_int(a, 4));
    if size > XATTR_SIZE_MAX {
        return Ok(Outcome::error(libc::E2BIG));
    }
    let name =
        CString::new(string(call.tid, name_at)?).map_err(|_| Outcome::error(libc::EINVAL))?;
    let value = if size == 0 {
        Vec::new()
    } else {
        io(tracee::read_bytes(call.tid, value_at, size as usize))?
    };
    let fd = match call.nr {
        libc::SYS_fsetxattr => {
            let file = io(tracee::steal_fd(call.tid, arg_int(a, 0)))?;
            Some(judged(rules, file, "fsetxattr", ACTION)?)
        }
        libc::SYS_setxattr => judged_path(
            rules,
            as_command,
            call,
            libc::AT_FDCWD,
            a[0],
            true,
            "setxattr",
            ACTION,
            valid,
        )?,
        _ => judged_path(
            rules,
            as_command,
            call,
            libc::AT_FDCWD,
            a[0],
            false,
            "lsetxattr",
            ACTION,
            valid,
        )?,
    };
    // A symlink takes no attribute a command may set (user.* is refused
    // on one; trusted.* and security.* need a capability).
    let Some(fd) = fd else {
        return Ok(Outcome::error(libc::EPERM));
    };
    let link = own_link(&fd)?;
    // SAFETY: setxattr through the magic link of a descriptor we hold, with
    // our own copies of the name and value.
    Ok(unit(unsafe {
        libc::setxattr(
            link.as_ptr(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            flags,
        )
    }))
}
