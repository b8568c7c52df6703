//! The HTTP API. Every `/v1` route needs the bearer token; `/healthz` does
//! not, and says nothing about sandboxing (SPEC B4). The routes (a test in
//! `host/tests/docs.rs` keeps this list and the router the same):
//!
//! - `GET /healthz` — status and version
//! - `GET /v1/backends` — every backend, its probe and source, the skipped
//!   files, the default
//! - `GET /v1/sandboxes` — every handle; `POST /v1/sandboxes[?backend=NAME]`
//!   (SandboxSpec → 201 and a SandboxHandle)
//! - `GET /v1/sandboxes/{id}`; `DELETE /v1/sandboxes/{id}` → the final handle
//! - `POST /v1/sandboxes/{id}/exec` → NDJSON events, ending with `exit` or
//!   `killed`
//! - `POST /v1/sandboxes/{id}/execs/{exec_id}/kill` (`{"signal": 15}`)
//! - `POST /v1/sandboxes/{id}/execs/{exec_id}/resize` (`{"cols", "rows"}`:
//!   the exec's terminal)
//! - `POST /v1/sandboxes/{id}/execs/{exec_id}/stdin` (a raw body into the
//!   exec's stdin; see [`stdin`])
//! - `POST /v1/sandboxes/{id}/suspend`, `POST /v1/sandboxes/{id}/resume` →
//!   SandboxHandle
//! - `POST /v1/policy/check`, `GET /v1/approvals`, `POST /v1/approvals/{id}`
//!   (see [`policy`])
//!
//! Before any route, every request passes [`request_rules`]: a `Host` this
//! server answers to (421 otherwise), no `Origin` the operator did not list
//! (403).
//!
//! Every answer that is an error is the API's JSON (`error`, `field` where
//! there is one): the extractors of [`extract`] refuse as JSON, and
//! [`http_errors`] rewrites whatever another layer said (a 405's empty body).

pub mod connections;
mod extract;
mod http_errors;
pub mod listener;
mod policy;
pub mod request_rules;
mod stdin;
pub mod token;
mod wire_answers;

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::Arc;

use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures_util::StreamExt as _;
use sandbox_plugin_api::{ErrorCode, ExecRequest, PtySize, SandboxHandle, SandboxSpec};
use serde::Deserialize;
use serde_json::json;

use self::extract::{ApiPath, JsonBody, QueryPairs, only_known};
use crate::wire;
use sandbox_runtime::env;
use sandbox_runtime::input::{InputError, parse_strict};
use sandbox_runtime::sessions::budget::ChargedLine;
use sandbox_runtime::sessions::{SessionError, Sessions};

#[derive(Clone)]
pub struct AppState {
    sessions: Arc<Sessions>,
    token: Arc<str>,
    rules: Arc<request_rules::RequestRules>,
    /// The execs whose stdin is streamed.
    stdin: Arc<stdin::Streams>,
}

impl AppState {
    pub fn new(sessions: Arc<Sessions>, token: String, rules: request_rules::RequestRules) -> Self {
        Self {
            sessions,
            token: token.into(),
            rules: Arc::new(rules),
            stdin: Arc::default(),
        }
    }
}

pub fn router(state: AppState) -> axum::Router {
    let v1 = axum::Router::new()
        .route("/backends", get(list_backends))
        .route("/sandboxes", get(list_sandboxes).post(create_sandbox))
        .route("/sandboxes/{id}", get(show_sandbox).delete(destroy_sandbox))
        .route("/sandboxes/{id}/exec", post(exec))
        .route("/sandboxes/{id}/execs/{exec_id}/kill", post(kill))
        .route("/sandboxes/{id}/execs/{exec_id}/resize", post(resize))
        .route("/sandboxes/{id}/execs/{exec_id}/stdin", post(stdin::upload))
        .route("/sandboxes/{id}/suspend", post(suspend))
        .route("/sandboxes/{id}/resume", post(resume))
        .route("/policy/check", post(policy::check))
        .route("/approvals", get(policy::approvals))
        .route("/approvals/{id}", post(policy::answer))
        .route_layer(middleware::from_fn_with_state(state.clone(), require_token));
    let rules = Arc::clone(&state.rules);
    let app = axum::Router::new()
        .route("/healthz", get(healthz))
        .nest("/v1", v1)
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "no such route") })
        .layer(middleware::from_fn_with_state(
            rules,
            request_rules::enforce,
        ))
        .with_state(state);
    // Around the finished router, so it sees what the router adds last (a
    // 405's `Allow`).
    axum::Router::new()
        .fallback_service(app)
        .layer(middleware::from_fn(http_errors::as_json))
}

/// An error as the client sees it: a status and `{"error", "field"?}`.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    message: String,
    field: Option<String>,
    /// More to say than a message (a policy refusal's verdict).
    extra: Option<serde_json::Value>,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            field: None,
            extra: None,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut body = json!({"error": self.message});
        if let Some(field) = self.field {
            body["field"] = field.into();
        }
        if let Some(serde_json::Value::Object(extra)) = self.extra {
            for (key, value) in extra {
                body.as_object_mut().map(|b| b.entry(key).or_insert(value));
            }
        }
        let mut response = (self.status, Json(body)).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer"),
            );
        }
        response
    }
}

impl From<InputError> for ApiError {
    fn from(e: InputError) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            message: e.to_string(),
            field: e.field,
            extra: None,
        }
    }
}

impl From<SessionError> for ApiError {
    fn from(e: SessionError) -> Self {
        let status = match &e {
            // The request asked for what this host cannot give; the server
            // itself is fine, so not a 5xx (T19).
            SessionError::Select(_) => StatusCode::UNPROCESSABLE_ENTITY,
            SessionError::Launch { error, .. } if error.code == ErrorCode::INVALID_SPEC => {
                StatusCode::UNPROCESSABLE_ENTITY
            }
            SessionError::Backend(error) => match error.code {
                ErrorCode::NOT_FOUND => StatusCode::NOT_FOUND,
                ErrorCode::INVALID_REQUEST => StatusCode::BAD_REQUEST,
                ErrorCode::UNSUPPORTED => StatusCode::UNPROCESSABLE_ENTITY,
                ErrorCode::DESTROYED => StatusCode::GONE,
                _ => StatusCode::INTERNAL_SERVER_ERROR,
            },
            SessionError::Launch { .. }
            | SessionError::NotLoaded(_)
            | SessionError::Egress(_)
            | SessionError::Random(_)
            | SessionError::Join(_)
            | SessionError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            SessionError::Unsupported { .. }
            | SessionError::Exec(_)
            | SessionError::PolicyUnenforceable(_) => StatusCode::UNPROCESSABLE_ENTITY,
            SessionError::BadId(_) | SessionError::InvalidSpec { .. } | SessionError::Env(_) => {
                StatusCode::BAD_REQUEST
            }
            SessionError::Conflict(_) => StatusCode::CONFLICT,
            SessionError::NotFound(_) => StatusCode::NOT_FOUND,
            SessionError::Destroyed(_) => StatusCode::GONE,
            SessionError::Refused(_) => StatusCode::FORBIDDEN,
        };
        let extra = match &e {
            SessionError::Refused(refusal) => Some(wire::refusal_json(refusal)),
            _ => None,
        };
        let field = match &e {
            SessionError::BadId(_) => Some("sessionId".to_owned()),
            SessionError::InvalidSpec { field, .. } => Some((*field).to_owned()),
            SessionError::Env(e) => Some(format!("env.{}", e.key)),
            SessionError::Select(_) => Some("backend".to_owned()),
            _ => None,
        };
        let mut message = sandbox_plugin_api::error_chain(&e);
        if let SessionError::Select(_) = &e {
            message.push_str(
                "; ask for a backend this host has (`GET /v1/backends` lists each with its \
                 probe), or leave `backend` out for the default — or fix what the probe \
                 reports (`cc_server probe`)",
            );
        }
        Self {
            status,
            message,
            field,
            extra,
        }
    }
}

async fn require_token(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let given = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    match given {
        Some(token) if token::matches(&state.token, token.trim()) => {
            // Its connection may use the share kept for clients with the token.
            if let Some(connection) = request.extensions().get::<listener::OnConnection>() {
                connection.0.authenticated();
            }
            next.run(request).await
        }
        Some(_) => ApiError::new(StatusCode::UNAUTHORIZED, "wrong bearer token").into_response(),
        None => ApiError::new(
            StatusCode::UNAUTHORIZED,
            "send `Authorization: Bearer <token>`; the token is in the server's token file",
        )
        .into_response(),
    }
}

async fn healthz() -> Json<serde_json::Value> {
    Json(json!({"status": "ok", "version": env!("CARGO_PKG_VERSION")}))
}

async fn list_backends(State(state): State<AppState>) -> Json<serde_json::Value> {
    let registry = state.sessions.registry();
    Json(json!({
        "backends": wire::backends_json(registry),
        "problems": wire::problems_json(registry),
        "default": wire::default_json(&state.sessions.select(None)),
    }))
}

async fn list_sandboxes(State(state): State<AppState>) -> Json<Vec<SandboxHandle>> {
    Json(state.sessions.list().iter().map(|s| s.handle()).collect())
}

async fn create_sandbox(
    State(state): State<AppState>,
    QueryPairs(query): QueryPairs,
    JsonBody(body): JsonBody,
) -> Result<(StatusCode, Json<SandboxHandle>), ApiError> {
    only_known(&query, &["backend"])?;
    let spec: SandboxSpec = parse_strict(&body, "the sandbox spec")?;
    // An absent `sessionId` gets a fresh id; an empty one is a mistake, not
    // a request for one (the spec type cannot tell the two apart).
    if spec.session_id.is_empty() && gives_empty_session_id(&body) {
        return Err(ApiError {
            status: StatusCode::BAD_REQUEST,
            message: "the sandbox spec: `sessionId` is empty; give 1 to 128 letters, digits, \
                      `.`, `_` or `-`, or leave it out for a fresh id"
                .into(),
            field: Some("sessionId".into()),
            extra: None,
        });
    }
    let backend = query.get("backend").cloned();
    if backend.as_deref() == Some("") {
        return Err(ApiError {
            status: StatusCode::BAD_REQUEST,
            message: "`backend` is empty; name a backend (`GET /v1/backends` lists them), or \
                      leave the parameter out for the default"
                .into(),
            field: Some("backend".into()),
            extra: None,
        });
    }
    // Launch in a task of its own: if the client leaves before it learns the
    // sandbox exists, nobody else could destroy it, so the task does.
    let (tx, rx) = tokio::sync::oneshot::channel();
    let sessions = Arc::clone(&state.sessions);
    tokio::spawn(async move {
        let created = sessions.create(spec, backend.as_deref()).await;
        if let Err(Ok(orphan)) = tx.send(created) {
            tracing::info!(session = %orphan.id, "the client left during launch; destroying the sandbox");
            let _ = sessions.destroy(&orphan.id).await;
        }
    });
    let session = rx.await.map_err(|_| {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "the launch task failed")
    })??;
    Ok((StatusCode::CREATED, Json(session.handle())))
}

/// Whether the spec's JSON has `"sessionId": ""` (not merely no `sessionId`).
fn gives_empty_session_id(body: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(body)
        .is_ok_and(|spec| spec.get("sessionId").and_then(|v| v.as_str()) == Some(""))
}

async fn show_sandbox(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<SandboxHandle>, ApiError> {
    Ok(Json(state.sessions.get(&id)?.handle()))
}

async fn destroy_sandbox(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<SandboxHandle>, ApiError> {
    Ok(Json(state.sessions.destroy(&id).await?))
}

/// The body of `POST …/exec`. `env` is added to a small base environment
/// (a name given twice is refused: see [`env::unique_names`]); `input`,
/// when given, is written to stdin, which is then closed (on a terminal,
/// closing types ^D); `"stdin": "stream"` keeps stdin open for
/// `POST …/execs/{exec}/stdin` instead. `pty` runs the command on a
/// terminal of that size (`{"cols": 80, "rows": 24}`), resized with
/// `POST …/resize`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct ExecCall {
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum StdinMode {
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

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct KillCall {
    signal: Option<i32>,
}

/// The path of one exec's routes.
#[derive(Deserialize)]
struct ExecPath {
    id: String,
    exec_id: u64,
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
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct ResizeCall {
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

async fn suspend(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<SandboxHandle>, ApiError> {
    let session = state.sessions.get(&id)?;
    session.suspend().await?;
    Ok(Json(session.handle()))
}

async fn resume(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<SandboxHandle>, ApiError> {
    let session = state.sessions.get(&id)?;
    session.resume().await?;
    Ok(Json(session.handle()))
}
