//! Starting QEMU, for a boot or from a saved state (a checkpoint or a
//! template), up to a machine whose agent port and QMP are connected.

use std::ffi::OsString;
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use sandbox_microvm_proto::{self as proto, Hello};

use super::{Tail, accept_until, keep_tail, qmp, read_hello};

/// How long loading a saved machine may take.
pub(super) const LOAD_PATIENCE: Duration = Duration::from_secs(60);

/// Where a machine starts from.
pub(super) enum Origin<'a> {
    /// A cold boot: the agent says `Hello`.
    Boot,
    /// A saved state (`-incoming defer`, then `migrate-incoming` from the
    /// file): the agent is already up and says nothing until asked.
    Saved(&'a Path),
}

/// A QEMU running the machine, connected.
pub(super) struct Running {
    pub child: Child,
    /// The agent's port.
    pub stream: UnixStream,
    pub qmp: qmp::Qmp,
    /// Threads keeping QEMU's output in the tail.
    pub console: Vec<JoinHandle<()>>,
    /// The agent's greeting (a boot only).
    pub hello: Option<Hello>,
    /// From the spawn to a machine that runs.
    pub took: Duration,
}

/// What QEMU is started with.
pub(super) struct Setup<'a> {
    pub qemu: &'a Path,
    pub args: &'a [OsString],
    /// The runtime directory (QEMU's working directory).
    pub dir: &'a Path,
    pub agent_socket: &'a Path,
    pub qmp_socket: &'a Path,
    pub patience: Duration,
}

/// Starts QEMU and waits for a running machine; on failure QEMU is gone
/// and the error says why.
pub(super) fn start(
    s: &Setup<'_>,
    origin: Origin<'_>,
    tail: &Arc<Tail>,
) -> Result<Running, String> {
    let _ = std::fs::remove_file(s.agent_socket);
    let _ = std::fs::remove_file(s.qmp_socket);
    let listener = UnixListener::bind(s.agent_socket)
        .and_then(|l| l.set_nonblocking(true).map(|()| l))
        .map_err(|e| format!("listening for the guest agent: {e}"))?;
    let started = Instant::now();
    let mut command = Command::new(s.qemu);
    command.args(s.args);
    if let Origin::Saved(_) = origin {
        command.args(["-incoming", "defer"]);
    }
    let mut child = command
        .current_dir(s.dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("starting {}: {e}", s.qemu.display()))?;
    let mut console = Vec::new();
    if let Some(out) = child.stdout.take() {
        console.extend(keep_tail(out, Arc::clone(tail)));
    }
    if let Some(err) = child.stderr.take() {
        console.extend(keep_tail(err, Arc::clone(tail)));
    }
    let deadline = started + s.patience;
    let connected = (|| {
        let stream = accept_until(&listener, &mut child, deadline)?;
        let hello = match origin {
            Origin::Boot => {
                let hello = read_hello(&stream, deadline)?;
                if hello.version != proto::VERSION {
                    return Err(format!(
                        "the guest agent speaks protocol {}, this backend {}: rebuild the image",
                        hello.version,
                        proto::VERSION
                    ));
                }
                Some(hello)
            }
            Origin::Saved(_) => None,
        };
        let qmp = connect_qmp(s.qmp_socket, deadline).map_err(|e| format!("QMP: {e}"))?;
        Ok((stream, hello, qmp))
    })();
    let (stream, hello, mut qmp) = match connected {
        Ok(c) => c,
        Err(why) => return Err(stop(&mut child, why)),
    };
    if let Origin::Saved(file) = origin
        && let Err(e) = load(&mut qmp, file)
    {
        return Err(stop(&mut child, format!("loading {}: {e}", file.display())));
    }
    Ok(Running {
        child,
        stream,
        qmp,
        console,
        hello,
        took: started.elapsed(),
    })
}

/// QEMU may open its QMP socket a little after the agent's.
fn connect_qmp(socket: &Path, deadline: Instant) -> std::io::Result<qmp::Qmp> {
    loop {
        match qmp::Qmp::connect(socket) {
            Ok(qmp) => return Ok(qmp),
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => return Err(e),
        }
    }
}

/// Loads the saved machine and lets it run (the state carried a stopped
/// machine).
fn load(qmp: &mut qmp::Qmp, file: &Path) -> std::io::Result<()> {
    let state = std::fs::File::open(file)?;
    qmp.pass_fd("saved", state.as_raw_fd())?;
    qmp.call("migrate-incoming", serde_json::json!({"uri": "fd:saved"}))?;
    qmp.wait_for_migration(Instant::now() + LOAD_PATIENCE)?;
    qmp.execute("cont")
}

/// Writes the running machine to `file`: `stop`, then the state through a
/// descriptor (QEMU's `exec:` would need a fork, which its sandbox denies),
/// with QEMU's default 128 MiB/s cap lifted. The machine stays stopped.
pub(super) fn save(
    qmp: &mut qmp::Qmp,
    file: &std::fs::File,
    deadline: Instant,
) -> std::io::Result<()> {
    qmp.execute("stop")?;
    qmp.call(
        "migrate-set-parameters",
        serde_json::json!({"max-bandwidth": 1u64 << 40}),
    )?;
    qmp.pass_fd("saved", file.as_raw_fd())?;
    qmp.call("migrate", serde_json::json!({"uri": "fd:saved"}))?;
    qmp.wait_for_migration(deadline)?;
    file.sync_all()
}

fn stop(child: &mut Child, why: String) -> String {
    let _ = child.kill();
    let _ = child.wait();
    why
}
