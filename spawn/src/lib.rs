//! Processes made the way `posix_spawn` makes them (SPEC G2): the
//! child shares its parent's memory (`CLONE_VM`) on a stack of its own
//! until it execs, and the calling thread waits for that (`CLONE_VFORK`).
//! A `fork` copies the parent's page tables for every command, and the
//! exec throws the copy away again, with copy-on-write faults on both sides
//! between — a cost that grows with the parent's resident memory
//! (docs/measurements.md). Made straight into a
//! cgroup (`CLONE_INTO_CGROUP`) where the kernel allows: joining one by
//! writing `cgroup.procs` waits out an RCU grace period.
//!
//! Sharing memory is safe for a child that writes only its own stack (and
//! the calling thread's `errno`) and reads what was prepared before (the
//! contract of [`spawn`]: async-signal-safe calls, no allocation, ending in
//! exec or `_exit`), whose signal handlers are its own copy (no
//! `CLONE_SIGHAND`) and reset before it unblocks signals, made by a thread
//! that blocks every signal and waits until it has exec'd or exited, so
//! the stack is never used by two children at once. The parent's memory
//! stays as (non-)dumpable while shared as its copy would be. Not for a
//! child that opens files for someone else: a process that shares its
//! parent's memory may open the parent's `/proc/…/mem` (the kernel lets a
//! memory open itself) — sandbox-init's one-shot opens for the guard
//! (`Forker::open_as_command`) are forked with a copy for that reason.

use std::io;
pub mod pty;

use std::os::fd::RawFd;

/// `clone3`'s arguments (linux/sched.h, `CLONE_ARGS_SIZE_VER2`).
#[repr(C)]
#[derive(Default)]
pub struct CloneArgs {
    pub flags: u64,
    pub pidfd: u64,
    pub child_tid: u64,
    pub parent_tid: u64,
    pub exit_signal: u64,
    pub stack: u64,
    pub stack_size: u64,
    pub tls: u64,
    pub set_tid: u64,
    pub set_tid_size: u64,
    pub cgroup: u64,
}

/// `CLONE_INTO_CGROUP` (Linux 5.7).
pub const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// Size of a child's stack: `spawn::child` needs a few KiB (filters, a
/// descriptor message); the rest is margin. A guard page lies below it.
const STACK_BYTES: usize = 256 * 1024;

/// The stack the fork thread's children run on, one at a time.
pub struct ChildStack {
    base: *mut libc::c_void,
    len: usize,
}

// SAFETY: the mapping is only an address range; the fork thread that owns
// it uses it for one child at a time.
unsafe impl Send for ChildStack {}

impl ChildStack {
    /// Maps the stack and a guard page below it.
    pub fn new() -> io::Result<ChildStack> {
        let page = 4096;
        let len = STACK_BYTES + page;
        // SAFETY: a fresh private anonymous mapping of our own.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let stack = ChildStack { base, len };
        // SAFETY: the lowest page of the mapping we just made.
        if unsafe { libc::mprotect(base, page, libc::PROT_NONE) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(stack)
    }
}

impl Drop for ChildStack {
    fn drop(&mut self) {
        // SAFETY: our own mapping, no child running on it (see `spawn`).
        unsafe { libc::munmap(self.base, self.len) };
    }
}

/// What the child's entry point is given.
struct Start<'a> {
    child: &'a dyn Fn(bool),
    joined: bool,
}

/// The child's first Rust frame, on its own stack.
extern "C" fn entry(start: *const Start<'_>) -> ! {
    // SAFETY: `spawn` passes a `Start` that lives until we exec or exit
    // (the parent is suspended until then).
    let start = unsafe { &*start };
    (start.child)(start.joined);
    // SAFETY: the child must not return; if it did, end here.
    unsafe { libc::_exit(127) }
}

/// Makes a process that runs `child` (told whether it was made in the
/// cgroup `cgroup_dir`) and returns its pid once it has exec'd or exited;
/// without the cgroup when the kernel refuses that. ENOSYS when there is
/// no `clone3` (before Linux 5.3): the caller forks instead.
///
/// # Safety
/// `child` runs in memory shared with this process: it may make only
/// async-signal-safe calls on memory prepared before, must write no memory
/// but its own stack, must not allocate or unwind, and must end in `exec`
/// or `_exit`. The calling thread must block every signal, and `stack` may
/// serve one child at a time.
pub unsafe fn spawn(
    stack: &ChildStack,
    child: &dyn Fn(bool),
    cgroup_dir: Option<RawFd>,
) -> io::Result<libc::pid_t> {
    let into = cgroup_dir.and_then(|fd| u64::try_from(fd).ok());
    let attempts = if into.is_some() {
        vec![into, None]
    } else {
        vec![None]
    };
    let mut last = libc::ENOSYS;
    for cgroup in attempts {
        let start = Start {
            child,
            joined: cgroup.is_some(),
        };
        let args = CloneArgs {
            flags: (libc::CLONE_VM | libc::CLONE_VFORK) as u64
                | cgroup.map_or(0, |_| CLONE_INTO_CGROUP),
            exit_signal: libc::SIGCHLD as u64,
            stack: stack.base as u64,
            stack_size: stack.len as u64,
            cgroup: cgroup.unwrap_or(0),
            ..CloneArgs::default()
        };
        // SAFETY: as promised by our caller; `start` and `args` outlive the
        // child's use of them (we are suspended until it execs or exits).
        let pid = unsafe { clone3(&args, &start) };
        if pid >= 0 {
            return Ok(pid as libc::pid_t);
        }
        last = -pid as i32;
        if last == libc::ENOSYS {
            break;
        }
    }
    Err(io::Error::from_raw_os_error(last))
}

/// `clone3(args)`; the child starts on `args.stack` in [`entry`] with
/// `start` and never comes back here. Returns the pid or `-errno`.
///
/// # Safety
/// `args` has `CLONE_VM | CLONE_VFORK` and a stack no one else uses; see
/// [`spawn`].
#[cfg(target_arch = "x86_64")]
unsafe fn clone3(args: &CloneArgs, start: &Start<'_>) -> isize {
    let ret: isize;
    // The kernel keeps every register but rax, rcx and r11 across the
    // call, and starts the child at the next instruction with rsp at the
    // top of its stack (16-byte aligned: the mapping is page-aligned and
    // its size a multiple of 16), so `call` gives `entry` the ABI's
    // alignment. The child never leaves this block.
    // SAFETY: as promised by our caller.
    unsafe {
        std::arch::asm!(
            "syscall",
            "test rax, rax",
            "jnz 2f",
            "xor ebp, ebp",
            "mov rdi, r13",
            "call r12",
            "ud2",
            "2:",
            inlateout("rax") libc::SYS_clone3 as isize => ret,
            in("rdi") args as *const CloneArgs,
            in("rsi") std::mem::size_of::<CloneArgs>(),
            in("r12") entry as extern "C" fn(*const Start<'_>) -> !,
            in("r13") start as *const Start<'_>,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret
}

/// What became of a child of [`spawn`] that leaves the errno of what
/// failed before its exec in `failure` (0: it exec'd) and then exits:
/// its pid, or that errno — the child then reaped here, since nobody else
/// knows it.
pub fn exec_result(
    pid: libc::pid_t,
    failure: &std::sync::atomic::AtomicI32,
) -> io::Result<libc::pid_t> {
    let errno = failure.load(std::sync::atomic::Ordering::SeqCst);
    if errno == 0 {
        return Ok(pid);
    }
    let mut status = 0;
    // SAFETY: waits for our own child, which has exited or is exiting.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    Err(io::Error::from_raw_os_error(errno))
}

/// Blocks every signal on the calling thread, as [`spawn`] requires of
/// its caller (signals are other threads' to take).
pub fn block_every_signal() {
    // SAFETY: a full set, applied to this thread only.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, std::ptr::null_mut());
    }
}

/// In a child of [`spawn`]: every signal back at its default, then none
/// blocked — the parent's handlers must never run there (it is the
/// parent's memory), and a program starts as under a shell. glibc's own
/// two (32, 33) are left.
///
/// # Safety
/// Only in a child of [`spawn`], before it execs (async-signal-safe calls).
pub unsafe fn default_signals() {
    // SAFETY: async-signal-safe calls on this process's own signal state.
    unsafe {
        for signal in (1..32).chain(34..=64) {
            if signal != libc::SIGKILL && signal != libc::SIGSTOP {
                libc::signal(signal, libc::SIG_DFL);
            }
        }
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
    }
}

/// Elsewhere no shared-memory child: ENOSYS, and `spawn` forks.
#[cfg(not(target_arch = "x86_64"))]
unsafe fn clone3(_args: &CloneArgs, _start: &Start<'_>) -> isize {
    -(libc::ENOSYS as isize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CString;
    use std::os::fd::AsRawFd;

    /// Runs `f` on a thread of its own with every signal blocked, as the
    /// fork thread is.
    fn blocked<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        std::thread::spawn(move || {
            block_every_signal();
            f()
        })
        .join()
        .unwrap()
    }

    /// `args` as C strings and the null-terminated pointer array `execve`
    /// takes (the pointers point into the strings, which must outlive it).
    fn exec_args(args: &[&str]) -> (Vec<CString>, Vec<*const libc::c_char>) {
        let strings: Vec<CString> = args.iter().map(|a| CString::new(*a).unwrap()).collect();
        let pointers = strings
            .iter()
            .map(|a| a.as_ptr())
            .chain([std::ptr::null()])
            .collect();
        (strings, pointers)
    }

    fn reap(pid: libc::pid_t) -> i32 {
        let mut status = 0;
        // SAFETY: waits for our own child.
        let reaped = unsafe { libc::waitpid(pid, &mut status, libc::__WALL) };
        assert_eq!(reaped, pid);
        status
    }

    /// The child runs on its own stack in our memory, and `spawn` returns
    /// only once it has exec'd: what it exec'd then exits with its code.
    #[test]
    fn a_child_execs_and_the_caller_waits_for_that() {
        let status = blocked(|| {
            let stack = ChildStack::new().unwrap();
            let (args, argv) = exec_args(&["/bin/sh", "-c", "exit 3"]);
            let sh = &args[0];
            let env = [std::ptr::null::<libc::c_char>()];
            let child = |joined: bool| {
                // SAFETY: exec with arrays prepared before; never returns.
                unsafe {
                    if joined {
                        libc::_exit(1);
                    }
                    libc::execve(sh.as_ptr(), argv.as_ptr(), env.as_ptr());
                    libc::_exit(127)
                }
            };
            // SAFETY: the child only execs or exits.
            let pid = unsafe { spawn(&stack, &child, None) }.unwrap();
            reap(pid)
        });
        assert!(libc::WIFEXITED(status));
        assert_eq!(libc::WEXITSTATUS(status), 3);
    }

    /// Made straight in the group when the kernel allows (here: a
    /// writable v2 hierarchy), told so, and a member before it ran.
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
        let name = sandbox_exec_group::owner_name(std::process::id(), "spawn-test");
        let group = hierarchy.owner(&name).unwrap();
        let dir = group.dir_file().unwrap();
        let (status, members) = blocked(move || {
            let stack = ChildStack::new().unwrap();
            let (args, argv) = exec_args(&["/bin/sleep", "30"]);
            let sleep = &args[0];
            let env = [std::ptr::null::<libc::c_char>()];
            // Sleeps once exec'd (the caller waits only until then).
            let child = |joined: bool| {
                // SAFETY: exec with arrays prepared before, or exit.
                unsafe {
                    if !joined {
                        libc::_exit(9);
                    }
                    libc::execve(sleep.as_ptr(), argv.as_ptr(), env.as_ptr());
                    libc::_exit(127)
                }
            };
            // SAFETY: the child only execs or exits.
            let pid = unsafe { spawn(&stack, &child, Some(dir.as_raw_fd())) }.unwrap();
            let members = group.members().unwrap();
            // SAFETY: our own child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            let status = reap(pid);
            group.remove().unwrap();
            (status, members.contains(&pid).then_some(pid))
        });
        assert!(
            libc::WIFSIGNALED(status),
            "the child was not made in the group"
        );
        assert!(members.is_some(), "the child was not a member of the group");
    }

    /// A descriptor that is no cgroup: made without one, and told so.
    #[test]
    fn a_descriptor_that_is_no_cgroup_makes_the_child_outside_it() {
        let status = blocked(|| {
            let stack = ChildStack::new().unwrap();
            let not_a_group = std::fs::File::open("/dev/null").unwrap();
            let child = |joined: bool| {
                // SAFETY: exits at once.
                unsafe { libc::_exit(if joined { 1 } else { 9 }) }
            };
            // SAFETY: the child only exits.
            let pid = unsafe { spawn(&stack, &child, Some(not_a_group.as_raw_fd())) }.unwrap();
            reap(pid)
        });
        assert_eq!(libc::WEXITSTATUS(status), 9);
    }
}
