//! A `none` command's process, made as `posix_spawn` makes one
//! (`sandbox_spawn`; SPEC G2): sharing the server's memory until it execs,
//! instead of a `fork` that copied the whole server's page tables for every
//! command — a large share of all CPU under many concurrent execs
//! (docs/measurements.md) — and made straight into the exec's cgroup
//! (`CLONE_INTO_CGROUP`) where the kernel allows, instead of joining it by a
//! write that waits out an RCU grace period. What the command starts with is
//! what `std::process::Command` gave it: its argv and environment, the working
//! directory, a process group of its own, the three pipes (or `/dev/null`),
//! every signal at its default and none blocked, `PR_SET_PDEATHSIG(SIGKILL)`,
//! and the `execvp` way of finding the program (the environment's `PATH`, a
//! file without a `#!` run by `/bin/sh`).

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicI32, Ordering};

use sandbox_spawn::ChildStack;
use sandbox_spawn::pty::above_stdio;

/// What a command is started with.
pub(crate) struct Request {
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub cwd: PathBuf,
    /// A pipe for stdin (else `/dev/null`).
    pub stdin: bool,
    /// A terminal's slave side: the command's stdin, stdout, stderr and
    /// controlling terminal, instead of pipes (SPEC B8).
    pub terminal: Option<RawFd>,
    /// The exec's cgroup: its `cgroup.procs` and its directory.
    pub join: Option<(RawFd, RawFd)>,
}

/// The started command: its pid and the parent's ends of its pipes (none
/// on a terminal: its master side is the caller's).
pub(crate) struct Spawned {
    pub pid: libc::pid_t,
    pub stdin: Option<File>,
    /// Stdout and stderr.
    pub output: Option<(File, File)>,
}

/// The default search path of `execvp` when the environment has no `PATH`.
const DEFAULT_PATH: &str = "/bin:/usr/bin";

thread_local! {
    /// The stack this thread's children run on (one at a time).
    static STACK: Option<ChildStack> = ChildStack::new().ok();
}

/// Starts the command. Call only on a thread that blocks every signal and
/// lives as long as the commands should (their death signal is its end).
pub(crate) fn spawn(request: &Request) -> io::Result<Spawned> {
    let c = |s: &[u8]| CString::new(s).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL));
    let program = request
        .argv
        .first()
        .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
    let argv: Vec<CString> = request
        .argv
        .iter()
        .map(|a| c(a.as_bytes()))
        .collect::<io::Result<_>>()?;
    let env: Vec<CString> = request
        .env
        .iter()
        .map(|(k, v)| c(format!("{k}={v}").as_bytes()))
        .collect::<io::Result<_>>()?;
    let path = request
        .env
        .iter()
        .rev()
        .find(|(k, _)| k == "PATH")
        .map_or(DEFAULT_PATH, |(_, v)| v.as_str());
    let candidates: Vec<CString> = candidates(program, path)
        .iter()
        .map(|p| c(p.as_bytes()))
        .collect::<io::Result<_>>()?;
    let sh = c(b"/bin/sh")?;
    let pointers = |strings: &[&CString]| -> Vec<*const libc::c_char> {
        strings
            .iter()
            .map(|s| s.as_ptr())
            .chain([std::ptr::null()])
            .collect()
    };
    let argv_ptrs = pointers(&argv.iter().collect::<Vec<_>>());
    let env_ptrs = pointers(&env.iter().collect::<Vec<_>>());
    // `execvp`'s retry of a file the kernel cannot run (ENOEXEC): through
    // the shell, the file as its script.
    let script_argvs: Vec<Vec<*const libc::c_char>> = candidates
        .iter()
        .map(|file| {
            pointers(
                &[&sh, file]
                    .into_iter()
                    .chain(&argv[1..])
                    .collect::<Vec<_>>(),
            )
        })
        .collect();
    let cwd = c(request.cwd.as_os_str().as_bytes())?;

    let (stdin_child, stdin_parent) = if request.terminal.is_some() {
        (None, None)
    } else if request.stdin {
        let (r, w) = pipe()?;
        (Some(r), Some(w))
    } else {
        let null = File::open("/dev/null")?;
        (Some(above_stdio(OwnedFd::from(null))?), None)
    };
    let pipes = match request.terminal {
        Some(_) => None,
        None => Some((pipe()?, pipe()?)),
    };
    let fds = match (request.terminal, &stdin_child, &pipes) {
        (Some(slave), _, _) => [slave; 3],
        (None, Some(stdin), Some(((_, out), (_, err)))) => {
            [stdin.as_raw_fd(), out.as_raw_fd(), err.as_raw_fd()]
        }
        _ => return Err(io::Error::from_raw_os_error(libc::EINVAL)),
    };

    let failure = AtomicI32::new(0);
    let prepared = Prepared {
        argv: &argv_ptrs,
        env: &env_ptrs,
        candidates: &candidates,
        script_argvs: &script_argvs,
        sh: &sh,
        cwd: &cwd,
        fds,
        controlling_terminal: request.terminal.is_some(),
        join: request.join.map(|(procs, _)| procs),
        server: std::process::id() as libc::pid_t,
        failure: &failure,
    };
    let child = |joined: bool| {
        // SAFETY: only ever the child of `sandbox_spawn::spawn`, on memory
        // prepared above; never returns.
        unsafe { child(&prepared, joined) }
    };
    let dir = request.join.map(|(_, dir)| dir);
    let spawned = STACK.with(|stack| match stack {
        // SAFETY: `child` makes only async-signal-safe calls on memory
        // prepared above, writes only its stack and `failure`, and ends in
        // exec or _exit; our caller blocks every signal.
        Some(stack) => unsafe { sandbox_spawn::spawn(stack, &child, dir) },
        None => Err(io::Error::from_raw_os_error(libc::ENOMEM)),
    });
    let pid = spawned.map_err(|e| match e.raw_os_error() {
        Some(libc::ENOSYS) => io::Error::other(
            "this kernel has no clone3, which the none backend starts commands with (Linux 5.3)",
        ),
        _ => e,
    })?;
    drop(stdin_child);
    let output = pipes.map(|((out, out_child), (err, err_child))| {
        drop((out_child, err_child));
        (File::from(out), File::from(err))
    });
    let pid = sandbox_spawn::exec_result(pid, &failure)?;
    Ok(Spawned {
        pid,
        stdin: stdin_parent.map(File::from),
        output,
    })
}

/// Where the program may be, in `execvp`'s order: itself if it names a
/// path, else each entry of `path` (an empty entry is the working
/// directory).
fn candidates(program: &str, path: &str) -> Vec<String> {
    if program.contains('/') {
        return vec![program.to_owned()];
    }
    path.split(':')
        .map(|dir| match dir {
            "" => program.to_owned(),
            dir => format!("{}/{program}", dir.trim_end_matches('/')),
        })
        .collect()
}

/// A close-on-exec pipe, both ends above the standard descriptors (so no
/// `dup2` onto 0–2 in the child can close another end first).
fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut ends = [0; 2];
    // SAFETY: pipe2 writes two descriptors into `ends`.
    if unsafe { libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both were just created and are ours.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(ends[0]), OwnedFd::from_raw_fd(ends[1])) };
    Ok((above_stdio(r)?, above_stdio(w)?))
}

/// What the child reads, all made before it starts.
struct Prepared<'a> {
    argv: &'a [*const libc::c_char],
    env: &'a [*const libc::c_char],
    candidates: &'a [CString],
    script_argvs: &'a [Vec<*const libc::c_char>],
    sh: &'a CString,
    cwd: &'a CString,
    /// Its stdin, stdout and stderr.
    fds: [RawFd; 3],
    /// Make the terminal on its stdin its controlling terminal, in a
    /// session of its own.
    controlling_terminal: bool,
    /// `cgroup.procs` of the exec's group, when it was not made in it.
    join: Option<RawFd>,
    server: libc::pid_t,
    /// Where the child leaves the errno of what failed (0: it exec'd).
    failure: &'a AtomicI32,
}

/// The child, until exec; `joined` when it was made in the exec's cgroup.
///
/// # Safety
/// Only in the child of `sandbox_spawn::spawn`: async-signal-safe calls,
/// no allocation, no write but to its stack and `p.failure`.
unsafe fn child(p: &Prepared<'_>, joined: bool) -> ! {
    // SAFETY: async-signal-safe syscalls on memory prepared before.
    unsafe {
        let fail = |errno: i32| -> ! {
            p.failure.store(errno.max(1), Ordering::SeqCst);
            libc::_exit(127)
        };
        let errno = || *libc::__errno_location();
        // First: everything this process does and starts is in the group.
        if !joined
            && let Some(fd) = p.join
            && libc::write(fd, b"0".as_ptr().cast(), 1) != 1
        {
            fail(errno());
        }
        if libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        ) != 0
        {
            fail(errno());
        }
        // The server died before the death signal was armed.
        if libc::getppid() != p.server {
            fail(libc::ESRCH);
        }
        // A session of its own for a terminal (also a group of its own:
        // the exec's kill reaches it the same way), else a group.
        if p.controlling_terminal {
            if libc::setsid() < 0 {
                fail(errno());
            }
        } else if libc::setpgid(0, 0) != 0 {
            fail(errno());
        }
        sandbox_spawn::default_signals();
        for (target, &fd) in p.fds.iter().enumerate() {
            if libc::dup2(fd, target as RawFd) < 0 {
                fail(errno());
            }
        }
        if p.controlling_terminal
            && let Err(e) = sandbox_spawn::pty::make_controlling(0)
        {
            fail(e);
        }
        if libc::chdir(p.cwd.as_ptr()) != 0 {
            fail(errno());
        }
        let mut denied = false;
        let mut last = libc::ENOENT;
        for (file, script) in p.candidates.iter().zip(p.script_argvs) {
            libc::execve(file.as_ptr(), p.argv.as_ptr(), p.env.as_ptr());
            last = errno();
            if last == libc::ENOEXEC {
                libc::execve(p.sh.as_ptr(), script.as_ptr(), p.env.as_ptr());
                last = errno();
            }
            match last {
                libc::ENOENT | libc::ENOTDIR | libc::ENOEXEC => {}
                libc::EACCES => denied = true,
                _ => break,
            }
        }
        fail(if denied && matches!(last, libc::ENOENT | libc::ENOTDIR) {
            libc::EACCES
        } else {
            last
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_program_is_looked_up_as_execvp_does() {
        assert_eq!(candidates("./x", "/a:/b"), vec!["./x"]);
        assert_eq!(candidates("/bin/true", "/a"), vec!["/bin/true"]);
        assert_eq!(
            candidates("make", "/usr/local/bin:/usr/bin/::/bin"),
            vec!["/usr/local/bin/make", "/usr/bin/make", "make", "/bin/make"]
        );
    }
}
