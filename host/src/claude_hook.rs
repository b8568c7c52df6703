//! Claude Code's `PreToolUse` hook, judged by the command policy (SPEC H6,
//! H13): the input it sends, the output it reads. One place, so the HTTP
//! hook (`POST /v1/policy/check?format=claude-code`) and the command hook
//! (`cc_server policy hook --format claude-code`) cannot drift apart.
//!
//! Claude Code runs a tool when its hook fails in any way other than the
//! blocking exit status ([`EXIT_BLOCK`]); so every failure of the command
//! hook must end in that status, never in another.

use sandbox_plugin_api::SandboxMode;
use sandbox_policy::{Decision, Verdict};
use serde_json::{Value, json};

/// The exit status Claude Code reads as "block this tool call"; what the
/// hook wrote on stderr reaches the model as the reason.
pub const EXIT_BLOCK: u8 = 2;

/// The most a hook input may weigh (a command line is far smaller; a larger
/// input is refused, not truncated).
pub const MAX_INPUT: usize = 4 * 1024 * 1024;

/// What a hook input asks.
#[derive(Debug, PartialEq, Eq)]
pub enum Call {
    /// A Bash call: this command line, run from `cwd` when it says.
    Bash {
        command: String,
        cwd: Option<String>,
    },
    /// Another tool: not the command policy's to judge (no decision, the
    /// normal flow goes on).
    Other,
}

/// Why a hook input could not be judged.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum InputError {
    #[error("the hook input is not JSON: {0}")]
    NotJson(String),
    #[error("the hook input is not a JSON object")]
    NotObject,
    #[error("the hook input has no tool_name string")]
    NoToolName,
    #[error("the hook input has no tool_input.command string")]
    NoCommand,
    #[error("the hook input is larger than {MAX_INPUT} bytes")]
    TooLarge,
}

impl InputError {
    /// The field at fault, for the API's error body.
    pub fn field(&self) -> Option<&'static str> {
        match self {
            Self::NoToolName => Some("tool_name"),
            Self::NoCommand => Some("tool_input.command"),
            _ => None,
        }
    }
}

/// Reads a `PreToolUse` input. The input has many fields and grows; only
/// these matter.
pub fn parse(input: &[u8]) -> Result<Call, InputError> {
    if input.len() > MAX_INPUT {
        return Err(InputError::TooLarge);
    }
    let value: Value =
        serde_json::from_slice(input).map_err(|e| InputError::NotJson(e.to_string()))?;
    if !value.is_object() {
        return Err(InputError::NotObject);
    }
    let Some(tool) = value["tool_name"].as_str() else {
        return Err(InputError::NoToolName);
    };
    if tool != "Bash" {
        return Ok(Call::Other);
    }
    let Some(command) = value["tool_input"]["command"].as_str() else {
        return Err(InputError::NoCommand);
    };
    Ok(Call::Bash {
        command: command.to_owned(),
        cwd: value["cwd"].as_str().map(str::to_owned),
    })
}

/// The hook output for a verdict. A prompt becomes Claude Code's own "ask":
/// its user is the owner present to answer.
pub fn answer(verdict: &Verdict, mode: SandboxMode) -> Value {
    let kind = match verdict.decision {
        Decision::Allow => "allow",
        Decision::Prompt => "ask",
        Decision::Deny => "deny",
    };
    decision(kind, &reason(verdict, mode))
}

/// The hook output with one decision (`allow`, `ask`, `deny`) and its
/// reason, which the model reads.
pub fn decision(decision: &str, reason: &str) -> Value {
    json!({
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": decision,
            "permissionDecisionReason": reason,
        }
    })
}

/// What the model reads: the rule, and for a refusal what would change it.
fn reason(verdict: &Verdict, mode: SandboxMode) -> String {
    match verdict.decision {
        Decision::Allow => format!("cc_server policy: {}", verdict.rule),
        Decision::Prompt | Decision::Deny => format!(
            "cc_server policy ({} mode): {}; rules: `[policy] guardrails` in cc_server's config",
            mode.as_str(),
            verdict.rule
        ),
    }
}

/// An answer the hook got back is one Claude Code reads as a decision or
/// as none: an object whose `hookSpecificOutput`, when present, names
/// `PreToolUse` and a known decision. Anything else is a failure.
pub fn valid_answer(answer: &Value) -> bool {
    let Some(object) = answer.as_object() else {
        return false;
    };
    match object.get("hookSpecificOutput") {
        None => object.is_empty(),
        Some(output) => {
            output["hookEventName"] == "PreToolUse"
                && matches!(
                    output["permissionDecision"].as_str(),
                    Some("allow" | "ask" | "deny")
                )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bash_call_is_read_with_its_cwd() {
        let call = parse(
            br#"{"hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{"command":"ls"},"cwd":"/w"}"#,
        )
        .unwrap();
        assert_eq!(
            call,
            Call::Bash {
                command: "ls".into(),
                cwd: Some("/w".into())
            }
        );
        assert_eq!(
            parse(br#"{"tool_name":"Read","tool_input":{}}"#).unwrap(),
            Call::Other
        );
    }

    #[test]
    fn bad_input_is_an_error_never_a_pass() {
        assert!(matches!(parse(b"{"), Err(InputError::NotJson(_))));
        assert_eq!(parse(b"[]"), Err(InputError::NotObject));
        assert_eq!(parse(b"{}"), Err(InputError::NoToolName));
        assert_eq!(
            parse(br#"{"tool_name":"Bash","tool_input":{"command":7}}"#),
            Err(InputError::NoCommand)
        );
        let big = vec![b' '; MAX_INPUT + 1];
        assert_eq!(parse(&big), Err(InputError::TooLarge));
    }

    #[test]
    fn only_a_decision_or_none_is_a_valid_answer() {
        assert!(valid_answer(&json!({})));
        assert!(valid_answer(&json!({"hookSpecificOutput": {
            "hookEventName": "PreToolUse", "permissionDecision": "deny"}})));
        assert!(!valid_answer(&json!([])));
        assert!(!valid_answer(&json!({"error": "unauthorized"})));
        assert!(!valid_answer(&json!({"hookSpecificOutput": {
            "hookEventName": "PreToolUse", "permissionDecision": "maybe"}})));
    }
}
