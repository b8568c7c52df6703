//! What ties a `none` command's processes to its exec and to the server
//! (threat model T31, T32).
//!
//! - **Its exec**: each exec joins a cgroup v2 group of its own
//!   (`sandbox_exec_group`) before it runs, so its timeout, a kill and the
//!   sandbox's destroy end every process it started, whatever it did with
//!   sessions or process groups. Without a writable v2 hierarchy only the
//!   exec's process group is signalled — `setsid` escapes that, and the
//!   handle's `processTracking` detail says so.
//! - **The server**: when the server dies, even by SIGKILL, a watcher
//!   process it forked once (a pipe only the server holds the write end of
//!   reaches end-of-file) writes `cgroup.kill` of the server's group, so
//!   every `none` command of the server ends with it, then removes the
//!   group's tree once its processes are gone — a server that exits, or is
//!   killed, leaves no group behind. Besides, every
//!   command's own process gets `PR_SET_PDEATHSIG(SIGKILL)` — which fires
//!   when the *thread* that forked it ends, so commands are forked by one
//!   thread that lives as long as the server ([`spawn`]) — which still
//!   holds where there is no cgroup, for the command itself (not for what
//!   it started).
//!
//! What does not hold: the server's rights are the commands' rights, so a
//! command may kill the watcher, or write the cgroup files itself; this
//! backend isolates nothing, and says so.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock, mpsc};

use sandbox_exec_group::{Group, Hierarchy};

/// A request to the spawning thread.
type Job = Box<dyn FnOnce() + Send>;

/// Runs `job` on the one thread that makes every `none` command, which
/// never ends: a command's `PR_SET_PDEATHSIG` then fires only when the
/// server itself dies. The thread blocks every signal, as making a process
/// that shares the server's memory requires (`crate::spawn`).
pub(crate) fn on_spawner<T: Send + 'static>(
    job: impl FnOnce() -> io::Result<T> + Send + 'static,
) -> io::Result<T> {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<Job>>> = OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (jobs, incoming) = mpsc::channel::<Job>();
        let started = std::thread::Builder::new()
            .name("none-spawner".into())
            .spawn(move || {
                sandbox_spawn::block_every_signal();
                for job in incoming {
                    job();
                }
            });
        if let Err(e) = started {
            tracing::error!("cannot start the none backend's spawning thread: {e}");
        }
        Mutex::new(jobs)
    });
    let (answer, answered) = mpsc::channel();
    let job: Job = Box::new(move || {
        let _ = answer.send(job());
    });
    let gone = || io::Error::other("the none backend's spawning thread is gone");
    spawner
        .lock()
        .map_err(|_| gone())?
        .send(job)
        .map_err(|_| gone())?;
    answered.recv().map_err(|_| gone())?
}

/// `std::process::Command::spawn` on the spawning thread (the tests').
#[cfg(test)]
pub(crate) fn spawn(command: std::process::Command) -> io::Result<std::process::Child> {
    let mut command = command;
    on_spawner(move || command.spawn())
}

/// The server's group for `none` commands, with its watcher started; or
/// why there is none. Made once per server, on the first launch, after the
/// groups killed servers left are swept away.
fn server_group() -> &'static Result<Group, String> {
    static GROUP: OnceLock<Result<Group, String>> = OnceLock::new();
    GROUP.get_or_init(|| {
        let hierarchy = Hierarchy::find()?;
        sandbox_exec_group::sweep(hierarchy.base());
        let name = sandbox_exec_group::owner_name(std::process::id(), "none");
        let group = hierarchy.owner(&name).map_err(|e| {
            format!(
                "cannot create the cgroup {}: {e}",
                hierarchy.base().join(&name).display()
            )
        })?;
        start_watcher(&group).map_err(|e| format!("cannot start the watcher: {e}"))?;
        tracing::debug!(group = %group.path().display(), "none commands are tracked by cgroup");
        Ok(group)
    })
}

/// A sandbox's group below the server's, or why there is none (logged
/// once per sandbox by the caller, reported in the handle).
pub(crate) fn sandbox_group() -> Result<Group, String> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let server = server_group().as_ref().map_err(Clone::clone)?;
    // Another copy of this crate (the built-in backend and a plugin file)
    // counts on its own: a name already taken is skipped.
    for _ in 0..1000 {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        match server.child(&format!("s{n}")) {
            Ok(group) => return Ok(group),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => {
                return Err(format!(
                    "cannot create a cgroup below {}: {e}",
                    server.path().display()
                ));
            }
        }
    }
    Err("no free cgroup name for the sandbox".into())
}

/// Forks the watcher: a process that blocks reading a pipe whose write end
/// only the server holds (close-on-exec, so no command keeps it), and on
/// end-of-file — the server is gone, however it died — kills the server's
/// group and removes its tree. It holds nothing else: every other
/// descriptor is closed.
fn start_watcher(group: &Group) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let kill = group.kill_file()?;
    let (Some(parent), Some(name)) = (group.path().parent(), group.path().file_name()) else {
        return Err(io::Error::other("the server's group has no parent"));
    };
    let parent = std::fs::File::open(parent)?;
    let name = std::ffi::CString::new(name.as_bytes())?;
    let mut ends = [0; 2];
    // SAFETY: pipe2 writes two descriptors into `ends`.
    if unsafe { libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both were just created and are ours.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(ends[0]), OwnedFd::from_raw_fd(ends[1])) };
    let kept = [read.as_raw_fd(), kill.as_raw_fd(), parent.as_raw_fd()];
    // SAFETY: the child makes only async-signal-safe calls on descriptors
    // and memory prepared before the fork and ends in _exit.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        // SAFETY: async-signal-safe syscalls only; never returns.
        unsafe { watch(kept, &name) }
    }
    drop(read);
    // The write end lives as long as the server: its end is the signal.
    std::mem::forget(write);
    Ok(())
}

/// How long the watcher tries to remove the group once it killed it (its
/// processes take a moment to exit), and how often.
const REMOVE_TRIES: u32 = 200;
const REMOVE_PAUSE_NS: libc::c_long = 50_000_000;

/// The watcher's body (in the forked child): `[read, kill, parent]` are
/// the pipe, the group's `cgroup.kill` and the directory holding the
/// group, which is called `name`.
///
/// # Safety
/// Call only in the child of `fork`; the descriptors are open.
unsafe fn watch([read, kill, parent]: [i32; 3], name: &std::ffi::CStr) -> ! {
    // SAFETY: async-signal-safe syscalls on our own descriptors and stack.
    unsafe {
        let mut kept = [read, kill, parent];
        kept.sort_unstable();
        let mut from = 0;
        for fd in kept {
            if fd > from {
                libc::syscall(libc::SYS_close_range, from as u32, (fd - 1) as u32, 0u32);
            }
            from = fd + 1;
        }
        libc::syscall(libc::SYS_close_range, from as u32, u32::MAX, 0u32);
        // Out of the server's process group: a terminal's ^C that reaches
        // the server must not end its watcher first.
        libc::setpgid(0, 0);
        libc::prctl(
            libc::PR_SET_NAME,
            c"cc-none-watch".as_ptr() as libc::c_ulong,
            0,
            0,
            0,
        );
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        libc::signal(libc::SIGHUP, libc::SIG_IGN);
        libc::signal(libc::SIGINT, libc::SIG_IGN);
        let mut byte = [0u8; 1];
        loop {
            let n = libc::read(read, byte.as_mut_ptr().cast(), 1);
            if n == 0 || (n < 0 && *libc::__errno_location() != libc::EINTR) {
                break;
            }
        }
        libc::write(kill, b"1".as_ptr().cast(), 1);
        let pause = libc::timespec {
            tv_sec: 0,
            tv_nsec: REMOVE_PAUSE_NS,
        };
        for _ in 0..REMOVE_TRIES {
            if remove_tree(parent, name.as_ptr(), 0) {
                break;
            }
            libc::nanosleep(&pause, std::ptr::null_mut());
        }
        libc::_exit(0)
    }
}

/// Removes the directory `name` in `dir` and every directory below it,
/// deepest first (a cgroup's files go with it); `true` once it is gone.
/// Allocates nothing: it runs in the forked watcher, where the exec-group
/// crate's own removal (paths, `read_dir`) cannot.
///
/// # Safety
/// `dir` is an open directory, `name` a NUL-terminated name.
unsafe fn remove_tree(dir: i32, name: *const libc::c_char, depth: u32) -> bool {
    // Ours are three deep (server, sandbox, exec); more is not ours.
    const MAX_DEPTH: u32 = 8;
    // SAFETY: syscalls on descriptors we hold, buffers on our stack, and
    // names the kernel wrote NUL-terminated into them.
    unsafe {
        let fd = libc::openat(
            dir,
            name,
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        );
        if fd < 0 {
            return *libc::__errno_location() == libc::ENOENT;
        }
        let mut buf = [0u8; 4096];
        loop {
            let n = libc::syscall(libc::SYS_getdents64, fd, buf.as_mut_ptr(), buf.len());
            if n <= 0 {
                break;
            }
            let mut at = 0usize;
            while at < n as usize {
                // struct linux_dirent64: ino 8, off 8, reclen 2, type 1, name.
                let entry = buf.as_ptr().add(at);
                let reclen = u16::from_ne_bytes([*entry.add(16), *entry.add(17)]) as usize;
                let kind = *entry.add(18);
                let child = entry.add(19).cast::<libc::c_char>();
                let dot = *child == b'.' as libc::c_char
                    && (*child.add(1) == 0
                        || (*child.add(1) == b'.' as libc::c_char && *child.add(2) == 0));
                if kind == libc::DT_DIR && !dot && depth < MAX_DEPTH {
                    remove_tree(fd, child, depth + 1);
                }
                if reclen == 0 {
                    break;
                }
                at += reclen;
            }
        }
        libc::close(fd);
        libc::unlinkat(dir, name, libc::AT_REMOVEDIR) == 0
            || *libc::__errno_location() == libc::ENOENT
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spawning_thread_outlives_its_callers() {
        let threads: Vec<_> = (0..3)
            .map(|_| {
                std::thread::spawn(|| {
                    spawn(std::process::Command::new("true")).map(|mut c| c.wait())
                })
            })
            .collect();
        for t in threads {
            assert!(t.join().unwrap().unwrap().unwrap().success());
        }
    }
}
