//! The engine: one QEMU microVM per sandbox, the guest agent as its PID 1,
//! every command a stream on the agent's port (docs/research/microvm.md §4).
//!
//! `launch` makes a private 0700 runtime directory, listens on the agent's
//! socket there, starts QEMU (no NIC, spawn denied), waits for the agent's
//! `Hello`, mounts the binds (9p, read-only enforced by QEMU), and only then
//! reports `ready`. `destroy` asks the agent to power off, waits, kills
//! QEMU if it must, ends every open exec as `killed`, and removes the
//! directory: nothing is left behind. The serial console and QEMU's own
//! messages are kept in a bounded tail for error reports.
//!
//! `suspend` pauses every vCPU (RAM kept), or — with `[backends.microvm]
//! suspend = "checkpoint"` — writes the machine to a file and ends QEMU
//! (RAM freed; see `checkpoint`).
//!
//! A launch loads a saved, booted machine with the same devices instead of
//! booting when it can (`template`; `templates = false` turns it off).

pub mod argv;
mod checkpoint;
pub mod link;
pub mod qmp;
pub mod refuse;
mod start;
mod template;

use std::collections::VecDeque;
use std::io::Read;
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::process::Child;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use sandbox_microvm_proto::{self as proto, Frame, Hello, Kind};
use sandbox_plugin_api::sdk::{EventSender, SandboxImpl};
use sandbox_plugin_api::{
    ErrorCode, ExecRequest, KillReason, PluginError, ResizeRequest, SandboxInfo, SandboxSpec,
    SandboxState, calls, proxy,
};

use self::argv::{Launch, Share};
use self::link::{Answer, Link};
use crate::options::{Accel, SettingError, SuspendMode};

/// How long a boot may take before the launch fails: TCG boots a Debian
/// kernel in seconds; a loaded CI host needs slack.
const BOOT_PATIENCE_TCG: Duration = Duration::from_secs(60);
const BOOT_PATIENCE_KVM: Duration = Duration::from_secs(15);

/// How long the agent may take to answer a request.
const ANSWER_PATIENCE: Duration = Duration::from_secs(30);

/// How long `destroy` waits for the guest to power off before killing QEMU.
const POWEROFF_PATIENCE: Duration = Duration::from_secs(5);

/// The console and QEMU messages kept for error reports.
const TAIL_BYTES: usize = 16 << 10;

/// A verified guest image.
#[derive(Debug, Clone)]
pub struct Image {
    pub dir: PathBuf,
    pub vmlinux: PathBuf,
    pub initrd: PathBuf,
    pub cmdline: String,
}

/// What `launch` needs besides the spec.
#[derive(Debug, Clone)]
pub struct Engine {
    pub qemu: PathBuf,
    pub image: Image,
    pub accel: Accel,
    pub tsc_khz: Option<u64>,
    /// `[backends.microvm] suspend`, or why it is not understood.
    pub suspend: Result<SuspendMode, SettingError>,
    /// `[backends.microvm] templates` (default true: start from a saved,
    /// booted machine; false: boot every time), or why it is not understood.
    pub templates: Result<bool, SettingError>,
}

impl Engine {
    /// QEMU's arguments for a machine with these sockets and shares.
    fn args(
        &self,
        agent_socket: &std::path::Path,
        qmp_socket: &std::path::Path,
        shares: &[Share],
    ) -> Vec<std::ffi::OsString> {
        argv::qemu_args(&Launch {
            vmlinux: &self.image.vmlinux,
            initrd: &self.image.initrd,
            cmdline: &self.image.cmdline,
            accel: self.accel,
            tsc_khz: self.tsc_khz,
            agent_socket,
            qmp_socket,
            shares,
        })
    }
}

/// How a VM's QEMU is started — at launch, and again for a restore: the
/// very same machine.
struct Relaunch {
    qemu: PathBuf,
    args: Vec<std::ffi::OsString>,
    /// The runtime directory.
    dir: PathBuf,
    agent_socket: PathBuf,
    qmp_socket: PathBuf,
    patience: Duration,
}

impl Relaunch {
    fn setup(&self) -> start::Setup<'_> {
        start::Setup {
            qemu: &self.qemu,
            args: &self.args,
            dir: &self.dir,
            agent_socket: &self.agent_socket,
            qmp_socket: &self.qmp_socket,
            patience: self.patience,
        }
    }
}

/// The last bytes of a stream, bounded.
#[derive(Default)]
struct Tail(Mutex<VecDeque<u8>>);

impl Tail {
    fn push(&self, bytes: &[u8]) {
        if let Ok(mut t) = self.0.lock() {
            t.extend(bytes);
            let over = t.len().saturating_sub(TAIL_BYTES);
            t.drain(..over);
        }
    }

    fn text(&self) -> String {
        let bytes: Vec<u8> = self
            .0
            .lock()
            .map(|t| t.iter().copied().collect())
            .unwrap_or_default();
        String::from_utf8_lossy(&bytes).trim().to_owned()
    }
}

/// Copies a child's output into the tail until it closes.
fn keep_tail(mut from: impl Read + Send + 'static, tail: Arc<Tail>) -> Option<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("microvm-console".into())
        .spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = from.read(&mut buf) {
                if n == 0 {
                    break;
                }
                tail.push(&buf[..n]);
            }
        })
        .ok()
}

/// A private runtime directory, removed when dropped.
struct RuntimeDir(PathBuf);

impl RuntimeDir {
    fn create(session: &str) -> std::io::Result<Self> {
        static N: AtomicU32 = AtomicU32::new(0);
        let base = crate::cache::dir().unwrap_or_else(std::env::temp_dir);
        let safe: String = session
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
            .take(16)
            .collect();
        let dir = base.join(format!(
            "vm-{safe}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
        Ok(Self(dir))
    }
}

impl Drop for RuntimeDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// One running microVM.
pub struct Vm {
    link: Arc<Link>,
    qemu: Mutex<Option<Child>>,
    /// Pause and resume.
    qmp: Mutex<qmp::Qmp>,
    /// Suspended: paused in RAM, or checkpointed (`checkpoint` is set).
    suspended: AtomicBool,
    mode: SuspendMode,
    /// While checkpointed: the state file and its size.
    checkpoint: Mutex<Option<(PathBuf, u64)>>,
    /// Set while QEMU is ended on purpose, so its port's end is no loss.
    swapping: Arc<AtomicBool>,
    relaunch: Relaunch,
    shares: Vec<Share>,
    reader: Mutex<Option<JoinHandle<()>>>,
    console: Mutex<Vec<JoinHandle<()>>>,
    tail: Arc<Tail>,
    dir: Mutex<Option<RuntimeDir>>,
    next_stream: AtomicU32,
    destroyed: AtomicBool,
    /// Set by the reader when the agent's port closed unasked.
    lost: Arc<AtomicBool>,
    workdir: Option<PathBuf>,
    /// Commands get the proxy variables: the agent listens on the ports.
    egress: bool,
    details: Mutex<serde_json::Map<String, serde_json::Value>>,
}

fn other(what: &str, e: impl std::fmt::Display) -> PluginError {
    PluginError::other(format!("{what}: {e}"))
}

/// The 9p exports for a spec's binds (writable only in modes that allow it).
pub fn shares(spec: &SandboxSpec) -> Vec<Share> {
    spec.bind_mounts
        .iter()
        .enumerate()
        .map(|(i, b)| Share {
            tag: format!("share{i}"),
            host: b.host_path.clone(),
            guest: b.guest_path().to_path_buf(),
            read_only: b.read_only || !spec.binds_writable(),
        })
        .collect()
}

impl Engine {
    /// Boots a VM for `spec` and returns it once the agent answered and the
    /// binds are mounted. Any failure stops QEMU, removes the runtime
    /// directory and names the cause, with the console's tail.
    pub fn launch(&self, spec: &SandboxSpec, events: EventSender) -> Result<Vm, PluginError> {
        let shares = shares(spec);
        // Judged on resolved paths: a symlink must not hide what a bind shows.
        let resolve =
            |p: &std::path::Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
        let resolved: Vec<Share> = shares
            .iter()
            .map(|s| Share {
                host: resolve(&s.host),
                ..s.clone()
            })
            .collect();
        let home = std::env::var_os("HOME").map(|h| resolve(std::path::Path::new(&h)));
        let exists = |p: &std::path::Path| p.symlink_metadata().is_ok();
        if let Some(why) = refuse::refusal(spec, &resolved, home.as_deref(), &exists) {
            return Err(PluginError::new(ErrorCode::INVALID_SPEC, why));
        }
        // SAFETY: geteuid cannot fail.
        let uid = unsafe { libc::geteuid() };
        let state = resolve(&sandbox_paths::state_dirs::runtime_dir(
            uid,
            std::env::var_os("XDG_RUNTIME_DIR").as_deref(),
            &std::env::temp_dir(),
        ));
        if let Some(why) = refuse::holds_server_state(&resolved, &state) {
            return Err(PluginError::new(ErrorCode::INVALID_SPEC, why));
        }
        let invalid = |e: SettingError| PluginError::from_error(ErrorCode::INVALID_REQUEST, &e);
        let mode = self.suspend.clone().map_err(invalid)?;
        let templates = self.templates.clone().map_err(invalid)?;
        events.starting();
        let dir = RuntimeDir::create(&spec.session_id)
            .map_err(|e| other("creating the VM's runtime directory", e))?;
        let agent_socket = dir.0.join("agent.sock");
        let qmp_socket = dir.0.join("qmp.sock");
        let args = self.args(&agent_socket, &qmp_socket, &shares);
        let patience = match self.accel {
            Accel::Tcg => BOOT_PATIENCE_TCG,
            Accel::Kvm => BOOT_PATIENCE_KVM,
        };
        let relaunch = Relaunch {
            qemu: self.qemu.clone(),
            args,
            dir: dir.0.clone(),
            agent_socket,
            qmp_socket,
            patience,
        };
        let tail = Arc::new(Tail::default());
        // A saved, booted machine with the same devices starts in a tenth of
        // a boot; without one (or if it cannot be made), a boot.
        let template = if templates {
            template::ensure(self, &shares)
        } else {
            None
        };
        let origin = match &template {
            Some(file) => start::Origin::Saved(file),
            None => start::Origin::Boot,
        };
        let running = start::start(&relaunch.setup(), origin, &tail).map_err(|why| {
            PluginError::new(
                ErrorCode::UNAVAILABLE,
                format!("the microVM did not start: {why}; console: {}", tail.text()),
            )
        })?;
        let start::Running {
            mut child,
            stream,
            qmp,
            console,
            hello,
            took,
        } = running;
        let fail = |child: &mut Child, why: String| {
            let _ = child.kill();
            let _ = child.wait();
            PluginError::new(
                ErrorCode::UNAVAILABLE,
                format!("the microVM did not start: {why}; console: {}", tail.text()),
            )
        };
        let reader_end = match stream.try_clone() {
            Ok(s) => s,
            Err(e) => return Err(fail(&mut child, format!("the agent socket: {e}"))),
        };
        let proxies = spec.egress.as_ref().map(|e| link::Proxies {
            http: e.http_socket.clone(),
            socks: e.socks_socket.clone(),
        });
        let link = Link::new(stream, events.clone(), proxies);
        let lost = Arc::new(AtomicBool::new(false));
        let swapping = Arc::new(AtomicBool::new(false));
        let reader = match spawn_reader(&link, reader_end, &lost, &swapping) {
            Ok(r) => r,
            Err(e) => return Err(fail(&mut child, format!("starting the agent reader: {e}"))),
        };
        let mut details = serde_json::Map::new();
        details.insert(
            "isolation".into(),
            match self.accel {
                Accel::Kvm => "microvm (kvm)".into(),
                Accel::Tcg => "microvm (tcg: emulated, not a supported isolation boundary)".into(),
            },
        );
        details.insert("qemuPid".into(), child.id().into());
        details.insert("image".into(), self.image.dir.display().to_string().into());
        match &hello {
            Some(hello) => {
                details.insert("startedFrom".into(), "boot".into());
                details.insert("bootMs".into(), (took.as_millis() as u64).into());
                details.insert("bootId".into(), hello.boot_id.clone().into());
            }
            None => {
                details.insert("startedFrom".into(), "template".into());
                details.insert("restoreMs".into(), (took.as_millis() as u64).into());
            }
        }
        let vm = Vm {
            link,
            qemu: Mutex::new(Some(child)),
            qmp: Mutex::new(qmp),
            suspended: AtomicBool::new(false),
            mode,
            checkpoint: Mutex::new(None),
            swapping,
            relaunch,
            shares: shares.clone(),
            reader: Mutex::new(Some(reader)),
            console: Mutex::new(console),
            tail,
            dir: Mutex::new(Some(dir)),
            next_stream: AtomicU32::new(1),
            destroyed: AtomicBool::new(false),
            lost,
            workdir: spec.guest_workdir.clone(),
            egress: spec.egress.is_some(),
            details: Mutex::new(details),
        };
        if hello.is_none()
            && let Err(e) = vm.tell_restored()
        {
            let _ = vm.destroy();
            return Err(e);
        }
        for share in &vm.shares {
            if let Err(e) = vm.mount(share) {
                let _ = vm.destroy();
                return Err(e);
            }
        }
        if vm.egress
            && let Err(e) = vm.listen_for_egress()
        {
            let _ = vm.destroy();
            return Err(e);
        }
        events.ready();
        Ok(vm)
    }
}

/// Starts the thread reading the agent's port into events. Its end is a
/// loss (the VM is gone) unless `swapping` says QEMU was ended on purpose.
fn spawn_reader(
    link: &Arc<Link>,
    stream: UnixStream,
    lost: &Arc<AtomicBool>,
    swapping: &Arc<AtomicBool>,
) -> std::io::Result<JoinHandle<()>> {
    let (link, lost, swapping) = (Arc::clone(link), Arc::clone(lost), Arc::clone(swapping));
    std::thread::Builder::new()
        .name("microvm-agent".into())
        .spawn(move || {
            if let Err(e) = link.read_until_closed(stream)
                && !swapping.load(Ordering::SeqCst)
            {
                tracing::warn!("microvm: the guest agent's port broke: {e}");
            }
            if !swapping.load(Ordering::SeqCst) {
                lost.store(true, Ordering::SeqCst);
            }
        })
}

/// Accepts the agent's connection (QEMU connects as soon as it starts),
/// giving up at `deadline` or when QEMU exits.
fn accept_until(
    listener: &UnixListener,
    child: &mut Child,
    deadline: Instant,
) -> Result<UnixStream, String> {
    loop {
        match listener.accept() {
            Ok((stream, _)) => {
                stream
                    .set_nonblocking(false)
                    .map_err(|e| format!("the agent socket: {e}"))?;
                return Ok(stream);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(format!("accepting QEMU's connection: {e}")),
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("QEMU exited ({status}) before connecting"));
        }
        if Instant::now() > deadline {
            return Err("QEMU did not connect to the agent socket in time".into());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Waits for the agent's `Hello` (the guest is booting meanwhile).
fn read_hello(stream: &UnixStream, deadline: Instant) -> Result<Hello, String> {
    let left = deadline.saturating_duration_since(Instant::now());
    stream
        .set_read_timeout(Some(left.max(Duration::from_millis(1))))
        .map_err(|e| format!("the agent socket: {e}"))?;
    let mut input = stream;
    let frame = Frame::read_from(&mut input)
        .map_err(|e| format!("no greeting from the guest agent in time ({e})"))?
        .ok_or("the guest agent's port closed before it said hello")?;
    stream
        .set_read_timeout(None)
        .map_err(|e| format!("the agent socket: {e}"))?;
    if frame.kind != Kind::Hello {
        return Err(format!(
            "the guest agent began with {:?}, not Hello",
            frame.kind
        ));
    }
    frame.body::<Hello>().map_err(|e| e.to_string())
}

impl Vm {
    /// Joins the agent port's reader and the console threads, once QEMU is
    /// gone (its port and output closed, so they end).
    fn join_port_threads(&self) {
        if let Ok(mut reader) = self.reader.lock()
            && let Some(handle) = reader.take()
        {
            let _ = handle.join();
        }
        if let Ok(mut console) = self.console.lock() {
            for handle in console.drain(..) {
                let _ = handle.join();
            }
        }
    }

    fn stream_id(&self) -> u32 {
        self.next_stream.fetch_add(1, Ordering::SeqCst)
    }

    fn check_live(&self) -> Result<(), PluginError> {
        if self.destroyed.load(Ordering::SeqCst) {
            return Err(PluginError::new(
                ErrorCode::DESTROYED,
                "the sandbox was destroyed",
            ));
        }
        if self.lost.load(Ordering::SeqCst) {
            return Err(PluginError::new(
                ErrorCode::UNAVAILABLE,
                format!("the microVM is gone; console: {}", self.tail.text()),
            ));
        }
        if self.suspended.load(Ordering::SeqCst) {
            return Err(PluginError::invalid(
                "the sandbox is suspended; resume it first",
            ));
        }
        Ok(())
    }

    /// `stop` or `cont` over QMP, then the new state.
    fn pause(&self, stop: bool) -> Result<(), PluginError> {
        if self.destroyed.load(Ordering::SeqCst) {
            return Err(PluginError::new(
                ErrorCode::DESTROYED,
                "the sandbox was destroyed",
            ));
        }
        if self.suspended.load(Ordering::SeqCst) == stop {
            return Ok(());
        }
        let command = if stop { "stop" } else { "cont" };
        self.qmp
            .lock()
            .map_err(|_| PluginError::other("the QMP lock is poisoned"))?
            .execute(command)
            .map_err(|e| other(&format!("QMP `{command}`"), e))?;
        self.suspended.store(stop, Ordering::SeqCst);
        self.link.events().state(if stop {
            SandboxState::Suspended
        } else {
            SandboxState::Warm
        });
        Ok(())
    }

    fn mount(&self, share: &Share) -> Result<(), PluginError> {
        let id = self.stream_id();
        let body = proto::Mount {
            tag: share.tag.clone(),
            path: share.guest.display().to_string(),
            read_only: share.read_only,
        };
        match self
            .link
            .request(&Frame::json(id, Kind::Mount, &body), ANSWER_PATIENCE)
        {
            Ok(Answer::Mounted(proto::Mounted { error: None })) => Ok(()),
            Ok(Answer::Mounted(proto::Mounted { error: Some(e) })) => Err(PluginError::other(
                format!("mounting {} in the guest: {e}", share.guest.display()),
            )),
            Ok(other_answer) => Err(PluginError::other(format!(
                "the guest agent answered a mount with {other_answer:?}"
            ))),
            Err(e) => Err(other(
                &format!("mounting {} in the guest", share.guest.display()),
                e,
            )),
        }
    }

    /// Has the agent listen on the proxy ports (SPEC E2): its tunnels are
    /// the guest's only way out.
    fn listen_for_egress(&self) -> Result<(), PluginError> {
        let id = self.stream_id();
        let body = proto::Egress {
            ports: vec![proxy::HTTP_PORT, proxy::SOCKS_PORT],
        };
        match self
            .link
            .request(&Frame::json(id, Kind::Egress, &body), ANSWER_PATIENCE)
        {
            Ok(Answer::Listening(proto::Mounted { error: None })) => Ok(()),
            Ok(Answer::Listening(proto::Mounted { error: Some(e) })) => {
                Err(PluginError::other(format!("the guest's egress ports: {e}")))
            }
            Ok(other_answer) => Err(PluginError::other(format!(
                "the guest agent answered egress with {other_answer:?}"
            ))),
            Err(e) => Err(other("the guest's egress ports", e)),
        }
    }

    fn signal(&self, exec_id: u64, signal: i32, reason: KillReason) -> Result<(), PluginError> {
        let id = u32::try_from(exec_id).map_err(|_| PluginError::invalid("no such exec"))?;
        if !self.link.is_open(id) {
            return Err(PluginError::new(
                ErrorCode::NOT_FOUND,
                format!("exec {exec_id} is not running"),
            ));
        }
        self.link.mark_killed(id, reason);
        self.link
            .send(&Frame::json(id, Kind::Signal, &proto::Signal { signal }))
            .map_err(|e| other("signalling the command", e))
    }
}

impl SandboxImpl for Vm {
    fn info(&self) -> SandboxInfo {
        let mut details = self.details.lock().map(|d| d.clone()).unwrap_or_default();
        let checkpoint = self.checkpoint.lock().ok().and_then(|c| c.clone());
        let (state, error) = if self.destroyed.load(Ordering::SeqCst) {
            (SandboxState::Destroyed, None)
        } else if let Some((file, bytes)) = checkpoint {
            // Said only once the state is written and QEMU is gone.
            details.insert("suspendMode".into(), "checkpointed".into());
            details.insert("checkpointFile".into(), file.display().to_string().into());
            details.insert("checkpointBytes".into(), bytes.into());
            details.remove("qemuPid");
            (SandboxState::Suspended, None)
        } else if self.suspended.load(Ordering::SeqCst) {
            // Never claim a checkpoint: this is a pause in RAM.
            details.insert("suspendMode".into(), "paused".into());
            (SandboxState::Suspended, None)
        } else if self.lost.load(Ordering::SeqCst) {
            (
                SandboxState::Error,
                Some(format!(
                    "the microVM is gone; console: {}",
                    self.tail.text()
                )),
            )
        } else if self.link.open_streams().is_empty() {
            (SandboxState::Warm, None)
        } else {
            (SandboxState::Active, None)
        };
        SandboxInfo {
            state,
            error,
            details,
        }
    }

    fn exec(&self, request: ExecRequest) -> Result<u64, PluginError> {
        self.check_live()?;
        if let Some(size) = request.pty {
            check_size(size.cols, size.rows)?;
        }
        let id = self.stream_id();
        let cwd = request.cwd.clone().or_else(|| self.workdir.clone());
        let mut env: Vec<(String, String)> = request.env.into_iter().collect();
        if self.egress {
            let ours = proxy::env();
            env.retain(|(k, _)| !ours.iter().any(|(p, _)| p == k));
            env.extend(ours);
        }
        let body = proto::Exec {
            argv: request.argv.clone(),
            env,
            cwd: cwd.map(|c| c.display().to_string()),
            stdin: request.stdin,
            pty: request.pty.map(|size| proto::PtySize {
                cols: size.cols,
                rows: size.rows,
            }),
        };
        self.link
            .open_stream(id)
            .map_err(|e| other("starting the exec's delivery thread", e))?;
        let answer = self
            .link
            .request(&Frame::json(id, Kind::Exec, &body), ANSWER_PATIENCE);
        match answer {
            Ok(Answer::Started(_)) => {}
            Ok(Answer::Failed(f)) => {
                self.link.close_stream(id);
                let code = match f.errno {
                    libc::ENOENT | libc::ENOTDIR => ErrorCode::COMMAND_NOT_FOUND,
                    libc::EACCES | libc::EPERM => ErrorCode::PERMISSION_DENIED,
                    _ => ErrorCode::OTHER,
                };
                return Err(PluginError::new(code, f.message));
            }
            Ok(other_answer) => {
                self.link.close_stream(id);
                return Err(PluginError::other(format!(
                    "the guest agent answered an exec with {other_answer:?}"
                )));
            }
            Err(e) => {
                self.link.close_stream(id);
                return Err(other("starting the command in the guest", e));
            }
        }
        if let Some(ms) = request.timeout_ms {
            let link = Arc::clone(&self.link);
            let timer = std::thread::Builder::new()
                .name(format!("microvm-timeout-{id}"))
                .spawn(move || {
                    let deadline = Instant::now() + Duration::from_millis(ms);
                    while link.is_open(id) && Instant::now() < deadline {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    if link.is_open(id) {
                        link.mark_killed(id, KillReason::Timeout);
                        let signal = proto::Signal {
                            signal: libc::SIGKILL,
                        };
                        let _ = link.send(&Frame::json(id, Kind::Signal, &signal));
                    }
                });
            if let Err(e) = timer {
                return Err(other("starting the exec's timeout", e));
            }
        }
        Ok(u64::from(id))
    }

    fn write_stdin(&self, exec_id: u64, data: &[u8]) -> Result<(), PluginError> {
        let id = u32::try_from(exec_id).map_err(|_| PluginError::invalid("no such exec"))?;
        for chunk in data.chunks(proto::CHUNK) {
            self.link
                .send(&Frame::new(id, Kind::Stdin, chunk.to_vec()))
                .map_err(|e| other("writing to the command's stdin", e))?;
        }
        Ok(())
    }

    fn close_stdin(&self, exec_id: u64) -> Result<(), PluginError> {
        let id = u32::try_from(exec_id).map_err(|_| PluginError::invalid("no such exec"))?;
        self.link
            .send(&Frame::new(id, Kind::Stdin, Vec::new()))
            .map_err(|e| other("closing the command's stdin", e))
    }

    fn kill(&self, exec_id: u64, signal: i32) -> Result<(), PluginError> {
        if !(1..=64).contains(&signal) {
            return Err(PluginError::invalid(format!(
                "{signal} is not a signal number"
            )));
        }
        self.signal(exec_id, signal, KillReason::Manual)
    }

    fn suspend(&self) -> Result<(), PluginError> {
        match self.mode {
            SuspendMode::Pause => self.pause(true),
            SuspendMode::Checkpoint => self.checkpoint(),
        }
    }

    fn call(&self, method: &str, json: &str) -> Result<String, PluginError> {
        if method != calls::RESIZE {
            return Err(PluginError::unsupported(&format!(
                "sandbox call `{method}`"
            )));
        }
        let resize: ResizeRequest = serde_json::from_str(json)
            .map_err(|e| PluginError::invalid(format!("the resize request: {e}")))?;
        check_size(resize.cols, resize.rows)?;
        let id = u32::try_from(resize.exec_id).map_err(|_| PluginError::invalid("no such exec"))?;
        if !self.link.open_streams().contains(&id) {
            return Err(PluginError::invalid(format!(
                "exec {} is not running",
                resize.exec_id
            )));
        }
        let size = proto::PtySize {
            cols: resize.cols,
            rows: resize.rows,
        };
        self.link
            .send(&Frame::json(id, Kind::Resize, &size))
            .map_err(|e| other("resizing the command's terminal", e))?;
        Ok(String::new())
    }

    fn resume(&self) -> Result<(), PluginError> {
        if self.is_checkpointed() {
            self.restore()
        } else {
            self.pause(false)
        }
    }

    fn destroy(&self) -> Result<(), PluginError> {
        // A paused guest cannot power off: let it run for that. A
        // checkpointed one has no QEMU: there is only the file to remove.
        if self.suspended.load(Ordering::SeqCst) && !self.is_checkpointed() {
            let _ = self.pause(false);
        }
        if self.destroyed.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        for id in self.link.open_streams() {
            self.link.mark_killed(id, KillReason::Destroyed);
        }
        let _ = self.link.send(&Frame::new(0, Kind::Shutdown, Vec::new()));
        let mut result = Ok(());
        if let Ok(mut qemu) = self.qemu.lock()
            && let Some(mut child) = qemu.take()
        {
            let deadline = Instant::now() + POWEROFF_PATIENCE;
            loop {
                match child.try_wait() {
                    Ok(Some(_)) => break,
                    Ok(None) if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    _ => {
                        let _ = child.kill();
                        let _ = child.wait();
                        result = Err(PluginError::other(
                            "the guest did not power off in time; QEMU was killed",
                        ));
                        break;
                    }
                }
            }
        }
        self.join_port_threads();
        self.link.end_all(KillReason::Destroyed);
        if let Ok(mut dir) = self.dir.lock() {
            dir.take();
        }
        result
    }
}

/// A terminal needs at least one column and one row.
fn check_size(cols: u16, rows: u16) -> Result<(), PluginError> {
    if cols == 0 || rows == 0 {
        return Err(PluginError::invalid(format!(
            "a terminal of {cols} columns and {rows} rows: both must be at least 1"
        )));
    }
    Ok(())
}

impl Drop for Vm {
    fn drop(&mut self) {
        // The host always destroys; this is the backstop for a panic.
        let _ = self.destroy();
    }
}
