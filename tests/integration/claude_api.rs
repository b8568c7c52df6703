//! A fake Anthropic Messages API on loopback, for the real Claude Code CLI
//! (tests/integration/claude.rs, bench/claude): `POST /v1/messages`
//! answered as the API streams (server-sent events: `message_start`, the
//! content blocks with their deltas, `message_delta`, `message_stop`).
//!
//! It plays a script: to each request that offers the Bash tool it answers
//! with the script's next command as a `tool_use` call, and once the script
//! is played, with a text that ends the turn. It keeps every `tool_result`
//! Claude Code sends back, which is what the model would have read.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

/// The text the fake model ends its turn with.
pub const FINAL_TEXT: &str = "fake model: turn done";

#[derive(Default)]
struct State {
    script: Vec<(String, Value)>,
    next: usize,
    results: Vec<ToolResult>,
    requests: usize,
    tools: std::collections::BTreeSet<String>,
    bodies: Vec<String>,
    api_keys: Vec<Option<String>>,
    authorizations: Vec<Option<String>>,
    probe_acked: bool,
}

/// One `tool_result` as the model received it.
#[derive(Debug, Clone)]
pub struct ToolResult {
    pub tool_use_id: String,
    pub is_error: bool,
    /// The text content (a string, or the text blocks joined).
    pub content: String,
}

pub struct FakeAnthropic {
    pub addr: SocketAddr,
    state: Arc<Mutex<State>>,
}

impl FakeAnthropic {
    /// Listens on 127.0.0.1 and plays `script`, one Bash command per
    /// model turn.
    pub fn start(script: &[&str]) -> Self {
        Self::start_calls(
            script
                .iter()
                .map(|command| {
                    (
                        "Bash".to_owned(),
                        json!({"command": command, "description": "scripted by the test"}),
                    )
                })
                .collect(),
        )
    }

    /// Plays any tool calls: (tool name, input), one per model turn.
    pub fn start_calls(script: Vec<(String, Value)>) -> Self {
        Self::start_with(script, None)
    }

    /// Plays `script` over TLS with `tls` (a test CA's server config).
    pub fn start_tls(script: &[&str], tls: Arc<rustls::ServerConfig>) -> Self {
        let calls = script
            .iter()
            .map(|command| {
                (
                    "Bash".to_owned(),
                    json!({"command": command, "description": "scripted by the test"}),
                )
            })
            .collect();
        Self::start_with(calls, Some(tls))
    }

    fn start_with(script: Vec<(String, Value)>, tls: Option<Arc<rustls::ServerConfig>>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(Mutex::new(State {
            script,
            ..State::default()
        }));
        let shared = Arc::clone(&state);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { break };
                let state = Arc::clone(&shared);
                let tls = tls.clone();
                std::thread::spawn(move || {
                    let Some(config) = tls else {
                        let _ = serve(stream, &state);
                        return;
                    };
                    let Ok(connection) = rustls::ServerConnection::new(config) else {
                        return;
                    };
                    let mut tls = rustls::StreamOwned::new(connection, stream);
                    let _ = serve(&mut tls, &state);
                    tls.conn.send_close_notify();
                    let _ = tls.flush();
                });
            }
        });
        Self { addr, state }
    }

    /// The names of every tool Claude Code offered the model.
    pub fn tools_offered(&self) -> Vec<String> {
        self.state.lock().unwrap().tools.iter().cloned().collect()
    }

    /// Whether some request's body contained `needle` (a tool Claude Code
    /// defers is only named in a message, not offered).
    pub fn saw(&self, needle: &str) -> bool {
        self.state
            .lock()
            .unwrap()
            .bodies
            .iter()
            .any(|b| b.contains(needle))
    }

    /// The `x-api-key` of every request, in order (`None`: it had none).
    pub fn api_keys(&self) -> Vec<Option<String>> {
        self.state.lock().unwrap().api_keys.clone()
    }

    /// The `authorization` of every request, in order.
    pub fn authorizations(&self) -> Vec<Option<String>> {
        self.state.lock().unwrap().authorizations.clone()
    }

    /// `ANTHROPIC_BASE_URL` for Claude Code.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every tool result received so far.
    pub fn results(&self) -> Vec<ToolResult> {
        self.state.lock().unwrap().results.clone()
    }
}

fn serve(mut stream: impl Read + Write, state: &Mutex<State>) -> std::io::Result<()> {
    let mut reader = BufReader::new(&mut stream);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut parts = line.split_whitespace();
    let (method, path) = (
        parts.next().unwrap_or("").to_owned(),
        parts.next().unwrap_or("").to_owned(),
    );
    let mut length = 0usize;
    let (mut api_key, mut authorization) = (None, None);
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header)? == 0 || header == "\r\n" {
            break;
        }
        if let Some((name, value)) = header.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().unwrap_or(0);
        }
        if let Some((name, value)) = header.split_once(':')
            && name.eq_ignore_ascii_case("x-api-key")
        {
            api_key = Some(value.trim().to_owned());
        }
        if let Some((name, value)) = header.split_once(':')
            && name.eq_ignore_ascii_case("authorization")
        {
            authorization = Some(value.trim().to_owned());
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body)?;
    drop(reader);
    let out = &mut stream;
    {
        let mut state = state.lock().unwrap();
        state.api_keys.push(api_key);
        state.authorizations.push(authorization);
    }
    if path.starts_with("/v1/stream-probe") {
        return stream_probe(&path, out, state);
    }
    if method != "POST" || !path.starts_with("/v1/messages") {
        return out.write_all(
            b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
        );
    }
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    if path.starts_with("/v1/messages/count_tokens") {
        let answer = br#"{"input_tokens":10}"#;
        write!(
            out,
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            answer.len()
        )?;
        return out.write_all(answer);
    }
    let command = {
        let mut state = state.lock().unwrap();
        state.requests += 1;
        state
            .bodies
            .push(String::from_utf8_lossy(&body).into_owned());
        for tool in request["tools"].as_array().into_iter().flatten() {
            if let Some(name) = tool["name"].as_str() {
                state.tools.insert(name.to_owned());
            }
        }
        state.results.extend(tool_results(&request));
        let offers_bash = request["tools"]
            .as_array()
            .is_some_and(|tools| tools.iter().any(|t| t["name"] == "Bash"));
        if offers_bash && state.next < state.script.len() {
            state.next += 1;
            let (tool, input) = state.script[state.next - 1].clone();
            Some((state.next, tool, input))
        } else {
            None
        }
    };
    out.write_all(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nconnection: close\r\n\r\n",
    )?;
    for (event, data) in stream_events(&request, command) {
        write!(out, "event: {event}\ndata: {data}\n\n")?;
        out.flush()?;
    }
    Ok(())
}

/// The streaming probe: `/v1/stream-probe` sends its first event and holds
/// the rest until `/v1/stream-probe/ack` arrives (at most 20 s), so a
/// client sees the first event only if nothing between buffers the answer.
fn stream_probe(path: &str, mut out: impl Write, state: &Mutex<State>) -> std::io::Result<()> {
    let acked = |state: &Mutex<State>| state.lock().unwrap().probe_acked;
    if path.starts_with("/v1/stream-probe/ack") {
        state.lock().unwrap().probe_acked = true;
        return out.write_all(
            b"HTTP/1.1 200 OK\r\ncontent-length: 6\r\nconnection: close\r\n\r\nacked\n",
        );
    }
    out.write_all(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n",
    )?;
    out.write_all(b"event: first\ndata: {}\n\n")?;
    out.flush()?;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !acked(state) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let last = if acked(state) { "second" } else { "timed-out" };
    write!(out, "event: {last}\ndata: {{}}\n\n")?;
    out.flush()
}

/// The tool results in the request's last message.
fn tool_results(request: &Value) -> Vec<ToolResult> {
    let Some(last) = request["messages"].as_array().and_then(|m| m.last()) else {
        return Vec::new();
    };
    let Some(blocks) = last["content"].as_array() else {
        return Vec::new();
    };
    blocks
        .iter()
        .filter(|b| b["type"] == "tool_result")
        .map(|b| ToolResult {
            tool_use_id: b["tool_use_id"].as_str().unwrap_or("").to_owned(),
            is_error: b["is_error"].as_bool().unwrap_or(false),
            content: match &b["content"] {
                Value::String(s) => s.clone(),
                Value::Array(parts) => parts
                    .iter()
                    .filter_map(|p| p["text"].as_str())
                    .collect::<Vec<_>>()
                    .join("\n"),
                _ => String::new(),
            },
        })
        .collect()
}

/// One streamed answer: a Bash call, or the closing text.
fn stream_events(
    request: &Value,
    call: Option<(usize, String, Value)>,
) -> Vec<(&'static str, Value)> {
    let mut events = vec![(
        "message_start",
        json!({"type": "message_start", "message": {
            "id": "msg_fake", "type": "message", "role": "assistant",
            "model": request["model"], "content": [], "stop_reason": null,
            "stop_sequence": null, "usage": {"input_tokens": 1, "output_tokens": 1}}}),
    )];
    let stop = match call {
        Some((n, tool, input)) => {
            let id = format!("toolu_fake_{n}");
            events.push((
                "content_block_start",
                json!({"type": "content_block_start", "index": 0, "content_block":
                    {"type": "tool_use", "id": id, "name": tool, "input": {}}}),
            ));
            events.push((
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 0, "delta":
                    {"type": "input_json_delta", "partial_json": input.to_string()}}),
            ));
            "tool_use"
        }
        None => {
            events.push((
                "content_block_start",
                json!({"type": "content_block_start", "index": 0, "content_block":
                    {"type": "text", "text": ""}}),
            ));
            events.push((
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 0, "delta":
                    {"type": "text_delta", "text": FINAL_TEXT}}),
            ));
            "end_turn"
        }
    };
    events.push((
        "content_block_stop",
        json!({"type": "content_block_stop", "index": 0}),
    ));
    events.push((
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null},
            "usage": {"output_tokens": 5}}),
    ));
    events.push(("message_stop", json!({"type": "message_stop"})));
    events
}
