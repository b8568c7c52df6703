//! The API's own extractors: the request's body, path and query, each
//! refused as the API's JSON (`error`, `field` where there is one) instead of
//! axum's plain-text rejections (threat model T19).
//!
//! - [`JsonBody`]: a body that arrives must be `Content-Type:
//!   application/json` (415 otherwise; a browser page cannot send that type
//!   without a preflight this server never answers) and fit the body limit
//!   (413, naming the limit and the streamed-stdin route for long input).
//! - [`ApiPath`]: a path segment that does not parse is a 400 naming it.
//! - [`QueryPairs`]: the query as a map, a parameter given twice a 400 (two
//!   readers of one URL must not see two different values).

use std::collections::BTreeMap;

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection};
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use serde::de::DeserializeOwned;

use super::ApiError;

/// The body limit of every buffered body (axum's default, 2 MiB).
pub const BODY_LIMIT: usize = 2 * 1024 * 1024;

/// Whether `Content-Type` is `essence` (parameters such as `charset` allowed).
pub fn content_type_is(headers: &HeaderMap, essence: &str) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case(essence))
}

/// Whether the request says a body follows (before reading any of it).
pub fn announces_body(headers: &HeaderMap) -> bool {
    headers.contains_key(header::TRANSFER_ENCODING)
        || headers
            .get(header::CONTENT_LENGTH)
            .is_some_and(|v| v.as_bytes() != b"0")
}

/// The 415 for a body of the wrong type.
pub fn unsupported_type(headers: &HeaderMap, essence: &str) -> ApiError {
    let got = match headers.get(header::CONTENT_TYPE) {
        Some(v) => format!("`{}`", v.to_str().unwrap_or("(not text)")),
        None => "none".to_owned(),
    };
    ApiError::new(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        format!(
            "this route takes a body sent with `Content-Type: {essence}`; the request's Content-Type is {got}"
        ),
    )
}

/// A buffered JSON body (possibly empty: routes whose body is optional
/// decide what empty means).
pub struct JsonBody(pub Bytes);

impl<S: Send + Sync> FromRequest<S> for JsonBody {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        let json = content_type_is(request.headers(), "application/json");
        // Refused before reading: a wrong type is not worth 2 MiB.
        if !json && announces_body(request.headers()) {
            return Err(unsupported_type(request.headers(), "application/json"));
        }
        let headers = request.headers().clone();
        let body = Bytes::from_request(request, state)
            .await
            .map_err(body_error)?;
        if !json && !body.is_empty() {
            return Err(unsupported_type(&headers, "application/json"));
        }
        Ok(Self(body))
    }
}

/// A body that could not be read, as the API's JSON.
fn body_error(rejection: BytesRejection) -> ApiError {
    let status = rejection.status();
    if status == StatusCode::PAYLOAD_TOO_LARGE {
        return ApiError::new(
            status,
            format!(
                "the request body is larger than the limit of {} MiB; for a long stdin, start \
                 the exec with `\"stdin\": \"stream\"` and send it to \
                 `POST /v1/sandboxes/{{id}}/execs/{{exec}}/stdin`, which has no limit",
                BODY_LIMIT >> 20
            ),
        );
    }
    ApiError::new(
        status,
        format!(
            "the request body could not be read: {}",
            rejection.body_text()
        ),
    )
}

/// Path parameters; one that does not parse is a 400 naming it.
pub struct ApiPath<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for ApiPath<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match Path::<T>::from_request_parts(parts, state).await {
            Ok(Path(value)) => Ok(Self(value)),
            Err(rejection) => Err(path_error(rejection)),
        }
    }
}

fn path_error(rejection: PathRejection) -> ApiError {
    use axum::extract::path::ErrorKind;
    let status = rejection.status();
    let mut error = ApiError::new(status, format!("the URL: {}", rejection.body_text()));
    if let PathRejection::FailedToDeserializePathParams(e) = &rejection {
        error.field = match e.kind() {
            ErrorKind::ParseErrorAtKey { key, .. }
            | ErrorKind::InvalidUtf8InPathParam { key }
            | ErrorKind::DeserializeError { key, .. } => Some(key.clone()),
            _ => None,
        };
    }
    error
}

/// The query string's parameters; a parameter given twice is a 400.
pub struct QueryPairs(pub BTreeMap<String, String>);

impl<S: Send + Sync> FromRequestParts<S> for QueryPairs {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let Query(pairs) = Query::<Vec<(String, String)>>::from_request_parts(parts, state)
            .await
            .map_err(|rejection| {
                ApiError::new(
                    rejection.status(),
                    format!("the query string: {}", rejection.body_text()),
                )
            })?;
        plan_query(pairs).map(Self)
    }
}

/// The query's pairs as a map, refusing a name given twice.
pub fn plan_query(pairs: Vec<(String, String)>) -> Result<BTreeMap<String, String>, ApiError> {
    let mut query = BTreeMap::new();
    for (name, value) in pairs {
        if query.contains_key(&name) {
            let mut error = ApiError::new(
                StatusCode::BAD_REQUEST,
                format!("query parameter `{name}` is given twice; give it once"),
            );
            error.field = Some(name);
            return Err(error);
        }
        query.insert(name, value);
    }
    Ok(query)
}

/// Refuses any parameter but `known`, naming it and the known ones.
pub fn only_known(query: &BTreeMap<String, String>, known: &[&str]) -> Result<(), ApiError> {
    match query.keys().find(|k| !known.contains(&k.as_str())) {
        None => Ok(()),
        Some(unknown) => {
            let expected = match known {
                [] => "this route takes none".to_owned(),
                [one] => format!("the only one is `{one}`"),
                more => format!(
                    "use {}",
                    more.iter()
                        .map(|k| format!("`{k}`"))
                        .collect::<Vec<_>>()
                        .join(" or ")
                ),
            };
            let mut error = ApiError::new(
                StatusCode::BAD_REQUEST,
                format!("unknown query parameter `{unknown}`; {expected}"),
            );
            error.field = Some(unknown.clone());
            Err(error)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn content_types_match_by_essence() {
        let mut headers = HeaderMap::new();
        assert!(!content_type_is(&headers, "application/json"));
        for (value, json) in [
            ("application/json", true),
            ("Application/JSON; charset=utf-8", true),
            ("application/json-patch+json", false),
            ("text/plain", false),
            ("application/x-www-form-urlencoded", false),
        ] {
            headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(value));
            assert_eq!(
                content_type_is(&headers, "application/json"),
                json,
                "{value}"
            );
        }
    }

    #[test]
    fn a_query_parameter_given_twice_is_refused_by_name() {
        let pairs = |p: &[(&str, &str)]| {
            p.iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect::<Vec<_>>()
        };
        let once = plan_query(pairs(&[("backend", "none"), ("x", "1")])).unwrap();
        assert_eq!(once["backend"], "none");
        let twice = plan_query(pairs(&[("backend", "none"), ("backend", "microvm")])).unwrap_err();
        assert_eq!(twice.status, StatusCode::BAD_REQUEST);
        assert_eq!(twice.field.as_deref(), Some("backend"));
        let unknown = only_known(&once, &["backend"]).unwrap_err();
        assert_eq!(unknown.field.as_deref(), Some("x"));
        assert!(unknown.message.contains("`backend`"), "{}", unknown.message);
    }
}
