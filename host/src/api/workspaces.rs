//! Workspaces, conversations and agents (SPEC H1, H10): create, list, get,
//! delete. None runs a command: a conversation is cloned files, an agent
//! two directories; a sandbox for them is `POST /v1/sandboxes` with
//! `conversationId` and `agentId`.
//!
//! `POST /v1/conversations` with `Accept: application/x-ndjson` streams
//! the provisioning: `{"type":"progress",…}` lines, then
//! `{"type":"created","conversation":…}` or `{"type":"error",…}`.

use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use sandbox_workspaces::{Conversation, NewWorkspace, WorkspaceError, Workspaces};
use serde::Deserialize;
use serde_json::json;

use super::extract::{ApiPath, JsonBody, QueryPairs, only_known};
use super::{ApiError, AppState, layout_status};
use crate::wire;
use sandbox_runtime::input::parse_strict;

/// The area's routes, with their full paths (the entry-point scan reads them
/// as written: see `entry_points`).
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/workspaces", get(list_workspaces).post(add_workspace))
        .route(
            "/v1/workspaces/{name}",
            get(show_workspace).delete(remove_workspace),
        )
        .route(
            "/v1/conversations",
            get(list_conversations).post(new_conversation),
        )
        .route(
            "/v1/conversations/{id}",
            get(show_conversation).delete(remove_conversation),
        )
        .route(
            "/v1/conversations/{id}/agents",
            get(list_agents).post(add_agent),
        )
        .route(
            "/v1/conversations/{id}/agents/{agent}",
            get(show_agent).delete(remove_agent),
        )
}

impl From<WorkspaceError> for ApiError {
    fn from(e: WorkspaceError) -> Self {
        ApiError {
            status: layout_status(e.kind()),
            message: sandbox_plugin_api::error_chain(&e),
            field: e.field().map(str::to_owned),
            extra: None,
        }
    }
}

/// The layer, or the 422 of a server that keeps no workspaces.
fn layer(state: &AppState) -> Result<Arc<Workspaces>, ApiError> {
    state.workspaces.clone().ok_or_else(|| {
        ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "this server keeps no workspaces (no state directory: set `[workspaces] state_dir` or HOME)",
        )
    })
}

/// Runs a layer call on a blocking thread (SQLite, the filesystem, git).
async fn blocking<T: Send + 'static>(
    state: &AppState,
    f: impl FnOnce(&Workspaces) -> Result<T, WorkspaceError> + Send + 'static,
) -> Result<T, ApiError> {
    let layer = layer(state)?;
    tokio::task::spawn_blocking(move || f(&layer))
        .await
        .map_err(|_| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "a workspaces call failed",
            )
        })?
        .map_err(ApiError::from)
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct RepositoryBody {
    #[serde(default)]
    name: Option<String>,
    path: PathBuf,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct WorkspaceBody {
    name: String,
    #[serde(default)]
    repositories: Vec<RepositoryBody>,
    #[serde(default)]
    attachments: Option<PathBuf>,
    #[serde(default)]
    include_secrets: Vec<String>,
}

async fn list_workspaces(State(state): State<AppState>) -> Result<Response, ApiError> {
    let all = blocking(&state, |l| Ok(l.store().workspaces()?)).await?;
    Ok(Json(all).into_response())
}

async fn add_workspace(
    State(state): State<AppState>,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let body: WorkspaceBody = parse_strict(&body, "the workspace")?;
    let new = NewWorkspace {
        name: body.name,
        repositories: body
            .repositories
            .into_iter()
            .map(|r| (r.name, r.path))
            .collect(),
        attachments: body.attachments,
        include_secrets: body.include_secrets,
    };
    let ws = blocking(&state, move |l| l.add_workspace(&new)).await?;
    Ok((StatusCode::CREATED, Json(ws)).into_response())
}

async fn show_workspace(
    State(state): State<AppState>,
    ApiPath(name): ApiPath<String>,
) -> Result<Response, ApiError> {
    let ws = blocking(&state, move |l| {
        l.store()
            .workspace(&name)?
            .ok_or_else(|| WorkspaceError::NotFound(format!("no workspace `{name}`")))
    })
    .await?;
    Ok(Json(ws).into_response())
}

async fn remove_workspace(
    State(state): State<AppState>,
    ApiPath(name): ApiPath<String>,
) -> Result<StatusCode, ApiError> {
    blocking(&state, move |l| l.remove_workspace(&name)).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct ConversationBody {
    workspace: String,
    #[serde(default)]
    agents: Vec<String>,
}

async fn list_conversations(State(state): State<AppState>) -> Result<Response, ApiError> {
    let all = blocking(&state, |l| Ok(l.store().conversations()?)).await?;
    Ok(Json(all).into_response())
}

async fn new_conversation(
    State(state): State<AppState>,
    headers: HeaderMap,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let body: ConversationBody = parse_strict(&body, "the conversation")?;
    let layer = layer(&state)?;
    let streamed = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("application/x-ndjson"));
    if !streamed {
        let made = tokio::task::spawn_blocking(move || {
            layer.new_conversation(&body.workspace, &body.agents, &mut |_| {})
        })
        .await
        .map_err(|_| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "provisioning failed"))??;
        return Ok((StatusCode::CREATED, Json(made)).into_response());
    }
    // Progress events while it clones; the last line says how it ended.
    let (tx, rx) = tokio::sync::mpsc::channel::<serde_json::Value>(16);
    tokio::task::spawn_blocking(move || {
        let result: Result<Conversation, WorkspaceError> =
            layer.new_conversation(&body.workspace, &body.agents, &mut |p| {
                let mut event = json!({"type": "progress"});
                if let (Some(map), Ok(serde_json::Value::Object(p))) =
                    (event.as_object_mut(), serde_json::to_value(p))
                {
                    map.extend(p);
                }
                let _ = tx.try_send(event);
            });
        let last = match result {
            Ok(conversation) => json!({"type": "created", "conversation": conversation}),
            Err(e) => {
                let e = ApiError::from(e);
                json!({"type": "error", "status": e.status.as_u16(), "error": e.message, "field": e.field})
            }
        };
        let _ = tx.blocking_send(last);
    });
    let lines = futures_util::stream::unfold(rx, |mut rx| async {
        let event = rx.recv().await?;
        Some((Ok::<_, Infallible>(Bytes::from(wire::line(&event))), rx))
    });
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/x-ndjson")],
        Body::from_stream(lines),
    )
        .into_response())
}

async fn show_conversation(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
) -> Result<Response, ApiError> {
    let conversation = blocking(&state, move |l| l.conversation(&id)).await?;
    Ok(Json(conversation).into_response())
}

async fn remove_conversation(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
    QueryPairs(query): QueryPairs,
) -> Result<StatusCode, ApiError> {
    only_known(&query, &["force"])?;
    let force = match query.get("force").map(String::as_str) {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => {
            return Err(ApiError {
                status: StatusCode::BAD_REQUEST,
                message: format!("`force` is {other:?}: give `true` or `false`"),
                field: Some("force".into()),
                extra: None,
            });
        }
    };
    blocking(&state, move |l| l.remove_conversation(&id, force)).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct AgentBody {
    name: String,
}

#[derive(Debug, Deserialize)]
struct AgentPath {
    id: String,
    agent: String,
}

async fn list_agents(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
) -> Result<Response, ApiError> {
    let conversation = blocking(&state, move |l| l.conversation(&id)).await?;
    Ok(Json(conversation.agents).into_response())
}

async fn add_agent(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let body: AgentBody = parse_strict(&body, "the agent")?;
    let name = body.name.clone();
    blocking(&state, move |l| l.add_agent(&id, &body.name)).await?;
    Ok((StatusCode::CREATED, Json(json!({"name": name}))).into_response())
}

async fn show_agent(
    State(state): State<AppState>,
    ApiPath(AgentPath { id, agent }): ApiPath<AgentPath>,
) -> Result<Response, ApiError> {
    let conversation = blocking(&state, move |l| l.conversation(&id)).await?;
    if !conversation.agents.contains(&agent) {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("no agent `{agent}` in `{}`", conversation.id),
        ));
    }
    Ok(Json(json!({"name": agent, "conversation": conversation.id})).into_response())
}

async fn remove_agent(
    State(state): State<AppState>,
    ApiPath(AgentPath { id, agent }): ApiPath<AgentPath>,
) -> Result<StatusCode, ApiError> {
    blocking(&state, move |l| l.remove_agent(&id, &agent)).await?;
    Ok(StatusCode::NO_CONTENT)
}
