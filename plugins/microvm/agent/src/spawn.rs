//! Starting one command. Everything the child needs is prepared before the
//! fork: the agent has other threads, which may hold locks (the allocator's
//! among them), so between fork and exec the child only makes
//! async-signal-safe calls. Why a command could not start reaches the
//! parent through a close-on-exec pipe: end of file means the exec happened.

use std::ffi::{CString, c_char};
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::mpsc::{self, Receiver};

use sandbox_microvm_proto::{Exec, Failed, PtySize};

use crate::reaper;

/// The search path of the agent, and of commands whose environment has none.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// What the child reports failing at.
const STAGE_SETUP: i32 = 1;
const STAGE_CHDIR: i32 = 2;
const STAGE_EXEC: i32 = 3;

/// A forked command, maybe not executing yet (see [`Child::wait_exec`]).
pub struct Child {
    pub pid: i32,
    /// The write end of its stdin, if it has one (with a terminal: the
    /// master side).
    pub stdin: Option<File>,
    /// Its output (with a terminal: the master side, everything).
    pub stdout: File,
    /// Its error output; none with a terminal.
    pub stderr: Option<File>,
    /// The terminal's master side, to resize it.
    pub terminal: Option<File>,
    /// Its wait status, from the reaper.
    pub status: Receiver<i32>,
    report: File,
    program: String,
    cwd: Option<String>,
}

/// The child's memory, prepared before the fork.
struct Prepared {
    argv: Vec<*const c_char>,
    envp: Vec<*const c_char>,
    /// Where to look for the program, in order.
    programs: Vec<CString>,
    cwd: Option<CString>,
    /// Make stdin (a terminal's slave side) the controlling terminal.
    controlling_terminal: bool,
}

/// Forks a command with its own session (so it and its descendants are one
/// process group to signal) and stdio pipes, or a terminal (`exec.pty`).
pub fn spawn(exec: &Exec) -> Result<Child, Failed> {
    let program = exec.argv.first().ok_or_else(|| invalid("argv is empty"))?;
    let argv = cstrings(exec.argv.iter().cloned())?;
    let env = cstrings(exec.env.iter().map(|(k, v)| format!("{k}={v}")))?;
    let search = exec
        .env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map_or(DEFAULT_PATH, |(_, v)| v.as_str());
    let programs = cstrings(candidates(program, search))?;
    let cwd = exec.cwd.clone().map(cstring).transpose()?;
    let prepared = Prepared {
        argv: pointers(&argv),
        envp: pointers(&env),
        programs,
        cwd,
        controlling_terminal: exec.pty.is_some(),
    };

    let failed = |what: &str, e: io::Error| Failed {
        errno: e.raw_os_error().unwrap_or(libc::EIO),
        message: format!("{what}: {e}"),
    };
    if let Some(size) = exec.pty {
        return spawn_on_terminal(exec, &prepared, size, program)
            .map_err(|e| failed("terminal", e));
    }
    let (stdin, stdin_writer) = if exec.stdin {
        let (read, write) = pipe().map_err(|e| failed("pipe", e))?;
        (read, Some(File::from(write)))
    } else {
        let null = File::open("/dev/null").map_err(|e| failed("/dev/null", e))?;
        (OwnedFd::from(null), None)
    };
    let (stdout, stdout_w) = pipe().map_err(|e| failed("pipe", e))?;
    let (stderr, stderr_w) = pipe().map_err(|e| failed("pipe", e))?;
    let (report, report_w) = pipe().map_err(|e| failed("pipe", e))?;
    let fds = [
        stdin.as_raw_fd(),
        stdout_w.as_raw_fd(),
        stderr_w.as_raw_fd(),
        report_w.as_raw_fd(),
    ];

    let (status_tx, status) = mpsc::channel();
    let pid = reaper::fork(status_tx, || child(&prepared, fds)).map_err(|e| failed("fork", e))?;
    // The child's ends close here, so that its exit is our end of file.
    drop((stdin, stdout_w, stderr_w, report_w));
    Ok(Child {
        pid,
        stdin: stdin_writer,
        stdout: File::from(stdout),
        stderr: Some(File::from(stderr)),
        terminal: None,
        status,
        report: File::from(report),
        program: program.clone(),
        cwd: exec.cwd.clone(),
    })
}

/// [`spawn`] on a new pseudo-terminal of `size`: the child gets the slave
/// side as stdin, stdout, stderr and controlling terminal; we keep the
/// master side. The slave is opened from the master (`TIOCGPTPEER`), never
/// by path, and closed here after the fork: once the command and all it
/// started let go of it, reading the master ends (EIO).
fn spawn_on_terminal(
    exec: &Exec,
    prepared: &Prepared,
    size: PtySize,
    program: &str,
) -> io::Result<Child> {
    let (master, slave) = sandbox_spawn::pty::open(size.cols, size.rows)?;
    let (report, report_w) = pipe()?;
    let fds = [
        slave.as_raw_fd(),
        slave.as_raw_fd(),
        slave.as_raw_fd(),
        report_w.as_raw_fd(),
    ];
    let (status_tx, status) = mpsc::channel();
    let pid = reaper::fork(status_tx, || child(prepared, fds))?;
    drop((slave, report_w));
    let master = File::from(master);
    let stdin = if exec.stdin {
        Some(master.try_clone()?)
    } else {
        None
    };
    Ok(Child {
        pid,
        stdin,
        stdout: master.try_clone()?,
        stderr: None,
        terminal: Some(master),
        status,
        report: File::from(report),
        program: program.to_owned(),
        cwd: exec.cwd.clone(),
    })
}

/// Sets a terminal's size (the kernel tells its foreground group with
/// SIGWINCH).
pub fn resize(master: &impl AsFd, size: PtySize) -> io::Result<()> {
    sandbox_spawn::pty::resize(master.as_fd(), size.cols, size.rows)
}

impl Child {
    /// Blocks until the command executes (`Ok`) or fails to (the `Failed`
    /// to report; the child then exits by itself).
    pub fn wait_exec(&mut self) -> Result<(), Failed> {
        let mut report = Vec::new();
        // An error reading a pipe of our own cannot happen; if it did, the
        // command would still be reported by its exit.
        let _ = self.report.read_to_end(&mut report);
        let [s0, s1, s2, s3, e0, e1, e2, e3] = report[..] else {
            return Ok(());
        };
        let stage = i32::from_le_bytes([s0, s1, s2, s3]);
        let errno = i32::from_le_bytes([e0, e1, e2, e3]);
        let error = io::Error::from_raw_os_error(errno);
        let message = match (stage, &self.cwd) {
            (STAGE_CHDIR, Some(cwd)) => format!("cannot change directory to {cwd}: {error}"),
            (STAGE_EXEC, _) => format!("cannot execute {}: {error}", self.program),
            _ => format!("cannot set up the command's process: {error}"),
        };
        Err(Failed { errno, message })
    }
}

/// The forked child: never returns, never allocates, takes no lock.
fn child(prepared: &Prepared, [stdin, stdout, stderr, report]: [RawFd; 4]) -> ! {
    // SAFETY: async-signal-safe calls only, on descriptors that are open
    // (the agent's own 0-2 are open, so these pipes are above 2 and dup2
    // clears their close-on-exec flag) and on prepared NUL-terminated
    // strings and NULL-terminated pointer arrays.
    unsafe {
        if libc::setsid() < 0
            || libc::dup2(stdin, 0) < 0
            || libc::dup2(stdout, 1) < 0
            || libc::dup2(stderr, 2) < 0
            || (prepared.controlling_terminal && libc::ioctl(0, libc::TIOCSCTTY, 0) < 0)
        {
            fail(report, STAGE_SETUP, errno());
        }
        // Rust's runtime ignores SIGPIPE, and an ignored signal stays
        // ignored across exec: give the command the default back.
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        if let Some(cwd) = &prepared.cwd
            && libc::chdir(cwd.as_ptr()) != 0
        {
            fail(report, STAGE_CHDIR, errno());
        }
        // Like execvp: go on past the directories where it is not, report
        // a permission problem over absence, stop at any other error.
        let mut denied = false;
        let mut last = libc::ENOENT;
        for program in &prepared.programs {
            libc::execve(
                program.as_ptr(),
                prepared.argv.as_ptr(),
                prepared.envp.as_ptr(),
            );
            last = errno();
            match last {
                libc::EACCES => denied = true,
                libc::ENOENT | libc::ENOTDIR | libc::ESTALE | libc::ENODEV | libc::ETIMEDOUT => {}
                _ => fail(report, STAGE_EXEC, last),
            }
        }
        fail(report, STAGE_EXEC, if denied { libc::EACCES } else { last })
    }
}

/// In the child: reports `stage` and `errno` to the parent and exits.
fn fail(report: RawFd, stage: i32, errno: i32) -> ! {
    let [s0, s1, s2, s3] = stage.to_le_bytes();
    let [e0, e1, e2, e3] = errno.to_le_bytes();
    let message = [s0, s1, s2, s3, e0, e1, e2, e3];
    // SAFETY: async-signal-safe calls on a valid buffer. A pipe write this
    // small is atomic; if it failed, the parent sees a plain exit 127.
    unsafe {
        libc::write(report, message.as_ptr().cast(), message.len());
        libc::_exit(127)
    }
}

fn errno() -> i32 {
    // Reads errno; no allocation.
    io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// Where execvp would look for `program`: itself if it names a path, else
/// each directory of `search` (an empty one is the working directory).
fn candidates(program: &str, search: &str) -> Vec<String> {
    if program.contains('/') {
        return vec![program.to_owned()];
    }
    search
        .split(':')
        .map(|dir| match dir {
            "" => program.to_owned(),
            dir => format!("{}/{program}", dir.trim_end_matches('/')),
        })
        .collect()
}

fn invalid(message: &str) -> Failed {
    Failed {
        errno: libc::EINVAL,
        message: message.to_owned(),
    }
}

fn cstring(s: String) -> Result<CString, Failed> {
    CString::new(s).map_err(|_| invalid("an argument, variable or directory holds a NUL byte"))
}

fn cstrings(items: impl IntoIterator<Item = String>) -> Result<Vec<CString>, Failed> {
    items.into_iter().map(cstring).collect()
}

/// A NULL-terminated array of pointers into `strings`, which must outlive it.
fn pointers(strings: &[CString]) -> Vec<*const c_char> {
    strings
        .iter()
        .map(|s| s.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: `fds` is a valid array of two ints.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let [read, write] = fds;
    // SAFETY: pipe2 just opened both descriptors; nothing else owns them.
    Ok(unsafe { (OwnedFd::from_raw_fd(read), OwnedFd::from_raw_fd(write)) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_follow_execvp() {
        assert_eq!(candidates("./x", "/bin"), ["./x"]);
        assert_eq!(candidates("/bin/sh", "/usr/bin"), ["/bin/sh"]);
        assert_eq!(
            candidates("sh", "/usr/bin/:/bin:"),
            ["/usr/bin/sh", "/bin/sh", "sh"]
        );
    }
}
