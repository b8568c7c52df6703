//! Making the commands' processes (docs/research/linux-create-deny.md §2.2):
//! every command is forked into the commands' pid and mount namespaces
//! (`crate::namespaces`), so it cannot name the supervisor — `kill`,
//! `ptrace`, `pidfd_open` and `process_vm_*` take pids of the caller's
//! namespace, and PID 1 has none there — and its `/proc` is its own
//! namespace's.
//!
//! A thread that has entered a pid namespace for its children can no longer
//! start threads (the kernel refuses `CLONE_THREAD` when the two namespaces
//! differ), and the supervisor needs threads. So a thread of its own does
//! it: the *fork thread* enters the namespaces, drops its capabilities, and
//! from then on forks each command on request. The children are still PID
//! 1's to wait for (any thread of a process may wait for the children of
//! another), and PID 1 sees them under its own pids.
//!
//! [`Forker::open_as_command`] opens a file in a one-shot process with
//! exactly a command's credentials (the commands' namespaces, their Landlock
//! domain, no capabilities), for the guard's supervisor, which must never
//! open another process's `/proc` entry with its own (SPEC G1, no confused
//! deputy).

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::{Mutex, mpsc};
use std::time::Duration;

use sandbox_spawn::{self as vfork, CLONE_INTO_CGROUP, ChildStack, CloneArgs};

use crate::namespaces::{MemfdExec, Namespaces};

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

/// How long a one-shot open may take before it is given up (a command can
/// stop the process doing it: then that command's call fails, nothing else).
const OPEN_LIMIT: Duration = Duration::from_secs(10);

impl Forker {
    /// Starts the fork thread. The calling thread must hold CAP_SYS_ADMIN
    /// and CAP_SYS_CHROOT in its user namespace (the new thread inherits
    /// them, uses them once to enter `namespaces` and drops every capability
    /// before it answers).
    ///
    /// Returns once the thread exists; it enters the namespaces meanwhile,
    /// and [`Forker::wait_started`] waits for it (before `ready`: namespaces
    /// that could not be entered fail the sandbox's start). So that happens
    /// while PID 1 installs its filter and binds the forwards, not before.
    pub fn start(namespaces: Namespaces) -> io::Result<Forker> {
        let (requests, incoming) = mpsc::channel::<Request>();
        let (answer, answers) = mpsc::channel();
        let (setup, started) = mpsc::channel();
        std::thread::Builder::new()
            .name("fork".into())
            .spawn(move || {
                let reaper = namespaces.reaper;
                let entered = enter_namespaces(&namespaces);
                drop(namespaces);
                let ok = entered.is_ok();
                let entered = entered.map(|()| Started { reaper });
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
    /// (`-1`, no process, before the fork thread is known started.)
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
/// take), the commands' mount namespace (with a root and working directory
/// of this thread's own) and their pid namespace for our children, a
/// Landlock domain below PID 1's, no capabilities, and the commands'
/// hardening filter but for its `clone3` rule (each command adds that).
fn enter_namespaces(namespaces: &Namespaces) -> io::Result<()> {
    // SAFETY: a full set, applied to this thread only.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, std::ptr::null_mut());
    }
    let entering = |what: &str, rc: libc::c_int| {
        if rc == 0 {
            Ok(())
        } else {
            let e = io::Error::last_os_error();
            Err(io::Error::new(
                e.kind(),
                format!("entering the commands' {what}: {e}"),
            ))
        }
    };
    // SAFETY: plain syscalls on descriptors we hold; each changes this
    // thread alone (CLONE_FS first: a mount namespace is entered only by a
    // thread whose root and working directory are its own).
    unsafe {
        entering("mount namespace", libc::unshare(libc::CLONE_FS))?;
        entering(
            "mount namespace",
            libc::setns(namespaces.mnt.as_raw_fd(), libc::CLONE_NEWNS),
        )?;
        entering(
            "pid namespace",
            libc::setns(namespaces.pid.as_raw_fd(), libc::CLONE_NEWPID),
        )?;
    }
    // Every command is in a Landlock domain below PID 1's (see
    // `commands_domain`).
    let domain = crate::landlock::commands_domain()?;
    if !crate::landlock::restrict_self(domain.as_raw_fd()) {
        return Err(io::Error::last_os_error());
    }
    // Every command is forked without any.
    crate::caps::drop_capabilities()?;
    // Last: every process made from here on — commands and one-shot
    // opens — starts under the commands' hardening, attached once here
    // rather than by each command (`seccomp::fork_thread_filter`).
    crate::seccomp::install(&crate::seccomp::fork_thread_filter(
        namespaces.memfd() == MemfdExec::FilterOnly,
    ))
    .map_err(|e| io::Error::new(e.kind(), format!("the commands' seccomp filter: {e}")))?;
    Ok(())
}

pub(crate) use sandbox_fdpass::seqpacket_pair;

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
