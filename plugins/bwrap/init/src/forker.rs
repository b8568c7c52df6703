//! The commands' pid namespace (docs/research/linux-create-deny.md §2.2): every
//! command lives in a pid namespace below PID 1's, so it cannot name the
//! supervisor — `kill`, `ptrace`, `pidfd_open` and `process_vm_*` take pids
//! of the caller's namespace, and PID 1 has none there.
//!
//! A process that has unshared a pid namespace for its children can no
//! longer start threads from that thread (the kernel refuses `CLONE_THREAD`
//! when the two namespaces differ), and the supervisor needs threads. So a
//! thread of its own does it: the *fork thread* unshares the namespace,
//! forks the namespace's PID 1 (the reaper), drops its capabilities, and
//! from then on forks each command on request. The children are still PID
//! 1's to wait for (any thread of a process may wait for the children of
//! another), and PID 1 sees them under its own pids.
//!
//! Two more jobs come with owning that namespace:
//! - its reaper sets `vm.memfd_noexec` to 2 there (Linux 6.3: the setting
//!   is per pid namespace, and a namespace below can only raise it), so no
//!   command can make an executable memfd: a program written into memory
//!   cannot be exec'd any more than one written to a file. Only global root
//!   may write it, through a descriptor PID 1 opened before `/proc/sys`
//!   became read-only (`crate::layout`); for any other account
//!   [`MemfdExec::FilterOnly`] tells the caller to have the commands'
//!   filter do it;
//! - [`Forker::open_as_command`] opens a file in a one-shot process with
//!   exactly a command's credentials (this namespace, the commands' Landlock
//!   domain, no capabilities), for the guard's supervisor, which must never
//!   open another process's `/proc` entry with its own (SPEC G1, no
//!   confused deputy).

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::{Mutex, mpsc};
use std::time::Duration;

use sandbox_spawn::{self as vfork, CLONE_INTO_CGROUP, ChildStack, CloneArgs};

/// A request to fork and run the `&dyn Fn(bool)` at the address in the
/// child, made straight into the cgroup directory when one is given. It
/// lives until the answer comes back (the caller waits for it); only the
/// child runs it, in a copy of this address space, told whether it was
/// made in the cgroup.
struct Request {
    child: usize,
    cgroup_dir: Option<RawFd>,
    /// A copy of PID 1's memory rather than a share of it (`vfork`).
    copy: bool,
}

/// Makes the commands' processes in their pid namespace. Shared by PID 1's
/// main thread and the guard's threads: one request at a time.
pub struct Forker {
    channel: Mutex<Channel>,
    /// The fork thread's report of its namespace, until it is read.
    setup: Mutex<Option<mpsc::Receiver<io::Result<Started>>>>,
    /// What it reported: the reaper.
    started: std::sync::OnceLock<Started>,
}

/// What the fork thread made: the namespace's reaper.
#[derive(Debug, Clone, Copy)]
struct Started {
    reaper: libc::pid_t,
}

struct Channel {
    requests: mpsc::Sender<Request>,
    answers: mpsc::Receiver<io::Result<libc::pid_t>>,
}

/// How the commands' namespace keeps memfds from being exec'd.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemfdExec {
    /// `vm.memfd_noexec = 2` there: `MFD_EXEC` is refused (EACCES) and
    /// every other memfd is sealed non-executable.
    Sysctl,
    /// The setting could not be made — writing it takes global root (the
    /// account running bubblewrap), and Linux 6.3 — so the commands' filter
    /// must allow only memfds made with `MFD_NOEXEC_SEAL`
    /// (`crate::seccomp::fork_thread_filter`).
    FilterOnly,
}

/// How long a one-shot open may take before it is given up (a command can
/// stop the process doing it: then that command's call fails, nothing else).
const OPEN_LIMIT: Duration = Duration::from_secs(10);

impl Forker {
    /// Starts the fork thread. The calling thread must hold CAP_SYS_ADMIN
    /// in its user namespace (the new thread inherits it, uses it once and
    /// drops every capability before it answers).
    ///
    /// `memfd_sysctl`, when the caller could open it for writing before
    /// `/proc/sys` became read-only, is `/proc/sys/vm/memfd_noexec`: the
    /// reaper writes it (the setting is the writer's pid namespace's).
    ///
    /// Returns once the thread exists; it makes the namespace meanwhile, and
    /// [`Forker::wait_started`] waits for it (before `ready`: a namespace
    /// that could not be made fails the sandbox's start, as before). So the
    /// namespace and its reaper are made while PID 1 installs its filter and
    /// binds the forwards, not before.
    pub fn start(memfd_sysctl: Option<OwnedFd>) -> io::Result<Forker> {
        let (requests, incoming) = mpsc::channel::<Request>();
        let (answer, answers) = mpsc::channel();
        let (setup, started) = mpsc::channel();
        std::thread::Builder::new()
            .name("fork".into())
            .spawn(move || {
                // Held until the reaper has written it (or could not).
                let entered = enter_namespace(memfd_sysctl.as_ref().map(AsRawFd::as_raw_fd));
                drop(memfd_sysctl);
                let ok = entered.is_ok();
                let entered = entered.map(|reaper| Started { reaper });
                if setup.send(entered).is_err() || !ok {
                    return;
                }
                // Without a stack of its own a child is forked as before.
                let stack = ChildStack::new().ok();
                for request in incoming {
                    // SAFETY: `fork_into` sent the address of a live
                    // reference and waits for our answer.
                    let child = unsafe { *(request.child as *const &dyn Fn(bool)) };
                    // A copy of PID 1's memory: asked for, or no clone3
                    // (before Linux 5.3), or no stack for a shared one.
                    let copied = || {
                        // SAFETY: the child runs only `child`, which the
                        // caller promised is async-signal-safe and ends in
                        // exec or _exit.
                        match unsafe { fork_maybe_into(request.cgroup_dir) } {
                            Ok((0, joined)) => {
                                child(joined);
                                // SAFETY: `child` must not return; if it did, end here.
                                unsafe { libc::_exit(127) }
                            }
                            forked => forked.map(|(pid, _)| pid),
                        }
                    };
                    let result = match stack.as_ref().filter(|_| !request.copy) {
                        Some(stack) => {
                            // SAFETY: the child runs only `child`, which the
                            // caller promised is async-signal-safe, writes
                            // only its stack and ends in exec or _exit; this
                            // thread blocks every signal and waits until it has.
                            let shared = unsafe { vfork::spawn(stack, child, request.cgroup_dir) };
                            match shared {
                                Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => copied(),
                                spawned => spawned,
                            }
                        }
                        None => copied(),
                    };
                    if answer.send(result).is_err() {
                        return;
                    }
                }
            })?;
        Ok(Forker {
            channel: Mutex::new(Channel { requests, answers }),
            setup: Mutex::new(Some(started)),
            started: std::sync::OnceLock::new(),
        })
    }

    /// Waits until the fork thread has made the namespace and its reaper;
    /// the error if it could not (then no command can start: fail closed).
    pub fn wait_started(&self) -> io::Result<()> {
        if self.started.get().is_some() {
            return Ok(());
        }
        let receiver = self
            .setup
            .lock()
            .map_err(|_| io::Error::other("the fork thread's report was lost"))?
            .take()
            .ok_or_else(|| io::Error::other("the fork thread could not start"))?;
        let started = receiver
            .recv()
            .map_err(|_| io::Error::other("the fork thread ended before it started"))??;
        let _ = self.started.set(started);
        Ok(())
    }

    /// What the fork thread reported; `None` before [`Forker::wait_started`]
    /// succeeded.
    fn started(&self) -> Option<Started> {
        self.started.get().copied()
    }

    /// Forks a process in the commands' namespace that runs `child`.
    ///
    /// # Safety
    /// `child` runs in the child of `fork` in a multi-threaded process: it
    /// must make only async-signal-safe calls on memory prepared before,
    /// and end in `exec` or `_exit` (if it returns, the child exits 127).
    /// The child gets a copy of PID 1's memory, never a share of it: a
    /// process with PID 1's memory may open PID 1's `/proc/…/mem` (the
    /// kernel lets a memory open itself), which no one-shot open for a
    /// command may.
    pub unsafe fn fork(&self, child: &dyn Fn()) -> io::Result<libc::pid_t> {
        // SAFETY: as promised by our caller.
        unsafe { self.request(&|_| child(), None, true) }
    }

    /// Like [`Forker::fork`], made straight into the cgroup `cgroup_dir`
    /// (a descriptor of its directory) where the kernel allows that; the
    /// child is told whether it was, and must join by itself if not. The
    /// child shares PID 1's memory until it execs (`sandbox_spawn`).
    ///
    /// # Safety
    /// As for [`Forker::fork`], and the child may write no memory but its
    /// own stack.
    pub unsafe fn fork_into(
        &self,
        child: &dyn Fn(bool),
        cgroup_dir: Option<RawFd>,
    ) -> io::Result<libc::pid_t> {
        // SAFETY: as promised by our caller.
        unsafe { self.request(child, cgroup_dir, false) }
    }

    /// Has the fork thread make the child, sharing PID 1's memory or with
    /// a `copy` of it.
    ///
    /// # Safety
    /// As for [`Forker::fork`].
    unsafe fn request(
        &self,
        child: &dyn Fn(bool),
        cgroup_dir: Option<RawFd>,
        copy: bool,
    ) -> io::Result<libc::pid_t> {
        let reference: &dyn Fn(bool) = child;
        let address = &raw const reference as usize;
        let gone = || io::Error::other("the fork thread is gone");
        let channel = self.channel.lock().map_err(|_| gone())?;
        channel
            .requests
            .send(Request {
                child: address,
                cgroup_dir,
                copy,
            })
            .map_err(|_| gone())?;
        channel.answers.recv().map_err(|_| gone())?
    }

    /// `openat(dir, name, flags, mode)` done by a one-shot process in the
    /// commands' namespace and Landlock domain, without capabilities — a
    /// command's credentials exactly — so the kernel gives the answer it
    /// would give a command (for another process's `/proc/<pid>/mem`:
    /// EACCES). The process is a copy of PID 1 (so it holds `dir` at the same
    /// number) that opens, sends the descriptor back and exits; it is not
    /// dumpable and its memory belongs to bubblewrap's user namespace, so no
    /// command can reach into it while it lives.
    pub fn open_as_command(
        &self,
        dir: RawFd,
        name: &CStr,
        flags: i32,
        mode: u32,
    ) -> io::Result<OwnedFd> {
        let (ours, theirs) = seqpacket_pair()?;
        let report = theirs.as_raw_fd();
        let name = name.as_ptr();
        let child = move || {
            // SAFETY: async-signal-safe calls on memory prepared before the
            // fork (the name, the descriptors); ends in _exit.
            unsafe {
                let fd = libc::openat(dir, name, flags | libc::O_CLOEXEC, mode);
                if fd < 0 {
                    let errno = (*libc::__errno_location()).to_le_bytes();
                    libc::send(
                        report,
                        errno.as_ptr().cast(),
                        errno.len(),
                        libc::MSG_NOSIGNAL,
                    );
                } else {
                    // `fdpass::send` allocates nothing and takes no lock.
                    let _ = sandbox_fdpass::send(report, b"F", &[fd]);
                }
                libc::_exit(0)
            }
        };
        // SAFETY: the child runs only `child`: async-signal-safe, ends in _exit.
        let pid = unsafe { self.fork(&child) }?;
        drop(theirs);
        match recv_answer(&ours, OPEN_LIMIT) {
            Err(e) if e.kind() == io::ErrorKind::TimedOut => {
                // Stopped (a command may signal it): it must not outlive the
                // call it was made for. Not yet reaped: it never answered.
                // SAFETY: plain syscall on our own child.
                unsafe { libc::kill(pid, libc::SIGKILL) };
                Err(io::Error::from_raw_os_error(libc::EIO))
            }
            answer => answer,
        }
    }

    /// The pid (in PID 1's namespace) of the namespace's reaper. If it ends,
    /// the kernel kills every process of the namespace and no further one
    /// can be made there.
    /// (`-1`, no process, before the namespace is known made.)
    pub fn reaper(&self) -> libc::pid_t {
        self.started().map_or(-1, |s| s.reaper)
    }
}

/// Forks — straight into the cgroup `cgroup_dir` when one is given and the
/// kernel allows it — and says which: `(pid, joined)`, pid 0 in the child.
///
/// Made in the group, a process never has to join it: joining by writing
/// `cgroup.procs` takes the kernel's cgroup threadgroup lock for writing,
/// which waits out an RCU grace period — up to milliseconds, paid by every
/// command's start (docs/measurements.md). `clone3(CLONE_INTO_CGROUP)` takes
/// it for reading only. Where the kernel refuses (older than 5.7, or the
/// directory not writable with the caller's credentials — the kernel checks
/// ours here, the opener's for a `cgroup.procs` write), a plain fork, and the
/// child joins through the server's `cgroup.procs` descriptor as before: both
/// end in the group, or the command does not start.
///
/// # Safety
/// As for `fork`: in a multi-threaded process the child may make only
/// async-signal-safe calls, and must end in `exec` or `_exit`.
pub unsafe fn fork_maybe_into(cgroup_dir: Option<RawFd>) -> io::Result<(libc::pid_t, bool)> {
    if let Some(dir) = cgroup_dir.and_then(|fd| u64::try_from(fd).ok()) {
        let args = CloneArgs {
            flags: CLONE_INTO_CGROUP,
            exit_signal: libc::SIGCHLD as u64,
            cgroup: dir,
            ..CloneArgs::default()
        };
        // SAFETY: `clone3` without CLONE_VM is a fork; the arguments are a
        // local of the size we pass.
        let pid = unsafe {
            libc::syscall(
                libc::SYS_clone3,
                &raw const args,
                std::mem::size_of::<CloneArgs>(),
            )
        };
        if pid >= 0 {
            return Ok((pid as libc::pid_t, true));
        }
    }
    // SAFETY: as promised by our caller.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((pid, false))
}

/// On the fork thread: no signals (they are PID 1's main thread's to
/// take), a pid namespace for our children, a Landlock domain below PID
/// 1's, the reaper as the namespace's first process (it sets the
/// namespace's `vm.memfd_noexec` with the capabilities it was forked with,
/// then drops them), then no capabilities, and the commands' hardening
/// filter but for its `clone3` rule (each command adds that).
fn enter_namespace(memfd_sysctl: Option<RawFd>) -> io::Result<libc::pid_t> {
    // SAFETY: a full set, applied to this thread only.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, std::ptr::null_mut());
    }
    // SAFETY: plain syscall; changes this thread's namespace for children.
    if unsafe { libc::unshare(libc::CLONE_NEWPID) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // The reaper and every command are in a Landlock domain below PID 1's
    // (see `commands_domain`).
    let domain = crate::landlock::commands_domain()?;
    if !crate::landlock::restrict_self(domain.as_raw_fd()) {
        return Err(io::Error::last_os_error());
    }
    let (told, tell) = pipe()?;
    // SAFETY: the child makes only async-signal-safe calls and never returns.
    let reaper = unsafe { libc::fork() };
    if reaper < 0 {
        return Err(io::Error::last_os_error());
    }
    if reaper == 0 {
        // SAFETY: async-signal-safe calls only; never returns.
        unsafe {
            let errno = match memfd_sysctl {
                Some(fd) => set_memfd_noexec(fd),
                None => libc::EACCES,
            };
            libc::write(tell.as_raw_fd(), errno.to_le_bytes().as_ptr().cast(), 4);
            drop_all_capabilities();
            reap_forever()
        }
    }
    drop(tell);
    // Every command is forked without any.
    crate::caps::drop_capabilities()?;
    let mut answer = [0u8; 4];
    // SAFETY: reads into a local buffer from our pipe.
    let n = unsafe { libc::read(told.as_raw_fd(), answer.as_mut_ptr().cast(), 4) };
    if n != 4 {
        return Err(io::Error::other(
            "the reaper did not say whether it set vm.memfd_noexec",
        ));
    }
    let memfd = match i32::from_le_bytes(answer) {
        0 => MemfdExec::Sysctl,
        _ => MemfdExec::FilterOnly,
    };
    // Last: every process made from here on — commands and one-shot
    // opens — starts under the commands' hardening, attached once here
    // rather than by each command (`seccomp::fork_thread_filter`).
    crate::seccomp::install(&crate::seccomp::fork_thread_filter(
        memfd == MemfdExec::FilterOnly,
    ))
    .map_err(|e| io::Error::new(e.kind(), format!("the commands' seccomp filter: {e}")))?;
    Ok(reaper)
}

/// Writes `2` to the namespace's `vm.memfd_noexec` through `fd`; returns
/// 0 or the errno. Async-signal-safe.
///
/// # Safety
/// `fd` is open; call only in a freshly forked child.
unsafe fn set_memfd_noexec(fd: RawFd) -> i32 {
    // SAFETY: raw syscalls on a descriptor we hold and a local buffer.
    unsafe {
        let written = libc::pwrite(fd, b"2\n".as_ptr().cast(), 2, 0);
        if written == 2 {
            0
        } else {
            (*libc::__errno_location()).max(libc::EIO)
        }
    }
}

/// Empties this process's capability sets (it never execs, so the
/// bounding set does not matter). Async-signal-safe.
///
/// # Safety
/// Call only in a freshly forked child.
unsafe fn drop_all_capabilities() {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: libc::c_int,
    }
    let header = Header {
        version: 0x2008_0522, // _LINUX_CAPABILITY_VERSION_3
        pid: 0,
    };
    let none = [0u32; 6];
    // SAFETY: capset reads a v3 header and two data structs (six u32).
    let done = unsafe { libc::syscall(libc::SYS_capset, &raw const header, none.as_ptr()) };
    if done != 0 {
        // A reaper with capabilities must not stay: end the namespace.
        // SAFETY: plain syscall.
        unsafe { libc::_exit(1) };
    }
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut ends = [0; 2];
    // SAFETY: pipe2 writes two descriptors into `ends`.
    if unsafe { libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both were just created and are ours.
    Ok(unsafe { (OwnedFd::from_raw_fd(ends[0]), OwnedFd::from_raw_fd(ends[1])) })
}

/// A close-on-exec `SOCK_SEQPACKET` pair (the one-shot opener's answer, a
/// command's start report).
pub(crate) fn seqpacket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
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

/// The one-shot opener's answer: a descriptor, or the errno it got.
fn recv_answer(socket: &OwnedFd, limit: Duration) -> io::Result<OwnedFd> {
    let mut polled = libc::pollfd {
        fd: socket.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let millis = i32::try_from(limit.as_millis()).unwrap_or(i32::MAX);
    loop {
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut polled, 1, millis) };
        if n > 0 {
            break;
        }
        if n == 0 {
            return Err(io::Error::from(io::ErrorKind::TimedOut));
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    let mut buf = [0u8; 4];
    let mut fds = Vec::new();
    let n = crate::proto::recvmsg(socket.as_raw_fd(), &mut buf, &mut fds)?;
    if let Some(fd) = fds.into_iter().next() {
        return Ok(fd);
    }
    if n == 4 {
        return Err(io::Error::from_raw_os_error(i32::from_le_bytes(buf)));
    }
    // It ended without an answer (killed by a command, say).
    Err(io::Error::from_raw_os_error(libc::EIO))
}

/// The namespace's PID 1: sleeps, with `SIGCHLD` ignored so the kernel
/// reaps the orphans handed to it. As a namespace's init it receives no
/// signal from inside that it has no handler for (it has none); it is not
/// dumpable, so no command can trace it; it holds no descriptor.
///
/// # Safety
/// Call only in a freshly forked child.
unsafe fn reap_forever() -> ! {
    // SAFETY: async-signal-safe calls only.
    unsafe {
        libc::prctl(libc::PR_SET_DUMPABLE, 0 as libc::c_ulong, 0, 0, 0);
        libc::prctl(
            libc::PR_SET_NAME,
            c"pidns-reaper".as_ptr() as libc::c_ulong,
            0,
            0,
            0,
        );
        libc::signal(libc::SIGCHLD, libc::SIG_IGN);
        libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32);
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        loop {
            libc::pause();
        }
    }
}

impl crate::guard::emulate::AsCommand for Forker {
    fn openat(&self, dir: RawFd, name: &CStr, flags: i32, mode: u32) -> io::Result<OwnedFd> {
        self.open_as_command(dir, name, flags, mode)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    /// Forks a child that exits 7 at once, or (`stay`) waits to be killed.
    fn fork_child(cgroup_dir: Option<RawFd>, stay: bool) -> (libc::pid_t, bool) {
        // SAFETY: the child only pauses or exits.
        match unsafe { fork_maybe_into(cgroup_dir) }.unwrap() {
            // SAFETY: async-signal-safe calls in the child; never returns.
            (0, _) => unsafe {
                if stay {
                    loop {
                        libc::pause();
                    }
                }
                libc::_exit(7)
            },
            forked => forked,
        }
    }

    fn reap(pid: libc::pid_t) -> i32 {
        let mut status = 0;
        // SAFETY: waits for our own child.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        status
    }

    #[test]
    fn a_descriptor_that_is_no_cgroup_falls_back_to_a_plain_fork() {
        let not_a_group = std::fs::File::open("/dev/null").unwrap();
        let (pid, joined) = fork_child(Some(not_a_group.as_fd().as_raw_fd()), false);
        assert!(!joined, "clone3 into /dev/null cannot have succeeded");
        assert_eq!(libc::WEXITSTATUS(reap(pid)), 7);
    }

    #[test]
    fn a_child_is_made_straight_in_the_group() {
        let hierarchy = match sandbox_exec_group::Hierarchy::find() {
            Ok(h) => h,
            Err(why) => {
                sandbox_test_support::skip_or_fail(format!(
                    "no writable cgroup v2 group for this process ({why}): CI must run the tests as root on a host with a cgroup2 mount (pure v2, or the hybrid `/sys/fs/cgroup/unified`)"
                ));
                return;
            }
        };
        let name = sandbox_exec_group::owner_name(std::process::id(), "forker-test");
        let group = hierarchy.owner(&name).unwrap();
        let dir = group.dir_file().unwrap();
        let (pid, joined) = fork_child(Some(dir.as_fd().as_raw_fd()), true);
        let members = group.members().unwrap();
        // SAFETY: our own child.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        assert!(libc::WIFSIGNALED(reap(pid)));
        group.remove().unwrap();
        assert!(joined, "clone3(CLONE_INTO_CGROUP) was refused here");
        assert_eq!(members, vec![pid], "the child was not made in the group");
    }
}
