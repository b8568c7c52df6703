//! `sandbox-init --control-fd N [--guard JSON]`: PID 1 of a bwrap sandbox.
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
//! With `--guard`, it is also the create-time guard's supervisor (see
//! `sandbox_init::guard`): every command installs the guard filter between
//! fork and exec and hands its listener here, where a thread serves it.
//!
//! With `--forward PORT=SOCKET`, it binds and listens on `127.0.0.1:PORT`
//! before `ready` and hands the listeners to the egress forwarder, this same
//! binary started as `sandbox-init --forwarder PORT=FD:SOCKET …` in a
//! process of its own (see `sandbox_init::forward`).
//!
//! Commands are forked by the fork thread, in a pid namespace below ours
//! (`sandbox_init::forker`), so none can name PID 1; the forwarder is forked
//! on the main thread. The code between fork and exec makes only
//! async-signal-safe calls on memory prepared before the fork, so the
//! supervisor threads cannot leave it a held lock.

use std::collections::HashMap;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};

use sandbox_init::caches::CacheOverlays;
use sandbox_init::forker::{Forker, MemfdExec};
use sandbox_init::forward::{self, Route};
use sandbox_init::guard::rules::{GuardConfig, Rules};
use sandbox_init::guard::{self, notify::Listener};
use sandbox_init::proto::{self, Reply, Request};
use sandbox_init::seccomp;
use sandbox_plugin_api::error_chain;

/// The stage codes a failed child reports.
const STAGE_CHDIR: u32 = 1;
const STAGE_EXEC: u32 = 2;
const STAGE_GUARD: u32 = 3;
const STAGE_OOM: u32 = 4;
const STAGE_CGROUP: u32 = 5;

/// Every command's `oom_score_adj`: the OOM killer takes a command before
/// PID 1, the supervisor or the forwarder (which keep 0; lowering their
/// own would need CAP_SYS_RESOURCE, raising a child's needs nothing
/// where the sandbox's root is mapped), so a
/// command past the sandbox's memory limit ends `killed` reason `oom` and
/// the sandbox lives on (SPEC G6, F10).
const COMMAND_OOM_SCORE_ADJ: &[u8] = b"1000";

// A command that cannot install its filters does not run: `STAGE_GUARD`.

fn main() -> ExitCode {
    if std::env::args().nth(1).as_deref() == Some(FORWARDER) {
        return forwarder();
    }
    let (control, guard_config, forwards, mut exec_from, exec_grants, caches) = match parse_args() {
        Ok(parsed) => parsed,
        Err(message) => {
            eprintln!("sandbox-init: {message}");
            return ExitCode::from(125);
        }
    };
    // First, while single-threaded: our own namespaces, writable mounts
    // noexec, no capabilities (see `sandbox_init::layout`). Fail closed.
    // PID 1's Landlock domain is entered in there, before anything is
    // forked: the supervisor, the forwarder and every command are in it.
    let guarded = guard_config.is_some();
    exec_from.extend(exec_grants.iter().map(std::path::PathBuf::from));
    let forker = match sandbox_init::layout::enter(guarded, &exec_grants, &caches, |writable| {
        enter_domain(&exec_from, writable, guarded)
    }) {
        Ok(forker) => forker,
        Err(e) => {
            eprintln!("sandbox-init: {}", error_chain(&e));
            return ExitCode::from(125);
        }
    };
    // SAFETY: plain prctl call. Not dumpable, guard or not: commands can
    // neither read PID 1's memory nor reach its descriptors through /proc/1.
    // (Not before the layout: the id-map helper writes our /proc entry,
    // which a non-dumpable process's is closed to.)
    unsafe {
        libc::prctl(libc::PR_SET_DUMPABLE, 0 as libc::c_ulong, 0, 0, 0);
    }
    let rules = match guard_config.map(|c| start_guard(&c)).transpose() {
        Ok(rules) => rules,
        Err(message) => {
            // Fail closed: a guard that cannot start means nothing runs.
            eprintln!("sandbox-init: the create-time guard cannot start: {message}");
            return ExitCode::from(125);
        }
    };
    // PID 1's own filter; every command also installs the full one itself.
    let own_filter = if rules.is_some() {
        seccomp::supervisor_filter()
    } else {
        seccomp::hardening_filter()
    };
    if let Err(e) = seccomp::install(&own_filter) {
        eprintln!("sandbox-init: cannot install the seccomp filter: {e}");
        return ExitCode::from(125);
    }
    match serve(
        control.as_fd(),
        rules.map(Arc::new),
        &forwards,
        Arc::new(forker),
    ) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sandbox-init: {e}");
            ExitCode::from(125)
        }
    }
}

/// Builds PID 1's Landlock domain (`sandbox_init::landlock`) and enters it.
/// The guard needs the write rights covered: a supervisor that writes for
/// the commands must not be able to write where they could not.
fn enter_domain(
    exec_from: &[std::path::PathBuf],
    writable: &[String],
    guarded: bool,
) -> Result<(), String> {
    if exec_from.is_empty() {
        return Err("no --exec-from: nothing could be executed".into());
    }
    let (ruleset, coverage) = sandbox_init::landlock::domain(exec_from, writable)
        .map_err(|e| format!("PID 1's Landlock domain: {e}"))?;
    if guarded && !coverage.writes {
        return Err(format!(
            "the create-time guard's supervisor cannot be confined: Landlock ABI {} lacks \
             REFER (ABI 2, Linux 5.19)",
            coverage.abi
        ));
    }
    if !sandbox_init::landlock::restrict_self(ruleset.as_raw_fd()) {
        return Err(format!(
            "entering PID 1's Landlock domain: {}",
            io::Error::last_os_error()
        ));
    }
    Ok(())
}

/// The first argument of the forwarder process.
const FORWARDER: &str = "--forwarder";

/// `sandbox-init --forwarder PORT=FD:SOCKET …`: relays the connections of
/// the listeners PID 1 made and passed down to the unix sockets. Runs under
/// the hardening filter PID 1's child installed before exec.
fn forwarder() -> ExitCode {
    // SAFETY: plain prctl call. Not dumpable: commands can neither read its
    // memory nor reach its descriptors through /proc.
    unsafe {
        libc::prctl(libc::PR_SET_DUMPABLE, 0 as libc::c_ulong, 0, 0, 0);
    }
    let mut routes: Vec<Route> = Vec::new();
    for arg in std::env::args().skip(2) {
        let taken: Vec<RawFd> = routes.iter().map(|r| r.listener.as_raw_fd()).collect();
        match Route::adopt(&arg, &taken) {
            Ok(route) => routes.push(route),
            Err(e) => {
                eprintln!("sandbox-init forwarder: {}", error_chain(&e));
                return ExitCode::from(125);
            }
        }
    }
    let error = forward::serve(routes, forward::connection_limit());
    eprintln!("sandbox-init forwarder: {error}");
    ExitCode::from(1)
}

/// A loopback TCP port forwarded to a unix socket bound into the sandbox:
/// how commands reach the session's egress proxies (SPEC E2).
struct Forward {
    port: u16,
    socket: String,
}

/// What PID 1 was started with: the control socket, the guard, the egress
/// forwards, where commands may exec from, the writable exec grants, and
/// the cache overlays.
type Args = (
    OwnedFd,
    Option<GuardConfig>,
    Vec<Forward>,
    Vec<std::path::PathBuf>,
    Vec<String>,
    CacheOverlays,
);

fn parse_args() -> Result<Args, String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut control = None;
    let mut guard_config = None;
    let mut forwards = Vec::new();
    let mut exec_from = Vec::new();
    let mut exec_grants = Vec::new();
    let mut caches = CacheOverlays::default();
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--control-fd" => {
                control = Some(
                    value
                        .parse::<RawFd>()
                        .map_err(|_| format!("bad descriptor `{value}`"))?,
                )
            }
            "--guard" => {
                guard_config = Some(
                    serde_json::from_str::<GuardConfig>(value)
                        .map_err(|e| format!("--guard: {e}"))?,
                )
            }
            "--forward" => {
                let (port, socket) = value
                    .split_once('=')
                    .and_then(|(p, s)| Some((p.parse::<u16>().ok()?, s)))
                    .ok_or_else(|| format!("--forward {value}: use PORT=/path/to/socket"))?;
                forwards.push(Forward {
                    port,
                    socket: socket.to_owned(),
                });
            }
            "--exec-from" => exec_from.push(std::path::PathBuf::from(value)),
            "--exec-grant" => exec_grants.push(value.clone()),
            "--caches" => {
                caches = serde_json::from_str::<CacheOverlays>(value)
                    .map_err(|e| format!("--caches: {e}"))?
            }
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    let fd = control
        .ok_or("usage: sandbox-init --control-fd N [--guard JSON] [--forward PORT=SOCKET]... [--exec-from PATH]... [--exec-grant DIR]... [--caches JSON]")?;
    // SAFETY: F_GETFD only inspects the descriptor table.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        return Err(format!("descriptor {fd} is not open"));
    }
    // SAFETY: the descriptor is open and handed to us to own by our parent.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: plain fcntl on a descriptor we own; commands must not inherit it.
    unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    Ok((
        owned,
        guard_config,
        forwards,
        exec_from,
        exec_grants,
        caches,
    ))
}

/// Prepares the supervisor side: the rules, the identities of existing
/// protected files, and a process no command can inspect.
fn start_guard(config: &GuardConfig) -> Result<Rules, String> {
    let mut rules = Rules::new(config).map_err(|e| error_chain(&e))?;
    if !seccomp::notify_available() {
        return Err("this kernel offers no seccomp user notification".into());
    }
    if !guard::scan_protected_inodes(&mut rules) {
        eprintln!(
            "sandbox-init: more files than the scan limit; hard links to some protected files may not be caught"
        );
    }
    Ok(rules)
}

/// Commands running, by pid and by exec id.
#[derive(Default)]
struct Running {
    by_pid: HashMap<i32, u64>,
    by_id: HashMap<u64, i32>,
}

/// The control socket, shared by the main loop and the supervisor threads.
#[derive(Clone)]
struct Outbox {
    fd: RawFd,
    lock: Arc<Mutex<()>>,
}

impl Outbox {
    fn send(&self, seq: u64, reply: &Reply) -> io::Result<()> {
        let _frame = self
            .lock
            .lock()
            .map_err(|_| io::Error::other("send lock poisoned"))?;
        // SAFETY: the control descriptor outlives every sender (PID 1 exits
        // with it; supervisor threads die with the process).
        let fd = unsafe { BorrowedFd::borrow_raw(self.fd) };
        proto::send(fd, seq, reply, &[])
    }
}

fn serve(
    control: BorrowedFd<'_>,
    rules: Option<Arc<Rules>>,
    forwards: &[Forward],
    forker: Arc<Forker>,
) -> io::Result<()> {
    let children = ChildSignals::new()?;
    // Before `ready`: a command must find its proxies listening.
    let forwarder = start_forwards(forwards)?;
    let outbox = Outbox {
        fd: control.as_raw_fd(),
        lock: Arc::default(),
    };
    outbox.send(
        0,
        &Reply::Ready {
            version: proto::VERSION,
        },
    )?;
    let filters = Filters {
        hardening: match forker.memfd_exec() {
            MemfdExec::Sysctl => seccomp::hardening_filter(),
            MemfdExec::FilterOnly => seccomp::hardening_filter_sealed_memfds(),
        },
        guard: rules.as_ref().map(|_| seccomp::guard_filter()),
        umask: commands_umask(rules.is_some()),
    };
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
            reap(&outbox, &mut running, forwarder, forker.reaper())?;
        }
        if polled[0].revents != 0 {
            match proto::recv::<Request>(control)? {
                Some((envelope, fds)) => {
                    let reply = handle(
                        envelope.body,
                        fds,
                        &mut running,
                        &filters,
                        &forker,
                        rules.as_ref(),
                        &outbox,
                    );
                    outbox.send(envelope.seq, &reply)?;
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

/// Binds and listens on each forward's port, then starts the forwarder
/// (hardening filter, no guard: it creates no files) with the listeners,
/// which it alone holds from then on: if it dies, connections are refused.
/// Returns its pid. A port that cannot be bound, or a forwarder that cannot
/// be started, fails the launch: a sandbox that asked for network gets it,
/// or does not start.
fn start_forwards(forwards: &[Forward]) -> io::Result<Option<i32>> {
    if forwards.is_empty() {
        return Ok(None);
    }
    let mut listeners = Vec::with_capacity(forwards.len());
    let mut argv = vec![own_path(), FORWARDER.to_owned()];
    for forward in forwards {
        let listener = forward::listen_loopback(forward.port)
            .map_err(|e| io::Error::new(e.kind(), format!("127.0.0.1:{}: {e}", forward.port)))?;
        argv.push(forward::route_arg(
            forward.port,
            listener.as_raw_fd(),
            &forward.socket,
        ));
        listeners.push(listener);
    }
    let filters = Filters {
        hardening: seccomp::hardening_filter(),
        guard: None,
        umask: 0o077,
    };
    let dev_null: OwnedFd = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/null")?
        .into();
    let stderr = std::io::stderr().as_fd().try_clone_to_owned()?;
    let inherit: Vec<RawFd> = listeners.iter().map(|l| l.as_raw_fd()).collect();
    // Forked here, not by the forker: outside the commands' namespace, no
    // command can name the forwarder either.
    let (pid, _) = spawn(
        &argv,
        &[],
        "/",
        Streams::default(),
        vec![dev_null, stderr],
        &inherit,
        &filters,
        None,
    )
    .map_err(|f| io::Error::other(format!("the egress forwarder: {}", f.message)))?;
    // `listeners` close here: the forwarder's copies are the only ones.
    Ok(Some(pid))
}

/// This binary's path inside the sandbox (`/.sandbox-init`, as bwrap ran
/// it), or the kernel's link to it.
fn own_path() -> String {
    std::env::args()
        .next()
        .filter(|a| a.starts_with('/'))
        .unwrap_or_else(|| "/proc/self/exe".to_owned())
}

/// What every command gets between fork and exec.
struct Filters {
    hardening: Vec<seccomp::SockFilter>,
    guard: Option<Vec<seccomp::SockFilter>>,
    /// The umask commands start with.
    umask: libc::mode_t,
}

/// With the guard, PID 1 creates files for commands with their own umask
/// applied, so its own must be 0; commands get back the umask PID 1 started
/// with.
fn commands_umask(guarded: bool) -> libc::mode_t {
    // SAFETY: umask has no preconditions; reading it means setting it.
    let started_with = unsafe { libc::umask(0) };
    if !guarded {
        // SAFETY: as above.
        unsafe { libc::umask(started_with) };
    }
    started_with
}

#[allow(clippy::too_many_arguments)]
fn handle(
    request: Request,
    fds: Vec<OwnedFd>,
    running: &mut Running,
    filters: &Filters,
    forker: &Arc<Forker>,
    rules: Option<&Arc<Rules>>,
    outbox: &Outbox,
) -> Reply {
    match request {
        Request::Exec {
            id,
            argv,
            env,
            cwd,
            stdin,
            cgroup,
        } => match spawn(
            &argv,
            &env,
            &cwd,
            Streams { stdin, cgroup },
            fds,
            &[],
            filters,
            Some(forker.as_ref()),
        ) {
            Ok((pid, listener)) => {
                running.by_pid.insert(pid, id);
                running.by_id.insert(id, pid);
                if let (Some(rules), Some(listener)) = (rules, listener) {
                    supervise(
                        id,
                        listener,
                        Arc::clone(rules),
                        Arc::clone(forker),
                        outbox.clone(),
                    );
                }
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

/// Serves an exec's listener on a thread until its last process is gone.
fn supervise(
    exec_id: u64,
    listener: OwnedFd,
    rules: Arc<Rules>,
    forker: Arc<Forker>,
    outbox: Outbox,
) {
    let spawned = std::thread::Builder::new()
        .name(format!("guard-{exec_id}"))
        .spawn(move || {
            let listener = Listener::new(listener);
            let report = |denial: &guard::emulate::Denial, tid: u32| {
                let violation = Reply::Violation {
                    id: exec_id,
                    action: denial.action.to_owned(),
                    target: denial.target.display().to_string(),
                    raw: guard::describe(denial, tid),
                };
                let _ = outbox.send(0, &violation);
            };
            guard::serve(&listener, &rules, forker.as_ref(), &report);
        });
    if let Err(e) = spawned {
        // Without a supervisor every guarded call of this exec fails: closed.
        eprintln!("sandbox-init: cannot start the guard of exec {exec_id}: {e}");
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

/// Reaps every child that ended; reports the commands among them and logs
/// the end of the egress forwarder. The end of the commands' namespace
/// reaper ends the sandbox: the kernel killed every command with it, and
/// none can start again.
fn reap(
    outbox: &Outbox,
    running: &mut Running,
    forwarder: Option<i32>,
    reaper: libc::pid_t,
) -> io::Result<()> {
    loop {
        let mut status = 0;
        // SAFETY: plain syscall writing into `status`.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid <= 0 {
            return Ok(());
        }
        if pid == reaper {
            return Err(io::Error::other(format!(
                "the commands' pid namespace ended (its reaper: {}); the sandbox cannot run anything",
                describe_status(status)
            )));
        }
        if Some(pid) == forwarder {
            // Its listeners closed with it: connections are refused now.
            eprintln!(
                "sandbox-init: the egress forwarder ended ({}); the sandbox has no network",
                describe_status(status)
            );
            continue;
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
        outbox.send(0, &Reply::Exited { id, code, signal })?;
    }
}

fn describe_status(status: i32) -> String {
    if libc::WIFEXITED(status) {
        format!("exit status {}", libc::WEXITSTATUS(status))
    } else {
        format!("signal {}", libc::WTERMSIG(status))
    }
}

/// SIGCHLD as a readable descriptor.
struct ChildSignals {
    fd: OwnedFd,
}

impl ChildSignals {
    fn new() -> io::Result<Self> {
        // SAFETY: sigset operations on a local set, then blocking SIGCHLD for
        // this process so it is only seen via the signalfd (threads started
        // later inherit the mask).
        let fd = unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGCHLD);
            if libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) != 0 {
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

/// Which descriptors follow stdout and stderr in an exec request.
#[derive(Default, Clone, Copy)]
struct Streams {
    stdin: bool,
    /// The exec's `cgroup.procs`, which the child joins first.
    cgroup: bool,
}

/// Forks and execs one command in a session (and process group) of its own,
/// and, when one is sent, in the exec's cgroup.
/// With a guard filter, the child installs it before exec and hands over
/// its listener, which is returned with the pid. The descriptors in
/// `inherit` (close-on-exec in PID 1, above 2) stay open across the exec,
/// at the same numbers. With `forker`, the command is made in the
/// commands' pid namespace (`sandbox_init::forker`); without, here.
#[allow(clippy::too_many_arguments)]
fn spawn(
    argv: &[String],
    env: &[(String, String)],
    cwd: &str,
    streams: Streams,
    fds: Vec<OwnedFd>,
    inherit: &[RawFd],
    filters: &Filters,
    forker: Option<&Forker>,
) -> Result<(i32, Option<OwnedFd>), Failure> {
    let expected = 2 + usize::from(streams.stdin) + usize::from(streams.cgroup);
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
    let prepared = Prepared {
        argv: pointers(&c_argv),
        env: pointers(&c_env),
        paths: c_paths,
        cwd: c_string(cwd)?,
        dev_null: c_string("/dev/null")?,
        oom_score_adj: c_string("/proc/self/oom_score_adj")?,
        stdin: if streams.stdin {
            Some(fds[2].as_raw_fd())
        } else {
            None
        },
        cgroup: if streams.cgroup {
            Some(fds[expected - 1].as_raw_fd())
        } else {
            None
        },
        stdout: fds[0].as_raw_fd(),
        stderr: fds[1].as_raw_fd(),
        hardening: &filters.hardening,
        guard_filter: filters.guard.as_deref(),
        umask: filters.umask,
        inherit,
    };

    // A datagram socket pair: the child sends its guard listener (if any)
    // and, on failure, `(stage, errno)`; a successful exec closes its end.
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
        return Err(Failure {
            errno: io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO),
            message: "socketpair".into(),
        });
    }
    // SAFETY: both descriptors were just created and are ours.
    let (report_r, report_w) =
        unsafe { (OwnedFd::from_raw_fd(pair[0]), OwnedFd::from_raw_fd(pair[1])) };

    let report = report_w.as_raw_fd();
    // SAFETY: only ever run as the child side of fork; never returns.
    let run_child = || unsafe { child(&prepared, report) };
    let forked = match forker {
        // SAFETY: the child runs only `child`, which makes async-signal-safe
        // syscalls on memory prepared above and ends in exec or _exit.
        Some(forker) => unsafe { forker.fork(&run_child) },
        None => {
            // SAFETY: as above.
            let pid = unsafe { libc::fork() };
            if pid == 0 {
                run_child();
            }
            if pid < 0 {
                Err(io::Error::last_os_error())
            } else {
                Ok(pid)
            }
        }
    };
    let pid = forked.map_err(|e| Failure {
        errno: e.raw_os_error().unwrap_or(libc::EIO),
        message: format!("fork: {e}"),
    })?;
    drop(report_w);
    drop(fds);
    let (listener, failure) = read_report(report_r.as_fd());
    if let Some((stage, errno)) = failure {
        let what = match stage {
            STAGE_CHDIR => format!("working directory {cwd}"),
            STAGE_GUARD => "installing the command's seccomp filters".to_owned(),
            STAGE_OOM => "raising the command's oom_score_adj".to_owned(),
            STAGE_CGROUP => "joining the exec's cgroup (which ends every process of the exec at its timeout or kill)".to_owned(),
            _ => argv[0].clone(),
        };
        let mut message = format!("{what}: {}", io::Error::from_raw_os_error(errno));
        if stage == STAGE_EXEC && errno == libc::EACCES {
            message.push_str(&exec_refusal(&candidates(&argv[0], env), cwd));
        }
        return Err(Failure { errno, message });
    }
    if filters.guard.is_some() && listener.is_none() {
        // SAFETY: plain syscall on our own child, which must not run unguarded.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        return Err(Failure {
            errno: libc::EIO,
            message: "the command did not hand over its guard listener".into(),
        });
    }
    Ok((pid, listener))
}

/// Why an exec the kernel refused with EACCES was refused, and what would
/// allow it (every refusal explains itself): a file without an execute bit
/// says so; an executable one was stopped by the exec rule (`noexec`
/// writable mounts, PID 1's Landlock EXECUTE rule), which grants change.
/// Read from the file the kernel refused, not predicted from the rules.
fn exec_refusal(candidates: &[String], cwd: &str) -> String {
    use std::os::unix::fs::PermissionsExt;
    let found = candidates.iter().find_map(|c| {
        let path = std::path::Path::new(cwd).join(c.trim_start_matches("./"));
        let meta = std::fs::metadata(&path).ok()?;
        meta.is_file().then_some((path, meta.permissions().mode()))
    });
    match found {
        Some((path, mode)) if mode & 0o111 == 0 => format!(
            " — {} has no execute bit (chmod +x it, or run it through its interpreter)",
            path.display()
        ),
        Some((path, _)) => format!(
            " — refused by the exec rule: commands execute only from the system view and \
             exec grants, and {} is in neither. Grant its directory: `--exec-grant DIR` \
             (cc_server run), `execGrantRoots` (the spec); a tool directory of the host: \
             `[backends.bwrap] system_paths`",
            path.display()
        ),
        None => String::new(),
    }
}

fn pointers(strings: &[CString]) -> Vec<*const libc::c_char> {
    let mut out: Vec<*const libc::c_char> = strings.iter().map(|s| s.as_ptr()).collect();
    out.push(std::ptr::null());
    out
}

/// Reads the child's report: a listener (with the first message) and, if
/// it failed, `(stage, errno)`.
fn read_report(socket: BorrowedFd<'_>) -> (Option<OwnedFd>, Option<(u32, i32)>) {
    let (mut listener, mut failure) = (None, None);
    loop {
        let mut fds = Vec::new();
        let mut buf = [0u8; 8];
        match sandbox_init::proto::recvmsg(socket.as_raw_fd(), &mut buf, &mut fds) {
            Ok(0) | Err(_) => return (listener, failure),
            Ok(n) => {
                if let Some(fd) = fds.pop() {
                    listener = Some(fd);
                }
                if n == 8 {
                    let stage = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]);
                    let errno = i32::from_le_bytes([buf[4], buf[5], buf[6], buf[7]]);
                    failure = Some((stage, errno));
                }
            }
        }
    }
}

/// What the child needs, prepared before fork.
struct Prepared<'a> {
    argv: Vec<*const libc::c_char>,
    env: Vec<*const libc::c_char>,
    paths: Vec<CString>,
    cwd: CString,
    dev_null: CString,
    oom_score_adj: CString,
    stdin: Option<RawFd>,
    /// The exec's `cgroup.procs`, open for writing.
    cgroup: Option<RawFd>,
    stdout: RawFd,
    stderr: RawFd,
    hardening: &'a [seccomp::SockFilter],
    guard_filter: Option<&'a [seccomp::SockFilter]>,
    umask: libc::mode_t,
    inherit: &'a [RawFd],
}

/// The child between fork and exec.
///
/// # Safety
/// Call only in the child of `fork`; `p` was prepared before forking.
unsafe fn child(p: &Prepared<'_>, report: RawFd) -> ! {
    // SAFETY: async-signal-safe syscalls on descriptors and memory prepared before fork.
    unsafe {
        // First: everything this process does and starts is in the exec's
        // group. The kernel checks the rights of the descriptor's opener
        // (the server), not ours.
        if let Some(fd) = p.cgroup {
            if libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                fail(report, STAGE_CGROUP);
            }
            libc::close(fd);
        }
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
        libc::umask(p.umask);
        libc::setsid();
        // Before the filters: the guard would judge this open otherwise.
        // EACCES only where the sandbox's root is not mapped (an
        // unprivileged server): PID 1 is not dumpable, so its child's
        // /proc entry belongs to an unmapped root until exec. Then the
        // score stays 0 — a command that grows is still the likelier
        // victim; any other failure stops the command.
        let adj = libc::open(p.oom_score_adj.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        let len = COMMAND_OOM_SCORE_ADJ.len();
        if adj < 0 {
            if *libc::__errno_location() != libc::EACCES {
                fail(report, STAGE_OOM);
            }
        } else {
            if libc::write(adj, COMMAND_OOM_SCORE_ADJ.as_ptr().cast(), len) != len as isize {
                fail(report, STAGE_OOM);
            }
            libc::close(adj);
        }
        if seccomp::install(p.hardening).is_err() {
            fail(report, STAGE_GUARD);
        }
        if let Some(filter) = p.guard_filter {
            match seccomp::install_listener(filter) {
                Ok(listener) => {
                    sandbox_init::forker::send_fd(report, listener.as_raw_fd(), b'L');
                    // The command must never hold its own listener.
                    drop(listener);
                }
                Err(_) => fail(report, STAGE_GUARD),
            }
        }
        let input = match p.stdin {
            Some(fd) => fd,
            None => libc::open(p.dev_null.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC),
        };
        libc::dup2(input, 0);
        libc::dup2(p.stdout, 1);
        libc::dup2(p.stderr, 2);
        for &fd in p.inherit {
            libc::fcntl(fd, libc::F_SETFD, 0);
        }
        if libc::chdir(p.cwd.as_ptr()) != 0 {
            fail(report, STAGE_CHDIR);
        }
        let mut denied = false;
        let mut last = libc::ENOENT;
        for path in &p.paths {
            libc::execve(path.as_ptr(), p.argv.as_ptr(), p.env.as_ptr());
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
        fail(report, STAGE_EXEC)
    }
}

/// Sends `(stage, errno)` to the parent and exits.
///
/// # Safety
/// Call only in the forked child.
unsafe fn fail(report: RawFd, stage: u32) -> ! {
    // SAFETY: reads errno, sends a local buffer over our own socket, exits.
    unsafe {
        let errno = *libc::__errno_location();
        let mut answer = [0u8; 8];
        answer[..4].copy_from_slice(&stage.to_le_bytes());
        answer[4..].copy_from_slice(&errno.to_le_bytes());
        libc::send(
            report,
            answer.as_ptr().cast(),
            answer.len(),
            libc::MSG_NOSIGNAL,
        );
        libc::_exit(if stage == STAGE_CHDIR { 126 } else { 127 })
    }
}
