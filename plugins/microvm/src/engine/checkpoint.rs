//! Suspend with RAM freed (SPEC F9, docs/research/microvm.md §2, §4.8): the
//! machine's state is written to a file in the VM's private runtime
//! directory and QEMU ends; `resume` starts the very same machine again
//! (same arguments, `-incoming defer`), loads the file, and lets it go on.
//! Processes in the guest, its tmpfs and the agent's streams survive: the
//! host keeps its side of every exec stream and reads the new QEMU's port.
//!
//! QEMU cannot migrate a mounted 9p device, so the shares are unmounted in
//! the guest first and mounted again after the restore. A share something
//! in the guest still uses (a working directory, an open file) cannot be
//! unmounted: then the checkpoint is refused, with the share named, and the
//! VM goes on as it was. So is a checkpoint while an egress connection is
//! open (its host end would not survive). Nothing is called checkpointed
//! before the file is written and QEMU has ended.

use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use sandbox_microvm_proto::{self as proto, Frame, Kind};
use sandbox_plugin_api::{ErrorCode, PluginError, SandboxState};

use super::link::Answer;
use super::{ANSWER_PATIENCE, Vm, other, spawn_reader, start};

/// How long QEMU may take to end after `quit`.
const QUIT_PATIENCE: Duration = Duration::from_secs(10);

/// The state file's name in the runtime directory.
const STATE_FILE: &str = "checkpoint.state";

impl Vm {
    pub(super) fn is_checkpointed(&self) -> bool {
        self.checkpoint.lock().map(|c| c.is_some()).unwrap_or(false)
    }

    /// Writes the machine to a file and ends QEMU (see the module doc).
    pub(super) fn checkpoint(&self) -> Result<(), PluginError> {
        self.check_live()?;
        let tunnels = self.link.open_tunnels();
        if tunnels > 0 {
            return Err(PluginError::invalid(format!(
                "cannot checkpoint: {tunnels} connection(s) through the egress proxies are open \
                 (their host end would not survive); close them, or use suspend = \"pause\""
            )));
        }
        self.unmount_all()?;
        match self.write_state() {
            Ok(()) => Ok(()),
            Err(e) => {
                // Back to where we were: running, shares mounted.
                let _ = self.qmp_execute("cont");
                for share in &self.shares {
                    let _ = self.mount(share);
                }
                Err(e)
            }
        }
    }

    /// Unmounts every share in the guest, last first; on a refusal mounts
    /// back what was unmounted and names the busy share.
    fn unmount_all(&self) -> Result<(), PluginError> {
        for (i, share) in self.shares.iter().enumerate().rev() {
            let id = self.stream_id();
            let body = proto::Mount {
                tag: share.tag.clone(),
                path: share.guest.display().to_string(),
                read_only: share.read_only,
            };
            let answer = self
                .link
                .request(&Frame::json(id, Kind::Unmount, &body), ANSWER_PATIENCE);
            let refusal = match answer {
                Ok(Answer::Mounted(m)) => m.error,
                Ok(other) => Some(format!("unexpected answer {other:?}")),
                Err(e) => Some(e.to_string()),
            };
            if let Some(why) = refusal {
                for again in &self.shares[i + 1..] {
                    let _ = self.mount(again);
                }
                return Err(PluginError::invalid(format!(
                    "cannot checkpoint: the share {} is busy in the guest ({why}); a process \
                     there has it as its working directory or holds a file open — end it, or use \
                     suspend = \"pause\"",
                    share.guest.display()
                )));
            }
        }
        Ok(())
    }

    /// `stop`, the state to the file, `quit`; then the VM is checkpointed.
    fn write_state(&self) -> Result<(), PluginError> {
        let file = self
            .dir
            .lock()
            .ok()
            .and_then(|d| d.as_ref().map(|d| d.0.join(STATE_FILE)))
            .ok_or_else(|| PluginError::other("the VM's runtime directory is gone"))?;
        let state = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&file)
            .map_err(|e| other("creating the checkpoint file", e))?;
        {
            let mut qmp = self
                .qmp
                .lock()
                .map_err(|_| PluginError::other("the QMP lock is poisoned"))?;
            start::save(&mut qmp, &state, Instant::now() + start::LOAD_PATIENCE)
                .map_err(|e| other("checkpoint", e))?;
            // From here QEMU ends on purpose: its port closing is no loss.
            self.swapping.store(true, Ordering::SeqCst);
            // The answer may or may not come before the socket closes.
            let _ = qmp.execute("quit");
        }
        self.wait_for_qemu_to_end();
        let bytes = std::fs::metadata(&file).map(|m| m.len()).unwrap_or(0);
        if let Ok(mut c) = self.checkpoint.lock() {
            *c = Some((file, bytes));
        }
        self.suspended.store(true, Ordering::SeqCst);
        self.link.events().state(SandboxState::Suspended);
        Ok(())
    }

    /// Waits for QEMU (after `quit`), its port's reader and console.
    fn wait_for_qemu_to_end(&self) {
        if let Ok(mut qemu) = self.qemu.lock()
            && let Some(mut child) = qemu.take()
        {
            let deadline = Instant::now() + QUIT_PATIENCE;
            while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        self.join_port_threads();
    }

    /// Starts the same machine again from the file (see the module doc).
    pub(super) fn restore(&self) -> Result<(), PluginError> {
        if self.destroyed.load(Ordering::SeqCst) {
            return Err(PluginError::new(
                ErrorCode::DESTROYED,
                "the sandbox was destroyed",
            ));
        }
        let Some((file, _)) = self.checkpoint.lock().ok().and_then(|c| c.clone()) else {
            return Ok(());
        };
        let lost = |why: String| {
            // The machine is lost; the file stays until destroy.
            self.lost.store(true, Ordering::SeqCst);
            PluginError::new(
                ErrorCode::UNAVAILABLE,
                format!(
                    "the microVM could not be restored: {why}; console: {}",
                    self.tail.text()
                ),
            )
        };
        let running = start::start(
            &self.relaunch.setup(),
            start::Origin::Saved(&file),
            &self.tail,
        )
        .map_err(lost)?;
        let start::Running {
            mut child,
            stream,
            qmp,
            console,
            took,
            ..
        } = running;
        let fail = |child: &mut std::process::Child, why: String| {
            let _ = child.kill();
            let _ = child.wait();
            lost(why)
        };
        let reader_end = match stream.try_clone() {
            Ok(s) => s,
            Err(e) => return Err(fail(&mut child, format!("the agent socket: {e}"))),
        };
        self.link.replace_transport(stream);
        self.swapping.store(false, Ordering::SeqCst);
        let reader = match spawn_reader(&self.link, reader_end, &self.lost, &self.swapping) {
            Ok(h) => h,
            Err(e) => return Err(fail(&mut child, format!("starting the agent reader: {e}"))),
        };
        let pid = child.id();
        if let Ok(mut q) = self.qemu.lock() {
            *q = Some(child);
        }
        if let Ok(mut q) = self.qmp.lock() {
            *q = qmp;
        }
        if let Ok(mut slot) = self.reader.lock() {
            *slot = Some(reader);
        }
        if let Ok(mut c) = self.console.lock() {
            c.extend(console);
        }
        if let Ok(mut d) = self.details.lock() {
            d.insert("qemuPid".into(), pid.into());
            d.insert("restoreMs".into(), (took.as_millis() as u64).into());
        }
        // The agent answers on the same streams, in the same boot.
        if let Err(e) = self.tell_restored() {
            self.lost.store(true, Ordering::SeqCst);
            return Err(e);
        }
        if let Ok(mut c) = self.checkpoint.lock() {
            *c = None;
        }
        let _ = std::fs::remove_file(&file);
        self.suspended.store(false, Ordering::SeqCst);
        for share in &self.shares {
            self.mount(share)?;
        }
        self.link.events().state(SandboxState::Warm);
        Ok(())
    }

    /// Tells the agent its machine was started from a saved state: a fresh
    /// seed for its RNG and the host's time (see the agent's `restored`).
    pub(super) fn tell_restored(&self) -> Result<(), PluginError> {
        let mut seed = vec![0u8; 64];
        // SAFETY: getrandom into a live buffer of that length.
        let got = unsafe { libc::getrandom(seed.as_mut_ptr().cast(), seed.len(), 0) };
        if got != seed.len() as isize {
            return Err(other(
                "drawing a seed for the restored guest",
                std::io::Error::last_os_error(),
            ));
        }
        let unix_nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        let id = self.stream_id();
        let body = proto::Restored { seed, unix_nanos };
        match self
            .link
            .request(&Frame::json(id, Kind::Restored, &body), ANSWER_PATIENCE)
        {
            Ok(Answer::Mounted(m)) => match m.error {
                None => Ok(()),
                Some(why) => Err(PluginError::other(format!(
                    "the restored guest could not be reseeded: {why}"
                ))),
            },
            Ok(other_answer) => Err(PluginError::other(format!(
                "the restored guest answered {other_answer:?}"
            ))),
            Err(e) => Err(other("the restored guest agent does not answer", e)),
        }
    }

    fn qmp_execute(&self, command: &str) -> Result<(), PluginError> {
        self.qmp
            .lock()
            .map_err(|_| PluginError::other("the QMP lock is poisoned"))?
            .execute(command)
            .map_err(|e| other(&format!("QMP `{command}`"), e))
    }
}
