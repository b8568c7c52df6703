//! `sandbox-init --control-fd N`: PID 1 of a bwrap sandbox.
//!
//! It installs the hardening seccomp filter on itself first (everything it
//! starts inherits it and cannot remove it; if it cannot, it refuses to run
//! anything), announces `ready`, then serves the backend's requests: start a
//! command with the descriptors it was sent, signal a command's process
//! group, freeze or thaw the sandbox. It reaps every process (commands and
//! the orphans they leave) and reports each command's end. When the backend
//! goes away — destroy, or the server dying — it kills everything and exits,
//! and the kernel tears the namespaces down with it.
//!
//! Single-threaded on purpose: forking from it is safe, and the code between
//! fork and exec needs no care beyond not allocating.

use std::collections::HashMap;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::process::ExitCode;

use sandbox_init::proto::{self, Reply, Request};
use sandbox_init::seccomp;

fn main() -> ExitCode {
    let control = match control_fd() {
        Ok(fd) => fd,
        Err(message) => {
            eprintln!("sandbox-init: {message}");
            return ExitCode::from(125);
        }
    };
    if let Err(e) = seccomp::install(&seccomp::hardening_filter()) {
        // Fail closed: without the filter nothing runs.
        eprintln!("sandbox-init: cannot install the seccomp filter: {e}");
        return ExitCode::from(125);
    }
    match serve(control.as_fd()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sandbox-init: {e}");
            ExitCode::from(125)
        }
    }
}

fn control_fd() -> Result<OwnedFd, String> {
    let args: Vec<String> = std::env::args().collect();
    let fd: RawFd = match args.as_slice() {
        [_, flag, fd] if flag == "--control-fd" => {
            fd.parse().map_err(|_| format!("bad descriptor `{fd}`"))?
        }
        _ => return Err("usage: sandbox-init --control-fd N".into()),
    };
    // SAFETY: F_GETFD only inspects the descriptor table.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        return Err(format!("descriptor {fd} is not open"));
    }
    // SAFETY: the descriptor is open and handed to us to own by our parent.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: plain fcntl on a descriptor we own; commands must not inherit it.
    unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    Ok(owned)
}

/// Commands running, by pid and by exec id.
#[derive(Default)]
struct Running {
    by_pid: HashMap<i32, u64>,
    by_id: HashMap<u64, i32>,
}

fn serve(control: BorrowedFd<'_>) -> io::Result<()> {
    let children = ChildSignals::new()?;
    proto::send(
        control,
        0,
        &Reply::Ready {
            version: proto::VERSION,
        },
        &[],
    )?;
    let mut running = Running::default();
    loop {
        let mut polled = [
            libc::pollfd {
                fd: control.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: children.fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: polled is a valid array of two pollfd.
        let n = unsafe { libc::poll(polled.as_mut_ptr(), 2, -1) };
        if n < 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(err);
        }
        if polled[1].revents != 0 {
            children.drain();
            reap(control, &mut running)?;
        }
        if polled[0].revents != 0 {
            match proto::recv::<Request>(control)? {
                Some((envelope, fds)) => {
                    let reply = handle(envelope.body, fds, &mut running);
                    proto::send(control, envelope.seq, &reply, &[])?;
                }
                None => {
                    // The backend is gone (destroy, or the server died).
                    kill_everything();
                    return Ok(());
                }
            }
        }
    }
}

fn handle(request: Request, fds: Vec<OwnedFd>, running: &mut Running) -> Reply {
    match request {
        Request::Exec {
            id,
            argv,
            env,
            cwd,
            stdin,
        } => match spawn(&argv, &env, &cwd, stdin, fds) {
            Ok(pid) => {
                running.by_pid.insert(pid, id);
                running.by_id.insert(id, pid);
                Reply::Started { pid }
            }
            Err(Failure { errno, message }) => Reply::Failed { errno, message },
        },
        Request::Signal { id, signal } => match running.by_id.get(&id) {
            Some(&pid) => {
                // SAFETY: plain syscall; the group's leader is our unreaped child.
                if unsafe { libc::kill(-pid, signal) } == 0 {
                    Reply::Done
                } else {
                    Reply::Refused {
                        message: format!("signal {signal}: {}", io::Error::last_os_error()),
                    }
                }
            }
            None => Reply::Refused {
                message: format!("exec {id} is not running"),
            },
        },
        Request::Freeze => signal_everything(libc::SIGSTOP),
        Request::Thaw => signal_everything(libc::SIGCONT),
    }
}

/// Signals every process of the sandbox but PID 1 (kill(-1) from the init of
/// a pid namespace reaches exactly its other members).
fn signal_everything(signal: i32) -> Reply {
    // SAFETY: plain syscall.
    if unsafe { libc::kill(-1, signal) } == 0
        || io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
    {
        Reply::Done
    } else {
        Reply::Refused {
            message: format!("signal {signal}: {}", io::Error::last_os_error()),
        }
    }
}

fn kill_everything() {
    // SAFETY: plain syscall; see signal_everything.
    unsafe { libc::kill(-1, libc::SIGKILL) };
}

/// Reaps every child that ended; reports the commands among them.
fn reap(control: BorrowedFd<'_>, running: &mut Running) -> io::Result<()> {
    loop {
        let mut status = 0;
        // SAFETY: plain syscall writing into `status`.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid <= 0 {
            return Ok(());
        }
        let Some(id) = running.by_pid.remove(&pid) else {
            continue; // an orphan, or a command that never started
        };
        running.by_id.remove(&id);
        let (code, signal) = if libc::WIFEXITED(status) {
            (Some(libc::WEXITSTATUS(status)), None)
        } else {
            (None, Some(libc::WTERMSIG(status)))
        };
        proto::send(control, 0, &Reply::Exited { id, code, signal }, &[])?;
    }
}

/// SIGCHLD as a readable descriptor.
struct ChildSignals {
    fd: OwnedFd,
}

impl ChildSignals {
    fn new() -> io::Result<Self> {
        // SAFETY: sigset operations on a local set, then blocking SIGCHLD for
        // this (single-threaded) process so it is only seen via the signalfd.
        let fd = unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGCHLD);
            if libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) != 0 {
                return Err(io::Error::last_os_error());
            }
            libc::signalfd(-1, &set, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK)
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: signalfd returned a fresh descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Self { fd })
    }

    fn drain(&self) {
        let mut info = [0u8; 128];
        // SAFETY: reads into a local buffer from our non-blocking signalfd.
        while unsafe { libc::read(self.fd.as_raw_fd(), info.as_mut_ptr().cast(), info.len()) } > 0 {
        }
    }
}

struct Failure {
    errno: i32,
    message: String,
}

fn c_string(s: &str) -> Result<CString, Failure> {
    CString::new(s).map_err(|_| Failure {
        errno: libc::EINVAL,
        message: format!("{s:?} contains a NUL byte"),
    })
}

/// Where `argv[0]` may be, in order: itself if it names a path, else each
/// `PATH` entry of the command's own environment.
fn candidates(program: &str, env: &[(String, String)]) -> Vec<String> {
    if program.contains('/') {
        return vec![program.to_owned()];
    }
    let path = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map_or("/usr/local/bin:/usr/bin:/bin", |(_, v)| v.as_str());
    path.split(':')
        .map(|dir| if dir.is_empty() { "." } else { dir })
        .map(|dir| format!("{}/{program}", dir.trim_end_matches('/')))
        .collect()
}

/// Forks and execs one command in a session (and process group) of its own.
fn spawn(
    argv: &[String],
    env: &[(String, String)],
    cwd: &str,
    stdin: bool,
    fds: Vec<OwnedFd>,
) -> Result<i32, Failure> {
    let expected = if stdin { 3 } else { 2 };
    if argv.is_empty() || fds.len() != expected {
        return Err(Failure {
            errno: libc::EINVAL,
            message: format!(
                "an exec needs argv and {expected} descriptors; got {}",
                fds.len()
            ),
        });
    }
    // Everything the child needs is allocated before fork.
    let c_argv: Vec<CString> = argv.iter().map(|a| c_string(a)).collect::<Result<_, _>>()?;
    let c_env: Vec<CString> = env
        .iter()
        .map(|(k, v)| c_string(&format!("{k}={v}")))
        .collect::<Result<_, _>>()?;
    let c_paths: Vec<CString> = candidates(&argv[0], env)
        .iter()
        .map(|p| c_string(p))
        .collect::<Result<_, _>>()?;
    let c_cwd = c_string(cwd)?;
    let c_null = c_string("/dev/null")?;
    let mut argv_ptrs: Vec<*const libc::c_char> = c_argv.iter().map(|a| a.as_ptr()).collect();
    argv_ptrs.push(std::ptr::null());
    let mut env_ptrs: Vec<*const libc::c_char> = c_env.iter().map(|e| e.as_ptr()).collect();
    env_ptrs.push(std::ptr::null());
    let stdout = fds[0].as_raw_fd();
    let stderr = fds[1].as_raw_fd();
    let stdin_fd = if stdin {
        Some(fds[2].as_raw_fd())
    } else {
        None
    };

    let mut report = [0 as RawFd; 2];
    // SAFETY: pipe2 writes two descriptors into `report`.
    if unsafe { libc::pipe2(report.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(Failure {
            errno: io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO),
            message: "pipe2".into(),
        });
    }
    // SAFETY: both descriptors were just created and are ours.
    let (report_r, report_w) = unsafe {
        (
            OwnedFd::from_raw_fd(report[0]),
            OwnedFd::from_raw_fd(report[1]),
        )
    };

    // SAFETY: this process is single-threaded, so the child may run any code;
    // it only makes syscalls on memory prepared above and ends in exec or _exit.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(Failure {
            errno: io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO),
            message: "fork".into(),
        });
    }
    if pid == 0 {
        // SAFETY: the child side of fork; see above. Never returns.
        unsafe {
            child(
                &argv_ptrs,
                &env_ptrs,
                &c_paths,
                &c_cwd,
                &c_null,
                stdin_fd,
                stdout,
                stderr,
                report_w.as_raw_fd(),
            )
        }
    }
    drop(report_w);
    drop(fds);
    let mut answer = [0u8; 8];
    let n = read_full(report_r.as_fd(), &mut answer);
    if n < answer.len() {
        return Ok(pid); // exec succeeded: the pipe closed on exec
    }
    let stage = u32::from_le_bytes([answer[0], answer[1], answer[2], answer[3]]);
    let errno = i32::from_le_bytes([answer[4], answer[5], answer[6], answer[7]]);
    let what = if stage == 1 {
        format!("working directory {cwd}")
    } else {
        argv[0].clone()
    };
    Err(Failure {
        errno,
        message: format!("{what}: {}", io::Error::from_raw_os_error(errno)),
    })
}

fn read_full(fd: BorrowedFd<'_>, buf: &mut [u8]) -> usize {
    let mut filled = 0;
    while filled < buf.len() {
        // SAFETY: reads into the unfilled tail of `buf`.
        let n = unsafe {
            libc::read(
                fd.as_raw_fd(),
                buf[filled..].as_mut_ptr().cast(),
                buf.len() - filled,
            )
        };
        if n > 0 {
            filled += n as usize;
        } else if n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
            continue;
        } else {
            break;
        }
    }
    filled
}

/// The child between fork and exec.
///
/// # Safety
/// Call only in the child of `fork`; every pointer must stay valid (they
/// were prepared by the parent before forking).
#[allow(clippy::too_many_arguments)]
unsafe fn child(
    argv: &[*const libc::c_char],
    env: &[*const libc::c_char],
    paths: &[CString],
    cwd: &CString,
    dev_null: &CString,
    stdin: Option<RawFd>,
    stdout: RawFd,
    stderr: RawFd,
    report: RawFd,
) -> ! {
    // SAFETY: syscalls on descriptors and memory prepared before fork.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
        libc::setsid();
        let input = match stdin {
            Some(fd) => fd,
            None => libc::open(dev_null.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC),
        };
        libc::dup2(input, 0);
        libc::dup2(stdout, 1);
        libc::dup2(stderr, 2);
        if libc::chdir(cwd.as_ptr()) != 0 {
            fail(report, 1);
        }
        let mut denied = false;
        let mut last = libc::ENOENT;
        for path in paths {
            libc::execve(path.as_ptr(), argv.as_ptr(), env.as_ptr());
            last = *libc::__errno_location();
            match last {
                libc::ENOENT | libc::ENOTDIR => {}
                libc::EACCES => denied = true,
                _ => break,
            }
        }
        if denied && matches!(last, libc::ENOENT | libc::ENOTDIR) {
            *libc::__errno_location() = libc::EACCES;
        }
        fail(report, 2)
    }
}

/// Sends `(stage, errno)` to the parent and exits.
///
/// # Safety
/// Call only in the forked child.
unsafe fn fail(report: RawFd, stage: u32) -> ! {
    // SAFETY: reads errno, writes a local buffer to our own pipe, exits.
    unsafe {
        let errno = *libc::__errno_location();
        let mut answer = [0u8; 8];
        answer[..4].copy_from_slice(&stage.to_le_bytes());
        answer[4..].copy_from_slice(&errno.to_le_bytes());
        libc::write(report, answer.as_ptr().cast(), answer.len());
        libc::_exit(if stage == 1 { 126 } else { 127 })
    }
}
