//! The `none` backend: no sandbox at all (SPEC C4).
//!
//! Commands run on the host with the server's privileges. It exists so that
//! `--sandbox off`, hosts without a native sandbox, and the terminal default
//! all go through the same event stream as the real backends — and so that
//! its badge says, truthfully, that nothing is isolated.
//!
//! Each exec is its own process group and, where the server may make
//! cgroup v2 groups, its own cgroup: an exec's timeout or kill and the
//! sandbox's destroy end every process it started, `setsid` or not, and
//! every command dies with the server, even one killed by SIGKILL (see
//! `lifetime`). Without a cgroup a process that leaves its group
//! (`setsid`) escapes them, and the handle's `processTracking` says so —
//! one more reason this backend is called `none`.

mod exec;
mod lifetime;
mod procfs;
mod spawn;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sandbox_exec_group::Group;
use sandbox_plugin_api::sdk::{BackendImpl, EventSender, SandboxImpl};
use sandbox_plugin_api::{
    ErrorCode, ExecRequest, KillReason, PluginError, ProbeContext, ProbeReport, ResizeRequest,
    SandboxBackend, SandboxInfo, SandboxSpec, SandboxState, calls, capability,
};

use crate::exec::Exec;

/// The badge text: what this backend enforces (nothing).
pub const NOTE: &str = "none — no sandbox: commands run on the host with the server's privileges";

/// How long `destroy` waits for killed commands to be reported.
const DESTROY_PATIENCE: Duration = Duration::from_secs(5);

/// Finished execs whose process groups may still have members are kept as
/// zombies (so their group id cannot be reused); past this many, reap the
/// ones whose groups are empty.
const ZOMBIE_SWEEP_AT: usize = 64;

/// The `none` backend.
#[derive(Debug, Default)]
pub struct NoneBackend;

impl BackendImpl for NoneBackend {
    fn name(&self) -> &str {
        "none"
    }

    fn probe(&self, _ctx: &ProbeContext) -> ProbeReport {
        ProbeReport {
            available: true,
            note: NOTE.into(),
            kind: SandboxBackend::None,
            capabilities: vec![
                capability::STDIN.into(),
                capability::PTY.into(),
                capability::EXEC_TIMEOUT.into(),
                capability::HOST_FDS.into(),
            ],
            ..ProbeReport::default()
        }
    }

    fn launch(
        &self,
        spec: SandboxSpec,
        events: EventSender,
    ) -> Result<Box<dyn SandboxImpl>, PluginError> {
        if !spec.limits.is_empty() {
            // Asked for by name, so never silently unlimited (SPEC G6).
            return Err(PluginError::new(
                ErrorCode::INVALID_SPEC,
                "the spec asks for resource limits (`limits`), and the none backend enforces none; remove `limits` from the spec, or use bwrap",
            ));
        }
        events.starting();
        let workdir = match &spec.guest_workdir {
            Some(dir) => dir.clone(),
            None => std::env::current_dir().map_err(|e| {
                PluginError::other(format!("the server has no working directory: {e}"))
            })?,
        };
        if !workdir.is_dir() {
            return Err(PluginError::new(
                ErrorCode::INVALID_SPEC,
                format!(
                    "guestWorkdir {} is not a directory on this host",
                    workdir.display()
                ),
            ));
        }
        let (group, tracking) = match lifetime::sandbox_group() {
            Ok(group) => {
                let how = format!("cgroup v2 {}", group.path().display());
                (Some(group), how)
            }
            Err(why) => {
                tracing::warn!(session = %spec.session_id, "none: an exec's timeout and kill reach its process group only; `setsid` escapes them: {why}");
                (
                    None,
                    format!(
                        "process groups only (`setsid` escapes an exec's timeout and kill, and the server's death): {why}"
                    ),
                )
            }
        };
        let sandbox = NoneSandbox {
            workdir,
            group,
            tracking,
            events,
            execs: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            destroyed: AtomicBool::new(false),
        };
        sandbox.events.ready();
        tracing::debug!(session = %spec.session_id, "none sandbox ready");
        Ok(Box::new(sandbox))
    }
}

struct NoneSandbox {
    workdir: PathBuf,
    /// The sandbox's cgroup, each exec's a child of it.
    group: Option<Group>,
    /// How an exec's processes are found: the handle's `processTracking`.
    tracking: String,
    events: EventSender,
    execs: Mutex<HashMap<u64, Arc<Exec>>>,
    next_id: AtomicU64,
    destroyed: AtomicBool,
}

impl NoneSandbox {
    fn find(&self, exec_id: u64) -> Result<Arc<Exec>, PluginError> {
        self.execs
            .lock()
            .map_err(|_| PluginError::other("exec table poisoned"))?
            .get(&exec_id)
            .cloned()
            .ok_or_else(|| {
                PluginError::new(
                    ErrorCode::NOT_FOUND,
                    format!("no exec {exec_id} in this sandbox"),
                )
            })
    }

    fn all_execs(&self) -> Vec<Arc<Exec>> {
        self.execs
            .lock()
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default()
    }

    /// Reaps finished execs whose process groups have emptied.
    fn sweep_zombies(&self) {
        let Ok(mut execs) = self.execs.lock() else {
            return;
        };
        let finished: Vec<u64> = execs
            .iter()
            .filter(|(_, e)| e.has_ended())
            .map(|(id, _)| *id)
            .collect();
        if finished.len() < ZOMBIE_SWEEP_AT {
            return;
        }
        let live = procfs::live_process_groups();
        for id in finished {
            if let Some(exec) = execs.get(&id)
                && !live.contains(&exec.pgid())
                && !exec.group_populated()
            {
                exec.reap();
                execs.remove(&id);
            }
        }
    }
}

impl SandboxImpl for NoneSandbox {
    fn info(&self) -> SandboxInfo {
        let state = if self.destroyed.load(Ordering::SeqCst) {
            SandboxState::Destroyed
        } else if self.all_execs().iter().any(|e| !e.has_ended()) {
            SandboxState::Active
        } else {
            SandboxState::Warm
        };
        let mut details = serde_json::Map::new();
        details.insert("workdir".into(), self.workdir.display().to_string().into());
        details.insert("isolation".into(), "none".into());
        details.insert("processTracking".into(), self.tracking.clone().into());
        SandboxInfo {
            state,
            error: None,
            details,
        }
    }

    fn exec(&self, request: ExecRequest) -> Result<u64, PluginError> {
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        let cwd = request.cwd.clone().unwrap_or_else(|| self.workdir.clone());
        // Register before the threads start so a quick exit finds its entry.
        let mut execs = self
            .execs
            .lock()
            .map_err(|_| PluginError::other("exec table poisoned"))?;
        if self.destroyed.load(Ordering::SeqCst) {
            return Err(PluginError::new(
                ErrorCode::DESTROYED,
                "the sandbox was destroyed",
            ));
        }
        let exec = Exec::spawn(id, &request, &cwd, self.events.clone(), self.group.as_ref())?;
        execs.insert(id, exec);
        drop(execs);
        self.sweep_zombies();
        Ok(id)
    }

    fn write_stdin(&self, exec_id: u64, data: &[u8]) -> Result<(), PluginError> {
        self.find(exec_id)?.write_stdin(data)
    }

    fn close_stdin(&self, exec_id: u64) -> Result<(), PluginError> {
        self.find(exec_id)?.close_stdin();
        Ok(())
    }

    fn kill(&self, exec_id: u64, signal: i32) -> Result<(), PluginError> {
        if !(1..=64).contains(&signal) {
            return Err(PluginError::invalid(format!(
                "{signal} is not a signal number"
            )));
        }
        let exec = self.find(exec_id)?;
        if exec.has_ended() {
            return Err(PluginError::new(
                ErrorCode::NOT_FOUND,
                format!("exec {exec_id} has already ended"),
            ));
        }
        exec.signal(signal, KillReason::Manual);
        Ok(())
    }

    fn call(&self, method: &str, json: &str) -> Result<String, PluginError> {
        if method != calls::RESIZE {
            return Err(PluginError::unsupported(&format!(
                "sandbox call `{method}`"
            )));
        }
        let resize: ResizeRequest = serde_json::from_str(json)
            .map_err(|e| PluginError::invalid(format!("the resize request: {e}")))?;
        self.find(resize.exec_id)?
            .resize(resize.cols, resize.rows)?;
        Ok(String::new())
    }

    fn destroy(&self) -> Result<(), PluginError> {
        self.destroyed.store(true, Ordering::SeqCst);
        let execs: Vec<Arc<Exec>> = match self.execs.lock() {
            Ok(mut map) => map.drain().map(|(_, e)| e).collect(),
            Err(_) => return Err(PluginError::other("exec table poisoned")),
        };
        for exec in &execs {
            // Finished execs too: their background processes belong to us.
            exec.signal(libc::SIGKILL, KillReason::Destroyed);
        }
        if let Some(group) = &self.group
            && let Err(e) = group.kill()
        {
            tracing::warn!(group = %group.path().display(), "killing the sandbox's cgroup: {e}");
        }
        let mut stuck = Vec::new();
        for exec in &execs {
            if !exec.wait_ended(DESTROY_PATIENCE) {
                stuck.push(exec.id());
            }
            exec.reap();
        }
        if let Some(group) = &self.group
            && let Err(e) = group.remove()
        {
            tracing::warn!(group = %group.path().display(), "removing the sandbox's cgroup: {e}");
        }
        if stuck.is_empty() {
            Ok(())
        } else {
            Err(PluginError::other(format!(
                "execs {stuck:?} did not end after SIGKILL"
            )))
        }
    }
}

sandbox_plugin_api::export_backend!(NoneBackend);

#[cfg(test)]
mod tests {
    use super::*;
    use sandbox_plugin_api::testkit;

    #[test]
    fn conforms_to_the_plugin_contract() {
        testkit::assert_conformance(|| NoneBackend, &testkit::Options::default());
    }

    #[test]
    fn probe_is_honest_about_isolation() {
        let report = NoneBackend.probe(&ProbeContext::default());
        assert!(report.available);
        assert_eq!(report.kind, SandboxBackend::None);
        assert!(!report.kernel_boundary);
        assert!(
            !report.has(capability::FS_ISOLATION),
            "none isolates nothing"
        );
        assert!(!report.has(capability::NET_PROXY_ONLY));
    }
}
