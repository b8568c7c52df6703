//! The sandboxes: `GET /v1/sandboxes`, `POST /v1/sandboxes[?backend=NAME]`
//! (a SandboxSpec → 201 and a SandboxHandle with the sandbox's
//! `agentCredential`), `GET` and `DELETE
//! /v1/sandboxes/{id}`, and `POST …/suspend`, `POST …/resume`. None runs a
//! command: a launch starts a sandbox with nothing in it.

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use sandbox_plugin_api::{SandboxHandle, SandboxSpec};

use super::extract::{ApiPath, JsonBody, QueryPairs, only_known};
use super::{ApiError, AppState};
use sandbox_runtime::input::parse_strict;

/// The area's routes, with their full paths (the entry-point scan reads them
/// as written: see `entry_points`).
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/sandboxes", get(list_sandboxes).post(create_sandbox))
        .route(
            "/v1/sandboxes/{id}",
            get(show_sandbox).delete(destroy_sandbox),
        )
        .route("/v1/sandboxes/{id}/suspend", post(suspend))
        .route("/v1/sandboxes/{id}/resume", post(resume))
}

async fn list_sandboxes(State(state): State<AppState>) -> Json<Vec<SandboxHandle>> {
    Json(state.sessions.list().iter().map(|s| s.handle()).collect())
}

async fn create_sandbox(
    State(state): State<AppState>,
    QueryPairs(query): QueryPairs,
    JsonBody(body): JsonBody,
) -> Result<(StatusCode, Json<serde_json::Value>), ApiError> {
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
    // The handle, and once only the sandbox's agent credential: the owner
    // hands it to the agent, which then reaches this sandbox alone (SPEC
    // H4, H12; `credentials`).
    let mut created = serde_json::to_value(session.handle())
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    created["agentCredential"] = session.agent_credential().into();
    Ok((StatusCode::CREATED, Json(created)))
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
