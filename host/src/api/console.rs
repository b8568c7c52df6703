//! The web console's routes (the page, its files, signing in and out) and
//! the cookie as an owner's credential; what is not wiring lives in the
//! `sandbox-console` crate.
//!
//! - `GET /` — the page; `GET /console/{file}` — its script, style and
//!   xterm.js, each with the console's security headers.
//! - `POST /v1/console/session` `{"token"}` — signs in: the owner's token,
//!   posted once, opens a session whose id goes into an `HttpOnly`,
//!   `SameSite=Strict` cookie (`[api] console_session_secs`).
//! - `DELETE /v1/console/session` — signs out.
//!
//! A request with that cookie and no `Authorization` is the owner's
//! ([`cookie_owner`]) when it also passes the console's CSRF rule.

use axum::Router;
use axum::extract::Request;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use sandbox_console::{assets, csrf, headers, session};
use serde::Deserialize;
use serde_json::json;

use super::extract::{ApiPath, JsonBody};
use super::{ApiError, AppState, token};
use sandbox_runtime::input::parse_strict;

/// The area's routes, with their full paths (the entry-point scan reads them
/// as written: see `entry_points`).
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/", get(page))
        .route("/console/{file}", get(asset))
        .route("/v1/console/session", post(sign_in).delete(sign_out))
}

/// An embedded file with the console's headers.
fn serve(file: &assets::Asset) -> Response {
    let mut response = ([(header::CONTENT_TYPE, file.content_type)], file.body).into_response();
    secure(response.headers_mut());
    response
}

fn secure(headers: &mut HeaderMap) {
    for (name, value) in headers::SECURITY {
        headers.insert(*name, HeaderValue::from_static(value));
    }
}

async fn page() -> Response {
    serve(&assets::PAGE)
}

async fn asset(ApiPath(file): ApiPath<String>) -> Response {
    match assets::find(&file) {
        Some(found) => serve(found),
        None => ApiError::new(
            StatusCode::NOT_FOUND,
            format!("the console has no file `{file}`"),
        )
        .into_response(),
    }
}

/// The body of `POST /v1/console/session`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct SignInCall {
    /// The owner's token (the server's token file).
    token: String,
}

/// The CSRF rule's view of a request.
fn seen<'a>(method: &'a str, headers: &'a HeaderMap) -> csrf::Seen<'a> {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    csrf::Seen {
        method,
        host: text("host"),
        origin: text("origin"),
        fetch_site: text("sec-fetch-site"),
        console_header: text(csrf::HEADER),
    }
}

fn refused(refusal: csrf::Refused) -> Response {
    let mut error = ApiError::new(StatusCode::FORBIDDEN, refusal.message);
    error.extra = Some(json!({"rule": refusal.rule, "configKey": null}));
    error.into_response()
}

async fn sign_in(
    State(state): State<AppState>,
    request_headers: HeaderMap,
    JsonBody(body): JsonBody,
) -> Result<Response, Response> {
    csrf::check(&seen("POST", &request_headers)).map_err(refused)?;
    let call: SignInCall =
        parse_strict(&body, "the sign-in").map_err(|e| ApiError::from(e).into_response())?;
    if !token::matches(&state.token, call.token.trim()) {
        return Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "wrong token: paste the owner's token from the server's token file",
        )
        .into_response());
    }
    let id = state.console.open().map_err(|e| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("a session id: {e}"),
        )
        .into_response()
    })?;
    tracing::info!("the web console signed in");
    let mut response = StatusCode::NO_CONTENT.into_response();
    set_cookie(&mut response, &state.console.set_cookie(&id));
    Ok(response)
}

async fn sign_out(State(state): State<AppState>, request_headers: HeaderMap) -> Response {
    if let Err(refusal) = csrf::check(&seen("DELETE", &request_headers)) {
        return refused(refusal);
    }
    if let Some(id) = cookie(&request_headers) {
        state.console.close(id);
    }
    let mut response = StatusCode::NO_CONTENT.into_response();
    set_cookie(&mut response, &session::clear_cookie());
    response
}

fn set_cookie(response: &mut Response, value: &str) {
    if let Ok(value) = HeaderValue::from_str(value) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
}

/// The console's session id among the request's cookies.
fn cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(session::from_cookie_header)
}

/// `None` when the request carries no console cookie; else whether it is
/// the owner's: a live session and the CSRF rule passed, or the refusal.
pub(super) fn cookie_owner(state: &AppState, request: &Request) -> Option<Result<(), Response>> {
    let id = cookie(request.headers())?;
    if !state.console.check(id) {
        return Some(Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "the console's session has expired or was signed out: sign in again (`[api] \
             console_session_secs` sets how long a sign-in lasts)",
        )
        .into_response()));
    }
    let method = request.method().as_str();
    Some(csrf::check(&seen(method, request.headers())).map_err(refused))
}
