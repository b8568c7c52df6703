//! An exec and what is done to it while it runs: `POST
//! /v1/sandboxes/{id}/execs` runs a command (NDJSON events, ending with
//! `exit` or `killed`) — the API's one dispatching route, through
//! `Session::exec` like every entry point's (SPEC B10); `POST
//! /v1/sandboxes/{id}/exec` is its first name, kept as an alias to the same
//! handler. `POST …/execs/{exec_id}/kill`, `…/resize` and `…/stdin` act on
//! an exec already admitted by its `execs` call.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use futures_util::StreamExt as _;
use sandbox_plugin_api::{ExecRequest, PtySize};
use serde::Deserialize;

use super::extract::{ApiPath, JsonBody};
use super::{ApiError, AppState, ExecPath, stdin};
use crate::wire;
use sandbox_runtime::env;
use sandbox_runtime::input::parse_strict;
use sandbox_runtime::sessions::budget::ChargedLine;

/// The area's routes, with their full paths (the entry-point scan reads them
/// as written: see `entry_points`).
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/sandboxes/{id}/execs", post(exec))
        // The route's first name, before it took its children's plural:
        // the same handler, so the same dispatch path.
        .route("/v1/sandboxes/{id}/exec", post(exec))
        .route("/v1/sandboxes/{id}/execs/{exec_id}/kill", post(kill))
        .route("/v1/sandboxes/{id}/execs/{exec_id}/resize", post(resize))
        .route(
            "/v1/sandboxes/{id}/execs/{exec_id}/stdin",
            post(stdin::upload),
        )
}

/// The body of `POST …/execs`. `env` is added to a small base environment
/// (a name given twice is refused: see [`env::unique_names`]); `input`,
/// when given, is written to stdin, which is then closed (on a terminal,
/// closing types ^D); `"stdin": "stream"` keeps stdin open for
/// `POST …/execs/{exec}/stdin` instead. `pty` runs the command on a
/// terminal of that size (`{"cols": 80, "rows": 24}`), resized with
/// `POST …/resize`.
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub(super) struct ExecCall {
    argv: Vec<String>,
    #[serde(deserialize_with = "env::unique_names")]
    env: BTreeMap<String, String>,
    cwd: Option<PathBuf>,
    input: Option<String>,
    stdin: Option<StdinMode>,
    timeout_ms: Option<u64>,
    pty: Option<PtySize>,
}

/// How an exec's stdin is fed besides `input`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(super) enum StdinMode {
    /// Open until an upload to `POST …/execs/{exec}/stdin` closes it.
    Stream,
}

async fn exec(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let call: ExecCall = parse_strict(&body, "the exec request")?;
    if call.argv.is_empty() {
        return Err(ApiError {
            status: StatusCode::BAD_REQUEST,
            message: "the exec request: argv is empty; give the command and its arguments".into(),
            field: Some("argv".into()),
            extra: None,
        });
    }
    let streamed = call.stdin == Some(StdinMode::Stream);
    if streamed && call.input.is_some() {
        return Err(ApiError {
            status: StatusCode::BAD_REQUEST,
            message: "the exec request: give `input` or `\"stdin\": \"stream\"`, not both".into(),
            field: Some("stdin".into()),
            extra: None,
        });
    }
    let session = state.sessions.get(&id)?;
    // Sanitized in Session::exec, like every entry point's.
    let mut environment = env::api_base();
    environment.extend(call.env);
    let request = ExecRequest {
        argv: call.argv,
        env: environment,
        cwd: call.cwd,
        stdin: call.input.is_some() || streamed,
        timeout_ms: call.timeout_ms,
        pty: call.pty,
        // Never from a client: these would be the server's own descriptors.
        host_fds: None,
    };
    let stream = session.exec(request).await?;
    let exec_id = stream.exec_id;
    // Lives as long as the response body: uploads are taken while it does.
    let uploads = streamed.then(|| state.stdin.open(&session, exec_id));
    if let Some(input) = call.input {
        let session = Arc::clone(&session);
        tokio::spawn(async move {
            if let Err(e) = session.write_stdin(exec_id, input.into_bytes()).await {
                tracing::debug!("writing the exec's input: {e}");
            }
            let _ = session.close_stdin(exec_id).await;
        });
    }
    let started = wire::line(&wire::started_json(
        exec_id,
        session.backend_name(),
        stream.verdict.as_ref(),
    ));
    // Dropping this stream (the client went away) drops the ExecStream,
    // whose guard kills the command.
    let events = futures_util::stream::unfold(Some(stream), move |state| async move {
        let mut stream = state?;
        let line = match stream.next_charged().await {
            // The line keeps the output's share of the server's budget until
            // the socket has it, so unread streams cannot hold more.
            Some((event, charge)) => {
                Bytes::from_owner(ChargedLine::new(wire::event_line(&event), charge))
            }
            None if stream.ended() => return None,
            None => {
                let message = "the sandbox ended without reporting the command's exit";
                return Some((
                    Ok(Bytes::from(wire::line(&wire::error_json(exec_id, message)))),
                    None,
                ));
            }
        };
        Some((Ok::<_, Infallible>(line), Some(stream)))
    });
    let body = futures_util::stream::once(async move { Ok::<_, Infallible>(Bytes::from(started)) })
        .chain(events)
        .map(move |item| {
            let _ = &uploads;
            item
        });
    Ok((
        [(header::CONTENT_TYPE, "application/x-ndjson")],
        Body::from_stream(body),
    )
        .into_response())
}

#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(default)]
pub(super) struct KillCall {
    signal: Option<i32>,
}

async fn kill(
    State(state): State<AppState>,
    ApiPath(ExecPath { id, exec_id }): ApiPath<ExecPath>,
    JsonBody(body): JsonBody,
) -> Result<StatusCode, ApiError> {
    let call: KillCall = if body.is_empty() {
        KillCall::default()
    } else {
        parse_strict(&body, "the kill request")?
    };
    let session = state.sessions.get(&id)?;
    session
        .kill(exec_id, call.signal.unwrap_or(libc::SIGTERM))
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The body of `POST …/execs/{exec_id}/resize`.
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub(super) struct ResizeCall {
    cols: u16,
    rows: u16,
}

async fn resize(
    State(state): State<AppState>,
    ApiPath(ExecPath { id, exec_id }): ApiPath<ExecPath>,
    JsonBody(body): JsonBody,
) -> Result<StatusCode, ApiError> {
    let call: ResizeCall = parse_strict(&body, "the resize request")?;
    let session = state.sessions.get(&id)?;
    session
        .resize(
            exec_id,
            PtySize {
                cols: call.cols,
                rows: call.rows,
            },
        )
        .await?;
    Ok(StatusCode::NO_CONTENT)
}
