//! `GET /v1/events` → NDJSON: every sandbox's events as they happen, the
//! owner's view of the whole server (the web console's live events). Each
//! line is an exec stream's event (`wire::event_json`) with the
//! `sandboxId` it belongs to: the sandbox's own `starting` and `ready`,
//! `state` (`destroyed` last), violations, and its execs' output (cut to
//! `sandbox_runtime::feed::OUTPUT_LIMIT` bytes an event) and ends. A
//! client that falls behind gets `{"type":"lagged","missed"}` in place of
//! what it missed; a sandbox never waits for a watcher.

use std::convert::Infallible;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::json;
use tokio::sync::broadcast::error::RecvError;

use super::AppState;
use crate::wire;

/// The area's routes, with their full paths (the entry-point scan reads them
/// as written: see `entry_points`).
pub fn routes() -> Router<AppState> {
    Router::new().route("/v1/events", get(follow))
}

async fn follow(State(state): State<AppState>) -> Response {
    let rx = state.sessions.feed().subscribe();
    let hello = json!({"type": "connected"});
    let events = futures_util::stream::unfold(rx, |mut rx| async move {
        let line = match rx.recv().await {
            Ok(seen) => {
                let mut event = wire::event_json(&seen.event);
                event["sandboxId"] = seen.sandbox_id.as_ref().into();
                event
            }
            Err(RecvError::Lagged(missed)) => json!({"type": "lagged", "missed": missed}),
            Err(RecvError::Closed) => return None,
        };
        Some((Ok::<_, Infallible>(Bytes::from(wire::line(&line))), rx))
    });
    let first =
        futures_util::stream::once(
            async move { Ok::<_, Infallible>(Bytes::from(wire::line(&hello))) },
        );
    (
        [(header::CONTENT_TYPE, "application/x-ndjson")],
        Body::from_stream(futures_util::StreamExt::chain(first, events)),
    )
        .into_response()
}
