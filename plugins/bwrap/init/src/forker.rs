//! The commands' pid namespace (research linux-create-deny §2.2): every
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

use std::io;
use std::sync::mpsc;

/// A request to fork and run the `&dyn Fn()` at this address in the child.
/// It lives until the answer comes back (the caller waits for it); only the
/// child runs it, in a copy of this address space.
struct Request(usize);

/// Makes the commands' processes in their pid namespace.
pub struct Forker {
    requests: mpsc::Sender<Request>,
    answers: mpsc::Receiver<io::Result<libc::pid_t>>,
    reaper: libc::pid_t,
}

impl Forker {
    /// Starts the fork thread. The calling thread must hold CAP_SYS_ADMIN
    /// in its user namespace (the new thread inherits it, uses it once and
    /// drops every capability before it answers).
    pub fn start() -> io::Result<Forker> {
        let (requests, incoming) = mpsc::channel::<Request>();
        let (answer, answers) = mpsc::channel();
        std::thread::Builder::new()
            .name("fork".into())
            .spawn(move || {
                let reaper = enter_namespace();
                let ok = reaper.is_ok();
                if answer.send(reaper).is_err() || !ok {
                    return;
                }
                for Request(address) in incoming {
                    // SAFETY: `fork` sent the address of a live reference
                    // and waits for our answer.
                    let child = unsafe { *(address as *const &dyn Fn()) };
                    // SAFETY: the child runs only `child`, which the caller
                    // promised is async-signal-safe.
                    let pid = unsafe { libc::fork() };
                    if pid == 0 {
                        child();
                        // SAFETY: `child` must not return; if it did, end here.
                        unsafe { libc::_exit(127) };
                    }
                    let result = if pid < 0 {
                        Err(io::Error::last_os_error())
                    } else {
                        Ok(pid)
                    };
                    if answer.send(result).is_err() {
                        return;
                    }
                }
            })?;
        let reaper = answers
            .recv()
            .map_err(|_| io::Error::other("the fork thread ended before it started"))??;
        Ok(Forker {
            requests,
            answers,
            reaper,
        })
    }

    /// Forks a process in the commands' namespace that runs `child`.
    ///
    /// # Safety
    /// `child` runs in the child of `fork` in a multi-threaded process: it
    /// must make only async-signal-safe calls on memory prepared before,
    /// and end in `exec` or `_exit` (if it returns, the child exits 127).
    pub unsafe fn fork(&self, child: &dyn Fn()) -> io::Result<libc::pid_t> {
        let reference: &dyn Fn() = child;
        let address = &raw const reference as usize;
        self.requests
            .send(Request(address))
            .map_err(|_| io::Error::other("the fork thread is gone"))?;
        self.answers
            .recv()
            .map_err(|_| io::Error::other("the fork thread is gone"))?
    }

    /// The pid (in PID 1's namespace) of the namespace's reaper. If it ends,
    /// the kernel kills every process of the namespace and no further one
    /// can be made there.
    pub fn reaper(&self) -> libc::pid_t {
        self.reaper
    }
}

/// On the fork thread: no signals (they are PID 1's main thread's to
/// take), a pid namespace for our children, no capabilities, a Landlock
/// domain below PID 1's, then the reaper as the namespace's first process.
fn enter_namespace() -> io::Result<libc::pid_t> {
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
    // The reaper and every command are forked without any.
    crate::layout::drop_capabilities()?;
    // ... and in a Landlock domain below PID 1's (see `commands_domain`).
    let domain = crate::landlock::commands_domain()?;
    if !crate::landlock::restrict_self(std::os::fd::AsRawFd::as_raw_fd(&domain)) {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the child makes only async-signal-safe calls and never returns.
    let reaper = unsafe { libc::fork() };
    if reaper < 0 {
        return Err(io::Error::last_os_error());
    }
    if reaper == 0 {
        // SAFETY: async-signal-safe calls only; never returns.
        unsafe { reap_forever() }
    }
    Ok(reaper)
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
