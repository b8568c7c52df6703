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
            push_json_string(&mut out, text);
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

/// Appends `text` as a JSON string, quotes included: the same bytes as
/// `serde_json`'s, but looked at eight bytes at a time. Output is mostly
/// text that needs no escape, and `serde_json` looks at it a byte at a time:
/// a fifth of the server's time on a 1 GiB stream (issue 18 item 4).
fn push_json_string(out: &mut Vec<u8>, text: &str) {
    let bytes = text.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    let mut written = 0; // bytes[..written] are in `out`
    let words = bytes.chunks_exact(8);
    let tail = bytes.len() - words.remainder().len();
    for (index, word) in words.enumerate() {
        let dirty =
            <[u8; 8]>::try_from(word).map_or(true, |w| word_needs_escape(u64::from_ne_bytes(w)));
        if dirty {
            push_escaped(out, bytes, index * 8..index * 8 + 8, &mut written);
        }
    }
    push_escaped(out, bytes, tail..bytes.len(), &mut written);
    out.extend_from_slice(&bytes[written..]);
    out.push(b'"');
}

/// Writes what precedes each byte of `bytes[range]` that JSON escapes, then
/// its escape; `written` is where `out` has got to in `bytes`.
fn push_escaped(
    out: &mut Vec<u8>,
    bytes: &[u8],
    range: std::ops::Range<usize>,
    written: &mut usize,
) {
    for at in range {
        let byte = bytes[at];
        let short: &[u8] = match byte {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x08 => b"\\b",
            0x0c => b"\\f",
            0x00..=0x1f => b"",
            _ => continue,
        };
        out.extend_from_slice(&bytes[*written..at]);
        *written = at + 1;
        if short.is_empty() {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.extend_from_slice(b"\\u00");
            out.extend_from_slice(&[HEX[usize::from(byte >> 4)], HEX[usize::from(byte & 0xf)]]);
        } else {
            out.extend_from_slice(short);
        }
    }
}

/// Whether one of the eight bytes of `word` is one JSON escapes: below
/// 0x20, a quote or a backslash. Exact for the word as a whole (a borrow
/// can only mark a byte above one that matched).
fn word_needs_escape(word: u64) -> bool {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    let below = |w: u64, n: u8| w.wrapping_sub(ONES * u64::from(n)) & !w & HIGHS;
    let equal = |n: u8| below(word ^ (ONES * u64::from(n)), 1);
    below(word, 0x20) | equal(b'"') | equal(b'\\') != 0
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

    /// Every character JSON may escape, at every offset in a word, in runs
    /// long and short: the same text as `serde_json`'s.
    #[test]
    fn strings_are_escaped_as_serde_json_escapes_them() {
        let mut cases: Vec<String> = vec![String::new(), "a".into(), "é😀 plain".into()];
        let all: String = (0u8..0x80).map(char::from).collect();
        cases.push(all.clone());
        for offset in 0..17 {
            for special in (0u8..0x21).chain([b'"', b'\\', 0x7f, b'a']) {
                let mut text = "x".repeat(offset);
                text.push(char::from(special));
                text.push_str(&"yz".repeat(offset));
                text.push_str("\u{e9}\u{1F600}");
                cases.push(text);
            }
        }
        cases.push(all.repeat(40));
        for text in cases {
            let mut ours = Vec::new();
            push_json_string(&mut ours, &text);
            assert_eq!(
                String::from_utf8(ours).unwrap(),
                serde_json::to_string(&text).unwrap(),
                "{text:?}"
            );
        }
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
