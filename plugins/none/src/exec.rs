//! One command on the host: a process group (and, where there is one, a
//! cgroup: `crate::lifetime`), its output relay and a waiter.
//!
//! PID reuse: the waiter reads the leader's status with `WNOWAIT` and leaves
//! it a zombie. While the zombie exists its pid — and so the group id — cannot
//! be handed to another process, so a later `killpg` can only reach processes
//! this exec started. The zombie is reaped at destroy, or earlier once its
//! group is empty.

use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sandbox_exec_group::Group;
use sandbox_exec_relay::{Relay, pipe};
use sandbox_plugin_api::sdk::EventSender;
use sandbox_plugin_api::{ErrorCode, EventBody, ExecRequest, KillReason, PluginError};

pub(crate) struct Exec {
    id: u64,
    pid: i32,
    stdin: Mutex<Option<std::fs::File>>,
    /// The master side of its terminal, when it runs on one (SPEC B8).
    terminal: Option<std::fs::File>,
    /// Why we signalled it, if we did; decides `killed` over `exit`.
    kill_reason: Mutex<Option<KillReason>>,
    relay: Arc<Relay>,
    reaped: Mutex<bool>,
    /// The exec's own cgroup, until it is removed (at reap, if empty).
    group: Mutex<Option<Group>>,
}

impl Exec {
    /// Starts the command; with `sandbox_group`, in a group of its own
    /// below it (or not at all: an exec that cannot be tracked is refused).
    pub(crate) fn spawn(
        id: u64,
        request: &ExecRequest,
        cwd: &Path,
        events: EventSender,
        sandbox_group: Option<&Group>,
    ) -> Result<Arc<Self>, PluginError> {
        if !cwd.is_dir() {
            return Err(PluginError::invalid(format!(
                "working directory {} does not exist on this host",
                cwd.display()
            )));
        }
        if request.pty.is_some() && request.host_fds.is_some() {
            return Err(PluginError::invalid(
                "an exec on a terminal takes its input and gives its output through the terminal, not the host's descriptors (`hostFds`)",
            ));
        }
        let terminal = match request.pty {
            Some(size) => {
                sandbox_spawn::pty::check_size(size.cols, size.rows)
                    .map_err(PluginError::invalid)?;
                Some(
                    sandbox_spawn::pty::open(size.cols, size.rows)
                        .map_err(|e| PluginError::other(format!("opening a terminal: {e}")))?,
                )
            }
            None => None,
        };
        // The host's own descriptors, duplicated before anything starts;
        // the command gets pipes, never these.
        let (host_stdin, host_stdout) = pipe::duplicate_host_fds(request.host_fds)?;
        let (group, join) = match sandbox_group {
            Some(parent) => {
                let (group, join) = parent
                    .exec_child(&format!("e{id}"))
                    .map_err(PluginError::other)?;
                (Some(group), Some(join))
            }
            None => (None, None),
        };
        let spawn_request = crate::spawn::Request {
            argv: request.argv.clone(),
            env: request
                .env
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            cwd: cwd.to_path_buf(),
            stdin: request.stdin || host_stdin.is_some(),
            terminal: terminal.as_ref().map(|(_, slave)| slave.as_raw_fd()),
            join: join
                .as_ref()
                .map(|j| (j.procs.as_raw_fd(), j.dir.as_raw_fd())),
        };
        // The descriptors stay open until the command has exec'd
        // (close-on-exec: it does not keep them).
        let spawned = crate::lifetime::on_spawner(move || crate::spawn::spawn(&spawn_request));
        drop(join);
        // The command holds the slave side now; ours would keep the
        // terminal from hanging up when the command and its children exit.
        let master = terminal.map(|(master, _slave)| std::fs::File::from(master));
        let child = match spawned {
            Ok(child) => child,
            Err(e) => {
                if let Some(g) = &group {
                    let _ = g.remove();
                }
                return Err(spawn_error(&request.argv[0], &e));
            }
        };
        let pid = child.pid;
        let (stdout, stderr) = match (child.output, &master) {
            (Some(pipes), _) => pipes,
            (None, Some(master)) => terminal_output(master)?,
            (None, None) => return Err(PluginError::other("the command has no output")),
        };
        pipe::grow(stdout.as_fd());
        pipe::grow(stderr.as_fd());
        let mut stdin = child.stdin;
        if request.stdin
            && let Some(master) = &master
        {
            stdin = Some(master.try_clone().map_err(|e| {
                PluginError::other(format!("duplicating the terminal's master side: {e}"))
            })?);
        }
        if let Some(pipe) = &stdin {
            pipe::grow(pipe.as_fd());
        }
        if let Some(source) = host_stdin
            && let Some(pipe) = stdin.take()
        {
            // Fed from the host: `write_stdin` finds no stdin to write to.
            // The command runs already: a feed that cannot start leaves
            // its stdin empty, with a log line.
            if let Err(e) = sandbox_exec_relay::feed_stdin(id, source, OwnedFd::from(pipe)) {
                tracing::error!(exec = id, "could not start the stdin feed: {e}");
            }
        }
        let (relay, readers) = match host_stdout {
            Some(sink) => {
                Relay::prepare_with_sink(id, OwnedFd::from(stdout), stderr, events, None, sink)
            }
            None => Relay::prepare(id, stdout, stderr, events, None),
        };
        readers.start();
        let exec = Arc::new(Self {
            id,
            pid,
            stdin: Mutex::new(stdin),
            terminal: master,
            kill_reason: Mutex::new(None),
            relay,
            reaped: Mutex::new(false),
            group: Mutex::new(group),
        });
        let waiter = Arc::clone(&exec);
        std::thread::Builder::new()
            .name(format!("none-wait-{id}"))
            .spawn(move || waiter.wait_and_report())
            .map_err(|e| PluginError::other(format!("starting a waiter thread: {e}")))?;
        if let Some(ms) = request.timeout_ms {
            let timer = Arc::clone(&exec);
            std::thread::Builder::new()
                .name(format!("none-timeout-{id}"))
                .spawn(move || {
                    if !timer.wait_ended(Duration::from_millis(ms)) {
                        timer.signal(libc::SIGKILL, KillReason::Timeout);
                    }
                })
                .map_err(|e| PluginError::other(format!("starting a timer thread: {e}")))?;
        }
        Ok(exec)
    }

    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    pub(crate) fn pgid(&self) -> i32 {
        self.pid
    }

    pub(crate) fn has_ended(&self) -> bool {
        self.relay.has_ended()
    }

    /// Waits until the terminal event is out; `false` on timeout.
    pub(crate) fn wait_ended(&self, patience: Duration) -> bool {
        self.relay.wait_ended(patience)
    }

    /// Whether a process of the exec's cgroup is alive.
    pub(crate) fn group_populated(&self) -> bool {
        self.group
            .lock()
            .map(|g| g.as_ref().is_some_and(Group::populated))
            .unwrap_or(false)
    }

    /// Signals every process of the exec, remembering why: through its
    /// cgroup where it has one (SIGKILL by `cgroup.kill`, which nothing
    /// forks its way out of; another signal once to each member), else
    /// its process group. SIGKILL goes to the process group as well.
    pub(crate) fn signal(&self, signal: i32, reason: KillReason) {
        if let Ok(mut r) = self.kill_reason.lock() {
            r.get_or_insert(reason);
        }
        let mut reached = false;
        if let Ok(group) = self.group.lock()
            && let Some(group) = group.as_ref()
        {
            let sent = if signal == libc::SIGKILL {
                group.kill()
            } else {
                group.signal(signal)
            };
            match sent {
                Ok(()) => reached = signal != libc::SIGKILL,
                Err(e) => {
                    tracing::warn!(exec = self.id, group = %group.path().display(), "signalling the exec's cgroup: {e}")
                }
            }
        }
        if reached || self.reaped.lock().map(|r| *r).unwrap_or(true) {
            return; // the group id may belong to someone else by now
        }
        // SAFETY: plain syscall; the group id is held by our unreaped leader.
        unsafe {
            libc::killpg(self.pid, signal);
        }
    }

    pub(crate) fn write_stdin(&self, data: &[u8]) -> Result<(), PluginError> {
        let mut stdin = self
            .stdin
            .lock()
            .map_err(|_| PluginError::other("stdin lock poisoned"))?;
        let pipe = stdin
            .as_mut()
            .ok_or_else(|| PluginError::invalid(format!("exec {} has no open stdin", self.id)))?;
        pipe.write_all(data).map_err(|e| {
            PluginError::other(format!("writing to the stdin of exec {}: {e}", self.id))
        })
    }

    /// Closes the command's stdin. A terminal has no end of file to give:
    /// closing types `^D` instead (end of file for a reader in canonical
    /// mode at the start of a line, as at a keyboard).
    pub(crate) fn close_stdin(&self) {
        if let Ok(mut stdin) = self.stdin.lock()
            && let Some(mut input) = stdin.take()
            && self.terminal.is_some()
        {
            let _ = input.write_all(&[0x04]);
        }
    }

    /// Gives the command's terminal a new size.
    pub(crate) fn resize(&self, cols: u16, rows: u16) -> Result<(), PluginError> {
        let terminal = self.terminal.as_ref().ok_or_else(|| {
            PluginError::invalid(format!("exec {} does not run on a terminal", self.id))
        })?;
        sandbox_spawn::pty::check_size(cols, rows).map_err(PluginError::invalid)?;
        sandbox_spawn::pty::resize(terminal.as_fd(), cols, rows).map_err(|e| {
            PluginError::other(format!("resizing the terminal of exec {}: {e}", self.id))
        })
    }

    /// Reaps the zombie leader once the exec has ended; after this the group
    /// id is never signalled again.
    pub(crate) fn reap(&self) {
        if !self.has_ended() {
            return;
        }
        let Ok(mut reaped) = self.reaped.lock() else {
            return;
        };
        if !*reaped {
            let mut status = 0;
            // SAFETY: plain syscall on our own child.
            unsafe {
                libc::waitpid(self.pid, &mut status, 0);
            }
            *reaped = true;
        }
        drop(reaped);
        if let Ok(mut group) = self.group.lock()
            && group.as_ref().is_some_and(Group::remove_if_empty)
        {
            group.take();
        }
    }

    fn wait_and_report(&self) {
        let status = wait_no_reap(self.pid);
        if let Ok(mut stdin) = self.stdin.lock() {
            stdin.take();
        }
        let reason = self.kill_reason.lock().ok().and_then(|r| *r);
        self.relay.finish(match (status, reason) {
            (Status::Signaled(sig), Some(reason)) => EventBody::Killed {
                reason,
                signal: Some(sig),
            },
            (Status::Signaled(sig), None) => EventBody::Exit {
                code: 128 + sig,
                signal: Some(sig),
            },
            (Status::Exited(code), _) => EventBody::Exit { code, signal: None },
        });
    }
}

/// The reads of a command on a terminal: its master side as stdout, and an
/// empty pipe as stderr (the terminal carries both).
fn terminal_output(master: &std::fs::File) -> Result<(std::fs::File, std::fs::File), PluginError> {
    let out = master
        .try_clone()
        .map_err(|e| PluginError::other(format!("duplicating the terminal's master side: {e}")))?;
    let (err, _closed) =
        std::io::pipe().map_err(|e| PluginError::other(format!("creating a pipe: {e}")))?;
    Ok((out, std::fs::File::from(OwnedFd::from(err))))
}

enum Status {
    Exited(i32),
    Signaled(i32),
}

/// Waits for the child to end without reaping it (see the module doc).
fn wait_no_reap(pid: i32) -> Status {
    loop {
        // SAFETY: zeroed siginfo_t is a valid out-parameter for waitid.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: plain syscall on our own child, writing into `info`.
        let rc = unsafe {
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOWAIT,
            )
        };
        if rc == 0 {
            // SAFETY: waitid filled a SIGCHLD siginfo, whose status field is valid.
            let status = unsafe { info.si_status() };
            return match info.si_code {
                libc::CLD_EXITED => Status::Exited(status),
                _ => Status::Signaled(status),
            };
        }
        if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            // ECHILD cannot happen for our own unreaped child; report a failure.
            return Status::Exited(255);
        }
    }
}

fn spawn_error(program: &str, e: &std::io::Error) -> PluginError {
    match e.kind() {
        std::io::ErrorKind::NotFound => PluginError::new(
            ErrorCode::COMMAND_NOT_FOUND,
            format!("command not found: {program}"),
        ),
        std::io::ErrorKind::PermissionDenied => PluginError::new(
            ErrorCode::PERMISSION_DENIED,
            format!("permission denied: {program}"),
        ),
        _ => PluginError::other(format!("starting {program}: {e}")),
    }
}
