//! Terminals (SPEC D1–D3), the owner's only:
//!
//! - `POST /v1/terminals` `{backend?, workdir?, network?, cols, rows}` — a shell on a
//!   terminal in a session of its own: `none` by default (a host shell,
//!   badged as such); `native` (or a backend's name) only when asked, with
//!   the D2 profile — `$HOME` and the workdir bound writable, with every
//!   protection a bind gets (a home's dot-files and git metadata by
//!   allowlist, secrets masked), and nothing else of the host. A backend
//!   that cannot run is an error naming why, never a downgrade. `network`
//!   is `allowlist` unless `open` (D2: everything but the fixed deny list)
//!   or `off` is asked for; the terminal says which it has.
//! - `POST /v1/terminals/{id}/tickets` — a single-use ticket to attach.
//! - `GET /v1/terminals/{id}/ws?ticket=…` — the WebSocket: binary frames
//!   carry the terminal's bytes both ways; text frames carry JSON control,
//!   `{"type":"resize","cols","rows"}` and `{"type":"signal","signal"}`
//!   from the client, `{"type":"exit","code","signal"}` from the server. A
//!   client too slow to take its output is closed with 1008.
//! - `GET /v1/terminals` and `DELETE /v1/terminals/{id}`.

use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::{delete, get, post};
use axum::{Extension, Json};
use sandbox_plugin_api::{ExecRequest, PtySize, SandboxBindMount, SandboxSpec};
use sandbox_terminals::{Attached, Output, Terminal};
use serde::Deserialize;
use serde_json::json;

use super::connections::Held;
use super::extract::{ApiPath, JsonBody, QueryPairs, only_known};
use super::listener::UpgradeSlot;
use super::{ApiError, AppState};
use sandbox_runtime::env;
use sandbox_runtime::input::parse_strict;

/// The area's routes, with their full paths (the entry-point scan reads them
/// as written: see `entry_points`).
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/terminals", get(list).post(create))
        .route("/v1/terminals/{id}", delete(close))
        .route("/v1/terminals/{id}/tickets", post(ticket))
        .route("/v1/terminals/{id}/ws", get(attach))
}

/// The body of `POST /v1/terminals`.
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub(super) struct CreateCall {
    /// `none` (the default), `native`, or a backend's name.
    backend: Option<String>,
    /// The terminal's egress: `allowlist` (the default: the server's
    /// allowlist, as every session), `open` (everything but the fixed deny
    /// list and non-public addresses, SPEC D2) or `off`.
    network: Option<String>,
    workdir: Option<PathBuf>,
    cols: u16,
    rows: u16,
}

fn bad(message: impl Into<String>, field: &str) -> ApiError {
    ApiError {
        status: StatusCode::BAD_REQUEST,
        message: message.into(),
        field: Some(field.into()),
        extra: None,
    }
}

/// The backend a terminal asks for: `none` unless another is named
/// (`native` is the host's native sandbox, as everywhere).
fn backend_name(asked: Option<&str>) -> Result<&str, ApiError> {
    match asked {
        None => Ok("none"),
        Some("") => Err(bad(
            "`backend` is empty; name one, or leave it out for `none`",
            "backend",
        )),
        Some(name) => Ok(name),
    }
}

/// The D2 profile: `$HOME` and the workdir, bound writable; the binds'
/// own rules protect what the host runs later and mask the secrets.
fn terminal_spec(
    id: &str,
    wrapped: bool,
    workdir: Option<PathBuf>,
    network: Option<&str>,
) -> Result<SandboxSpec, ApiError> {
    let (network_enabled, network_open) = match network {
        None | Some("allowlist") => (true, false),
        Some("open") => (true, true),
        Some("off") => (false, false),
        Some(other) => {
            return Err(bad(
                format!(
                    "`network` is `{other}`; use `allowlist` (the default), `open` (everything \
                     but the fixed deny list) or `off`"
                ),
                "network",
            ));
        }
    };
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let workdir = match workdir.or_else(|| home.clone()) {
        Some(dir) => dir,
        None => std::env::current_dir().map_err(|e| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("the server has no working directory: {e}"),
            )
        })?,
    };
    if !workdir.is_absolute() {
        return Err(bad("`workdir` must be an absolute path", "workdir"));
    }
    let mut spec = SandboxSpec {
        session_id: id.to_owned(),
        guest_workdir: Some(workdir.clone()),
        network_enabled,
        network_open,
        ..SandboxSpec::default()
    };
    if wrapped {
        let mut binds = vec![workdir.clone()];
        if let Some(home) = home
            && !workdir.starts_with(&home)
        {
            binds.push(home);
        }
        spec.bind_mounts = binds
            .into_iter()
            .map(|host_path| SandboxBindMount {
                host_path,
                guest_path: None,
                read_only: false,
            })
            .collect();
    }
    Ok(spec)
}

/// The shell a terminal runs: the host's login shell on `none`, `bash`
/// (else `sh`) in a sandbox.
fn shell(wrapped: bool) -> Vec<String> {
    let host = std::env::var("SHELL").ok().filter(|s| s.starts_with('/'));
    let shell = match host {
        Some(shell) if !wrapped => shell,
        _ if std::path::Path::new("/bin/bash").exists() => "/bin/bash".to_owned(),
        _ => "/bin/sh".to_owned(),
    };
    vec![shell, "-i".to_owned()]
}

fn describe(terminal: &Terminal) -> serde_json::Value {
    let handle = terminal.session.handle();
    json!({
        "id": terminal.id,
        "sandboxId": handle.session_id,
        "backend": handle.backend,
        "backendName": handle.backend_name,
        "note": handle.note,
        "kernelBoundary": handle.kernel_boundary,
        "network": terminal.session.network_mode(),
        "clients": terminal.clients(),
    })
}

async fn create(
    State(state): State<AppState>,
    JsonBody(body): JsonBody,
) -> Result<(StatusCode, Json<serde_json::Value>), ApiError> {
    let call: CreateCall = parse_strict(&body, "the terminal request")?;
    sandbox_spawn_size(call.cols, call.rows)?;
    let backend = backend_name(call.backend.as_deref())?;
    let wrapped = backend != "none";
    // Never a downgrade: a wrapped terminal asked for runs wrapped, or not
    // at all (an unknown name, or the sandbox switched off, would be `none`).
    let selection = state
        .sessions
        .select(Some(backend))
        .map_err(|e| ApiError::from(sandbox_runtime::sessions::SessionError::Select(e)))?;
    if wrapped && selection.backend == "none" {
        return Err(ApiError {
            status: StatusCode::UNPROCESSABLE_ENTITY,
            message: format!(
                "the terminal asked for `{backend}`, which cannot run here ({}); a terminal \
                 asked to be wrapped is never started as a host shell — ask for a backend \
                 `GET /v1/backends` lists as available, or for `none`",
                selection
                    .notice()
                    .unwrap_or_else(|| "no such backend".into())
            ),
            field: Some("backend".into()),
            extra: None,
        });
    }
    let id = sandbox_terminals::new_id();
    let spec = terminal_spec(&id, wrapped, call.workdir, call.network.as_deref())?;
    // Named, so never a fallback: a backend that cannot run is an error.
    let session = state.sessions.create(spec, Some(backend)).await?;
    let mut environment = env::api_base();
    environment.insert("TERM".into(), "xterm-256color".into());
    let request = ExecRequest {
        argv: shell(wrapped),
        env: environment,
        cwd: None,
        stdin: true,
        timeout_ms: None,
        pty: Some(PtySize {
            cols: call.cols,
            rows: call.rows,
        }),
        host_fds: None,
    };
    let stream = match session.exec_interactive(request).await {
        Ok(stream) => stream,
        Err(e) => {
            session.destroy().await;
            return Err(e.into());
        }
    };
    let terminal = state.terminals.host(id, session, stream);
    Ok((StatusCode::CREATED, Json(describe(&terminal))))
}

/// The size rule of every terminal, before anything is launched.
fn sandbox_spawn_size(cols: u16, rows: u16) -> Result<(), ApiError> {
    if cols == 0 || rows == 0 || cols > 4096 || rows > 4096 {
        return Err(bad(
            format!(
                "the terminal request: a terminal of {cols} columns and {rows} rows: each must be \
                 at least 1 and at most 4096"
            ),
            if cols == 0 || cols > 4096 {
                "cols"
            } else {
                "rows"
            },
        ));
    }
    Ok(())
}

async fn list(State(state): State<AppState>) -> Json<Vec<serde_json::Value>> {
    Json(state.terminals.list().iter().map(|t| describe(t)).collect())
}

async fn close(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
) -> Result<StatusCode, ApiError> {
    state
        .terminals
        .close(&id)
        .await
        .map_err(|e| ApiError::new(StatusCode::NOT_FOUND, e.to_string()))?;
    Ok(StatusCode::NO_CONTENT)
}

async fn ticket(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
) -> Result<(StatusCode, Json<serde_json::Value>), ApiError> {
    let ticket = state
        .terminals
        .ticket(&id)
        .map_err(|e| ApiError::new(StatusCode::NOT_FOUND, e.to_string()))?;
    let ttl = state.terminals.settings().ticket_ttl.as_secs();
    Ok((
        StatusCode::CREATED,
        Json(json!({"ticket": ticket, "expiresInSecs": ttl})),
    ))
}

/// The WebSocket of a terminal: a fresh single-use ticket for it in the
/// query (a browser cannot set `Authorization` on an upgrade); the
/// `Origin` rule of every request has been applied before.
async fn attach(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
    QueryPairs(query): QueryPairs,
    slot: Option<Extension<UpgradeSlot>>,
    upgrade: WebSocketUpgrade,
) -> Result<Response, ApiError> {
    only_known(&query, &["ticket"])?;
    let ticket = query.get("ticket").map(String::as_str).unwrap_or_default();
    let attached = state.terminals.attach(&id, ticket).map_err(|e| {
        let mut error = ApiError::new(StatusCode::FORBIDDEN, e.to_string());
        error.extra = Some(json!({"rule": "single-use terminal ticket", "configKey": null}));
        error
    })?;
    // The socket keeps the connection's place under `[api] max_connections`
    // until it closes.
    let held = slot.map(|Extension(UpgradeSlot(slot))| Held::new(&slot));
    Ok(upgrade.on_upgrade(move |socket| async move {
        serve(socket, attached).await;
        drop(held);
    }))
}

/// How long the close of a slow client may wait for it to read.
const CLOSE_PATIENCE: std::time::Duration = std::time::Duration::from_secs(60);

/// A control message from a client.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
enum Control {
    Resize { cols: u16, rows: u16 },
    Signal { signal: i32 },
}

/// Frames written before one flush at most (each up to the relay's chunk,
/// 64 KiB).
const BATCH: usize = 16;

/// What [`send_ready`] left.
enum Sent {
    /// Sent; relaying goes on.
    More,
    /// The queue was closed (the terminal ended, or the client was
    /// dropped for not reading).
    Ended,
    /// The shell's end was sent and the socket closed, or the socket failed.
    Done,
}

/// Writes `first` and whatever else is queued already (up to [`BATCH`]),
/// then flushes once: output that arrives in a burst leaves in as few
/// writes as it can, and a lone keystroke's echo leaves at once.
async fn send_ready(
    socket: &mut WebSocket,
    first: Option<Output>,
    queue: &mut tokio::sync::mpsc::Receiver<Output>,
) -> Sent {
    use futures_util::SinkExt;
    let mut next = first;
    let mut fed = 0;
    loop {
        match next {
            Some(Output::Bytes(bytes)) => {
                if socket.feed(Message::Binary(bytes)).await.is_err() {
                    return Sent::Done;
                }
            }
            Some(Output::Exit { code, signal }) => {
                let exit = json!({"type": "exit", "code": code, "signal": signal});
                let _ = socket.feed(Message::Text(exit.to_string().into())).await;
                let close = CloseFrame {
                    code: 1000,
                    reason: "the shell ended".into(),
                };
                let _ = socket.send(Message::Close(Some(close))).await;
                return Sent::Done;
            }
            None => {
                let _ = socket.flush().await;
                return Sent::Ended;
            }
        }
        fed += 1;
        if fed == BATCH {
            break;
        }
        next = match queue.try_recv() {
            Ok(output) => Some(output),
            Err(tokio::sync::mpsc::error::TryRecvError::Empty) => break,
            Err(tokio::sync::mpsc::error::TryRecvError::Disconnected) => None,
        };
    }
    if socket.flush().await.is_err() {
        return Sent::Done;
    }
    Sent::More
}

/// Relays one client until the shell ends, the client leaves, or it is
/// dropped for not reading.
async fn serve(mut socket: WebSocket, mut attached: Attached) {
    let terminal = Arc::clone(&attached.terminal);
    let slow = Arc::clone(&attached.slow);
    loop {
        tokio::select! {
            out = attached.output.recv() => {
                let sent = tokio::select! {
                    sent = send_ready(&mut socket, out, &mut attached.output) => sent,
                    () = slow.wait() => break,
                };
                match sent {
                    Sent::More => {}
                    Sent::Ended => break,
                    Sent::Done => return,
                }
            }
            incoming = socket.recv() => {
                let Some(Ok(message)) = incoming else { return };
                let done = match message {
                    Message::Binary(bytes) => terminal.input(bytes.to_vec()).await.err().map(|e| e.to_string()),
                    Message::Text(text) => match serde_json::from_str::<Control>(text.as_str()) {
                        Ok(Control::Resize { cols, rows }) => terminal.resize(cols, rows).await.err().map(|e| e.to_string()),
                        Ok(Control::Signal { signal }) => terminal.signal(signal).await.err().map(|e| e.to_string()),
                        Err(e) => {
                            let error = json!({"type": "error", "error": format!("a control message: {e}; send {{\"type\":\"resize\",\"cols\",\"rows\"}} or {{\"type\":\"signal\",\"signal\"}}")});
                            let _ = socket.send(Message::Text(error.to_string().into())).await;
                            None
                        }
                    },
                    Message::Close(_) => return,
                    _ => None,
                };
                if let Some(error) = done {
                    let error = json!({"type": "error", "error": error});
                    let _ = socket.send(Message::Text(error.to_string().into())).await;
                }
            }
        }
    }
    if slow.is_set() {
        let close = Message::Close(Some(CloseFrame {
            code: 1008,
            reason: "too slow: the terminal's output queue for this client was full".into(),
        }));
        // It goes out once the client reads what is queued in the socket
        // before it (a bounded amount); a client that never reads is
        // dropped after this long.
        let _ = tokio::time::timeout(CLOSE_PATIENCE, socket.send(close)).await;
    }
}
