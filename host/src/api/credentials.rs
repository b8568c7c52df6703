//! Two kinds of credential (SPEC H4, H12): the owner's token (the token
//! file: approvals, administration, creating and destroying sandboxes) and
//! each sandbox's agent credential, minted when the sandbox is created
//! (returned once, as `agentCredential`, by `POST /v1/sandboxes`) and
//! revoked when it is destroyed, which opens that sandbox's exec, stdin
//! and file tools and nothing else. An agent must never hold the owner's
//! token: whoever holds it can answer its own prompts.
//!
//! The web console's session cookie stands for the owner's token on the
//! owner's routes (never an agent's, never a ticket's), and only from the
//! console's own page (`super::console::cookie_owner`, the CSRF rule).
//!
//! Every route says which it takes ([`ROUTES`]; a unit test holds the list
//! to the routes the entry-point scan finds). An agent credential on an
//! owner route, or on another sandbox's route, is a 403 naming the rule.

use axum::extract::{MatchedPath, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::{ApiError, AppState, listener, token};
use sandbox_mcp::CallerSandbox;

/// What a route takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Credential {
    /// Nothing (`/healthz`).
    None,
    /// The owner's token only.
    Owner,
    /// The owner's token, or the agent credential of the sandbox `{id}`
    /// names.
    OwnerOrAgent,
    /// An agent credential only: it names the sandbox the call acts on.
    Agent,
    /// A single-use ticket the owner got from an authenticated `POST`,
    /// checked by the route itself (a WebSocket upgrade, on which a browser
    /// cannot set `Authorization`).
    Ticket,
}

/// Every route and the credential it takes, written as the entry-point
/// scan names routes (`METHOD PATH`).
pub const ROUTES: &[(&str, Credential)] = &[
    ("GET /healthz", Credential::None),
    ("GET /v1/openapi.json", Credential::None),
    // The web console's page and files hold nothing secret; signing in
    // takes the token in its body, signing out the cookie it ends.
    ("GET /", Credential::None),
    ("GET /console/{file}", Credential::None),
    ("POST /v1/console/session", Credential::None),
    ("DELETE /v1/console/session", Credential::None),
    ("GET /v1/backends", Credential::Owner),
    ("GET /v1/sandboxes", Credential::Owner),
    ("POST /v1/sandboxes", Credential::Owner),
    ("GET /v1/sandboxes/{id}", Credential::OwnerOrAgent),
    ("DELETE /v1/sandboxes/{id}", Credential::Owner),
    ("POST /v1/sandboxes/{id}/suspend", Credential::Owner),
    ("POST /v1/sandboxes/{id}/resume", Credential::Owner),
    ("POST /v1/sandboxes/{id}/execs", Credential::OwnerOrAgent),
    ("POST /v1/sandboxes/{id}/exec", Credential::OwnerOrAgent),
    (
        "POST /v1/sandboxes/{id}/execs/{exec_id}/kill",
        Credential::OwnerOrAgent,
    ),
    (
        "POST /v1/sandboxes/{id}/execs/{exec_id}/resize",
        Credential::OwnerOrAgent,
    ),
    (
        "POST /v1/sandboxes/{id}/execs/{exec_id}/stdin",
        Credential::OwnerOrAgent,
    ),
    ("POST /v1/policy/check", Credential::Owner),
    ("GET /v1/approvals", Credential::Owner),
    ("POST /v1/approvals/{id}", Credential::Owner),
    // Workspaces and conversations are the owner's (SPEC H1, H4).
    ("GET /v1/workspaces", Credential::Owner),
    ("POST /v1/workspaces", Credential::Owner),
    ("GET /v1/workspaces/{name}", Credential::Owner),
    ("DELETE /v1/workspaces/{name}", Credential::Owner),
    ("GET /v1/conversations", Credential::Owner),
    ("POST /v1/conversations", Credential::Owner),
    ("GET /v1/conversations/{id}", Credential::Owner),
    ("DELETE /v1/conversations/{id}", Credential::Owner),
    ("GET /v1/conversations/{id}/agents", Credential::Owner),
    ("POST /v1/conversations/{id}/agents", Credential::Owner),
    (
        "GET /v1/conversations/{id}/agents/{agent}",
        Credential::Owner,
    ),
    (
        "DELETE /v1/conversations/{id}/agents/{agent}",
        Credential::Owner,
    ),
    // Terminals are the owner's (SPEC D1); the WebSocket takes the ticket
    // an owner's request minted.
    ("GET /v1/terminals", Credential::Owner),
    ("POST /v1/terminals", Credential::Owner),
    ("DELETE /v1/terminals/{id}", Credential::Owner),
    ("POST /v1/terminals/{id}/tickets", Credential::Owner),
    ("GET /v1/terminals/{id}/ws", Credential::Ticket),
    // Every sandbox's events: the owner's view of the server.
    ("GET /v1/events", Credential::Owner),
    ("POST /mcp", Credential::Agent),
    ("GET /mcp", Credential::Agent),
    ("DELETE /mcp", Credential::Agent),
];

/// `cc_server sandboxd`'s REST listener, a server of its own with its own
/// rule (`sandboxd/src/auth.rs`): nothing on loopback (the official client
/// sends no credential), the sandbox's agent credential beyond it, its
/// health probe never. Not routes of this API, nor of its document.
#[cfg(test)]
pub const SANDBOXD_ROUTES: &[(&str, Credential)] = &[
    ("GET /v1/health", Credential::None),
    ("GET /v1/metadata", Credential::Agent),
    ("GET /v1/files/{*path}", Credential::Agent),
    ("HEAD /v1/files/{*path}", Credential::Agent),
    ("PUT /v1/files/{*path}", Credential::Agent),
    ("DELETE /v1/files/{*path}", Credential::Agent),
];

/// The credential a route takes; one missing from [`ROUTES`] takes the
/// owner's (fail closed).
pub fn of(method: &str, path: &str) -> Credential {
    ROUTES
        .iter()
        .find(|(route, _)| route.split_once(' ') == Some((method, path)))
        .map_or(Credential::Owner, |(_, credential)| *credential)
}

/// The segment of `uri` where `template` has `{id}`.
fn sandbox_in(template: &str, uri: &str) -> Option<String> {
    let at = template.split('/').position(|s| s == "{id}")?;
    uri.split('/').nth(at).map(str::to_owned)
}

/// The 403 of a credential on a route it does not open, naming the rule.
fn forbidden(message: String, rule: &str) -> Response {
    let mut error = ApiError::new(StatusCode::FORBIDDEN, message);
    error.extra = Some(json!({"rule": rule, "configKey": null}));
    error.into_response()
}

/// Checks the request's credential against its route (a `route_layer`:
/// the route is known). An agent's call to `/mcp` carries its sandbox on
/// to the tools ([`CallerSandbox`]).
pub async fn check(State(state): State<AppState>, mut request: Request, next: Next) -> Response {
    let template = request
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_default();
    let method = request.method().as_str().to_owned();
    let route = of(&method, &template);
    if route == Credential::Ticket {
        return next.run(request).await;
    }
    let given = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(|t| t.trim().to_owned());
    let authenticated = |request: &Request| {
        // Its connection may use the share kept for clients with a credential.
        if let Some(connection) = request.extensions().get::<listener::OnConnection>() {
            connection.0.authenticated();
        }
    };
    // The web console's cookie is the owner's, on the owner's routes only.
    if given.is_none()
        && let Some(owner) = super::console::cookie_owner(&state, &request)
    {
        if let Err(refused) = owner {
            return refused;
        }
        if route == Credential::Agent {
            return forbidden(
                format!(
                    "{method} {template} takes a sandbox's agent credential, not the console's cookie"
                ),
                "owner cookie names no sandbox",
            );
        }
        authenticated(&request);
        return next.run(request).await;
    }
    let Some(given) = given else {
        let message = match route {
            Credential::Agent => {
                "send `Authorization: Bearer <agent credential>`: the `agentCredential` that \
                 `POST /v1/sandboxes` returned for the sandbox"
            }
            _ => "send `Authorization: Bearer <token>`; the token is in the server's token file",
        };
        return ApiError::new(StatusCode::UNAUTHORIZED, message).into_response();
    };
    if token::matches(&state.token, &given) {
        if route == Credential::Agent {
            return forbidden(
                format!(
                    "{method} {template} takes a sandbox's agent credential, which names the \
                     sandbox the call acts on; the owner's token names none (create a sandbox \
                     and use its `agentCredential`)"
                ),
                "owner token names no sandbox",
            );
        }
        authenticated(&request);
        return next.run(request).await;
    }
    let Some(session) = state.sessions.by_agent_credential(&given) else {
        return ApiError::new(
            StatusCode::UNAUTHORIZED,
            "wrong bearer token: neither the owner's token nor a live sandbox's agent credential \
             (an agent credential is revoked when its sandbox is destroyed)",
        )
        .into_response();
    };
    match route {
        Credential::None | Credential::Ticket => {}
        Credential::Owner => {
            return forbidden(
                format!(
                    "{method} {template} takes the owner's token: an agent credential opens its \
                     own sandbox's exec, stdin and file tools, never approvals, administration or \
                     other sandboxes"
                ),
                "agent credential on an owner route",
            );
        }
        Credential::OwnerOrAgent => {
            let named = sandbox_in(&template, request.uri().path());
            if named.as_deref() != Some(session.id.as_str()) {
                return forbidden(
                    format!(
                        "this agent credential opens the sandbox {} only, not {}",
                        session.id,
                        named.unwrap_or_default()
                    ),
                    "agent credential of another sandbox",
                );
            }
        }
        Credential::Agent => {
            request.extensions_mut().insert(CallerSandbox(session));
        }
    }
    authenticated(&request);
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_routes_take_the_owners_token_and_ids_are_found() {
        assert_eq!(of("GET", "/v1/new-thing"), Credential::Owner);
        assert_eq!(
            of("POST", "/v1/sandboxes/{id}/execs"),
            Credential::OwnerOrAgent
        );
        assert_eq!(of("GET", "/v1/approvals"), Credential::Owner);
        assert_eq!(of("POST", "/mcp"), Credential::Agent);
        assert_eq!(
            sandbox_in("/v1/sandboxes/{id}/execs", "/v1/sandboxes/s1/execs").as_deref(),
            Some("s1")
        );
        assert_eq!(sandbox_in("/v1/approvals", "/v1/approvals"), None);
    }
}
