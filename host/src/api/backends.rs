//! `GET /v1/backends`: every backend, its probe and source, the files
//! skipped, the default.

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::routing::get;
use serde_json::json;

use super::AppState;
use crate::wire;

/// The area's routes, with their full paths (the entry-point scan reads them
/// as written: see `entry_points`).
pub fn routes() -> Router<AppState> {
    Router::new().route("/v1/backends", get(list_backends))
}

async fn list_backends(State(state): State<AppState>) -> Json<serde_json::Value> {
    let registry = state.sessions.registry();
    Json(json!({
        "backends": wire::backends_json(registry),
        "problems": wire::problems_json(registry),
        "default": wire::default_json(&state.sessions.select(None)),
    }))
}
