//! The last word on every error answer: whatever layer made it — a route's
//! handler, the router (405 with an empty body), an extractor this code did
//! not wrap — a 4xx or 5xx leaves the server as the API's JSON
//! (`{"error": …}`, `Content-Type: application/json`), so a client parses
//! one shape of error (threat model T19). The API's own errors already are;
//! this layer rewrites only the others.

use axum::extract::Request;
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::ApiError;
use super::extract::content_type_is;

/// At most this much of a non-JSON error body is quoted.
const QUOTED: usize = 16 * 1024;

/// The middleware (outermost, so it sees every answer).
pub async fn as_json(request: Request, next: Next) -> Response {
    let (method, path) = (request.method().clone(), request.uri().path().to_owned());
    let response = next.run(request).await;
    let status = response.status();
    if !(status.is_client_error() || status.is_server_error())
        || content_type_is(response.headers(), "application/json")
    {
        return response;
    }
    let (parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, QUOTED)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_owned())
        .unwrap_or_default();
    let mut answer = ApiError::new(
        status,
        plan_message(status, &method, &path, &parts.headers, &text),
    )
    .into_response();
    for name in [header::ALLOW, header::WWW_AUTHENTICATE, header::RETRY_AFTER] {
        if let Some(value) = parts.headers.get(&name) {
            answer.headers_mut().insert(name, value.clone());
        }
    }
    answer
}

/// What the JSON says for an error another layer made: its own text when it
/// had one, else what the status means here.
pub fn plan_message(
    status: StatusCode,
    method: &Method,
    path: &str,
    headers: &HeaderMap,
    text: &str,
) -> String {
    if status == StatusCode::METHOD_NOT_ALLOWED {
        let allowed = headers
            .get(header::ALLOW)
            .and_then(|v| v.to_str().ok())
            .filter(|v| !v.is_empty())
            .unwrap_or("other methods");
        return format!("{path} does not take {method}; it takes {allowed}");
    }
    if !text.is_empty() {
        return text.to_owned();
    }
    match status {
        StatusCode::NOT_FOUND => format!("no route {path}"),
        other => other
            .canonical_reason()
            .unwrap_or("the request failed")
            .to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn a_405_names_the_methods_the_route_takes() {
        let mut headers = HeaderMap::new();
        headers.insert(header::ALLOW, HeaderValue::from_static("GET,HEAD"));
        let message = plan_message(
            StatusCode::METHOD_NOT_ALLOWED,
            &Method::PUT,
            "/healthz",
            &headers,
            "",
        );
        assert_eq!(message, "/healthz does not take PUT; it takes GET,HEAD");
    }

    #[test]
    fn another_layers_text_is_kept_and_silence_explained() {
        let empty = HeaderMap::new();
        let kept = plan_message(
            StatusCode::BAD_REQUEST,
            &Method::GET,
            "/x",
            &empty,
            "Invalid URL",
        );
        assert_eq!(kept, "Invalid URL");
        let said = plan_message(StatusCode::NOT_FOUND, &Method::GET, "/x", &empty, "");
        assert_eq!(said, "no route /x");
        let reason = plan_message(StatusCode::BAD_GATEWAY, &Method::GET, "/x", &empty, "");
        assert_eq!(reason, "Bad Gateway");
    }
}
