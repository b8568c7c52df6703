//! The HTTP API. Every `/v1` route and `/mcp` needs a credential — the
//! owner's token (or the web console's cookie, the owner's) or a sandbox's
//! agent credential ([`credentials`]); `/healthz`, the OpenAPI document and
//! the console's page and sign-in need none, and `/healthz` says nothing
//! about sandboxing (SPEC B4). Each area is a module
//! whose `routes()` carries its routes with their full paths, merged here
//! (the entry-point scan reads them as written: see `entry_points`). The
//! routes (a test in `host/tests/docs.rs` keeps this list and the area
//! modules' routes the same):
//!
//! - `GET /healthz` — status and version ([`health`])
//! - `GET /v1/openapi.json` — the API as OpenAPI 3.1, generated ([`openapi`])
//! - `GET /v1/backends` — every backend, its probe and source, the skipped
//!   files, the default ([`backends`])
//! - `GET /v1/sandboxes` — every handle; `POST /v1/sandboxes[?backend=NAME]`
//!   (SandboxSpec → 201 and a SandboxHandle) ([`sandboxes`])
//! - `GET /v1/sandboxes/{id}`; `DELETE /v1/sandboxes/{id}` → the final handle
//! - `POST /v1/sandboxes/{id}/suspend`, `POST /v1/sandboxes/{id}/resume` →
//!   SandboxHandle
//! - `POST /v1/sandboxes/{id}/execs` → NDJSON events, ending with `exit` or
//!   `killed` ([`execs`]); `POST /v1/sandboxes/{id}/exec` is its first name,
//!   an alias
//! - `POST /v1/sandboxes/{id}/execs/{exec_id}/kill` (`{"signal": 15}`)
//! - `POST /v1/sandboxes/{id}/execs/{exec_id}/resize` (`{"cols", "rows"}`:
//!   the exec's terminal)
//! - `POST /v1/sandboxes/{id}/execs/{exec_id}/stdin` (a raw body into the
//!   exec's stdin; see [`stdin`])
//! - `POST /v1/policy/check`, `GET /v1/approvals`, `POST /v1/approvals/{id}`
//!   ([`policy`])
//! - `GET /v1/workspaces`, `POST /v1/workspaces`; `GET /v1/workspaces/{name}`,
//!   `DELETE /v1/workspaces/{name}` ([`workspaces`])
//! - `GET /v1/conversations`, `POST /v1/conversations`;
//!   `GET /v1/conversations/{id}`, `DELETE /v1/conversations/{id}`
//! - `GET /v1/conversations/{id}/agents`, `POST /v1/conversations/{id}/agents`;
//!   `GET /v1/conversations/{id}/agents/{agent}`,
//!   `DELETE /v1/conversations/{id}/agents/{agent}`
//! - `POST /mcp`, `GET /mcp`, `DELETE /mcp` — the agent tools over MCP's
//!   streamable HTTP ([`mcp`])
//! - `GET /v1/terminals`, `POST /v1/terminals`; `DELETE /v1/terminals/{id}`;
//!   `POST /v1/terminals/{id}/tickets`; `GET /v1/terminals/{id}/ws` — the
//!   terminal's WebSocket, opened with a ticket ([`terminals`])
//!
//! - `GET /v1/events` — NDJSON: every sandbox's events as they happen
//!   ([`events`])
//! - `GET /`, `GET /console/{file}` — the web console's page and files;
//!   `POST /v1/console/session`, `DELETE /v1/console/session` — its sign-in
//!   and sign-out ([`console`])
//!
//! Each route takes the owner's token or a sandbox's agent credential, as
//! [`credentials`] lists.
//!
//! Before any route, every request passes [`request_rules`]: a `Host` this
//! server answers to (421 otherwise), no `Origin` the operator did not list
//! (403).
//!
//! Every answer that is an error is the API's JSON (`error`, `field` where
//! there is one): the extractors of [`extract`] refuse as JSON, and
//! [`http_errors`] rewrites whatever another layer said (a 405's empty body).

mod backends;
pub mod connections;
mod console;
pub mod credentials;
mod events;
mod execs;
mod extract;
mod health;
mod http_errors;
pub mod listener;
mod mcp;
mod openapi;
mod policy;
pub mod request_rules;
mod sandboxes;
mod stdin;
mod terminals;
pub mod token;
mod wire_answers;
mod workspaces;

use std::sync::Arc;

use axum::Json;

use axum::http::{StatusCode, header};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use sandbox_plugin_api::ErrorCode;
use serde::Deserialize;
use serde_json::json;

use crate::wire;
use sandbox_runtime::input::InputError;
use sandbox_runtime::layout::LayoutErrorKind;
use sandbox_runtime::sessions::{SessionError, Sessions};

#[derive(Clone)]
pub struct AppState {
    sessions: Arc<Sessions>,
    token: Arc<str>,
    rules: Arc<request_rules::RequestRules>,
    /// The execs whose stdin is streamed.
    stdin: Arc<stdin::Streams>,
    /// The workspaces layer (SPEC H1), when the server keeps workspaces.
    workspaces: Option<Arc<sandbox_workspaces::Workspaces>>,
    /// The agent tools at `/mcp`.
    mcp: Arc<sandbox_mcp::http::HttpService>,
    /// The terminals the server hosts (SPEC D1–D3).
    terminals: Arc<sandbox_terminals::Terminals>,
    /// The web console's sign-in sessions.
    console: Arc<sandbox_console::session::Sessions>,
}

impl AppState {
    pub fn new(sessions: Arc<Sessions>, token: String, rules: request_rules::RequestRules) -> Self {
        Self {
            token: token.into(),
            rules: Arc::new(rules),
            stdin: Arc::default(),
            workspaces: None,
            mcp: Arc::new(sandbox_mcp::http::http_service(sandbox_mcp::plain_roots())),
            terminals: sandbox_terminals::Terminals::new(
                sandbox_terminals::Settings::default(),
                Arc::clone(&sessions),
            ),
            console: Arc::new(sandbox_console::session::Sessions::new(
                sandbox_console::session::DEFAULT_TTL,
            )),
            sessions,
        }
    }

    /// The same, a console sign-in lasting `ttl` (`[api]
    /// console_session_secs`).
    pub fn with_console_session(mut self, ttl: Option<std::time::Duration>) -> Self {
        if let Some(ttl) = ttl {
            self.console = Arc::new(sandbox_console::session::Sessions::new(ttl));
        }
        self
    }

    /// The same, its terminals living `grace` after their last client
    /// left (`[api] terminal_grace_secs`).
    pub fn with_terminal_grace(mut self, grace: Option<std::time::Duration>) -> Self {
        if let Some(grace) = grace {
            self.terminals = sandbox_terminals::Terminals::new(
                sandbox_terminals::Settings {
                    grace,
                    ..sandbox_terminals::Settings::default()
                },
                Arc::clone(&self.sessions),
            );
        }
        self
    }

    /// The same, serving the workspaces layer's routes.
    pub fn with_workspaces(mut self, layer: Option<Arc<sandbox_workspaces::Workspaces>>) -> Self {
        self.workspaces = layer;
        self
    }
}

pub fn router(state: AppState) -> axum::Router {
    // A credential guards every route of the areas merged into `v1`, and
    // only those (`route_layer`: an unknown path is a 404 either way): the
    // owner's token or a sandbox's agent credential, as each route says.
    let v1 = axum::Router::new()
        .merge(backends::routes())
        .merge(sandboxes::routes())
        .merge(execs::routes())
        .merge(policy::routes())
        .merge(workspaces::routes())
        .merge(mcp::routes())
        .merge(terminals::routes())
        .merge(events::routes())
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            credentials::check,
        ));
    let rules = Arc::clone(&state.rules);
    let app = axum::Router::new()
        .merge(health::routes())
        .merge(openapi::routes())
        .merge(console::routes())
        .merge(v1)
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
            SessionError::Layout(e) => layout_status(e.kind),
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
            SessionError::Layout(e) => e.field.map(str::to_owned),
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

/// The status of a workspaces-layer failure.
pub fn layout_status(kind: LayoutErrorKind) -> StatusCode {
    match kind {
        LayoutErrorKind::NotFound => StatusCode::NOT_FOUND,
        LayoutErrorKind::Invalid => StatusCode::BAD_REQUEST,
        LayoutErrorKind::Conflict => StatusCode::CONFLICT,
        LayoutErrorKind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// The path of one exec's routes.
#[derive(Deserialize)]
struct ExecPath {
    id: String,
    exec_id: u64,
}
