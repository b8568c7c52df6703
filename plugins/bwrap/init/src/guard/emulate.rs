//! Doing a traced process's name-creating syscall for it, on exactly the
//! name that was checked (docs/research/linux-create-deny.md §2.5).
//!
//! The path is copied out of the tracee once; its parent is opened the way
//! the tracee would resolve it (from its cwd, root or directory descriptor,
//! absolute paths inside its root, in the tracee's own `/proc` — see
//! [`super::view`] — and a magic link on the way followed to the directory
//! it holds, see `walk`); the decision is made on
//! (canonical parent, final name); then the supervisor performs the call
//! relative to that parent descriptor, so what it checked is what happens.
//! A symlink in final position is followed here, hop by hop, each hop
//! checked. The result (a descriptor, a value or an errno) goes back to the
//! tracee; nothing is re-read from its memory, so there is no TOCTOU window.
//!
//! No confused deputy: the supervisor holds more than a command — it keeps
//! CAP_SYS_PTRACE, it is in the Landlock domain above the commands', and it
//! is a thread of PID 1 — and all three matter in one place only: `/proc`,
//! where opening another process's entry (`mem`, `maps`, `fd/N`, …) is a
//! ptrace access check. So the supervisor opens in `/proc` only the caller's
//! own entries (which the caller may open whatever it is); any other file
//! there, reached by any route (a path, a dirfd, a symlink, a `/proc/self/fd`
//! reopen), is opened by [`AsCommand`], with a command's credentials, and
//! the caller gets the kernel's own answer. Elsewhere the supervisor and a
//! command have the same rights: the same uid and groups, the same mounts
//! (read-only and masked paths included), the same Landlock write rules.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};

use super::bases::{self, Base};
use super::{timing, tracee, view};
use sandbox_paths::write_rules::{Refusal, Rules};

mod connect;
mod modes;
mod two_names;
mod walk;

/// Symlinks followed before giving up, as the kernel (ELOOP).
const MAX_HOPS: usize = 40;

/// Opens a file with a command's credentials (see the module doc): in the
/// sandbox, a one-shot process the forker makes (`crate::forker`).
pub trait AsCommand {
    /// `openat(dir, name, flags, mode)` as a command would make it.
    fn openat(&self, dir: RawFd, name: &CStr, flags: i32, mode: u32) -> io::Result<OwnedFd>;
}

/// `PROC_SUPER_MAGIC`.
const PROC_SUPER_MAGIC: i64 = 0x9fa0;

/// Whether the file or directory `fd` is on procfs.
fn on_procfs(fd: RawFd) -> bool {
    // SAFETY: zeroed statfs is a valid out-parameter.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: fstatfs on a descriptor we hold, writing into `st`.
    (unsafe { libc::fstatfs(fd, &mut st) } == 0) && st.f_type as i64 == PROC_SUPER_MAGIC
}

/// The pid of `/proc/<pid>/…` (or `/proc/<pid>` itself).
fn proc_entry_pid(path: &Path) -> Option<u32> {
    let mut parts = path.strip_prefix("/proc").ok()?.components();
    parts.next()?.as_os_str().to_str()?.parse().ok()
}

/// Whether the file or directory `fd`, at `path`, is in `/proc` but not an
/// entry of the caller's own process (any of its threads): then only a
/// command's credentials may open it.
fn foreign_proc(tid: u32, fd: RawFd, path: &Path) -> bool {
    if !on_procfs(fd) {
        return false;
    }
    match proc_entry_pid(path) {
        Some(pid) => !view::is_own(tid, pid),
        None => true,
    }
}

/// One notification, decoded.
#[derive(Debug, Clone, Copy)]
pub struct Call {
    pub tid: u32,
    pub nr: i64,
    pub args: [u64; 6],
}

/// What one exec's supervisor remembers between calls.
#[derive(Debug)]
pub struct Memo {
    /// The umask every process of the exec has while none has called `umask`:
    /// the exec's command starts with it (PID 1 sets it before the filter),
    /// children inherit it, and only the `umask` call — which the filter sends
    /// here — changes it. So a new process's umask is known without reading its
    /// `/proc` status (as dear as the rest of a guarded call, at the first
    /// create of every compiler, assembler and linker process of a build).
    started_with: Option<u32>,
    /// Umask by thread id, once some process has called `umask`; forgotten
    /// whenever any process calls it.
    umasks: std::collections::HashMap<u32, u32>,
}

impl Memo {
    /// For an exec whose command started with `umask`.
    pub fn new(umask: u32) -> Self {
        Self {
            started_with: Some(umask),
            umasks: Default::default(),
        }
    }

    fn umask(&mut self, tid: u32) -> u32 {
        if let Some(umask) = self.started_with {
            return umask;
        }
        *self.umasks.entry(tid).or_insert_with(|| {
            let began = timing::begin();
            let umask = tracee::umask(tid);
            timing::end("read umask", began);
            umask
        })
    }
}

/// What to answer.
#[derive(Debug)]
pub enum Answer {
    /// Let the call run unchanged (path-free calls, and barriers the
    /// guard does not judge).
    Continue,
    /// Inject this descriptor and return its number.
    Fd { fd: OwnedFd, cloexec: bool },
    /// Return this value.
    Value(i64),
    /// Fail with this errno.
    Error(i32),
    /// Made on a thread of its own, which answers: the call may block for
    /// long (a blocking `connect`), and the other calls must not wait.
    Later(Deferred),
}

/// A call to make on another thread: its value, or an errno.
pub struct Deferred(pub Box<dyn FnOnce() -> Result<i64, i32> + Send>);

impl std::fmt::Debug for Deferred {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Deferred")
    }
}

/// A refused call, for the violation event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial {
    /// `file-write-create`, `file-write-data` or `file-write-unlink`.
    pub action: &'static str,
    /// The canonical path refused.
    pub target: PathBuf,
    /// The glob or rule that refused it.
    pub rule: String,
    /// The syscall.
    pub syscall: &'static str,
}

/// The answer and, when refused, why.
#[derive(Debug)]
pub struct Outcome {
    pub answer: Answer,
    pub denial: Option<Denial>,
}

impl Outcome {
    fn error(errno: i32) -> Self {
        Self {
            answer: Answer::Error(errno),
            denial: None,
        }
    }

    fn value(value: i64) -> Self {
        Self {
            answer: Answer::Value(value),
            denial: None,
        }
    }
}

fn errno_of(e: &io::Error) -> i32 {
    e.raw_os_error().unwrap_or(libc::EIO)
}

type Step<T> = Result<T, Outcome>;

fn io<T>(r: io::Result<T>) -> Step<T> {
    r.map_err(|e| Outcome::error(errno_of(&e)))
}

fn deny(action: &'static str, target: &Path, refusal: Refusal, syscall: &'static str) -> Outcome {
    Outcome {
        answer: Answer::Error(libc::EACCES),
        denial: Some(Denial {
            action,
            target: target.to_path_buf(),
            rule: refusal.rule,
            syscall,
        }),
    }
}

/// Where resolution starts.
enum Start<'a> {
    /// The tracee's own directory descriptor (or `AT_FDCWD`).
    Tracee(i32),
    /// A directory we already hold (after following a relative symlink).
    Dir(&'a OwnedFd),
}

/// A tracee's (dirfd, path), resolved to the parent directory we hold and
/// the final name.
struct Target {
    /// Shared, not duplicated, when a second name lies in the same
    /// directory ([`two_names`]): one `dup` and `close` fewer per call.
    parent: std::rc::Rc<OwnedFd>,
    parent_path: PathBuf,
    name: Vec<u8>,
}

impl Target {
    /// The canonical path the call is about.
    fn path(&self) -> PathBuf {
        match self.name.as_slice() {
            b"." | b"" => self.parent_path.clone(),
            b".." => self
                .parent_path
                .parent()
                .unwrap_or(&self.parent_path)
                .to_path_buf(),
            name => tracee::join(&self.parent_path, name),
        }
    }

    fn name_c(&self) -> Step<CString> {
        CString::new(self.name.clone()).map_err(|_| Outcome::error(libc::EINVAL))
    }
}

fn dup(fd: &OwnedFd) -> Step<OwnedFd> {
    io(fd.try_clone())
}

/// Resolves the directory part the way the tracee would.
fn resolve(tid: u32, as_command: &dyn AsCommand, start: Start<'_>, path: &[u8]) -> Step<Target> {
    let began = timing::begin();
    let resolved = resolve_untimed(tid, as_command, start, path);
    timing::end("resolve", began);
    resolved
}

fn resolve_untimed(
    tid: u32,
    as_command: &dyn AsCommand,
    start: Start<'_>,
    path: &[u8],
) -> Step<Target> {
    if path.is_empty() {
        return Err(Outcome::error(libc::ENOENT));
    }
    let path = if view::names_self(path) {
        // The supervisor is not in the tracee's pid namespace: its numbers.
        let ids = view::ids(tid).ok_or_else(|| Outcome::error(libc::ENOENT))?;
        view::rewrite_self(path, &ids)
    } else {
        path.to_vec()
    };
    let (dir, name) = tracee::split(&path);
    let absolute = path[0] == b'/';
    let base = if absolute {
        io(bases::open(tid, Base::Root))?
    } else {
        match start {
            Start::Tracee(dirfd) if dirfd == libc::AT_FDCWD => io(bases::open(tid, Base::Cwd))?,
            Start::Tracee(dirfd) => std::rc::Rc::new(io(tracee::open_proc_entry(
                tid,
                &format!("fd/{dirfd}"),
                true,
            ))?),
            Start::Dir(fd) => std::rc::Rc::new(dup(fd)?),
        }
    };
    let mut resolve_flags = libc::RESOLVE_NO_MAGICLINKS;
    if absolute {
        // A chrooted tracee's "/" is its root, not ours (confused deputy).
        resolve_flags |= libc::RESOLVE_IN_ROOT;
    }
    let dir_c = CString::new(dir).map_err(|_| Outcome::error(libc::EINVAL))?;
    let walk = |flags: u64| {
        tracee::openat2(
            base.as_raw_fd(),
            &dir_c,
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
            0,
            flags,
        )
    };
    let parent = if dir_c.is_empty() || dir_c.as_bytes() == b"/" {
        base
    } else {
        match walk(resolve_flags) {
            Ok(fd) => std::rc::Rc::new(fd),
            // A magic link on the way (`/proc/self/fd/3/x`), or a symlink to
            // `self` of the tracee's /proc (`/dev/fd/3/x`): the kernel's
            // one walk stops there for us, not for the tracee.
            Err(e)
                if e.raw_os_error() == Some(libc::ELOOP)
                    || (e.raw_os_error() == Some(libc::ENOENT)
                        && walk(resolve_flags | libc::RESOLVE_NO_SYMLINKS)
                            .is_err_and(|e| e.raw_os_error() == Some(libc::ELOOP))) =>
            {
                walk::by_hand(tid, as_command, &base, dir_c.as_bytes())?
            }
            Err(e) => return Err(Outcome::error(errno_of(&e))),
        }
    };
    let parent_path = io(tracee::dir_path(parent.as_raw_fd()))?;
    Ok(Target {
        parent,
        parent_path,
        name,
    })
}

/// `/proc/<n>/fd` or `/proc/<n>/task/<m>/fd`: the final name is a magic link.
fn proc_fd_owner(dir: &Path) -> Option<u32> {
    let parts: Vec<&str> = dir.to_str()?.trim_start_matches('/').split('/').collect();
    match parts.as_slice() {
        ["proc", pid, "fd"] => pid.parse().ok(),
        ["proc", _, "task", tid, "fd"] => tid.parse().ok(),
        _ => None,
    }
}

fn fstat(fd: RawFd) -> Option<(u64, u64)> {
    // SAFETY: zeroed stat is a valid out-parameter.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat on a descriptor we hold, writing into `st`.
    (unsafe { libc::fstat(fd, &mut st) } == 0).then_some((st.st_dev, st.st_ino))
}

fn exists(parent: &OwnedFd, name: &CStr) -> bool {
    // SAFETY: zeroed stat is a valid out-parameter.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstatat relative to a descriptor we hold.
    unsafe {
        libc::fstatat(
            parent.as_raw_fd(),
            name.as_ptr(),
            &mut st,
            libc::AT_SYMLINK_NOFOLLOW,
        ) == 0
    }
}

/// Whether the name (not followed) is a directory.
fn is_dir(parent: &OwnedFd, name: &CStr) -> bool {
    // SAFETY: zeroed stat is a valid out-parameter.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstatat relative to a descriptor we hold.
    let found = unsafe {
        libc::fstatat(
            parent.as_raw_fd(),
            name.as_ptr(),
            &mut st,
            libc::AT_SYMLINK_NOFOLLOW,
        ) == 0
    };
    found && st.st_mode & libc::S_IFMT == libc::S_IFDIR
}

/// The error an unlink or `rmdir` of a name gets without changing
/// anything: ENOENT when it is not there, ENOTEMPTY for a directory that
/// holds something.
fn would_fail(parent: &OwnedFd, name: &CStr, flags: i32) -> Option<i32> {
    if !exists(parent, name) {
        return Some(libc::ENOENT);
    }
    if flags & libc::AT_REMOVEDIR == 0 || !is_dir(parent, name) {
        return None;
    }
    // SAFETY: openat relative to a directory we hold.
    let dir = unsafe {
        libc::openat(
            parent.as_raw_fd(),
            name.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    let dir = fd_result(dir).ok()?;
    let holds = std::fs::read_dir(format!("/proc/self/fd/{}", dir.as_raw_fd()))
        .ok()?
        .next()
        .is_some();
    holds.then_some(libc::ENOTEMPTY)
}

/// Whether the name (not followed) is a file protected at start, under
/// whatever path it has now: renaming an ancestor moves a protected file
/// to a path its glob may not name (`existing:` globs protect the paths
/// seen at start), but it stays the same file.
fn protected_identity(rules: &Rules, parent: &OwnedFd, name: &CStr) -> Option<Refusal> {
    if rules.protected_inodes() == 0 {
        return None;
    }
    // SAFETY: zeroed stat is a valid out-parameter.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstatat relative to a descriptor we hold.
    let found = unsafe {
        libc::fstatat(
            parent.as_raw_fd(),
            name.as_ptr(),
            &mut st,
            libc::AT_SYMLINK_NOFOLLOW,
        ) == 0
    };
    (found && rules.is_protected_inode(st.st_dev, st.st_ino)).then(|| Refusal {
        rule: "another name of a protected file".into(),
    })
}

fn readlink(parent: &OwnedFd, name: &CStr) -> Step<Vec<u8>> {
    let mut buf = vec![0u8; 4096];
    // SAFETY: readlinkat into our buffer, relative to a descriptor we hold.
    let n = unsafe {
        libc::readlinkat(
            parent.as_raw_fd(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if n < 0 {
        return Err(Outcome::error(errno_of(&io::Error::last_os_error())));
    }
    buf.truncate(n as usize);
    Ok(buf)
}

fn fd_result(fd: i32) -> Step<OwnedFd> {
    if fd < 0 {
        return Err(Outcome::error(errno_of(&io::Error::last_os_error())));
    }
    // SAFETY: a fresh descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn unit_result(rc: i64) -> Outcome {
    if rc < 0 {
        Outcome::error(errno_of(&io::Error::last_os_error()))
    } else {
        Outcome::value(0)
    }
}

fn wants_write(flags: i32) -> bool {
    flags & libc::O_ACCMODE != libc::O_RDONLY || flags & (libc::O_CREAT | libc::O_TRUNC) != 0
}

/// The raw `__O_TMPFILE` bit (glibc's `O_TMPFILE` also holds O_DIRECTORY).
const TMPFILE_BIT: i32 = 0o20000000;

/// Opens for the tracee: checks every name that could be written or
/// created, follows symlinks itself, refuses protected inodes.
#[allow(clippy::too_many_arguments)]
fn open(
    rules: &Rules,
    as_command: &dyn AsCommand,
    memo: &mut Memo,
    tid: u32,
    dirfd: i32,
    path: &[u8],
    flags: i32,
    mode: u32,
    syscall: &'static str,
) -> Step<OwnedFd> {
    let write = wants_write(flags);
    let creates = flags & (libc::O_CREAT | TMPFILE_BIT) != 0;
    let create_mode = if creates {
        (mode & 0o7777) & !memo.umask(tid)
    } else {
        0
    };
    if flags & TMPFILE_BIT != 0 {
        // An unnamed file in a directory: no name to judge (linking it is).
        let t = resolve(tid, as_command, Start::Tracee(dirfd), path)?;
        let name = t.name_c()?;
        let dir = io(tracee::openat2(
            t.parent.as_raw_fd(),
            &name,
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
            0,
            libc::RESOLVE_NO_MAGICLINKS,
        ))?;
        let dot = c".";
        // SAFETY: openat relative to a directory we hold.
        return fd_result(unsafe {
            libc::openat(
                dir.as_raw_fd(),
                dot.as_ptr(),
                flags | libc::O_CLOEXEC,
                create_mode,
            )
        });
    }
    let mut text = path.to_vec();
    let mut holder: Option<std::rc::Rc<OwnedFd>> = None;
    for _ in 0..=MAX_HOPS {
        let start = holder.as_deref().map_or(Start::Tracee(dirfd), Start::Dir);
        let t = resolve(tid, as_command, start, &text)?;
        if let Some(owner) = proc_fd_owner(&t.parent_path) {
            return magic_open(rules, as_command, tid, owner, &t, flags, write, syscall);
        }
        let name = t.name_c()?;
        if foreign_proc(tid, t.parent.as_raw_fd(), &t.parent_path) {
            // Another process's /proc entry: the kernel decides, for a
            // command (symlinks there followed by it, as a command's would be).
            let fd = io(as_command.openat(t.parent.as_raw_fd(), &name, flags, create_mode))?;
            if write {
                judge_file(rules, &fd, syscall)?;
            }
            return Ok(fd);
        }
        let target = t.path();
        if write && rules.could_refuse(&target) {
            let existed = exists(&t.parent, &name);
            let refusal = if existed {
                rules.check_name(&target)
            } else {
                rules.check_create(&target)
            };
            if let Some(refusal) = refusal {
                let action = if existed {
                    "file-write-data"
                } else {
                    "file-write-create"
                };
                return Err(deny(action, &target, refusal, syscall));
            }
        }
        // SAFETY: openat relative to a directory we hold, on the checked name.
        let fd = unsafe {
            libc::openat(
                t.parent.as_raw_fd(),
                name.as_ptr(),
                flags | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                create_mode,
            )
        };
        if fd >= 0 {
            let fd = fd_result(fd)?;
            if write
                && rules.protected_inodes() > 0
                && let Some((dev, ino)) = fstat(fd.as_raw_fd())
                && rules.is_protected_inode(dev, ino)
            {
                let refusal = Refusal {
                    rule: "another name of a protected file".into(),
                };
                return Err(deny("file-write-data", &target, refusal, syscall));
            }
            return Ok(fd);
        }
        let err = io::Error::last_os_error();
        if errno_of(&err) != libc::ELOOP || flags & libc::O_NOFOLLOW != 0 {
            return Err(Outcome::error(errno_of(&err)));
        }
        // The final name is a symlink: follow it here, so its target is judged too.
        text = readlink(&t.parent, &name)?;
        holder = Some(t.parent);
    }
    Err(Outcome::error(libc::ELOOP))
}

/// Refuses a write to the file we hold when its path or identity is protected.
fn judge_file(rules: &Rules, file: &OwnedFd, syscall: &'static str) -> Step<()> {
    let target = io(tracee::fd_path(file.as_raw_fd()))?;
    if let Some(refusal) = rules.check_name(&target) {
        return Err(deny("file-write-data", &target, refusal, syscall));
    }
    if let Some((dev, ino)) = fstat(file.as_raw_fd())
        && rules.is_protected_inode(dev, ino)
    {
        let refusal = Refusal {
            rule: "another name of a protected file".into(),
        };
        return Err(deny("file-write-data", &target, refusal, syscall));
    }
    Ok(())
}

/// The file behind the magic link `t` (`/proc/<owner>/fd/<k>`, `owner` as
/// the caller numbers it): the caller's own descriptor taken as it is;
/// another process's only as a command could reach it (the kernel's ptrace
/// check, for a command).
fn magic_file(as_command: &dyn AsCommand, tid: u32, owner: u32, t: &Target) -> Step<OwnedFd> {
    let k: i32 = std::str::from_utf8(&t.name)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| Outcome::error(libc::ENOENT))?;
    let ids = view::ids(tid);
    // Its process's or its own table, by our numbers for them.
    let outer = ids.and_then(|ids| match owner {
        n if n == ids.tgid => Some(ids.outer_tgid),
        n if n == ids.tid => Some(ids.outer_tid),
        _ => None,
    });
    if let Some(outer) = outer {
        return io(tracee::steal_fd(outer, k));
    }
    let name = t.name_c()?;
    if view::is_own(tid, owner) {
        // Another thread of its own process: the link followed by us, as
        // the caller may follow it.
        // SAFETY: openat relative to a directory we hold, with a valid C string.
        return fd_result(unsafe {
            libc::openat(
                t.parent.as_raw_fd(),
                name.as_ptr(),
                libc::O_PATH | libc::O_CLOEXEC,
            )
        });
    }
    io(as_command.openat(t.parent.as_raw_fd(), &name, libc::O_PATH, 0))
}

/// `/proc/<n>/fd/<k>` (`/dev/stdout`, `/dev/fd/3`): take the file, judge its
/// path and identity, and reopen it — with a command's credentials when it
/// is another process's `/proc` entry (an `O_PATH` descriptor of
/// `/proc/<pid>/mem`, reopened for writing, is still that process's memory).
#[allow(clippy::too_many_arguments)]
fn magic_open(
    rules: &Rules,
    as_command: &dyn AsCommand,
    tid: u32,
    owner: u32,
    t: &Target,
    flags: i32,
    write: bool,
    syscall: &'static str,
) -> Step<OwnedFd> {
    let file = magic_file(as_command, tid, owner, t)?;
    if write {
        judge_file(rules, &file, syscall)?;
    }
    let again = CString::new(format!("/proc/self/fd/{}", file.as_raw_fd()))
        .map_err(|_| Outcome::error(libc::EINVAL))?;
    let reopen = (flags & !(libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW)) | libc::O_CLOEXEC;
    let target = io(tracee::fd_path(file.as_raw_fd()))?;
    if foreign_proc(tid, file.as_raw_fd(), &target) {
        // `/proc/self` of the one-shot opener is a copy of ours: it holds
        // `file` at the same number.
        return io(as_command.openat(libc::AT_FDCWD, &again, reopen, 0));
    }
    let own = tracee::fd_name(file.as_raw_fd());
    // SAFETY: open of our own magic link (`again`) with a valid C string.
    fd_result(unsafe { libc::openat(io(tracee::own_fd_dir())?, own.as_ptr(), reopen) })
}

fn string(tid: u32, addr: u64) -> Step<Vec<u8>> {
    let began = timing::begin();
    let read = io(tracee::read_string(tid, addr)).map(CString::into_bytes);
    timing::end("read path", began);
    read
}

fn arg_int(args: &[u64; 6], i: usize) -> i32 {
    args[i] as u32 as i32
}

/// Handles one call. `still_valid` confirms the notification (and so the
/// tid) is still live after the tracee's memory was read.
pub fn handle(
    rules: &Rules,
    as_command: &dyn AsCommand,
    memo: &mut Memo,
    call: &Call,
    still_valid: &dyn Fn() -> bool,
) -> Outcome {
    if is_barrier(call.nr) {
        // Path-free (umask: forget the umasks we knew; chdir: forget the
        // working directories kept), sent only to come after the answers
        // before it (`seccomp::BARRIERS`): let it run as it is.
        if call.nr == libc::SYS_umask {
            memo.started_with = None;
            memo.umasks.clear();
        }
        if call.nr == libc::SYS_chdir || call.nr == libc::SYS_fchdir {
            bases::moving(call.tid);
        }
        return Outcome {
            answer: Answer::Continue,
            denial: None,
        };
    }
    match run(rules, as_command, memo, call, still_valid) {
        Ok(outcome) | Err(outcome) => outcome,
    }
}

fn is_barrier(nr: i64) -> bool {
    crate::seccomp::BARRIERS.contains(&nr)
}

fn run(
    rules: &Rules,
    as_command: &dyn AsCommand,
    memo: &mut Memo,
    call: &Call,
    still_valid: &dyn Fn() -> bool,
) -> Step<Outcome> {
    let (tid, a) = (call.tid, &call.args);
    let valid = || {
        if still_valid() {
            Ok(())
        } else {
            Err(Outcome::error(libc::ENOENT))
        }
    };
    let opened = |fd: OwnedFd, flags: i32| Outcome {
        answer: Answer::Fd {
            fd,
            cloexec: flags & libc::O_CLOEXEC != 0,
        },
        denial: None,
    };
    match call.nr {
        libc::SYS_open | libc::SYS_openat | libc::SYS_creat => {
            let (dirfd, path_at, flags, mode, name) = match call.nr {
                libc::SYS_open => (libc::AT_FDCWD, a[0], arg_int(a, 1), a[2] as u32, "open"),
                libc::SYS_creat => (
                    libc::AT_FDCWD,
                    a[0],
                    libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC,
                    a[1] as u32,
                    "creat",
                ),
                _ => (arg_int(a, 0), a[1], arg_int(a, 2), a[3] as u32, "openat"),
            };
            let path = string(tid, path_at)?;
            valid()?;
            let fd = open(
                rules, as_command, memo, tid, dirfd, &path, flags, mode, name,
            )?;
            Ok(opened(fd, flags))
        }
        libc::SYS_truncate => {
            let path = string(tid, a[0])?;
            valid()?;
            let fd = open(
                rules,
                as_command,
                memo,
                tid,
                libc::AT_FDCWD,
                &path,
                libc::O_WRONLY,
                0,
                "truncate",
            )?;
            // SAFETY: ftruncate on a descriptor we hold.
            Ok(unit_result(i64::from(unsafe {
                libc::ftruncate(fd.as_raw_fd(), a[1] as libc::off_t)
            })))
        }
        libc::SYS_mkdir | libc::SYS_mkdirat | libc::SYS_mknod | libc::SYS_mknodat => {
            let (dirfd, path_at, mode, dev, name) = match call.nr {
                libc::SYS_mkdir => (libc::AT_FDCWD, a[0], a[1] as u32, None, "mkdir"),
                libc::SYS_mkdirat => (arg_int(a, 0), a[1], a[2] as u32, None, "mkdirat"),
                libc::SYS_mknod => (libc::AT_FDCWD, a[0], a[1] as u32, Some(a[2]), "mknod"),
                _ => (arg_int(a, 0), a[1], a[2] as u32, Some(a[3]), "mknodat"),
            };
            let path = string(tid, path_at)?;
            valid()?;
            let t = resolve(tid, as_command, Start::Tracee(dirfd), &path)?;
            let target = t.path();
            let refusal = if dev.is_none() {
                rules.check_mkdir(&target)
            } else {
                rules.check_create(&target)
            };
            if let Some(refusal) = refusal {
                if exists(&t.parent, &t.name_c()?) {
                    // What the kernel answers first; nothing is being created.
                    return Err(Outcome::error(libc::EEXIST));
                }
                return Err(deny("file-write-create", &target, refusal, name));
            }
            // An existing name: the call below answers EEXIST itself.
            let cname = t.name_c()?;
            let masked = mode & !memo.umask(tid);
            // SAFETY: *at calls relative to a directory we hold, on the checked name.
            let rc = unsafe {
                match dev {
                    None => libc::mkdirat(t.parent.as_raw_fd(), cname.as_ptr(), masked & 0o7777),
                    Some(dev) => libc::mknodat(t.parent.as_raw_fd(), cname.as_ptr(), masked, dev),
                }
            };
            Ok(unit_result(i64::from(rc)))
        }
        libc::SYS_symlink | libc::SYS_symlinkat => {
            let (target_at, dirfd, link_at) = if call.nr == libc::SYS_symlink {
                (a[0], libc::AT_FDCWD, a[1])
            } else {
                (a[0], arg_int(a, 1), a[2])
            };
            let contents =
                CString::new(string(tid, target_at)?).map_err(|_| Outcome::error(libc::EINVAL))?;
            let link = string(tid, link_at)?;
            valid()?;
            let t = resolve(tid, as_command, Start::Tracee(dirfd), &link)?;
            let target = t.path();
            // A symlink where protected names live (`.git/hooks -> elsewhere`)
            // would carry them out of the rules' sight; a directory is fine.
            // On an existing name the kernel answers EEXIST first.
            if let Some(refusal) = rules
                .check_create(&target)
                .or_else(|| rules.check_structure_of_new(&target))
            {
                if exists(&t.parent, &t.name_c()?) {
                    return Err(Outcome::error(libc::EEXIST));
                }
                return Err(deny("file-write-create", &target, refusal, "symlink"));
            }
            let cname = t.name_c()?;
            // SAFETY: symlinkat relative to a directory we hold.
            let rc =
                unsafe { libc::symlinkat(contents.as_ptr(), t.parent.as_raw_fd(), cname.as_ptr()) };
            Ok(unit_result(i64::from(rc)))
        }
        libc::SYS_link | libc::SYS_linkat => two_names::link(rules, as_command, call, &valid),
        libc::SYS_chmod | libc::SYS_fchmod | libc::SYS_fchmodat | libc::SYS_fchmodat2 => {
            modes::chmod(rules, as_command, call, &valid)
        }
        libc::SYS_setxattr | libc::SYS_lsetxattr | libc::SYS_fsetxattr => {
            modes::setxattr(rules, as_command, call, &valid)
        }
        libc::SYS_rename | libc::SYS_renameat | libc::SYS_renameat2 => {
            two_names::rename(rules, as_command, call, &valid)
        }
        libc::SYS_unlink | libc::SYS_unlinkat | libc::SYS_rmdir => {
            let (dirfd, path_at, flags, name) = match call.nr {
                libc::SYS_unlink => (libc::AT_FDCWD, a[0], 0, "unlink"),
                libc::SYS_rmdir => (libc::AT_FDCWD, a[0], libc::AT_REMOVEDIR, "rmdir"),
                _ => (arg_int(a, 0), a[1], arg_int(a, 2), "unlinkat"),
            };
            let path = string(tid, path_at)?;
            valid()?;
            let t = resolve(tid, as_command, Start::Tracee(dirfd), &path)?;
            let target = t.path();
            let cname = t.name_c()?;
            if let Some(refusal) = rules
                .check_structure(&target)
                .or_else(|| protected_identity(rules, &t.parent, &cname))
            {
                // Nothing would change (git unlinks names that may not be
                // there, and `rmdir`s the directories a temporary file was
                // in): the kernel's answer, no violation.
                if let Some(errno) = would_fail(&t.parent, &cname, flags) {
                    return Err(Outcome::error(errno));
                }
                return Err(deny("file-write-unlink", &target, refusal, name));
            }
            // SAFETY: unlinkat relative to a directory we hold.
            let rc = unsafe { libc::unlinkat(t.parent.as_raw_fd(), cname.as_ptr(), flags) };
            Ok(unit_result(i64::from(rc)))
        }
        libc::SYS_connect => connect::connect(rules, as_command, call, &valid),
        _ => Ok(Outcome::error(libc::ENOSYS)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_fd_directories_are_recognised() {
        assert_eq!(proc_fd_owner(Path::new("/proc/42/fd")), Some(42));
        assert_eq!(proc_fd_owner(Path::new("/proc/42/task/43/fd")), Some(43));
        assert_eq!(proc_fd_owner(Path::new("/proc/42/fdinfo")), None);
        assert_eq!(proc_fd_owner(Path::new("/work/proc/42/fd")), None);
    }

    #[test]
    fn proc_entries_are_told_by_their_pid() {
        assert_eq!(proc_entry_pid(Path::new("/proc/42/mem")), Some(42));
        assert_eq!(proc_entry_pid(Path::new("/proc/42")), Some(42));
        assert_eq!(proc_entry_pid(Path::new("/proc/42/task/43/fd")), Some(42));
        assert_eq!(proc_entry_pid(Path::new("/proc/sys/vm")), None);
        assert_eq!(proc_entry_pid(Path::new("/proc")), None);
        assert_eq!(proc_entry_pid(Path::new("/work/proc/42")), None);
    }

    #[test]
    fn only_procfs_can_hold_foreign_entries() {
        let here = std::fs::File::open(".").unwrap();
        let fd = here.as_raw_fd();
        let tid = std::process::id();
        assert!(
            !foreign_proc(tid, fd, Path::new("/proc/1/mem")),
            "not on procfs"
        );
        let ours = std::fs::File::open(format!("/proc/{tid}")).unwrap();
        assert!(!foreign_proc(
            tid,
            ours.as_raw_fd(),
            &PathBuf::from(format!("/proc/{tid}"))
        ));
        let top = std::fs::File::open("/proc").unwrap();
        assert!(foreign_proc(tid, top.as_raw_fd(), Path::new("/proc")));
    }

    #[test]
    fn write_intent() {
        assert!(!wants_write(libc::O_RDONLY));
        assert!(wants_write(libc::O_WRONLY));
        assert!(wants_write(libc::O_RDWR));
        assert!(wants_write(libc::O_RDONLY | libc::O_CREAT));
        assert!(wants_write(libc::O_RDONLY | libc::O_TRUNC));
    }
}
