//! `exec`: a command through `Session::exec`, the one dispatch path (SPEC
//! B10) — the command policy, the sanitized environment, the sandbox — as
//! the API's exec route. Output goes out as progress notifications while
//! it runs (when the client gave a progress token); the result has the exit
//! code, the violations and the policy's verdict. A cancelled call, or a
//! connection that went away, drops the exec stream, which kills the
//! command.

use std::sync::Arc;

use rmcp::RoleServer;
use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::service::{Peer, RequestContext};
use sandbox_plugin_api::{EventBody, ExecRequest};
use sandbox_runtime::command_policy::verdict_json;
use sandbox_runtime::sessions::SessionError;
use sandbox_runtime::{Session, env};
use serde_json::json;

use crate::args::{ExecArgs, ExecOutput, ViolationOut};
use crate::events::Recorder;
use crate::failure::ToolError;

/// Output a result holds per stream; the rest went out as progress.
pub const MAX_OUTPUT: usize = 1 << 20;

/// Runs one command to its end, or until the call is cancelled.
pub async fn exec(
    session: &Arc<Session>,
    args: ExecArgs,
    context: &RequestContext<RoleServer>,
    recorder: &Recorder,
) -> Result<ExecOutput, ToolError> {
    if args.argv.is_empty() {
        return Err(ToolError::failed(
            "argv is empty; give the command and its arguments",
        ));
    }
    let mut environment = env::api_base();
    environment.extend(args.env);
    let request = ExecRequest {
        argv: args.argv,
        env: environment,
        cwd: args.cwd.map(Into::into),
        stdin: args.input.is_some(),
        timeout_ms: args.timeout_ms,
        pty: None,
        host_fds: None,
    };
    let line = sandbox_runtime::command_policy::command_line(&request.argv);
    let mut stream = match session.exec(request).await {
        Ok(stream) => stream,
        Err(SessionError::Refused(refusal)) => {
            recorder
                .record(json!({"type": "refused", "command": line, "rule": refusal.verdict.rule}));
            return Err(
                ToolError::refused(refusal.to_string(), refusal.verdict.rule.clone())
                    .with("policy", verdict_json(&refusal.verdict))
                    .with("answer", json!(refusal.answer)),
            );
        }
        Err(e) => {
            return Err(ToolError::failed(sandbox_plugin_api::error_chain(&e)));
        }
    };
    let exec_id = stream.exec_id;
    recorder.record(json!({"type": "started", "execId": exec_id, "command": line}));
    if let Some(input) = args.input {
        let session = Arc::clone(session);
        tokio::spawn(async move {
            let _ = session.write_stdin(exec_id, input.into_bytes()).await;
            let _ = session.close_stdin(exec_id).await;
        });
    }
    let progress = Progress::new(context);
    let mut out = ExecOutput {
        exit_code: None,
        killed: None,
        signal: None,
        stdout: String::new(),
        stderr: String::new(),
        truncated: false,
        violations: Vec::new(),
        policy: stream.verdict.as_ref().map(verdict_json),
        backend: session.backend_name().to_owned(),
    };
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    loop {
        let event = tokio::select! {
            event = stream.next() => event,
            () = context.ct.cancelled() => {
                // Dropping the stream kills the command (its guard).
                drop(stream);
                recorder.record(json!({"type": "killed", "execId": exec_id, "reason": "cancelled"}));
                return Err(ToolError::failed("the call was cancelled; the command was killed"));
            }
        };
        let Some(event) = event else {
            return Err(ToolError::failed(
                "the sandbox ended without reporting the command's exit",
            ));
        };
        match event.body {
            EventBody::Stdout(data) => {
                progress.send("stdout", &data).await;
                keep(&mut stdout, &data, &mut out.truncated);
            }
            EventBody::Stderr(data) => {
                progress.send("stderr", &data).await;
                keep(&mut stderr, &data, &mut out.truncated);
            }
            EventBody::Violation(v) => {
                let explained = sandbox_plugin_api::violation::explain(&v.action);
                let violation = ViolationOut {
                    rule: explained.as_ref().map(|e| e.rule.to_owned()),
                    remedy: explained.as_ref().map(|e| e.remedy.to_owned()),
                    action: v.action,
                    target: v.target,
                    raw: v.raw,
                };
                recorder.record(json!({"type": "violation", "execId": exec_id, "action": violation.action, "target": violation.target}));
                out.violations.push(violation);
            }
            EventBody::Exit { code, signal } => {
                out.exit_code = Some(code);
                out.signal = signal;
                recorder.record(json!({"type": "exit", "execId": exec_id, "exitCode": code}));
                break;
            }
            EventBody::Killed { reason, signal } => {
                out.killed = Some(reason.as_str().to_owned());
                out.signal = signal;
                recorder.record(
                    json!({"type": "killed", "execId": exec_id, "reason": reason.as_str()}),
                );
                break;
            }
            _ => {}
        }
    }
    out.stdout = String::from_utf8_lossy(&stdout).into_owned();
    out.stderr = String::from_utf8_lossy(&stderr).into_owned();
    Ok(out)
}

fn keep(kept: &mut Vec<u8>, data: &[u8], truncated: &mut bool) {
    let room = MAX_OUTPUT.saturating_sub(kept.len());
    if data.len() > room {
        *truncated = true;
    }
    kept.extend_from_slice(&data[..data.len().min(room)]);
}

/// Progress notifications carrying output, when the client asked for them.
struct Progress {
    peer: Peer<RoleServer>,
    token: Option<ProgressToken>,
    sent: std::sync::atomic::AtomicU64,
}

impl Progress {
    fn new(context: &RequestContext<RoleServer>) -> Self {
        Self {
            peer: context.peer.clone(),
            token: context.meta.get_progress_token(),
            sent: std::sync::atomic::AtomicU64::new(0),
        }
    }

    async fn send(&self, stream: &str, data: &[u8]) {
        let Some(token) = &self.token else { return };
        let n = self.sent.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        let param = ProgressNotificationParam::new(token.clone(), n as f64)
            .with_message(format!("{stream}: {}", String::from_utf8_lossy(data)));
        if let Err(e) = self.peer.notify_progress(param).await {
            tracing::debug!("sending exec output as progress: {e}");
        }
    }
}
