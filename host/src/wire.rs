//! Events as JSON lines: the NDJSON stream of the API and `run --json`; and
//! the backends, their probes and the default selection as JSON.
//!
//! Output bytes are sent as `data` when they are valid UTF-8, otherwise as
//! `dataBase64`, so the stream is binary-safe.

use base64::Engine as _;
use sandbox_plugin_api::{Event, EventBody};
use sandbox_policy::Verdict;
use sandbox_registry::{Registry, Source};
use serde_json::{Value, json};

use sandbox_runtime::command_policy::Refusal;

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
            if let Some((rule, remedy)) = sandbox_runtime::egress::cap_explanation(v) {
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
    sandbox_runtime::command_policy::verdict_json(verdict)
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
/// `serde_json`'s, but looked at eight bytes at a time. Output is mostly text
/// that needs no escape, and `serde_json` looks at it a byte at a time, a large
/// share of the server's time on a long output stream (SPEC F10; figures in
/// docs/measurements.md).
fn push_json_string(out: &mut Vec<u8>, text: &str) {
    let bytes = text.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    let mut written = 0; // bytes[..written] are in `out`
    let words = bytes.chunks_exact(8);
    let tail = bytes.len() - words.remainder().len();
    for (index, word) in words.enumerate() {
        let Ok(word) = <[u8; 8]>::try_from(word) else {
            continue; // chunks_exact(8) gives eight bytes
        };
        // Each escaped byte's high bit, lowest address first.
        let mut marks = escapes_in(u64::from_le_bytes(word));
        while marks != 0 {
            let at = index * 8 + marks.trailing_zeros() as usize / 8;
            push_escape(out, bytes, at, &mut written);
            marks &= marks - 1;
        }
    }
    for at in tail..bytes.len() {
        if matches!(bytes[at], 0x00..=0x1f | b'"' | b'\\') {
            push_escape(out, bytes, at, &mut written);
        }
    }
    out.extend_from_slice(&bytes[written..]);
    out.push(b'"');
}

/// Writes what precedes `bytes[at]` since `written`, then its escape.
fn push_escape(out: &mut Vec<u8>, bytes: &[u8], at: usize, written: &mut usize) {
    out.extend_from_slice(&bytes[*written..at]);
    *written = at + 1;
    let byte = bytes[at];
    let short: &[u8] = match byte {
        b'"' => b"\\\"",
        b'\\' => b"\\\\",
        b'\n' => b"\\n",
        b'\r' => b"\\r",
        b'\t' => b"\\t",
        0x08 => b"\\b",
        0x0c => b"\\f",
        _ => b"",
    };
    if short.is_empty() {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        out.extend_from_slice(b"\\u00");
        out.extend_from_slice(&[HEX[usize::from(byte >> 4)], HEX[usize::from(byte & 0xf)]]);
    } else {
        out.extend_from_slice(short);
    }
}

/// The high bit of each byte of `word` that JSON escapes (below 0x20, a
/// quote, a backslash), exactly: no carry crosses a byte, since each byte's
/// low seven bits are added to at most 0x7f.
fn escapes_in(word: u64) -> u64 {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const LOWS: u64 = ONES * 0x7f;
    const HIGHS: u64 = ONES * 0x80;
    // A byte is below `n` (at most 0x80) when neither its high bit nor the
    // carry out of its low bits plus 0x80 - n is set.
    let below = |w: u64, n: u8| !(((w & LOWS) + ONES * u64::from(0x80 - n)) | w) & HIGHS;
    let equal = |c: u8| below(word ^ (ONES * u64::from(c)), 1);
    below(word, 0x20) | equal(b'"') | equal(b'\\')
}

/// One line, newline included.
pub fn line(value: &Value) -> String {
    let mut text = value.to_string();
    text.push('\n');
    text
}

/// The default selection, or why there is none.
pub type Default =
    Result<sandbox_registry::select::Selection, sandbox_registry::select::SelectError>;

/// Where a backend came from, as JSON.
pub fn source_json(source: &Source) -> Value {
    match source {
        Source::Builtin => json!({"kind": "builtin"}),
        Source::File {
            path,
            plugin,
            version,
            api_version,
        } => json!({
            "kind": "file", "path": path, "plugin": plugin, "pluginVersion": version, "apiVersion": api_version,
        }),
    }
}

/// Every backend with its probe, as JSON.
pub fn backends_json(registry: &Registry) -> Value {
    registry
        .entries
        .iter()
        .map(|e| json!({"name": e.name(), "source": source_json(&e.source), "probe": e.report}))
        .collect()
}

/// Every skipped file, as JSON.
pub fn problems_json(registry: &Registry) -> Value {
    registry
        .problems
        .iter()
        .map(|p| json!({"path": p.path, "error": p.error.to_string()}))
        .collect()
}

/// The default selection, as JSON.
pub fn default_json(default: &Default) -> Value {
    match default {
        Ok(sel) => json!({"backend": sel.backend, "kind": sel.kind, "notice": sel.notice()}),
        Err(e) => json!({"error": e.to_string()}),
    }
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
        // Bytes at or above 0x80 whose low bits are those of an escaped
        // byte (0xa2, 0xdc, 0x8a, …) are never escaped.
        let wide: String = (0x80u32..0x800)
            .chain(0xfe00..0x10100)
            .filter_map(char::from_u32)
            .collect();
        cases.push(wide.clone());
        cases.push(format!("{wide}{all}{wide}"));
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
