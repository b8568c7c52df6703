//! Commands on a terminal (SPEC B8): sandbox-init makes the terminal inside
//! the sandbox, from the sandbox's own devpts, and makes it the command's
//! controlling terminal; only its master side comes back, with `started`.
//! No terminal of the host is ever handed in — a command that pushes input
//! with `TIOCSTI` reaches its own terminal and nothing else. The master's
//! output is the exec's stdout (a terminal has one stream), what is
//! written to it is what is typed, and a resize is a `TIOCSWINSZ` on it.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Mutex};

use sandbox_exec_relay::Relay;
use sandbox_init::proto::{Reply, Request};
use sandbox_plugin_api::{ExecRequest, PluginError, PtySize, ResizeRequest, calls};

use crate::sandbox::{BwrapSandbox, ExecState, exec_error};

impl BwrapSandbox {
    /// Starts `request` on a new terminal of `size`.
    pub(crate) fn exec_on_terminal(
        &self,
        id: u64,
        size: PtySize,
        request: ExecRequest,
    ) -> Result<u64, PluginError> {
        sandbox_spawn::pty::check_size(size.cols, size.rows).map_err(PluginError::invalid)?;
        if request.host_fds.is_some() {
            return Err(PluginError::invalid(
                "an exec on a terminal takes its input and gives its output through the terminal, not the host's descriptors (`hostFds`)",
            ));
        }
        let cwd = request
            .cwd
            .clone()
            .unwrap_or_else(|| self.plan.workdir.clone());
        // Fail closed: where execs are tracked by cgroup, one that cannot
        // be is not started.
        let (group, join) = match self.exec_groups.for_exec(id).map_err(PluginError::other)? {
            Some((group, join)) => (Some(group), Some(join)),
            None => (None, None),
        };
        let message = Request::Exec {
            id,
            argv: request.argv.clone(),
            env: self.command_env(request.env.clone()),
            cwd: cwd.display().to_string(),
            stdin: false,
            cgroup: join.is_some(),
            cgroup_dir: join.is_some(),
            pty: Some(size),
        };
        let mut fds = Vec::new();
        if let Some(join) = &join {
            fds.push(join.procs.as_fd());
            fds.push(join.dir.as_fd());
        }
        let answer = self.control.call_with_fds(&message, &fds);
        drop(fds);
        drop(join);
        let refused = |e: PluginError| {
            if let Some(group) = &group {
                let _ = group.remove();
            }
            Err(e)
        };
        // Held until the exec is registered: its `exited` waits for that.
        let (master, _hold) = match answer {
            Ok((Reply::Started { .. }, fds, hold)) => match fds.into_iter().next() {
                Some(master) => (master, hold),
                None => {
                    return refused(PluginError::other(
                        "sandbox-init started the command without sending its terminal",
                    ));
                }
            },
            Ok((Reply::Failed { errno, message }, _, _)) => {
                return refused(exec_error(errno, message));
            }
            Ok((other, _, _)) => {
                return refused(PluginError::other(format!(
                    "sandbox-init refused the exec: {other:?}"
                )));
            }
            Err(e) => {
                return refused(PluginError::other(format!(
                    "sending the exec to the sandbox: {e}"
                )));
            }
        };
        let exec = Arc::new(self.terminal_exec(id, master, request.stdin, group)?);
        self.execs
            .lock()
            .map_err(|_| PluginError::other("exec table poisoned"))?
            .insert(id, Arc::clone(&exec));
        if let Some(ms) = request.timeout_ms {
            self.arm_timeout(id, exec, ms)?;
        }
        Ok(id)
    }

    /// The exec's state around its terminal's master side: its reader
    /// started, its input when asked for.
    fn terminal_exec(
        &self,
        id: u64,
        master: OwnedFd,
        stdin: bool,
        group: Option<sandbox_exec_group::Group>,
    ) -> Result<ExecState, PluginError> {
        let master = std::fs::File::from(master);
        let dup = || {
            master
                .try_clone()
                .map_err(|e| PluginError::other(format!("duplicating the terminal: {e}")))
        };
        // A terminal has one stream; stderr is an empty pipe.
        let (err_r, _closed) =
            std::io::pipe().map_err(|e| PluginError::other(format!("creating a pipe: {e}")))?;
        let (relay, readers) = Relay::prepare(id, dup()?, err_r, self.events.clone(), None);
        readers.start();
        Ok(ExecState {
            relay,
            stdin: Mutex::new(if stdin { Some(dup()?) } else { None }),
            terminal: Some(master),
            kill_reason: Mutex::new(None),
            group: Mutex::new(group),
        })
    }

    /// The sandbox's calls: [`calls::RESIZE`] of an exec's terminal.
    pub(crate) fn terminal_call(&self, method: &str, json: &str) -> Result<String, PluginError> {
        if method != calls::RESIZE {
            return Err(PluginError::unsupported(&format!(
                "sandbox call `{method}`"
            )));
        }
        let resize: ResizeRequest = serde_json::from_str(json)
            .map_err(|e| PluginError::invalid(format!("the resize request: {e}")))?;
        sandbox_spawn::pty::check_size(resize.cols, resize.rows).map_err(PluginError::invalid)?;
        let exec = self.find(resize.exec_id)?;
        let terminal = exec.terminal.as_ref().ok_or_else(|| {
            PluginError::invalid(format!(
                "exec {} does not run on a terminal",
                resize.exec_id
            ))
        })?;
        sandbox_spawn::pty::resize(terminal.as_fd(), resize.cols, resize.rows).map_err(|e| {
            PluginError::other(format!(
                "resizing the terminal of exec {}: {e}",
                resize.exec_id
            ))
        })?;
        Ok(String::new())
    }
}
