//! The policy's API surfaces.
//!
//! - `POST /v1/policy/check` (`{"command", "mode"?}`) → the verdict, for
//!   external hooks (SPEC H6). With `?format=claude-code` the body is a
//!   Claude Code `PreToolUse` hook input and the answer is its hook output,
//!   so the endpoint can be an HTTP hook as it is.
//! - `GET /v1/approvals` → NDJSON: this connection is an owner (SPEC H4);
//!   each prompt arrives as `{"type":"prompt","id",…}`, each outcome as
//!   `{"type":"resolved",…}`. While no such connection is open every prompt
//!   is a deny.
//! - `POST /v1/approvals/{id}` (`{"decision":"allow"|"deny"}`) answers one.

use std::convert::Infallible;

use axum::Json;
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures_util::StreamExt as _;
use sandbox_plugin_api::SandboxMode;
use serde::Deserialize;
use serde_json::json;

use super::extract::{ApiPath, JsonBody, QueryPairs, only_known};
use super::{ApiError, AppState};
use crate::{claude_hook, wire};
use sandbox_runtime::input::parse_strict;

/// The area's routes, with their full paths (the entry-point scan reads them
/// as written: see `entry_points`).
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/policy/check", post(check))
        .route("/v1/approvals", get(approvals))
        .route("/v1/approvals/{id}", post(answer))
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct CheckCall {
    command: String,
    #[serde(default)]
    mode: Option<SandboxMode>,
}

fn bad_query(message: String, field: &str) -> ApiError {
    ApiError {
        status: StatusCode::BAD_REQUEST,
        message,
        field: Some(field.to_owned()),
        extra: None,
    }
}

async fn check(
    State(state): State<AppState>,
    QueryPairs(query): QueryPairs,
    JsonBody(body): JsonBody,
) -> Result<Json<serde_json::Value>, ApiError> {
    only_known(&query, &["format", "mode"])?;
    let query_mode = match query.get("mode") {
        Some(text) => Some(
            text.parse::<SandboxMode>()
                .map_err(|e| bad_query(format!("mode: {e}"), "mode"))?,
        ),
        None => None,
    };
    let policy = state.sessions.commands();
    match query.get("format").map(String::as_str) {
        None => {
            let call: CheckCall = parse_strict(&body, "the policy check")?;
            let mode = call.mode.or(query_mode).unwrap_or(SandboxMode::Chat);
            let verdict = policy.check(&call.command, mode);
            let mut answer = wire::verdict_json(&verdict);
            answer["mode"] = mode.as_str().into();
            Ok(Json(answer))
        }
        Some("claude-code") => {
            let mode = query_mode.unwrap_or(SandboxMode::Chat);
            match claude_hook::parse(&body) {
                Ok(claude_hook::Call::Bash { command, .. }) => Ok(Json(claude_hook::answer(
                    &policy.check(&command, mode),
                    mode,
                ))),
                // Not ours to judge: no decision, the normal flow goes on.
                Ok(claude_hook::Call::Other) => Ok(Json(json!({}))),
                Err(e) => Err(match e.field() {
                    Some(field) => bad_query(e.to_string(), field),
                    None => ApiError::new(StatusCode::BAD_REQUEST, e.to_string()),
                }),
            }
        }
        Some(other) => Err(bad_query(
            format!("format `{other}` is unknown; the only one is `claude-code`"),
            "format",
        )),
    }
}

async fn approvals(State(state): State<AppState>) -> Response {
    let commands = state.sessions.commands();
    let (approver, prompts) = commands.approvals.connect();
    let hello = json!({"type": "connected", "owners": commands.approvals.connected()});
    // The approver lives as long as the response body: a client that goes
    // away stops being an owner, and what it left waiting is denied.
    let prompts = futures_util::stream::unfold((approver, prompts), |(approver, mut rx)| async {
        let prompt = rx.recv().await?;
        Some((
            Ok::<_, Infallible>(Bytes::from(wire::line(&prompt))),
            (approver, rx),
        ))
    });
    let body =
        futures_util::stream::once(
            async move { Ok::<_, Infallible>(Bytes::from(wire::line(&hello))) },
        )
        .chain(prompts);
    (
        [(header::CONTENT_TYPE, "application/x-ndjson")],
        Body::from_stream(body),
    )
        .into_response()
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct AnswerCall {
    decision: String,
}

async fn answer(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
    JsonBody(body): JsonBody,
) -> Result<StatusCode, ApiError> {
    let call: AnswerCall = parse_strict(&body, "the approval answer")?;
    let allow = match call.decision.as_str() {
        "allow" => true,
        "deny" => false,
        other => {
            return Err(bad_query(
                format!("decision `{other}`: answer `allow` or `deny`"),
                "decision",
            ));
        }
    };
    if state.sessions.commands().approvals.answer(&id, allow) {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("no prompt `{id}` is waiting (answered, timed out, or never asked)"),
        ))
    }
}
