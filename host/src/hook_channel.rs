//! Claude Code's `PreToolUse` hook inside a sandbox, answered over the
//! sandbox's own server channel (SPEC B10, H4, H12, H13): the hook process
//! inside is `sandbox-init call claude-code-hook`, the caller is the
//! session whose proxy carried the call (no command can choose it), and
//! the Bash call passes the very admission `Session::exec` applies — the
//! session's mode and guardrails, a prompt put to its approver (the API's
//! owners, `--ask`'s terminal; none = deny). The answer is always allow or
//! deny, never Claude Code's own "ask": the sandbox has no approval path.
//!
//! Every failure — a session that is gone, an input that cannot be read —
//! is the blocking exit status, which the client passes on as its own.

use std::path::Path;
use std::sync::Arc;

use sandbox_runtime::channel::{Call, Handler, Reply, failure};
use sandbox_runtime::command_policy::workdir;
use sandbox_runtime::sessions::Sessions;
use serde_json::{Value, json};

use crate::claude_hook::{self, EXIT_BLOCK};
use crate::wire;

/// The handler's name: inside, `$CC_SERVER_CALL call claude-code-hook`.
pub const NAME: &str = "claude-code-hook";

/// Makes every session of `sessions` answer the hook.
pub fn register(sessions: &Sessions) -> anyhow::Result<()> {
    let handler: Handler = Arc::new(|call: Call| Box::pin(judge(call)));
    sessions.channel().register(NAME, handler)?;
    Ok(())
}

async fn judge(call: Call) -> Reply {
    let Some(session) = call.caller.session() else {
        return failure(
            EXIT_BLOCK,
            "cc_server refused this tool call (the hook fails closed): the sandbox is not live",
        );
    };
    let (command, cwd) = match claude_hook::parse(&call.input) {
        Ok(claude_hook::Call::Bash { command, cwd }) => (command, cwd),
        // Not ours to judge: no decision, the normal flow goes on.
        Ok(claude_hook::Call::Other) => return answer(&json!({})),
        Err(e) => {
            return failure(
                EXIT_BLOCK,
                format!("cc_server refused this tool call (the hook fails closed): {e}"),
            );
        }
    };
    let place = cwd.and_then(|cwd| {
        workdir::plan_host_dir(&session.launched_spec().bind_mounts, Path::new(&cwd))
    });
    // On `none` the policy is the only barrier, as for `Session::exec`.
    let barrier = if session.backend_name() == "none" {
        sandbox_policy::Barrier::PolicyOnly
    } else {
        sandbox_policy::Barrier::Sandbox
    };
    let argv = ["bash".to_owned(), "-c".to_owned(), command];
    let admitted = session
        .commands()
        .admit(&session.id, session.mode(), &argv, place, barrier)
        .await;
    answer(&match admitted {
        // Admitted: allowed, or asked and allowed by the owner.
        Ok(Some(verdict)) => claude_hook::decision(
            "allow",
            &match verdict.decision {
                sandbox_policy::Decision::Prompt => {
                    format!("cc_server policy: {}; the owner allowed it", verdict.rule)
                }
                _ => format!("cc_server policy: {}", verdict.rule),
            },
        ),
        Ok(None) => claude_hook::decision(
            "allow",
            "cc_server policy: off ([policy] enforce = false); only the sandbox holds",
        ),
        Err(refusal) => claude_hook::decision(
            "deny",
            &format!(
                "cc_server {refusal} ({} mode; rules: `[policy] guardrails` in cc_server's config)",
                session.mode().as_str()
            ),
        ),
    })
}

fn answer(output: &Value) -> Reply {
    Reply {
        exit: 0,
        stdout: wire::line(output).into_bytes(),
        stderr: Vec::new(),
    }
}
