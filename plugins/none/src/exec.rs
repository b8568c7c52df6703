//! One command on the host: a process group, two output readers and a waiter.
//!
//! Ordering: readers emit under `output`, and the waiter marks the exec ended
//! under the same lock before it emits `exit`/`killed`, so the terminal event
//! is always the exec's last.
//!
//! PID reuse: the waiter reads the leader's status with `WNOWAIT` and leaves
//! it a zombie. While the zombie exists its pid — and so the group id — cannot
//! be handed to another process, so a later `killpg` can only reach processes
//! this exec started. The zombie is reaped at destroy, or earlier once its
//! group is empty.

use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use sandbox_plugin_api::sdk::EventSender;
use sandbox_plugin_api::{ErrorCode, ExecRequest, KillReason, PluginError};

/// How long the waiter lets the output readers drain after the command exits.
/// Longer only when a background process keeps the pipes open.
const DRAIN_GRACE: Duration = Duration::from_millis(250);

/// Output is read and emitted in chunks of this size.
const CHUNK: usize = 64 * 1024;

pub(crate) struct Exec {
    id: u64,
    pid: i32,
    stdin: Mutex<Option<ChildStdin>>,
    /// Why we signalled it, if we did; decides `killed` over `exit`.
    kill_reason: Mutex<Option<KillReason>>,
    /// Held while emitting output and the terminal event.
    emitting: Mutex<()>,
    /// Set (under `emitting`) once the terminal event is out.
    ended: AtomicBool,
    /// Wakes `wait_ended`.
    ended_signal: (Mutex<()>, Condvar),
    reaped: Mutex<bool>,
}

impl Exec {
    pub(crate) fn spawn(
        id: u64,
        request: &ExecRequest,
        cwd: &Path,
        events: EventSender,
    ) -> Result<Arc<Self>, PluginError> {
        if !cwd.is_dir() {
            return Err(PluginError::invalid(format!(
                "working directory {} does not exist on this host",
                cwd.display()
            )));
        }
        let mut command = Command::new(&request.argv[0]);
        command
            .args(&request.argv[1..])
            .env_clear()
            .envs(&request.env)
            .current_dir(cwd)
            .process_group(0)
            .stdin(if request.stdin {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command
            .spawn()
            .map_err(|e| spawn_error(&request.argv[0], &e))?;
        let pid = i32::try_from(child.id()).map_err(|_| PluginError::other("pid out of range"))?;
        let exec = Arc::new(Self {
            id,
            pid,
            stdin: Mutex::new(child.stdin.take()),
            kill_reason: Mutex::new(None),
            emitting: Mutex::new(()),
            ended: AtomicBool::new(false),
            ended_signal: (Mutex::new(()), Condvar::new()),
            reaped: Mutex::new(false),
        });
        let (drained_tx, drained_rx) = mpsc::channel();
        if let Some(out) = child.stdout.take() {
            spawn_reader(&exec, out, false, events.clone(), drained_tx.clone());
        }
        if let Some(err) = child.stderr.take() {
            spawn_reader(&exec, err, true, events.clone(), drained_tx);
        }
        // The std `Child` is dropped without waiting: the waiter owns the pid.
        drop(child);
        let waiter = Arc::clone(&exec);
        std::thread::Builder::new()
            .name(format!("none-wait-{id}"))
            .spawn(move || waiter.wait_and_report(&events, &drained_rx))
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
        self.ended.load(Ordering::SeqCst)
    }

    /// Waits until the terminal event is out; `false` on timeout.
    pub(crate) fn wait_ended(&self, patience: Duration) -> bool {
        let (lock, signal) = &self.ended_signal;
        let Ok(guard) = lock.lock() else { return true };
        signal
            .wait_timeout_while(guard, patience, |()| !self.has_ended())
            .map(|_| self.has_ended())
            .unwrap_or(true)
    }

    /// Signals the whole process group, remembering why.
    pub(crate) fn signal(&self, signal: i32, reason: KillReason) {
        if let Ok(mut r) = self.kill_reason.lock() {
            r.get_or_insert(reason);
        }
        if self.reaped.lock().map(|r| *r).unwrap_or(true) {
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

    pub(crate) fn close_stdin(&self) {
        if let Ok(mut stdin) = self.stdin.lock() {
            stdin.take();
        }
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
    }

    fn wait_and_report(&self, events: &EventSender, drained: &mpsc::Receiver<()>) {
        let status = wait_no_reap(self.pid);
        // Let the readers deliver what the command wrote before it ended.
        for _ in 0..2 {
            if drained.recv_timeout(DRAIN_GRACE).is_err() {
                break;
            }
        }
        self.close_stdin();
        let Ok(emitting) = self.emitting.lock() else {
            return;
        };
        self.ended.store(true, Ordering::SeqCst);
        let reason = self.kill_reason.lock().ok().and_then(|r| *r);
        match (status, reason) {
            (Status::Signaled(sig), Some(reason)) => events.killed(self.id, reason, Some(sig)),
            (Status::Signaled(sig), None) => events.exit(self.id, 128 + sig, Some(sig)),
            (Status::Exited(code), _) => events.exit(self.id, code, None),
        };
        drop(emitting);
        let (lock, signal) = &self.ended_signal;
        let _guard = lock.lock();
        signal.notify_all();
    }
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

fn spawn_reader(
    exec: &Arc<Exec>,
    mut pipe: impl Read + Send + 'static,
    stderr: bool,
    events: EventSender,
    drained: mpsc::Sender<()>,
) {
    let exec = Arc::clone(exec);
    let id = exec.id;
    let name = format!("none-{}-{id}", if stderr { "err" } else { "out" });
    let spawned = std::thread::Builder::new().name(name).spawn(move || {
        let mut buf = vec![0u8; CHUNK];
        loop {
            match pipe.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    let Ok(_emitting) = exec.emitting.lock() else {
                        break;
                    };
                    if exec.has_ended() {
                        continue; // a background process writing after the exec ended
                    }
                    let chunk = buf[..n].to_vec();
                    if stderr {
                        events.stderr(exec.id, chunk);
                    } else {
                        events.stdout(exec.id, chunk);
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        let _ = drained.send(());
    });
    if let Err(e) = spawned {
        tracing::error!(exec = id, "could not start an output reader thread: {e}");
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
