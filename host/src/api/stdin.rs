//! Streamed stdin: an exec started with `"stdin": "stream"` keeps its stdin
//! open, and `POST /v1/sandboxes/{id}/execs/{exec}/stdin` sends a raw body
//! (`Content-Type: application/octet-stream`, any length, chunked or not)
//! into it, piece by piece as it arrives, so stdin longer than the body
//! limit goes in without the server holding it. The end of the body
//! closes stdin; `?close=false` keeps it open for another POST.
//!
//! Backpressure: the next piece of the body is read only when the command
//! took the last one, so a command that reads slowly slows the upload (TCP
//! does the rest) and the server holds at most one piece per upload.
//!
//! One upload at a time per exec (a second is a 409: two writers would
//! interleave); a body that breaks off kills the command, since a command
//! that read a cut-off input to its end would take it for the whole (a
//! script half-read by `sh -s`, a truncated archive).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use axum::extract::{Request, State};
use axum::http::StatusCode;
use futures_util::StreamExt as _;

use super::extract::{
    ApiPath, QueryPairs, announces_body, content_type_is, only_known, unsupported_type,
};
use super::{ApiError, AppState, ExecPath};
use sandbox_plugin_api::ErrorCode;
use sandbox_runtime::sessions::{Session, SessionError};

/// The execs whose stdin is streamed, by session id and exec id.
#[derive(Default)]
pub struct Streams {
    open: Mutex<HashMap<(String, u64), Entry>>,
}

struct Entry {
    /// The session the exec belongs to (an id may be reused after destroy).
    session: Weak<Session>,
    /// An upload is running.
    busy: bool,
}

impl Streams {
    /// Marks an exec's stdin as streamed until the returned guard is
    /// dropped (the exec's stream ended or its client left).
    pub fn open(self: &Arc<Self>, session: &Arc<Session>, exec_id: u64) -> Registration {
        let key = (session.id.clone(), exec_id);
        let entry = Entry {
            session: Arc::downgrade(session),
            busy: false,
        };
        self.lock().insert(key.clone(), entry);
        Registration {
            streams: Arc::clone(self),
            key,
            session: Arc::downgrade(session),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, u64), Entry>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes the exec's stdin for one upload.
    fn claim(self: &Arc<Self>, session: &Arc<Session>, exec_id: u64) -> Result<Claim, ApiError> {
        let key = (session.id.clone(), exec_id);
        let mut open = self.lock();
        let entry = open
            .get_mut(&key)
            .filter(|e| Weak::ptr_eq(&e.session, &Arc::downgrade(session)));
        match entry {
            None => Err(ApiError::new(
                StatusCode::CONFLICT,
                format!(
                    "exec {exec_id} of session `{}` takes no streamed stdin: it has ended, its \
                     stdin was closed, or it was not started with `\"stdin\": \"stream\"`",
                    session.id
                ),
            )),
            Some(e) if e.busy => Err(ApiError::new(
                StatusCode::CONFLICT,
                format!("exec {exec_id} is receiving another upload; send the next one after it"),
            )),
            Some(e) => {
                e.busy = true;
                Ok(Claim {
                    streams: Arc::clone(self),
                    key,
                    session: Arc::clone(session),
                    state: Upload::Running,
                })
            }
        }
    }

    /// Removes or releases `key` if it still belongs to `session`.
    fn settle(&self, key: &(String, u64), session: &Weak<Session>, remove: bool) {
        let mut open = self.lock();
        if let Some(entry) = open.get_mut(key)
            && Weak::ptr_eq(&entry.session, session)
        {
            if remove {
                open.remove(key);
            } else {
                entry.busy = false;
            }
        }
    }
}

/// Held by the exec's output stream: the exec takes uploads while it lives.
pub struct Registration {
    streams: Arc<Streams>,
    key: (String, u64),
    session: Weak<Session>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.streams.settle(&self.key, &self.session, true);
    }
}

/// One upload's hold on the exec's stdin. Dropped while the upload is
/// still [`Upload::Running`] — the connection went away mid-body and the
/// handler with it — the command is killed, as for a body that broke off.
struct Claim {
    streams: Arc<Streams>,
    key: (String, u64),
    session: Arc<Session>,
    state: Upload,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Upload {
    Running,
    /// Every piece was written and stdin stays open for another upload.
    Released,
    /// Stdin is closed or unusable (or the command killed): no more uploads.
    Done,
}

impl Drop for Claim {
    fn drop(&mut self) {
        let weak = Arc::downgrade(&self.session);
        self.streams
            .settle(&self.key, &weak, self.state != Upload::Released);
        if self.state == Upload::Running {
            let (session, exec) = (Arc::clone(&self.session), self.key.1);
            tracing::info!(session = %session.id, exec, "a stdin upload broke off; killing the command");
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(async move {
                    let _ = session.kill(exec, libc::SIGKILL).await;
                });
            }
        }
    }
}

/// `POST /v1/sandboxes/{id}/execs/{exec}/stdin`.
pub(super) async fn upload(
    State(state): State<AppState>,
    ApiPath(ExecPath { id, exec_id: exec }): ApiPath<ExecPath>,
    QueryPairs(query): QueryPairs,
    request: Request,
) -> Result<StatusCode, ApiError> {
    only_known(&query, &["close"])?;
    let close = match query.get("close").map(String::as_str) {
        None | Some("true") => true,
        Some("false") => false,
        Some(other) => {
            let mut error = ApiError::new(
                StatusCode::BAD_REQUEST,
                format!("close `{other}`: give `true` (the default) or `false`"),
            );
            error.field = Some("close".into());
            return Err(error);
        }
    };
    let headers = request.headers();
    if announces_body(headers) && !content_type_is(headers, "application/octet-stream") {
        return Err(unsupported_type(headers, "application/octet-stream"));
    }
    let session = state.sessions.get(&id)?;
    let mut claim = state.stdin.claim(&session, exec)?;
    let mut body = request.into_body().into_data_stream();
    while let Some(piece) = body.next().await {
        let piece = match piece {
            Ok(piece) => piece,
            Err(e) => {
                // `claim` is still running: dropping it kills the command.
                return Err(ApiError::new(
                    StatusCode::BAD_REQUEST,
                    format!(
                        "the upload broke off ({e}); exec {exec} is killed, so that it does not \
                         take a cut-off input for the whole"
                    ),
                ));
            }
        };
        if piece.is_empty() {
            continue;
        }
        if let Err(e) = session.write_stdin(exec, piece.to_vec()).await {
            claim.state = Upload::Done;
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                format!(
                    "exec {exec} no longer reads its stdin (it ended or closed it): {}",
                    sandbox_plugin_api::error_chain(&e)
                ),
            ));
        }
    }
    claim.state = if close {
        Upload::Done
    } else {
        Upload::Released
    };
    if close {
        match session.close_stdin(exec).await {
            Ok(()) => {}
            // Every byte was written, and the command ended before its
            // stdin was closed (a terminal's `read line; exit`): nothing is
            // left to close.
            Err(SessionError::Backend(e)) if e.code == ErrorCode::NOT_FOUND => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(StatusCode::NO_CONTENT)
}
