//! The REST listener: `/v1/files/{path}` (`GET`, `HEAD`, `PUT`, `DELETE`),
//! `/v1/health`, `/v1/metadata`, answering with the contract's codes and
//! its `Error` body. The path is taken from the raw URI and decoded once
//! ([`crate::files::decode_path`]); a body over the configured limit is
//! refused with 413 before it is kept.

use std::fs;
use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::json;

use crate::Daemon;
use crate::files::{self, Got};
use crate::status::RestError;

const FILES: &str = "/v1/files/";

pub fn router(daemon: Arc<Daemon>) -> Router {
    Router::new()
        .route("/v1/health", get(health))
        .route("/v1/metadata", get(metadata))
        .route(
            "/v1/files/{*path}",
            get(get_file)
                .head(head_file)
                .put(put_file)
                .delete(delete_file),
        )
        .fallback(not_a_route)
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&daemon),
            crate::auth::rest_credential,
        ))
        // The PUT handler reads the body within its own limit.
        .layer(DefaultBodyLimit::disable())
        .with_state(daemon)
}

async fn not_a_route(request: Request) -> RestError {
    RestError::not_found(format!(
        "{} {}: no such route; sandboxd serves /v1/files/{{path}}, /v1/health and /v1/metadata",
        request.method(),
        request.uri().path()
    ))
}

/// Ready while the sandbox is live.
async fn health(State(daemon): State<Arc<Daemon>>) -> Response {
    if daemon.session.is_live() {
        let uptime = daemon.started.elapsed().as_secs();
        Json(json!({"status": "ok", "uptime_seconds": uptime})).into_response()
    } else {
        RestError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "UNAVAILABLE",
            "the sandbox is gone: restart the sidecar",
        )
        .into_response()
    }
}

/// The orchestrator's `SANDBOX_*` variables, and which boundary holds.
async fn metadata(State(daemon): State<Arc<Daemon>>) -> Response {
    let env: serde_json::Map<String, serde_json::Value> = std::env::vars()
        .filter(|(k, _)| k.starts_with("SANDBOX_"))
        .filter(|(k, _)| !crate::boundary::looks_secret(k))
        .map(|(k, v)| (k, v.into()))
        .collect();
    Json(json!({
        "env": env,
        "cc_server": crate::boundary::report(&daemon.session),
    }))
    .into_response()
}

/// The path after `/v1/files/`, from the raw URI, decoded once.
fn relative(request: &Request) -> Result<String, RestError> {
    let raw = request
        .uri()
        .path()
        .strip_prefix(FILES)
        .ok_or_else(|| RestError::bad_request("the path must follow /v1/files/"))?;
    files::decode_path(raw)
}

async fn get_file(State(daemon): State<Arc<Daemon>>, request: Request) -> Response {
    let relative = relative(&request);
    let answer = async move {
        let relative = relative?;
        let d = Arc::clone(&daemon);
        tokio::task::spawn_blocking(move || files::get(&d, &relative))
            .await
            .map_err(|e| RestError::internal(e.to_string()))?
    };
    match answer.await {
        Ok(Got::Listing(listing)) => Json(listing).into_response(),
        Ok(Got::File {
            file,
            size,
            modified,
            mode,
        }) => {
            let mut headers = HeaderMap::new();
            headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/octet-stream"),
            );
            headers.insert(header::CONTENT_LENGTH, HeaderValue::from(size));
            insert_times(&mut headers, modified, mode);
            (headers, Body::from_stream(chunks(file, size))).into_response()
        }
        Err(e) => e.into_response(),
    }
}

async fn head_file(State(daemon): State<Arc<Daemon>>, request: Request) -> Response {
    let relative = relative(&request);
    let answer = async move {
        let relative = relative?;
        let d = Arc::clone(&daemon);
        tokio::task::spawn_blocking(move || files::head(&d, &relative))
            .await
            .map_err(|e| RestError::internal(e.to_string()))?
    };
    match answer.await {
        Ok((size, modified, dir)) => {
            let mut headers = HeaderMap::new();
            let kind = if dir {
                "application/json"
            } else {
                "application/octet-stream"
            };
            headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
            if !dir {
                headers.insert(header::CONTENT_LENGTH, HeaderValue::from(size));
            }
            insert_times(&mut headers, modified, 0);
            (StatusCode::OK, headers).into_response()
        }
        Err(e) => e.status.into_response(),
    }
}

/// The file's bytes in chunks read off the async threads, up to the size
/// it had when opened (a file growing meanwhile does not outrun its
/// `Content-Length`).
fn chunks(
    file: fs::File,
    size: u64,
) -> impl futures_util::Stream<Item = std::io::Result<bytes::Bytes>> + Send {
    const CHUNK: u64 = 256 << 10;
    futures_util::stream::unfold(Some((file, size)), |state| async move {
        let (mut file, left) = state?;
        if left == 0 {
            return None;
        }
        let read = tokio::task::spawn_blocking(move || {
            use std::io::Read as _;
            let mut buf = vec![0; CHUNK.min(left) as usize];
            let n = file.read(&mut buf)?;
            buf.truncate(n);
            Ok::<_, std::io::Error>((file, buf))
        })
        .await
        .map_err(std::io::Error::other)
        .and_then(|r| r);
        match read {
            Ok((_, buf)) if buf.is_empty() => Some((
                Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "the file shrank while it was sent",
                )),
                None,
            )),
            Ok((file, buf)) => {
                let left = left - buf.len() as u64;
                Some((Ok(bytes::Bytes::from(buf)), Some((file, left))))
            }
            Err(e) => Some((Err(e), None)),
        }
    })
}

fn insert_times(headers: &mut HeaderMap, modified: i64, mode: u32) {
    let when = std::time::UNIX_EPOCH + std::time::Duration::from_secs(modified.max(0) as u64);
    if let Ok(v) = HeaderValue::from_str(&httpdate::fmt_http_date(when)) {
        headers.insert(header::LAST_MODIFIED, v);
    }
    if mode != 0
        && let Ok(v) = HeaderValue::from_str(&format!("{:04o}", mode & 0o7777))
    {
        headers.insert("x-file-mode", v);
    }
}

async fn put_file(State(daemon): State<Arc<Daemon>>, request: Request) -> Response {
    let answer = async move {
        let relative = relative(&request)?;
        let mode = query(&request, "mode")
            .map(|m| parse_mode(&m))
            .transpose()?;
        let content_type = request
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        let limit = daemon.max_file_bytes;
        let body = axum::body::to_bytes(request.into_body(), limit)
            .await
            .map_err(|e| {
                RestError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "RESOURCE_EXHAUSTED",
                    format!(
                        "the body was not taken ({e}): a file of at most {limit} bytes; \
                         `cc_server sandboxd --max-file-bytes` changes it"
                    ),
                )
            })?;
        let data = if content_type.starts_with("multipart/form-data") {
            crate::multipart::file_part(&content_type, &body)
                .map(bytes::Bytes::from)
                .map_err(RestError::bad_request)?
        } else {
            body
        };
        files::put(Arc::clone(&daemon), relative, data, mode).await
    };
    match answer.await {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => e.into_response(),
    }
}

async fn delete_file(State(daemon): State<Arc<Daemon>>, request: Request) -> Response {
    let answer = async move {
        let relative = relative(&request)?;
        let recursive = match query(&request, "recursive").as_deref() {
            None | Some("false") | Some("0") => false,
            Some("true") | Some("1") => true,
            Some(other) => {
                return Err(RestError::bad_request(format!(
                    "recursive={other}: give true or false"
                )));
            }
        };
        files::delete(Arc::clone(&daemon), relative, recursive).await
    };
    match answer.await {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => e.into_response(),
    }
}

fn query(request: &Request, name: &str) -> Option<String> {
    let q = request.uri().query()?;
    q.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (k == name).then(|| files::decode_path(v).unwrap_or_default())
    })
}

/// `mode=0644`: `^0[0-7]{3}$`, as the contract says.
fn parse_mode(text: &str) -> Result<u32, RestError> {
    let ok = text.len() == 4
        && text.starts_with('0')
        && text[1..].bytes().all(|b| (b'0'..=b'7').contains(&b));
    if !ok {
        return Err(RestError::bad_request(format!(
            "mode={text}: give four octal digits starting with 0, such as 0644"
        )));
    }
    u32::from_str_radix(text, 8).map_err(|e| RestError::bad_request(format!("mode={text}: {e}")))
}
