//! Starts bwrap from one thread that lives as long as the process, the way
//! `posix_spawn` makes a process (`sandbox_spawn`: the child shares the
//! server's memory until it execs).
//!
//! `--die-with-parent` (PR_SET_PDEATHSIG) fires when the *thread* that forked
//! bwrap ends, not the process. Forking from a host worker thread that later
//! exits would kill a healthy sandbox; forking from this thread ties the
//! sandbox to the server process alone.
//!
//! Not `fork`: copying the server's page tables (four plugins, the async
//! runtime, the heap) for a child that execs at once, and throwing the copy
//! away in its exec, was a measurable share of the CPU of every sandbox's
//! start (`perf` of `cc_server run -- true`; docs/measurements.md).

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};

use sandbox_spawn::ChildStack;

/// What bwrap is started with: its program and arguments, an empty
/// environment, `/dev/null` for stdin and stdout, a pipe for stderr, the
/// descriptors it is given at fixed numbers and nothing else of ours
/// (threat model T3), after the child has joined the sandbox's groups.
pub(crate) struct Launch {
    program: CString,
    argv: Vec<CString>,
    /// `(ours, theirs)`: our descriptor, given to the child as `theirs`.
    fds: Vec<(RawFd, RawFd)>,
    /// Open `tasks` or `cgroup.procs` files the child writes itself into
    /// before it execs, so nothing it starts is outside them (SPEC G6).
    joins: Vec<RawFd>,
}

impl Launch {
    pub(crate) fn new<A: AsRef<std::ffi::OsStr>>(program: &Path, args: &[A]) -> io::Result<Self> {
        let c = |b: &[u8]| CString::new(b).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL));
        let program = c(program.as_os_str().as_bytes())?;
        let mut argv = vec![program.clone()];
        for arg in args {
            argv.push(c(arg.as_ref().as_bytes())?);
        }
        Ok(Launch {
            program,
            argv,
            fds: Vec::new(),
            joins: Vec::new(),
        })
    }

    /// Gives the child our `fd` as descriptor `theirs` (above 2; the
    /// standard three are the launch's own).
    pub(crate) fn give(&mut self, fd: RawFd, theirs: RawFd) -> &mut Self {
        self.fds.push((fd, theirs));
        self
    }

    /// The child writes itself into `fd` (an open `tasks` or
    /// `cgroup.procs`) before anything else.
    pub(crate) fn join(&mut self, fd: RawFd) -> &mut Self {
        self.joins.push(fd);
        self
    }
}

/// A started bwrap: its pid, until reaped, and its stderr.
pub(crate) struct Child {
    pid: libc::pid_t,
    reaped: bool,
    pub stderr: Option<File>,
}

impl Child {
    pub(crate) fn id(&self) -> u32 {
        self.pid as u32
    }

    /// SIGKILL, unless it is reaped already (its pid may be another's).
    pub(crate) fn kill(&mut self) -> io::Result<()> {
        if self.reaped {
            return Ok(());
        }
        // SAFETY: our own unreaped child: the pid is still its.
        if unsafe { libc::kill(self.pid, libc::SIGKILL) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Its wait status once it has exited (reaped then), else `None`.
    pub(crate) fn try_wait(&mut self) -> io::Result<Option<i32>> {
        self.reap(libc::WNOHANG)
    }

    /// Waits for it to exit and reaps it.
    pub(crate) fn wait(&mut self) -> io::Result<i32> {
        loop {
            if let Some(status) = self.reap(0)? {
                return Ok(status);
            }
        }
    }

    fn reap(&mut self, flags: i32) -> io::Result<Option<i32>> {
        if self.reaped {
            return Ok(Some(0));
        }
        let mut status = 0;
        // SAFETY: waits for our own child, writing its status into `status`.
        let got = unsafe { libc::waitpid(self.pid, &mut status, flags) };
        match got {
            0 => Ok(None),
            pid if pid == self.pid => {
                self.reaped = true;
                Ok(Some(status))
            }
            _ => {
                let e = io::Error::last_os_error();
                if e.raw_os_error() == Some(libc::EINTR) {
                    return Ok(None);
                }
                Err(e)
            }
        }
    }
}

type Job = (Launch, mpsc::Sender<io::Result<Child>>);

static SPAWNER: OnceLock<Mutex<mpsc::Sender<Job>>> = OnceLock::new();

fn spawner() -> io::Result<&'static Mutex<mpsc::Sender<Job>>> {
    if let Some(tx) = SPAWNER.get() {
        return Ok(tx);
    }
    let (tx, rx) = mpsc::channel::<Job>();
    std::thread::Builder::new()
        .name("bwrap-spawner".into())
        .spawn(move || {
            sandbox_spawn::block_every_signal();
            let stack = ChildStack::new();
            for (launch, answer) in rx {
                let started = match &stack {
                    Ok(stack) => start(stack, &launch),
                    Err(e) => Err(io::Error::new(e.kind(), format!("the child's stack: {e}"))),
                };
                let _ = answer.send(started);
            }
        })?;
    Ok(SPAWNER.get_or_init(|| Mutex::new(tx)))
}

/// Starts `launch` from the long-lived spawner thread; returns once the
/// child has exec'd bwrap (or says why it could not).
pub(crate) fn spawn(launch: Launch) -> io::Result<Child> {
    let (answer_tx, answer_rx) = mpsc::channel();
    spawner()?
        .lock()
        .map_err(|_| io::Error::other("spawner lock poisoned"))?
        .send((launch, answer_tx))
        .map_err(|_| io::Error::other("the spawner thread is gone"))?;
    answer_rx
        .recv()
        .map_err(|_| io::Error::other("the spawner thread is gone"))?
}

/// A close-on-exec copy of `fd` at `floor` or above — above every number
/// the child gives out (0–2 and the launch's own), so no `dup2` in the
/// child replaces one not yet given.
fn above(fd: RawFd, floor: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: duplicates a descriptor the caller holds open.
    let moved = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, floor) };
    if moved < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(moved) })
}

/// Makes the child on the spawner thread (which blocks every signal).
fn start(stack: &ChildStack, launch: &Launch) -> io::Result<Child> {
    let floor = launch
        .fds
        .iter()
        .map(|&(_, theirs)| theirs)
        .max()
        .unwrap_or(2)
        + 1;
    let null = File::open("/dev/null")?;
    let mut ends = [0; 2];
    // SAFETY: pipe2 writes two descriptors into `ends`.
    if unsafe { libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both were just made and are ours.
    let (stderr_ours, stderr_theirs) =
        unsafe { (OwnedFd::from_raw_fd(ends[0]), OwnedFd::from_raw_fd(ends[1])) };
    // Copies of everything given, all above `floor` (dropped once it execs).
    let null = above(null.as_raw_fd(), floor)?;
    let stderr_theirs = above(stderr_theirs.as_raw_fd(), floor)?;
    let mut given = vec![
        (null.as_raw_fd(), 0),
        (null.as_raw_fd(), 1),
        (stderr_theirs.as_raw_fd(), 2),
    ];
    let mut copies = Vec::new();
    for &(ours, theirs) in &launch.fds {
        let copy = above(ours, floor)?;
        given.push((copy.as_raw_fd(), theirs));
        copies.push(copy);
    }
    let argv: Vec<*const libc::c_char> = launch
        .argv
        .iter()
        .map(|a| a.as_ptr())
        .chain([std::ptr::null()])
        .collect();
    let env = [std::ptr::null::<libc::c_char>()];
    let failure = AtomicI32::new(0);
    let prepared = Prepared {
        program: &launch.program,
        argv: &argv,
        env: &env,
        joins: &launch.joins,
        given: &given,
        failure: &failure,
    };
    let child = |_joined: bool| {
        // SAFETY: only ever the child of `sandbox_spawn::spawn`, on memory
        // prepared above; never returns.
        unsafe { child(&prepared) }
    };
    // SAFETY: `child` makes only async-signal-safe calls on memory prepared
    // above, writes only its stack and `failure`, and ends in exec or
    // _exit; this thread blocks every signal (see `spawner`).
    let pid = unsafe { sandbox_spawn::spawn(stack, &child, None) }?;
    drop((null, stderr_theirs, copies));
    let pid = sandbox_spawn::exec_result(pid, &failure)?;
    Ok(Child {
        pid,
        reaped: false,
        stderr: Some(File::from(stderr_ours)),
    })
}

/// What the child reads, all made before it starts.
struct Prepared<'a> {
    program: &'a CString,
    argv: &'a [*const libc::c_char],
    env: &'a [*const libc::c_char],
    joins: &'a [RawFd],
    /// `(ours, theirs)`, every `ours` above every `theirs`.
    given: &'a [(RawFd, RawFd)],
    /// Where the child leaves the errno of what failed (0: it exec'd).
    failure: &'a AtomicI32,
}

/// The child, until it execs bwrap.
///
/// # Safety
/// Only in the child of `sandbox_spawn::spawn`: async-signal-safe calls,
/// no allocation, no write but to its stack and `p.failure`.
unsafe fn child(p: &Prepared<'_>) -> ! {
    // SAFETY: async-signal-safe syscalls on memory prepared before.
    unsafe {
        let fail = |errno: i32| -> ! {
            p.failure.store(errno.max(1), Ordering::SeqCst);
            libc::_exit(127)
        };
        let errno = || *libc::__errno_location();
        // First: everything this process does and starts is in the groups
        // (`0` is the writing process: this child, before it is bwrap).
        for &fd in p.joins {
            if libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                fail(errno());
            }
        }
        sandbox_spawn::default_signals();
        // Nothing of ours reaches bwrap but what is given (threat model
        // T3): every descriptor from 3 up closes at exec, and `dup2` gives
        // each one given without that flag.
        if libc::syscall(
            libc::SYS_close_range,
            3u32,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        ) != 0
        {
            fail(errno());
        }
        for &(ours, theirs) in p.given {
            if libc::dup2(ours, theirs) < 0 {
                fail(errno());
            }
        }
        libc::execve(p.program.as_ptr(), p.argv.as_ptr(), p.env.as_ptr());
        fail(errno())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    /// What is given arrives at its number, nothing else of ours does,
    /// stderr comes back through the pipe, and the exit status is bwrap's.
    #[test]
    fn the_child_gets_what_is_given_and_nothing_else() {
        let given = std::fs::File::open("/dev/null").unwrap();
        let null = std::fs::File::open("/dev/null").unwrap();
        // One left open across exec (no close-on-exec), as a library might.
        // SAFETY: F_DUPFD makes a fresh descriptor, at 20 or above, we own.
        let stray =
            unsafe { OwnedFd::from_raw_fd(libc::fcntl(null.as_raw_fd(), libc::F_DUPFD, 20)) };
        let script = format!(
            "for n in 3 4 5 6 7 8 9 {}; do [ -e /proc/$$/fd/$n ] && echo $n >&2; done; exit 3",
            stray.as_raw_fd()
        );
        let mut launch = Launch::new(Path::new("/bin/sh"), &["-c".to_owned(), script]).unwrap();
        launch.give(given.as_raw_fd(), 4);
        let mut child = spawn(launch).unwrap();
        let mut said = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut said)
            .unwrap();
        let status = child.wait().unwrap();
        assert!(libc::WIFEXITED(status));
        assert_eq!(libc::WEXITSTATUS(status), 3);
        assert_eq!(said.split_whitespace().collect::<Vec<_>>(), ["4"], "{said}");
    }

    /// A program that cannot be run is an error, not a child.
    #[test]
    fn a_missing_program_is_an_error() {
        let launch = Launch::new::<&str>(Path::new("/nonexistent/bwrap"), &[]).unwrap();
        let err = spawn(launch).err().expect("spawned");
        assert_eq!(err.raw_os_error(), Some(libc::ENOENT));
    }
}
