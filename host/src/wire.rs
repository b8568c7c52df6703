//! Events as JSON lines: the NDJSON stream of the API and `run --json`.
//!
//! Output bytes are sent as `data` when they are valid UTF-8, otherwise as
//! `dataBase64`, so the stream is binary-safe.

use base64::Engine as _;
use sandbox_plugin_api::{Event, EventBody};
use sandbox_policy::Verdict;
use serde_json::{Value, json};

use crate::command_policy::Refusal;

/// One event as a JSON object.
pub fn event_json(event: &Event) -> Value {
    let id = event.exec_id;
    let kind = event.body.type_name();
    match &event.body {
        EventBody::Starting | EventBody::Ready => json!({"type": kind, "execId": id}),
        EventBody::Stdout(data) | EventBody::Stderr(data) => match std::str::from_utf8(data) {
            Ok(text) => json!({"type": kind, "execId": id, "data": text}),
            Err(_) => json!({
                "type": kind,
                "execId": id,
                "dataBase64": base64::engine::general_purpose::STANDARD.encode(data),
            }),
        },
        EventBody::Exit { code, signal } => match signal {
            Some(sig) => json!({"type": kind, "execId": id, "exitCode": code, "signal": sig}),
            None => json!({"type": kind, "execId": id, "exitCode": code}),
        },
        EventBody::Killed { reason, signal } => {
            json!({"type": kind, "execId": id, "reason": reason.as_str(), "signal": signal})
        }
        EventBody::Violation(v) => {
            let mut event = json!({"type": kind, "execId": id, "action": v.action, "target": v.target, "raw": v.raw});
            if let Some(e) = sandbox_plugin_api::violation::explain(&v.action) {
                event["rule"] = e.rule.into();
                event["remedy"] = e.remedy.into();
                event["inferred"] = e.inferred.into();
            }
            if let Some((rule, remedy)) = crate::egress::cap_explanation(v) {
                event["rule"] = rule.into();
                event["remedy"] = remedy.into();
            }
            event
        }
        EventBody::State(state) => json!({"type": kind, "execId": id, "state": state.as_str()}),
    }
}

/// The first line of an exec stream: which exec this is, where it runs and
/// what the command policy decided (absent when the policy is off).
pub fn started_json(exec_id: u64, backend: &str, verdict: Option<&Verdict>) -> Value {
    let mut started = json!({"type": "started", "execId": exec_id, "backend": backend});
    if let Some(verdict) = verdict {
        started["policy"] = verdict_json(verdict);
    }
    started
}

/// A policy verdict: the decision, the rule, every command with its class.
pub fn verdict_json(verdict: &Verdict) -> Value {
    let commands: Vec<Value> = verdict
        .classes
        .iter()
        .map(|(class, command)| json!({"class": class.as_str(), "command": command}))
        .collect();
    json!({
        "decision": verdict.decision.as_str(),
        "rule": verdict.rule,
        "commands": commands,
        "reasons": verdict.reasons,
        "opaque": verdict.opaque,
    })
}

/// A command the policy refused: it never reached the sandbox.
pub fn refusal_json(refusal: &Refusal) -> Value {
    json!({
        "type": "refused",
        "error": refusal.to_string(),
        "policy": verdict_json(&refusal.verdict),
        "answer": refusal.answer,
    })
}

/// The last line of a stream that ended without `exit` or `killed`.
pub fn error_json(exec_id: u64, message: &str) -> Value {
    json!({"type": "error", "execId": exec_id, "message": message})
}

/// [`line`] of [`event_json`], as bytes, written straight from the event's
/// bytes for output — the bulk of a stream — without building a JSON value
/// first (a copy and an allocation per chunk fewer). The same text.
pub fn event_line(event: &Event) -> Vec<u8> {
    use std::io::Write as _;
    let (EventBody::Stdout(data) | EventBody::Stderr(data)) = &event.body else {
        return line(&event_json(event)).into_bytes();
    };
    let mut out = Vec::with_capacity(data.len() + data.len() / 8 + 64);
    // Writing into a Vec cannot fail.
    match std::str::from_utf8(data) {
        Ok(text) => {
            out.extend_from_slice(b"{\"data\":");
            let _ = serde_json::to_writer(&mut out, text);
        }
        Err(_) => {
            out.extend_from_slice(b"{\"dataBase64\":\"");
            let mut encoded = String::new();
            base64::engine::general_purpose::STANDARD.encode_string(data, &mut encoded);
            out.extend_from_slice(encoded.as_bytes());
            out.push(b'"');
        }
    }
    let kind = event.body.type_name();
    let _ = writeln!(out, ",\"execId\":{},\"type\":\"{kind}\"}}", event.exec_id);
    out
}

/// One line, newline included.
pub fn line(value: &Value) -> String {
    let mut text = value.to_string();
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandbox_plugin_api::KillReason;

    #[test]
    fn text_and_binary_output() {
        let text = event_json(&Event {
            exec_id: 2,
            body: EventBody::Stdout(b"hi\n".to_vec()),
        });
        assert_eq!(text, json!({"type": "stdout", "execId": 2, "data": "hi\n"}));
        let binary = event_json(&Event {
            exec_id: 2,
            body: EventBody::Stderr(vec![0xff, 0]),
        });
        assert_eq!(
            binary,
            json!({"type": "stderr", "execId": 2, "dataBase64": "/wA="})
        );
    }

    #[test]
    fn terminal_events() {
        let exit = event_json(&Event {
            exec_id: 1,
            body: EventBody::Exit {
                code: 3,
                signal: None,
            },
        });
        assert_eq!(exit, json!({"type": "exit", "execId": 1, "exitCode": 3}));
        let killed = event_json(&Event {
            exec_id: 1,
            body: EventBody::Killed {
                reason: KillReason::Timeout,
                signal: Some(9),
            },
        });
        assert_eq!(
            killed,
            json!({"type": "killed", "execId": 1, "reason": "timeout", "signal": 9})
        );
        assert!(line(&killed).ends_with("}\n"));
    }

    /// The output lines written directly are those of the JSON values.
    #[test]
    fn output_lines_are_the_values_lines() {
        let bodies = [
            EventBody::Stdout(b"hi \"there\"\n\t\0\x7f \xc3\xa9".to_vec()),
            EventBody::Stderr(vec![0xff, 0, 1, 2]),
            EventBody::Stdout(Vec::new()),
            EventBody::Exit {
                code: 1,
                signal: None,
            },
        ];
        for body in bodies {
            let event = Event { exec_id: 7, body };
            assert_eq!(
                String::from_utf8(event_line(&event)).unwrap(),
                line(&event_json(&event)),
                "{event:?}"
            );
        }
    }
}
