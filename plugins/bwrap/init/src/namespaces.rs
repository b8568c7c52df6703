//! The commands' pid and mount namespaces, and their reaper
//! (docs/research/linux-create-deny.md §2.2; SPEC G1, G4).
//!
//! Every command lives in a pid namespace below PID 1's, so it cannot name
//! the supervisor or the forwarder — `kill`, `ptrace`, `pidfd_open` and
//! `process_vm_*` take pids of the caller's namespace, and they have none
//! there — and in a mount namespace of the commands' own, a copy of PID 1's
//! whose `/proc` is the procfs of that pid namespace (`crate::commands_proc`):
//! `ps`, `pgrep`, `/proc/self` and `/proc/$$` number processes as the
//! commands do, and show nothing of the sandbox's machinery but the reaper.
//!
//! Both are made by PID 1 ([`Namespaces::make`]) after its mounts and
//! before its Landlock domain: the commands' `/proc` must exist by then, for
//! the domain to grant writing beneath it (a Landlock rule names a file, and
//! the commands' `/proc` is a file system of its own). A thread of PID 1
//! unshares both and forks their first process, the reaper. The fork thread
//! (`crate::forker`) enters both later and forks every command there. So the
//! reaper is in no Landlock domain (PID 1's does not exist yet): it runs
//! nothing but a pause loop, with no descriptor and no capability, is not
//! dumpable, and the commands' domain keeps them from tracing it and, on
//! Landlock ABI 6, from signalling it.
//!
//! The reaper sets `vm.memfd_noexec` to 2 in its namespace (Linux 6.3: the
//! setting is per pid namespace, and a namespace below can only raise it),
//! so no command can make an executable memfd: a program written into
//! memory cannot be exec'd any more than one written to a file. Only global
//! root may write it, through a descriptor PID 1 opened before `/proc/sys`
//! became read-only (`crate::layout`); for any other account
//! [`MemfdExec::FilterOnly`] tells the fork thread to have the commands'
//! filter do it.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

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

/// The commands' namespaces, by descriptor, and their reaper.
#[derive(Debug)]
pub struct Namespaces {
    /// The pid namespace (its reaper's).
    pub pid: OwnedFd,
    /// The mount namespace.
    pub mnt: OwnedFd,
    /// The reaper's pid in PID 1's namespace. If it ends, the kernel kills
    /// every process of the namespace and no further one can be made there.
    pub reaper: libc::pid_t,
    /// A procfs of the pid namespace, created by the reaper and not mounted
    /// yet (a filesystem context: `crate::commands_proc` mounts it).
    pub procfs: OwnedFd,
    /// Where the reaper says whether it set `vm.memfd_noexec` (read by the
    /// fork thread, off the start's critical path: [`Namespaces::memfd`]).
    told: OwnedFd,
}

impl Namespaces {
    /// Makes them. Call from PID 1 while it holds CAP_SYS_ADMIN in its own
    /// user namespace. `memfd_sysctl`, when PID 1 could open it for
    /// writing, is `/proc/sys/vm/memfd_noexec`.
    ///
    /// A short-lived thread of PID 1 unshares both, forks the reaper into
    /// them and names them by its own `/proc` entries: the namespaces are
    /// that thread's alone (a thread that unshared a pid namespace may
    /// start no thread, and PID 1 needs threads), no process is made for
    /// it, and the reaper is PID 1's child.
    pub fn make(memfd_sysctl: Option<RawFd>) -> io::Result<Namespaces> {
        let (told, tell) = sandbox_fdpass::seqpacket_pair()?;
        let made = std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    // SAFETY: plain syscall; changes this thread alone (its
                    // pid namespace for children, and — with its own root
                    // and working directory — its mount namespace).
                    if unsafe { libc::unshare(libc::CLONE_NEWPID | libc::CLONE_NEWNS) } != 0 {
                        return Err(io::Error::last_os_error());
                    }
                    let reaper = Self::reaper_here(memfd_sysctl, &tell)?;
                    // Named only once it has a first process (the kernel
                    // answers ENOENT for a pid namespace without one).
                    let own = |name: &str| -> io::Result<OwnedFd> {
                        Ok(std::fs::File::open(format!("/proc/thread-self/ns/{name}"))?.into())
                    };
                    let procfs = received_procfs(&told)?;
                    Ok((reaper, own("pid_for_children")?, own("mnt")?, procfs))
                })
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("the thread making them panicked")))
        });
        drop(tell);
        let (reaper, pid, mnt, procfs) = made?;
        Ok(Namespaces {
            pid,
            mnt,
            reaper,
            procfs,
            told,
        })
    }

    /// On that thread, in the new namespaces: makes the mounts slaves
    /// (nothing mounted in them reaches PID 1's) and forks the reaper, which
    /// sends `tell` a procfs of its namespace (created with the
    /// capabilities it was forked with, before it drops them), then whether
    /// it set `vm.memfd_noexec`.
    fn reaper_here(memfd_sysctl: Option<RawFd>, tell: &OwnedFd) -> io::Result<libc::pid_t> {
        // SAFETY: plain syscalls with valid arguments; the child makes only
        // async-signal-safe calls and never returns.
        unsafe {
            if libc::mount(
                std::ptr::null(),
                c"/".as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_SLAVE,
                std::ptr::null(),
            ) != 0
            {
                return Err(io::Error::last_os_error());
            }
            let reaper = libc::fork();
            if reaper < 0 {
                return Err(io::Error::last_os_error());
            }
            if reaper == 0 {
                send_procfs(tell.as_raw_fd());
                let set = match memfd_sysctl {
                    Some(fd) => set_memfd_noexec(fd),
                    None => libc::EACCES,
                };
                libc::send(
                    tell.as_raw_fd(),
                    set.to_le_bytes().as_ptr().cast(),
                    4,
                    libc::MSG_NOSIGNAL,
                );
                drop_all_capabilities();
                reap_forever()
            }
            Ok(reaper)
        }
    }

    /// How the namespace keeps memfds from being exec'd: what the reaper
    /// said (it says at once; this waits for it).
    pub fn memfd(&self) -> MemfdExec {
        let mut set = [0u8; 4];
        // SAFETY: reads one message into a local buffer from our socket.
        let n = unsafe { libc::recv(self.told.as_raw_fd(), set.as_mut_ptr().cast(), 4, 0) };
        if n == 4 && i32::from_le_bytes(set) == 0 {
            MemfdExec::Sysctl
        } else {
            MemfdExec::FilterOnly
        }
    }
}

/// In the reaper: creates a procfs of its pid namespace (`fsopen`,
/// `fsconfig(CREATE)`: a procfs is the namespace of whoever makes its
/// context) and sends it, or the errno, as one message. Async-signal-safe.
///
/// # Safety
/// Call only in a freshly forked child, holding CAP_SYS_ADMIN in its user
/// namespace.
unsafe fn send_procfs(tell: RawFd) {
    // SAFETY: plain syscalls with valid C strings and descriptors we hold;
    // `fdpass::send` allocates nothing and takes no lock.
    unsafe {
        let context = libc::syscall(libc::SYS_fsopen, c"proc".as_ptr(), libc::FSOPEN_CLOEXEC);
        let made = context >= 0
            && libc::syscall(
                libc::SYS_fsconfig,
                context as RawFd,
                libc::FSCONFIG_CMD_CREATE,
                std::ptr::null::<libc::c_char>(),
                std::ptr::null::<libc::c_void>(),
                0,
            ) == 0;
        if made {
            let _ = sandbox_fdpass::send(tell, &0i32.to_le_bytes(), &[context as RawFd]);
        } else {
            let errno = (*libc::__errno_location()).max(1);
            let _ = sandbox_fdpass::send(tell, &errno.to_le_bytes(), &[]);
        }
        if context >= 0 {
            libc::close(context as RawFd);
        }
    }
}

/// The reaper's first answer: its procfs, or why it could not make one.
fn received_procfs(told: &OwnedFd) -> io::Result<OwnedFd> {
    let mut answer = [0u8; 4];
    let mut fds = Vec::new();
    let n = sandbox_fdpass::recv(told.as_raw_fd(), &mut answer, &mut fds)?;
    if let Some(procfs) = fds.into_iter().next() {
        return Ok(procfs);
    }
    let errno = if n == 4 {
        i32::from_le_bytes(answer)
    } else {
        libc::EIO
    };
    let e = io::Error::from_raw_os_error(errno);
    Err(io::Error::new(
        e.kind(),
        format!("the reaper could not make a procfs of the commands' pid namespace: {e}"),
    ))
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
