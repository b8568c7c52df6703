//! PID 1's control server: announces `ready`, then serves the backend's
//! requests — start a command, signal a command's process group, freeze or
//! thaw the sandbox — and reaps between them, until the backend goes away.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::Arc;

use crate::args::Forward;
use crate::forker::Forker;
use crate::forward;
use crate::guard::pending::PendingRules;
use crate::guard::{self, notify::Listener};
use crate::outbox::Outbox;
use crate::proto::{self, Reply, Request};
use crate::reap::{ChildSignals, Running, reap};
use crate::seccomp;
use crate::spawn::{Failure, Filters, Spawned, Streams, spawn};

/// The first argument of the forwarder process.
pub const FORWARDER: &str = "--forwarder";

/// Serves the control socket until the backend goes away (`Ok`) or PID 1
/// can no longer do its job (`Err`).
pub fn serve(
    control: BorrowedFd<'_>,
    rules: Option<Arc<PendingRules>>,
    forwards: &[Forward],
    channel: Option<OwnedFd>,
    forker: Arc<Forker>,
    open_files: Option<crate::open_files::Budget>,
) -> io::Result<()> {
    let children = ChildSignals::new()?;
    // Before `ready`: a command must find its proxies listening. The
    // forwarder itself starts at the first connection.
    let mut forwarder = Forwarder::prepare(forwards, channel)?;
    // Made on the fork thread while we got here (`Forker::start`).
    forker.wait_started().map_err(|e| {
        io::Error::new(e.kind(), format!("making the commands' pid namespace: {e}"))
    })?;
    let outbox = Outbox {
        fd: control.as_raw_fd(),
        lock: Arc::default(),
    };
    if let Some(budget) = open_files {
        watch_open_files(budget, outbox.clone())
            .map_err(|e| io::Error::new(e.kind(), format!("watching the open-file table: {e}")))?;
    }
    outbox.send(
        0,
        &Reply::Ready {
            version: proto::VERSION,
        },
    )?;
    // The fork thread carries the commands' hardening but for `clone3`
    // (`seccomp::fork_thread_filter`); the guard filter has that rule, and
    // without a guard a command attaches it alone.
    let filters = Filters {
        hardening: rules.is_none().then(seccomp::clone3_filter),
        guard: rules.as_ref().map(|_| seccomp::guard_filter()),
        umask: commands_umask(rules.is_some()),
    };
    let mut running = Running::default();
    let mut polled = Vec::new();
    loop {
        let watched = |fd: RawFd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        polled.clear();
        polled.push(watched(control.as_raw_fd()));
        polled.push(watched(children.fd.as_raw_fd()));
        polled.extend(forwarder.waiting_on().map(watched));
        // SAFETY: `polled` is a valid array of that many pollfd.
        let n = unsafe { libc::poll(polled.as_mut_ptr(), polled.len() as libc::nfds_t, -1) };
        if n < 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(err);
        }
        if polled[1].revents != 0 {
            children.drain();
            reap(&outbox, &mut running, forwarder.pid(), forker.reaper())?;
        }
        if polled[2..].iter().any(|p| p.revents != 0) {
            forwarder.start();
        }
        if polled[0].revents != 0 {
            match proto::recv::<Request>(control)? {
                Some((envelope, fds)) => {
                    let (reply, terminal) = handle(
                        envelope.body,
                        fds,
                        &mut running,
                        &filters,
                        &forker,
                        rules.as_ref(),
                        &outbox,
                    );
                    let attached: Vec<BorrowedFd<'_>> = terminal.iter().map(AsFd::as_fd).collect();
                    outbox.send_with(envelope.seq, &reply, &attached)?;
                    // Our copy of the master side closes here: the backend's
                    // is the only one.
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

/// The egress forwarder (hardening filter, no guard: it creates no files),
/// started at the first connection to one of its ports rather than at
/// every start: most commands never connect, and one
/// process fewer to exec is start-up time on a 2-core host.
enum Forwarder {
    /// No forwards asked for.
    Absent,
    /// Listening; the forwarder is started when a connection waits.
    Waiting(Prepared),
    /// Started (its pid), or could not be: then its listeners are closed
    /// and connections refused.
    Started(Option<i32>),
}

/// What the forwarder is started with: its arguments, the listeners and
/// the proxy's channel, which it alone holds from then on.
struct Prepared {
    argv: Vec<String>,
    listeners: Vec<std::net::TcpListener>,
    channel: Option<OwnedFd>,
}

impl Forwarder {
    /// Binds and listens on each forward's port. A port that cannot be
    /// bound fails the launch: a sandbox that asked for network gets it, or
    /// does not start.
    fn prepare(forwards: &[Forward], channel: Option<OwnedFd>) -> io::Result<Self> {
        if forwards.is_empty() {
            return Ok(Self::Absent);
        }
        let mut listeners = Vec::with_capacity(forwards.len());
        let mut argv = vec![own_path(), FORWARDER.to_owned()];
        for forward in forwards {
            let listener = forward::listen_loopback(forward.port).map_err(|e| {
                io::Error::new(e.kind(), format!("127.0.0.1:{}: {e}", forward.port))
            })?;
            argv.push(forward::route_arg(
                forward.port,
                listener.as_raw_fd(),
                &forward.socket,
            ));
            listeners.push(listener);
        }
        if let Some(channel) = &channel {
            argv.push(forward::channel_arg(channel.as_raw_fd()));
        }
        Ok(Self::Waiting(Prepared {
            argv,
            listeners,
            channel,
        }))
    }

    /// The listeners to watch until the forwarder starts.
    fn waiting_on(&self) -> impl Iterator<Item = RawFd> + '_ {
        let listeners = match self {
            Self::Waiting(prepared) => prepared.listeners.as_slice(),
            _ => &[],
        };
        listeners.iter().map(AsRawFd::as_raw_fd)
    }

    /// The forwarder's pid, once started.
    fn pid(&self) -> Option<i32> {
        match self {
            Self::Started(pid) => *pid,
            _ => None,
        }
    }

    /// Starts the forwarder with the listeners (the waiting connection is
    /// in their backlog) and closes our copies. If it cannot start, the
    /// listeners close with the error logged: connections are refused, as
    /// when a forwarder dies.
    fn start(&mut self) {
        let Self::Waiting(prepared) = std::mem::replace(self, Self::Started(None)) else {
            return;
        };
        match prepared.spawn() {
            Ok(pid) => *self = Self::Started(Some(pid)),
            Err(e) => eprintln!(
                "sandbox-init: the egress forwarder could not start ({e}); the sandbox has no network"
            ),
        }
    }
}

impl Prepared {
    fn spawn(self) -> io::Result<i32> {
        let filters = Filters {
            hardening: Some(seccomp::hardening_filter()),
            guard: None,
            umask: 0o077,
        };
        let dev_null: OwnedFd = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/null")?
            .into();
        let stderr = std::io::stderr().as_fd().try_clone_to_owned()?;
        let inherit: Vec<RawFd> = self
            .listeners
            .iter()
            .map(|l| l.as_raw_fd())
            .chain(self.channel.as_ref().map(|c| c.as_raw_fd()))
            .collect();
        // Forked here, not by the forker: outside the commands' namespace, no
        // command can name the forwarder either.
        let Spawned { pid, .. } = spawn(
            &self.argv,
            &[],
            "/",
            Streams::default(),
            vec![dev_null, stderr],
            &inherit,
            &filters,
            None,
        )
        .map_err(|f| io::Error::other(f.message))?;
        // `listeners` and `channel` close here: the forwarder's copies are the
        // only ones.
        Ok(pid)
    }
}

/// This binary's path inside the sandbox (`/.sandbox-init`, as bwrap ran
/// it), or the kernel's link to it.
fn own_path() -> String {
    std::env::args()
        .next()
        .filter(|a| a.starts_with('/'))
        .unwrap_or_else(|| "/proc/self/exe".to_owned())
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
    rules: Option<&Arc<PendingRules>>,
    outbox: &Outbox,
) -> (Reply, Option<OwnedFd>) {
    let reply = match request {
        Request::Exec {
            id,
            argv,
            env,
            cwd,
            stdin,
            cgroup,
            cgroup_dir,
            pty,
        } => match spawn(
            &argv,
            &env,
            &cwd,
            Streams {
                stdin,
                cgroup,
                cgroup_dir,
                terminal: pty.map(|size| (size.cols, size.rows)),
            },
            fds,
            &[],
            filters,
            Some(forker.as_ref()),
        ) {
            Ok(Spawned {
                pid,
                listener,
                terminal,
            }) => {
                running.by_pid.insert(pid, id);
                running.by_id.insert(id, pid);
                if let (Some(rules), Some(listener)) = (rules, listener) {
                    supervise(
                        id,
                        listener,
                        filters.umask,
                        Arc::clone(rules),
                        Arc::clone(forker),
                        outbox.clone(),
                    );
                }
                return (Reply::Started { pid }, terminal);
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
    };
    (reply, None)
}

/// Serves an exec's listener on a thread until its last process is gone.
fn supervise(
    exec_id: u64,
    listener: OwnedFd,
    umask: libc::mode_t,
    rules: Arc<PendingRules>,
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
            // Nothing is answered before the rules are whole.
            let rules = rules.wait();
            guard::serve(&listener, &rules, umask, forker.as_ref(), &report);
        });
    if let Err(e) = spawned {
        // Without a supervisor every guarded call of this exec fails: closed.
        eprintln!("sandbox-init: cannot start the guard of exec {exec_id}: {e}");
    }
}

/// Kills every command while the sandbox holds more than its share of a
/// filling open-file table (`crate::open_files`), saying so to every exec
/// (exec id 0: the whole sandbox).
fn watch_open_files(budget: crate::open_files::Budget, outbox: Outbox) -> io::Result<()> {
    crate::open_files::watch(budget, move |over| {
        // Told first: an exec's `exited` ends what it reports.
        let violation = Reply::Violation {
            id: 0,
            action: sandbox_plugin_api::violation::RESOURCE_OPEN_FILES.to_owned(),
            target: "fs.file-max".to_owned(),
            raw: format!(
                "open-file table rule=the sandbox held {} open files, over its share of {}, while \
                 the host's table had {} entries, past the watermark of {} -> SIGKILL",
                over.held, budget.share, over.table, budget.watermark
            ),
        };
        let _ = outbox.send(0, &violation);
        let _ = signal_everything(libc::SIGKILL);
    })
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
