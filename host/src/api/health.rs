//! `GET /healthz`: status and version, without the token, and nothing about
//! sandboxing (SPEC B4).

use axum::Json;
use axum::Router;
use axum::routing::get;
use serde_json::json;

use super::AppState;

/// The area's routes, with their full paths (the entry-point scan reads them
/// as written: see `entry_points`).
pub fn routes() -> Router<AppState> {
    Router::new().route("/healthz", get(healthz))
}

async fn healthz() -> Json<serde_json::Value> {
    Json(json!({"status": "ok", "version": env!("CARGO_PKG_VERSION")}))
}
