//! `/mcp`: the agent tools over streamable HTTP (`sandbox-mcp`), behind the
//! API's Host and Origin rules, its connection limits and the agent
//! credential, which names the one sandbox each call acts on
//! ([`super::credentials`]). Each tool is an entry point of its own
//! (`mcp tool exec`, …); the route is their transport.

use axum::Router;
use axum::extract::{Request, State};
use axum::response::Response;
use axum::routing::post;

use super::AppState;

/// The area's routes, with their full paths (the entry-point scan reads them
/// as written: see `entry_points`).
pub fn routes() -> Router<AppState> {
    Router::new().route("/mcp", post(serve).get(serve).delete(serve))
}

async fn serve(State(state): State<AppState>, request: Request) -> Response {
    state.mcp.handle(request).await.map(axum::body::Body::new)
}
