//! One warm sandbox: a long-lived bwrap whose PID 1 is `sandbox-init`, and
//! the execs it runs (SPEC G2).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sandbox_exec_group::Group;
use sandbox_exec_relay::{Relay, StderrWatcher, pipe};
use sandbox_init::proto::{Reply, Request};
use sandbox_plugin_api::sdk::{EventSender, SandboxImpl};
use sandbox_plugin_api::{
    ErrorCode, EventBody, ExecRequest, KillReason, PluginError, SandboxInfo, SandboxState,
};

use crate::cgroup::{CgroupPlan, Groups, OomCounter};
use crate::control::{Control, ControlEvents, Exit};
use crate::exec_groups::ExecGroups;
use crate::plan::{CHANNEL_FD, GITCONFIG_FD, Plan};
use crate::probe::Tools;
use crate::spawner;
use crate::spawner::Child;
use crate::violations::StderrWatch;

/// The descriptor number of the control socket inside bwrap.
pub const CONTROL_FD: i32 = 3;

/// How long a sandbox may take to say it is ready.
const START_PATIENCE: Duration = Duration::from_secs(20);

/// How long destroy waits for bwrap to exit before killing it.
const EXIT_PATIENCE: Duration = Duration::from_secs(5);

pub(crate) struct ExecState {
    pub(crate) relay: Arc<Relay>,
    pub(crate) stdin: Mutex<Option<std::fs::File>>,
    /// The master side of its terminal, when it runs on one (SPEC B8).
    pub(crate) terminal: Option<std::fs::File>,
    /// Why we signalled it, if we did; decides `killed` over `exit`.
    pub(crate) kill_reason: Mutex<Option<KillReason>>,
    /// The exec's own cgroup (see [`ExecGroups`]), until it is removed.
    pub(crate) group: Mutex<Option<Group>>,
}

impl ExecState {
    /// Signals every process of the exec's cgroup: SIGKILL through
    /// `cgroup.kill`, which no process forks its way out of, another
    /// signal once to each member. `false` when it has no group, or it
    /// could not be signalled (then PID 1 signals the process group).
    fn signal_group(&self, exec_id: u64, signal: i32) -> bool {
        let Ok(group) = self.group.lock() else {
            return false;
        };
        let Some(group) = group.as_ref() else {
            return false;
        };
        let sent = if signal == libc::SIGKILL {
            group.kill()
        } else {
            group.signal(signal)
        };
        match sent {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(exec = exec_id, group = %group.path().display(), "signalling the exec's cgroup: {e}");
                false
            }
        }
    }

    /// Removes the exec's cgroup if nothing of it lives on.
    fn remove_group_if_empty(&self) {
        if let Ok(mut group) = self.group.lock()
            && group.as_ref().is_some_and(Group::remove_if_empty)
        {
            group.take();
        }
    }
}

type Execs = Arc<Mutex<HashMap<u64, Arc<ExecState>>>>;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Life {
    Live,
    Suspended,
    Destroyed,
    /// PID 1 went away on its own.
    Lost,
}

/// Tells an OOM kill from another SIGKILL: the memory group's `oom_kill`
/// count (SPEC F10). The kernel counts before it sends the signal.
struct OomWatch {
    counter: OomCounter,
    seen: Mutex<u64>,
}

impl OomWatch {
    fn new(counter: OomCounter) -> Self {
        let seen = Self::read(&counter).unwrap_or(0);
        Self {
            counter,
            seen: Mutex::new(seen),
        }
    }

    fn read(counter: &OomCounter) -> Option<u64> {
        std::fs::read_to_string(&counter.file)
            .ok()
            .as_deref()
            .and_then(OomCounter::parse)
    }

    /// Whether the count rose since the last look.
    fn killed_since(&self) -> bool {
        let Some(now) = Self::read(&self.counter) else {
            return false;
        };
        let Ok(mut seen) = self.seen.lock() else {
            return false;
        };
        let rose = now > *seen;
        *seen = now;
        rose
    }
}

/// Hears from PID 1.
struct Handler {
    exec_groups: Arc<ExecGroups>,
    execs: Execs,
    life: Arc<Mutex<Life>>,
    oom: Option<OomWatch>,
}

impl ControlEvents for Handler {
    fn exited(&self, exec_id: u64, exit: Exit) {
        let exec = self.execs.lock().ok().and_then(|mut m| m.remove(&exec_id));
        let Some(exec) = exec else { return };
        let mut reason = exec.kill_reason.lock().ok().and_then(|r| *r);
        let sigkill = exit.signal == Some(libc::SIGKILL);
        if reason.is_none() && sigkill && self.oom.as_ref().is_some_and(OomWatch::killed_since) {
            reason = Some(KillReason::Oom);
        }
        let terminal = match (exit.signal, reason) {
            (Some(sig), Some(reason)) => EventBody::Killed {
                reason,
                signal: Some(sig),
            },
            (Some(sig), None) => EventBody::Exit {
                code: 128 + sig,
                signal: Some(sig),
            },
            (None, _) => EventBody::Exit {
                code: exit.code.unwrap_or(0),
                signal: None,
            },
        };
        if let Ok(mut stdin) = exec.stdin.lock() {
            stdin.take();
        }
        // Emitted here when both pipes have ended already; draining may
        // wait on a background writer: then not on the control thread.
        if let Err(terminal) = exec.relay.finish_if_drained(terminal) {
            let finishing = Arc::clone(&exec);
            let _ = std::thread::Builder::new()
                .name(format!("bwrap-finish-{exec_id}"))
                .spawn(move || finishing.relay.finish(terminal));
        }
        // The clean-up after the terminal event is on its way, not before it,
        // so it adds nothing to the exec's round trip (SPEC G2): one with
        // processes left stays until destroy removes the tree; the OOM count
        // is read on every exit, so an earlier OOM kill is never counted for
        // a later SIGKILL.
        exec.remove_group_if_empty();
        if !sigkill && let Some(oom) = &self.oom {
            oom.killed_since();
        }
        self.exec_groups.make_spare();
    }

    fn violation(&self, exec_id: u64, violation: sandbox_plugin_api::SandboxViolation) {
        // Exec id 0: the whole sandbox's (PID 1's own), told to every exec.
        if exec_id == 0 {
            let execs: Vec<Arc<ExecState>> = self
                .execs
                .lock()
                .map(|m| m.values().cloned().collect())
                .unwrap_or_default();
            if execs.is_empty() {
                tracing::warn!(target = %violation.target, raw = ?violation.raw, "violation of the sandbox with no exec running");
            }
            for exec in execs {
                exec.relay.violation(violation.clone());
            }
            return;
        }
        let exec = self
            .execs
            .lock()
            .ok()
            .and_then(|m| m.get(&exec_id).cloned());
        match exec {
            Some(exec) => exec.relay.violation(violation),
            None => {
                tracing::warn!(exec = exec_id, target = %violation.target, "violation of an exec that has ended")
            }
        }
    }

    /// PID 1 is gone, and every process with it: the execs still listed
    /// were killed (by destroy, or by whatever ended the sandbox).
    fn lost(&self) {
        if let Ok(mut life) = self.life.lock()
            && *life != Life::Destroyed
        {
            tracing::error!("sandbox-init exited on its own; the sandbox is gone");
            *life = Life::Lost;
        }
        let execs: Vec<Arc<ExecState>> = self
            .execs
            .lock()
            .map(|mut m| m.drain().map(|(_, e)| e).collect())
            .unwrap_or_default();
        for exec in execs {
            let reason = exec
                .kill_reason
                .lock()
                .ok()
                .and_then(|r| *r)
                .unwrap_or(KillReason::Other);
            exec.relay.finish(EventBody::Killed {
                reason,
                signal: Some(libc::SIGKILL),
            });
        }
    }
}

/// A running sandbox.
pub struct BwrapSandbox {
    pub(crate) events: EventSender,
    pub(crate) control: Arc<Control>,
    bwrap: Mutex<Option<Child>>,
    bwrap_pid: u32,
    pub(crate) plan: Plan,
    pub(crate) execs: Execs,
    life: Arc<Mutex<Life>>,
    next_id: AtomicU64,
    /// The handle's `limits` detail.
    limits: serde_json::Value,
    /// The sandbox's cgroups, removed once bwrap is gone.
    groups: Mutex<Groups>,
    /// The same groups' directories, where the handle reads its `usage`.
    usage_groups: Vec<PathBuf>,
    pub(crate) exec_groups: Arc<ExecGroups>,
    /// Its share of the per-uid counters' budget, given back with it.
    _counters: crate::counters::Share,
    /// The handle's `unixDatagrams`.
    datagrams: String,
}

/// A sandbox's limits: its groups (created, empty) and how each is held.
pub struct Limits {
    pub plan: CgroupPlan,
    pub groups: Groups,
    pub details: serde_json::Value,
    /// The name of the sandbox's groups (`cc_server-<pid>-<n>`); its execs'
    /// groups are made below the v2 one.
    pub name: String,
    /// The handle's `unixDatagrams` (`crate::datagrams`).
    pub datagrams: String,
}

impl BwrapSandbox {
    /// The command's environment: the host's, and what this sandbox adds.
    pub(crate) fn command_env(
        &self,
        mut env: std::collections::BTreeMap<String, String>,
    ) -> Vec<(String, String)> {
        if self.plan.guard.is_some() {
            env.insert(
                "GIT_TEMPLATE_DIR".into(),
                crate::plan::GIT_TEMPLATE_IN_SANDBOX.into(),
            );
        }
        if self.plan.egress {
            env.extend(crate::plan::egress_env(self.plan.ssh_known_hosts));
        }
        env.into_iter().collect()
    }

    /// Kills the exec after `ms` unless it has ended (reason `timeout`).
    pub(crate) fn arm_timeout(
        &self,
        id: u64,
        exec: Arc<ExecState>,
        ms: u64,
    ) -> Result<(), PluginError> {
        let control = Arc::clone(&self.control);
        let timer = std::thread::Builder::new()
            .name(format!("bwrap-timeout-{id}"))
            .spawn(move || {
                if !exec.relay.wait_ended(Duration::from_millis(ms)) {
                    if let Ok(mut r) = exec.kill_reason.lock() {
                        r.get_or_insert(KillReason::Timeout);
                    }
                    let _ = control.call(
                        &Request::Signal {
                            id,
                            signal: libc::SIGKILL,
                        },
                        &[],
                    );
                    let _ = exec.signal_group(id, libc::SIGKILL);
                }
            });
        if let Err(e) = timer {
            return Err(PluginError::other(format!(
                "starting the timeout of exec {id}: {e}"
            )));
        }
        Ok(())
    }
}

impl BwrapSandbox {
    /// Starts bwrap with the plan in the limits' groups and waits for PID
    /// 1's `ready`. On failure the groups are removed again.
    pub fn launch(
        tools: &Tools,
        plan: Plan,
        limits: Limits,
        counters: crate::counters::Share,
        events: EventSender,
    ) -> Result<Self, PluginError> {
        let execs: Execs = Arc::default();
        let life = Arc::new(Mutex::new(Life::Live));
        let exec_groups = Arc::new(ExecGroups::new(&limits.name));
        let handler = Arc::new(Handler {
            exec_groups: Arc::clone(&exec_groups),
            execs: Arc::clone(&execs),
            life: Arc::clone(&life),
            oom: limits.plan.oom.clone().map(OomWatch::new),
        });
        let joins = crate::cgroup::open_joins(&limits.plan)
            .map_err(|e| PluginError::other(sandbox_plugin_api::error_chain(&e)))?;
        // The first exec's group, made while bwrap starts, not on that exec's
        // way in, so a start does not wait for it: the lock orders it with
        // the first exec and with a failed start's removal.
        let ahead = Arc::clone(&exec_groups);
        let _ = std::thread::Builder::new()
            .name("bwrap-groups".into())
            .spawn(move || ahead.make_spare());
        let (child, control) = match start(tools, &plan, &joins, handler) {
            Ok(started) => started,
            Err(e) => {
                exec_groups.remove();
                return Err(e);
            }
        };
        drop(joins);
        Ok(Self {
            exec_groups,
            datagrams: limits.datagrams,
            limits: limits.details,
            usage_groups: limits.plan.remove.clone(),
            groups: Mutex::new(limits.groups),
            events,
            control: Arc::new(control),
            bwrap_pid: child.id(),
            bwrap: Mutex::new(Some(child)),
            plan,
            execs,
            life,
            next_id: AtomicU64::new(1),
            _counters: counters,
        })
    }

    fn life(&self) -> Life {
        self.life.lock().map(|l| l.clone()).unwrap_or(Life::Lost)
    }

    pub(crate) fn find(&self, exec_id: u64) -> Result<Arc<ExecState>, PluginError> {
        self.execs
            .lock()
            .map_err(|_| PluginError::other("exec table poisoned"))?
            .get(&exec_id)
            .cloned()
            .ok_or_else(|| {
                PluginError::new(
                    ErrorCode::NOT_FOUND,
                    format!("no running exec {exec_id} in this sandbox"),
                )
            })
    }

    fn signal(
        &self,
        exec_id: u64,
        exec: &ExecState,
        signal: i32,
        reason: KillReason,
    ) -> Result<(), PluginError> {
        if let Ok(mut r) = exec.kill_reason.lock() {
            r.get_or_insert(reason);
        }
        // Once to each process: a member of the group is not signalled
        // again through its process group.
        if signal != libc::SIGKILL && exec.signal_group(exec_id, signal) {
            return Ok(());
        }
        // SIGKILL: the process group through PID 1 first (while PID 1
        // still knows the exec), then the whole cgroup.
        let answer = self.control.call(
            &Request::Signal {
                id: exec_id,
                signal,
            },
            &[],
        );
        let grouped = signal == libc::SIGKILL && exec.signal_group(exec_id, signal);
        match answer {
            Ok(Reply::Done) => Ok(()),
            // The leader had just ended; the group kill reached the rest.
            Ok(Reply::Refused { .. }) if grouped => Ok(()),
            Ok(Reply::Refused { message }) => Err(PluginError::new(ErrorCode::NOT_FOUND, message)),
            Ok(other) => Err(PluginError::other(format!("unexpected answer {other:?}"))),
            Err(e) => Err(PluginError::other(format!(
                "signalling exec {exec_id}: {e}"
            ))),
        }
    }

    fn freeze(
        &self,
        request: Request,
        from: Life,
        to: Life,
        state: SandboxState,
    ) -> Result<(), PluginError> {
        let mut life = self
            .life
            .lock()
            .map_err(|_| PluginError::other("state lock poisoned"))?;
        if *life == to {
            return Ok(());
        }
        if *life != from {
            return Err(PluginError::invalid(
                format!("the sandbox is {:?}", *life).to_lowercase(),
            ));
        }
        match self.control.call(&request, &[]) {
            Ok(Reply::Done) => {
                *life = to;
                drop(life);
                self.events.state(state);
                Ok(())
            }
            Ok(other) => Err(PluginError::other(format!(
                "sandbox-init refused: {other:?}"
            ))),
            Err(e) => Err(PluginError::other(e.to_string())),
        }
    }
}

/// Starts bwrap on a plan, with the control socket as descriptor
/// [`CONTROL_FD`], and waits for PID 1's `ready`. On failure bwrap is gone
/// and the error quotes what it said.
///
/// bwrap writes itself into each of `joins` (open `tasks` or `cgroup.procs`)
/// before it execs, so everything in the sandbox is in its groups from the
/// start: no command runs before the limits hold (SPEC G6).
pub(crate) fn start(
    tools: &Tools,
    plan: &Plan,
    joins: &[std::fs::File],
    events: Arc<dyn ControlEvents>,
) -> Result<(Child, Control), PluginError> {
    let (ours, theirs) = UnixStream::pair()
        .map_err(|e| PluginError::other(format!("creating the control socket: {e}")))?;
    // Every bind from the object checked, never a path looked up again
    // (threat model T40): the sources pinned now, given as descriptors.
    let (args, sources) = crate::pinned::by_descriptor(&plan.args)
        .map_err(|e| PluginError::other(format!("bwrap's arguments: {e}")))?;
    let pinned = crate::pinned::open(&sources).map_err(|e| PluginError::invalid(e.to_string()))?;
    let mut launch = spawner::Launch::new(&tools.bwrap, &args)
        .map_err(|e| PluginError::other(format!("bwrap's arguments: {e}")))?;
    for (number, fd) in (crate::pinned::FIRST_SOURCE_FD..).zip(&pinned) {
        launch.give(fd.as_raw_fd(), number);
    }
    // bwrap gets stdin, stdout, stderr, the control socket, the .gitconfig
    // data and the egress channel, and nothing else the host process had
    // open (threat model T3).
    launch.give(theirs.as_raw_fd(), CONTROL_FD);
    // The private home's .gitconfig, read by bwrap from GITCONFIG_FD.
    let gitconfig = match &plan.gitconfig {
        Some(text) => Some(data_file(text.as_bytes())?),
        None => None,
    };
    if let Some(file) = &gitconfig {
        launch.give(file.as_raw_fd(), GITCONFIG_FD);
    }
    let channel = plan
        .egress_channel
        .as_deref()
        .map(egress_channel)
        .transpose()?;
    if let Some(channel) = &channel {
        launch.give(channel.as_raw_fd(), CHANNEL_FD);
    }
    // bwrap writes itself into each join before it execs (SPEC G6).
    for join in joins {
        launch.join(join.as_raw_fd());
    }
    let mut child = spawner::spawn(launch)
        .map_err(|e| PluginError::other(format!("starting {}: {e}", tools.bwrap.display())))?;
    drop(gitconfig);
    drop(channel);
    drop(pinned);
    drop(theirs);
    let stderr_tail = Arc::new(Mutex::new(Vec::new()));
    if let Some(stderr) = child.stderr.take() {
        let tail = Arc::clone(&stderr_tail);
        let _ = std::thread::Builder::new()
            .name("bwrap-stderr".into())
            .spawn(move || log_stderr(stderr, &tail));
    }
    match Control::start(ours, START_PATIENCE, events) {
        Ok(control) => Ok((child, control)),
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            // Let the stderr reader collect what bwrap said.
            std::thread::sleep(Duration::from_millis(50));
            let said = stderr_tail.lock().map(|t| t.join("; ")).unwrap_or_default();
            let said = if said.is_empty() {
                String::new()
            } else {
                format!(" — bwrap said: {said}")
            };
            Err(PluginError::other(format!(
                "the sandbox did not start: {e}{said}"
            )))
        }
    }
}

/// A connection to the session's forwarder socket, for PID 1 to pass to
/// the forwarder as its channel (the spawner gives it to bwrap as
/// [`CHANNEL_FD`]).
fn egress_channel(path: &std::path::Path) -> Result<std::os::fd::OwnedFd, PluginError> {
    UnixStream::connect(path).map(Into::into).map_err(|e| {
        PluginError::other(format!(
            "connecting to the session's egress forwarder socket {}: {e}; the session's \
             proxies must be running while the sandbox starts",
            path.display()
        ))
    })
}

/// An unnamed file holding `data`, positioned at its start (bwrap's
/// `--file` reads it to the end).
fn data_file(data: &[u8]) -> Result<std::fs::File, PluginError> {
    use std::io::Seek;
    use std::os::fd::FromRawFd;
    let write = || -> std::io::Result<std::fs::File> {
        // SAFETY: memfd_create takes a valid C string and returns a new
        // descriptor (or -1), which the File then owns.
        let fd = unsafe { libc::memfd_create(c"cc-gitconfig".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor nothing else owns.
        let mut file = unsafe { std::fs::File::from_raw_fd(fd) };
        file.write_all(data)?;
        file.rewind()?;
        Ok(file)
    };
    write().map_err(|e| PluginError::other(format!("the private home's .gitconfig: {e}")))
}

fn log_stderr(stderr: std::fs::File, tail: &Mutex<Vec<String>>) {
    for line in BufReader::new(stderr).lines() {
        let Ok(line) = line else { break };
        tracing::warn!("bwrap: {line}");
        if let Ok(mut tail) = tail.lock() {
            if tail.len() >= 5 {
                tail.remove(0);
            }
            tail.push(line);
        }
    }
}

pub(crate) fn exec_error(errno: i32, message: String) -> PluginError {
    let code = match errno {
        libc::ENOENT | libc::ENOTDIR => ErrorCode::COMMAND_NOT_FOUND,
        libc::EACCES | libc::EPERM => ErrorCode::PERMISSION_DENIED,
        _ => ErrorCode::OTHER,
    };
    let message =
        if code == ErrorCode::COMMAND_NOT_FOUND && !message.starts_with("working directory") {
            format!("command not found: {message}")
        } else {
            message
        };
    PluginError::new(code, message)
}

impl SandboxImpl for BwrapSandbox {
    fn info(&self) -> SandboxInfo {
        let running = self.execs.lock().map(|m| !m.is_empty()).unwrap_or(false);
        let (state, error) = match self.life() {
            Life::Destroyed => (SandboxState::Destroyed, None),
            Life::Lost => (
                SandboxState::Error,
                Some("sandbox-init exited; the sandbox is gone".to_owned()),
            ),
            Life::Suspended => (SandboxState::Suspended, None),
            Life::Live if running => (SandboxState::Active, None),
            Life::Live => (SandboxState::Warm, None),
        };
        let mut details = serde_json::Map::new();
        details.insert("isolation".into(), "bubblewrap".into());
        details.insert("bwrapPid".into(), self.bwrap_pid.into());
        details.insert("createGuard".into(), self.plan.guard.is_some().into());
        details.insert(
            "workdir".into(),
            self.plan.workdir.display().to_string().into(),
        );
        let list = |paths: &[PathBuf]| -> serde_json::Value {
            paths
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .into()
        };
        details.insert("protected".into(), list(&self.plan.protected));
        details.insert("masked".into(), list(&self.plan.masked));
        details.insert("execGrants".into(), list(&self.plan.exec_grants));
        details.insert("toolchains".into(), list(&self.plan.toolchains));
        details.insert("caches".into(), list(&self.plan.caches));
        details.insert(
            "toolchainsSkipped".into(),
            self.plan
                .skipped
                .iter()
                .map(|(path, why)| serde_json::json!({"path": path.display().to_string(), "why": why}))
                .collect::<Vec<_>>()
                .into(),
        );
        details.insert("limits".into(), self.limits.clone());
        if let Some(usage) = crate::usage::read(&self.usage_groups) {
            details.insert("usage".into(), usage);
        }
        details.insert(
            "processTracking".into(),
            self.exec_groups.tracking.clone().into(),
        );
        details.insert("unixDatagrams".into(), self.datagrams.clone().into());
        SandboxInfo {
            state,
            error,
            details,
        }
    }

    fn exec(&self, request: ExecRequest) -> Result<u64, PluginError> {
        match self.life() {
            Life::Live => {}
            Life::Suspended => {
                return Err(PluginError::invalid(
                    "the sandbox is suspended; resume it first",
                ));
            }
            Life::Destroyed => {
                return Err(PluginError::new(
                    ErrorCode::DESTROYED,
                    "the sandbox was destroyed",
                ));
            }
            Life::Lost => {
                return Err(PluginError::new(
                    ErrorCode::UNAVAILABLE,
                    "the sandbox is gone",
                ));
            }
        }
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        if let Some(size) = request.pty {
            return self.exec_on_terminal(id, size, request);
        }
        // The host's own descriptors stay out here: the command gets the
        // pipes, and a thread of ours copies between them.
        let (host_stdin, host_stdout) = pipe::duplicate_host_fds(request.host_fds)?;
        let pipe = || {
            let (r, w) =
                std::io::pipe().map_err(|e| PluginError::other(format!("creating a pipe: {e}")))?;
            pipe::grow(r.as_fd());
            Ok::<_, PluginError>((r, w))
        };
        let (out_r, out_w) = pipe()?;
        let (err_r, err_w) = pipe()?;
        let stdin = if request.stdin || host_stdin.is_some() {
            Some(pipe()?)
        } else {
            None
        };
        let cwd = request
            .cwd
            .clone()
            .unwrap_or_else(|| self.plan.workdir.clone());
        let mut watch = match &self.plan.guard {
            Some(guard) => StderrWatch::guarded(guard.roots.clone()),
            None => StderrWatch::default(),
        }
        .in_dir(cwd.clone());
        let watcher: StderrWatcher = Box::new(move |chunk| watch.feed(chunk));
        // Its readers start once the command runs (see `Relay::prepare`).
        let (relay, readers) = match host_stdout {
            Some(sink) => Relay::prepare_with_sink(
                id,
                OwnedFd::from(out_r),
                err_r,
                self.events.clone(),
                Some(watcher),
                sink,
            ),
            None => Relay::prepare(id, out_r, err_r, self.events.clone(), Some(watcher)),
        };
        let (stdin_r, stdin_w) = match stdin {
            Some((r, w)) => (Some(r), Some(w)),
            None => (None, None),
        };
        // Fed from the host: `write_stdin` finds no stdin to write to.
        let (stdin_w, feed) = match host_stdin {
            Some(source) => (None, stdin_w.map(|w| (source, OwnedFd::from(w)))),
            None => (stdin_w, None),
        };
        // Fail closed: where execs are tracked by cgroup, one that cannot
        // be is not started.
        let (group, join) = match self.exec_groups.for_exec(id).map_err(PluginError::other)? {
            Some((group, join)) => (Some(group), Some(join)),
            None => (None, None),
        };
        let exec = Arc::new(ExecState {
            relay,
            stdin: Mutex::new(stdin_w.map(|w| std::fs::File::from(OwnedFd::from(w)))),
            terminal: None,
            kill_reason: Mutex::new(None),
            group: Mutex::new(group),
        });
        // Registered before the request so a quick exit finds it.
        self.execs
            .lock()
            .map_err(|_| PluginError::other("exec table poisoned"))?
            .insert(id, Arc::clone(&exec));
        let message = Request::Exec {
            id,
            argv: request.argv.clone(),
            env: self.command_env(request.env),
            cwd: cwd.display().to_string(),
            stdin: stdin_r.is_some(),
            cgroup: join.is_some(),
            cgroup_dir: join.is_some(),
            pty: None,
        };
        let mut fds = vec![out_w.as_fd(), err_w.as_fd()];
        if let Some(r) = &stdin_r {
            fds.push(r.as_fd());
        }
        if let Some(join) = &join {
            fds.push(join.procs.as_fd());
            fds.push(join.dir.as_fd());
        }
        let reply = self.control.call(&message, &fds);
        drop(fds);
        drop((out_w, err_w, stdin_r, join));
        let forget = || {
            if let Ok(mut m) = self.execs.lock() {
                m.remove(&id);
            }
            if let Ok(mut group) = exec.group.lock()
                && let Some(group) = group.take()
            {
                let _ = group.remove();
            }
        };
        match reply {
            Ok(Reply::Started { .. }) => {
                readers.start();
                // The command runs already: a feed that cannot start leaves
                // its stdin empty, with a log line.
                if let Some((source, pipe)) = feed
                    && let Err(e) = sandbox_exec_relay::feed_stdin(id, source, pipe)
                {
                    tracing::error!(exec = id, "could not start the stdin feed: {e}");
                }
            }
            Ok(Reply::Failed { errno, message }) => {
                forget();
                return Err(exec_error(errno, message));
            }
            Ok(other) => {
                forget();
                return Err(PluginError::other(format!(
                    "sandbox-init refused the exec: {other:?}"
                )));
            }
            Err(e) => {
                forget();
                return Err(PluginError::other(format!(
                    "sending the exec to the sandbox: {e}"
                )));
            }
        }
        if let Some(ms) = request.timeout_ms {
            self.arm_timeout(id, exec, ms)?;
        }
        Ok(id)
    }

    fn write_stdin(&self, exec_id: u64, data: &[u8]) -> Result<(), PluginError> {
        let exec = self.find(exec_id)?;
        let mut stdin = exec
            .stdin
            .lock()
            .map_err(|_| PluginError::other("stdin lock poisoned"))?;
        let pipe = stdin
            .as_mut()
            .ok_or_else(|| PluginError::invalid(format!("exec {exec_id} has no open stdin")))?;
        pipe.write_all(data)
            .map_err(|e| PluginError::other(format!("writing to the stdin of exec {exec_id}: {e}")))
    }

    /// A terminal has no end of file to give: closing its input types
    /// `^D` (end of file for a reader at the start of a line).
    fn close_stdin(&self, exec_id: u64) -> Result<(), PluginError> {
        let exec = self.find(exec_id)?;
        if let Ok(mut stdin) = exec.stdin.lock()
            && let Some(mut input) = stdin.take()
            && exec.terminal.is_some()
        {
            let _ = input.write_all(&[0x04]);
        }
        Ok(())
    }

    fn call(&self, method: &str, json: &str) -> Result<String, PluginError> {
        self.terminal_call(method, json)
    }

    fn kill(&self, exec_id: u64, signal: i32) -> Result<(), PluginError> {
        if !(1..=64).contains(&signal) {
            return Err(PluginError::invalid(format!(
                "{signal} is not a signal number"
            )));
        }
        let exec = self.find(exec_id)?;
        self.signal(exec_id, &exec, signal, KillReason::Manual)
    }

    fn suspend(&self) -> Result<(), PluginError> {
        self.freeze(
            Request::Freeze,
            Life::Live,
            Life::Suspended,
            SandboxState::Suspended,
        )
    }

    fn resume(&self) -> Result<(), PluginError> {
        self.freeze(
            Request::Thaw,
            Life::Suspended,
            Life::Live,
            SandboxState::Warm,
        )
    }

    fn destroy(&self) -> Result<(), PluginError> {
        if let Ok(mut life) = self.life.lock() {
            if *life == Life::Destroyed {
                return Ok(());
            }
            *life = Life::Destroyed;
        }
        let execs: Vec<Arc<ExecState>> = self
            .execs
            .lock()
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default();
        for exec in &execs {
            if let Ok(mut r) = exec.kill_reason.lock() {
                r.get_or_insert(KillReason::Destroyed);
            }
        }
        // PID 1 sees end-of-file, kills every process and exits; the kernel
        // then removes the namespaces and every mount in them.
        self.control.close();
        let mut result = Ok(());
        if let Ok(mut bwrap) = self.bwrap.lock()
            && let Some(mut child) = bwrap.take()
            && !crate::child_exit::wait_or_kill(&mut child, EXIT_PATIENCE)
        {
            result = Err(PluginError::other(
                "bwrap did not exit after its sandbox ended; killed it",
            ));
        }
        // The execs' groups first: the v2 limit group, when there is one,
        // is their parent.
        self.exec_groups.remove();
        if let Ok(mut groups) = self.groups.lock() {
            groups.remove();
        }
        // The control reader reports the killed execs when it sees PID 1 go;
        // wait for that, so every terminal event is out before we return.
        for exec in execs {
            if !exec.relay.wait_ended(EXIT_PATIENCE) {
                exec.relay.finish(EventBody::Killed {
                    reason: KillReason::Destroyed,
                    signal: Some(libc::SIGKILL),
                });
            }
        }
        result
    }
}
