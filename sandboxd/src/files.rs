//! The file routes' work, in the server process: every path goes through
//! `sandbox-paths`' jail over the sandbox's one root, judged by the
//! sandbox's own rules, and every change through the MCP file tools'
//! guardrails (SPEC H2, H4) — the same `SessionFiles`, effects and
//! parent-making, never a check of its own. The URL's path is decoded
//! exactly once ([`decode_path`]); what `..`, `%2F` or a symlink then lead
//! to is the kernel's to resolve beneath the root.

use std::fs;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::sync::Arc;

use sandbox_mcp::failure::ToolError;
use sandbox_mcp::files::{SessionFiles, edit::make_parents};
use sandbox_paths::jail::{EntryKind, JailError, JailPath};
use serde_json::{Value, json};
use tonic::Status;

use crate::Daemon;
use crate::status::RestError;

/// The path of `/v1/files/{path}` as the client wrote it, decoded once:
/// `%2F` is a `/`, `%2E%2E` a `..` — both judged by the jail like any
/// other. A decoded NUL, or an invalid escape, is refused.
pub fn decode_path(raw: &str) -> Result<String, RestError> {
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| {
                    RestError::bad_request(format!(
                        "the path `{raw}` holds an invalid percent escape at byte {i}"
                    ))
                })?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    let path = String::from_utf8(out).map_err(|_| {
        RestError::bad_request(format!("the path `{raw}` is not UTF-8 once decoded"))
    })?;
    if path.contains('\0') {
        return Err(RestError::bad_request(format!(
            "the path `{raw}` holds a NUL byte once decoded"
        )));
    }
    Ok(path)
}

/// The guest path of a root-relative path from the URL (leading `/` are
/// the URL's, not an absolute path).
fn guest(daemon: &Daemon, relative: &str) -> String {
    daemon
        .root
        .join(relative.trim_start_matches('/'))
        .display()
        .to_string()
}

/// The session's files, made once (blocking).
fn session_files(daemon: &Daemon) -> Result<Arc<SessionFiles>, RestError> {
    SessionFiles::of(&daemon.session, &daemon.roots_of).map_err(tool_error)
}

/// A jail error as the contract's codes: a rule is 403, a missing name
/// 404, a directory not empty 409.
pub fn jail_error(shown: &str, error: &JailError) -> RestError {
    match error {
        JailError::Refused(denial) => {
            let mut message = format!(
                "{} {shown}: refused by the rule `{}`: {}",
                denial.op, denial.rule, denial.why
            );
            if let Some(remedy) = &denial.remedy {
                message.push_str("; ");
                message.push_str(remedy);
            }
            RestError::denied(message, Some(denial.rule.clone()))
        }
        _ => match error.raw_os_error() {
            Some(libc::ENOENT | libc::ENOTDIR) => {
                RestError::not_found(format!("{shown}: no such file or directory"))
            }
            Some(libc::ENOTEMPTY) => RestError::new(
                http::StatusCode::CONFLICT,
                "FAILED_PRECONDITION",
                format!("{shown}: the directory is not empty; add ?recursive=true"),
            ),
            Some(libc::EISDIR | libc::EEXIST) => RestError::new(
                http::StatusCode::CONFLICT,
                "FAILED_PRECONDITION",
                format!("{shown}: {error}"),
            ),
            Some(libc::EACCES | libc::EPERM | libc::EROFS) => {
                RestError::denied(format!("{shown}: {error}"), None)
            }
            _ => RestError::internal(format!("{shown}: {error}")),
        },
    }
}

/// A file tool's failure as a REST error: a rule is 403.
pub fn tool_error(error: ToolError) -> RestError {
    match error.rule {
        Some(rule) => RestError::denied(error.message, Some(rule)),
        None => RestError::internal(error.message),
    }
}

/// What `GET` answers: a file opened through the jail (its bytes are
/// streamed from the descriptor the jail judged), or a listing.
pub enum Got {
    File {
        file: fs::File,
        size: u64,
        modified: i64,
        mode: u32,
    },
    Listing(Value),
}

/// `GET`: a file's bytes, or a directory's listing.
pub fn get(daemon: &Daemon, relative: &str) -> Result<Got, RestError> {
    let files = session_files(daemon)?;
    let shown = format!("/{}", relative.trim_start_matches('/'));
    let (_, path) = files.locate(&guest(daemon, relative)).map_err(tool_error)?;
    let meta = files
        .jail
        .stat(&path, true)
        .map_err(|e| jail_error(&shown, &e))?;
    if meta.is_dir() {
        return Ok(Got::Listing(listing(&files, &path, &shown)?));
    }
    let file = files
        .jail
        .open_read(&path)
        .map_err(|e| jail_error(&shown, &e))?;
    let meta = file
        .metadata()
        .map_err(|e| RestError::internal(format!("{shown}: {e}")))?;
    Ok(Got::File {
        file,
        size: meta.len(),
        modified: meta.mtime(),
        mode: meta.permissions().mode(),
    })
}

/// `HEAD`: whether it exists, with its size and time.
pub fn head(daemon: &Daemon, relative: &str) -> Result<(u64, i64, bool), RestError> {
    let files = session_files(daemon)?;
    let shown = format!("/{}", relative.trim_start_matches('/'));
    let (_, path) = files.locate(&guest(daemon, relative)).map_err(tool_error)?;
    let meta = files
        .jail
        .stat(&path, true)
        .map_err(|e| jail_error(&shown, &e))?;
    Ok((meta.len(), meta.mtime(), meta.is_dir()))
}

fn listing(files: &SessionFiles, dir: &JailPath, shown: &str) -> Result<Value, RestError> {
    let mut entries = Vec::new();
    let mut names = files.jail.list(dir).map_err(|e| jail_error(shown, &e))?;
    names.sort_by(|a, b| a.name.cmp(&b.name));
    for entry in names {
        let name = entry.name.to_string_lossy().into_owned();
        let kind = match entry.kind {
            EntryKind::File => "file",
            EntryKind::Dir => "directory",
            EntryKind::Symlink => "symlink",
            EntryKind::Other => "other",
        };
        let child = JailPath::from_input(dir, &name);
        // A secret is listed by name only: the jail does not stat it.
        let (size, modified, mode) = match files.jail.stat(&child, false) {
            Ok(m) => (m.len(), m.mtime(), m.permissions().mode()),
            Err(_) => (0, 0, 0),
        };
        entries.push(json!({
            "name": name,
            "type": kind,
            "size": size,
            "modified_at": rfc3339(modified),
            "mode": format!("{:04o}", mode & 0o7777),
        }));
    }
    Ok(json!({"path": shown, "entries": entries}))
}

/// `PUT`: the body becomes the file, atomically, its parents made — after
/// the guardrails allowed the change (SPEC H4).
pub async fn put(
    daemon: Arc<Daemon>,
    relative: String,
    data: bytes::Bytes,
    mode: Option<u32>,
) -> Result<(), RestError> {
    let shown = format!("/{}", relative.trim_start_matches('/'));
    let d = Arc::clone(&daemon);
    let (files, located, path, exists, effect) = blocking(move || {
        let files = session_files(&d)?;
        let (located, path) = files.locate(&guest(&d, &relative)).map_err(tool_error)?;
        let exists = match files.jail.stat(&path, false) {
            Ok(m) if m.is_dir() => {
                return Err(RestError::new(
                    http::StatusCode::CONFLICT,
                    "FAILED_PRECONDITION",
                    format!("{}: a directory is there", located.guest.display()),
                ));
            }
            Ok(_) => true,
            Err(e @ JailError::Refused(_)) => {
                return Err(jail_error(&located.guest.display().to_string(), &e));
            }
            Err(_) => false,
        };
        let effect = sandbox_mcp::effects::judge(&files, &located, &path, false);
        Ok((files, located, path, exists, effect))
    })
    .await?;
    guard(&daemon, "write", effect).await?;
    blocking(move || {
        if !exists {
            make_parents(&files, &located).map_err(tool_error)?;
        }
        files
            .jail
            .replace_atomically(&path, &data)
            .map_err(|e| jail_error(&shown, &e))?;
        if let Some(mode) = mode {
            files
                .jail
                .chmod(&path, mode)
                .map_err(|e| jail_error(&shown, &e))?;
        }
        Ok(())
    })
    .await
}

/// `DELETE`: a file, an empty directory, or with `recursive` a tree —
/// after the guardrails allowed the change.
pub async fn delete(
    daemon: Arc<Daemon>,
    relative: String,
    recursive: bool,
) -> Result<(), RestError> {
    let shown = format!("/{}", relative.trim_start_matches('/'));
    let d = Arc::clone(&daemon);
    let (files, path, is_dir, effect) = blocking(move || {
        let files = session_files(&d)?;
        let (located, path) = files.locate(&guest(&d, &relative)).map_err(tool_error)?;
        let meta = files
            .jail
            .stat(&path, false)
            .map_err(|e| jail_error(&located.guest.display().to_string(), &e))?;
        let effect = sandbox_mcp::effects::judge(&files, &located, &path, true);
        Ok((files, path, meta.is_dir(), effect))
    })
    .await?;
    guard(&daemon, "delete", effect).await?;
    blocking(move || {
        let done = match (is_dir, recursive) {
            (true, true) => files.jail.remove_all(&path),
            (true, false) => files.jail.rmdir(&path),
            (false, _) => files.jail.unlink(&path),
        };
        done.map_err(|e| jail_error(&shown, &e))
    })
    .await
}

/// The guardrails on one change: the mode's table and the guardrails file,
/// a prompt asked of the server's owners (with none: deny).
async fn guard(
    daemon: &Daemon,
    tool: &str,
    effect: sandbox_mcp::effects::Effect,
) -> Result<(), RestError> {
    let session = &daemon.session;
    let resolution =
        sandbox_mcp::effects::resolve(vec![effect], session.mode(), &session.commands().guardrails);
    sandbox_mcp::effects::settle(session, tool, resolution)
        .await
        .map(drop)
        .map_err(tool_error)
}

/// A `cwd` of the contract, confined to the root by the jail: relative to
/// the root, or absolute beneath it; it must be a directory there.
pub fn confined_cwd(daemon: &Daemon, cwd: &str) -> Result<String, Status> {
    let guest = if cwd.starts_with('/') {
        cwd.to_owned()
    } else {
        daemon.root.join(cwd).display().to_string()
    };
    let denied = |e: RestError| match e.status {
        http::StatusCode::FORBIDDEN => {
            Status::permission_denied(format!("cwd {cwd}: {}", e.message))
        }
        http::StatusCode::NOT_FOUND => Status::not_found(format!("cwd {cwd}: {}", e.message)),
        _ => Status::invalid_argument(format!("cwd {cwd}: {}", e.message)),
    };
    let files = session_files(daemon).map_err(denied)?;
    let (located, path) = files.locate(&guest).map_err(|e| denied(tool_error(e)))?;
    let meta = files
        .jail
        .stat(&path, true)
        .map_err(|e| denied(jail_error(&guest, &e)))?;
    if !meta.is_dir() {
        return Err(Status::invalid_argument(format!(
            "cwd {cwd}: not a directory"
        )));
    }
    Ok(located.guest.display().to_string())
}

async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, RestError> + Send + 'static,
) -> Result<T, RestError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| RestError::internal(format!("internal error: the file route failed: {e}")))?
}

/// Seconds since the epoch as RFC 3339 in UTC (pure).
pub fn rfc3339(secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Howard Hinnant's civil-from-days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_is_decoded_once() {
        assert_eq!(decode_path("a%2Fb.txt").unwrap(), "a/b.txt");
        assert_eq!(decode_path("%2E%2E%2Fetc").unwrap(), "../etc");
        // Twice-encoded stays encoded once: `%252E` is the name `%2E`.
        assert_eq!(decode_path("%252E%252E").unwrap(), "%2E%2E");
        assert!(decode_path("a%00b").is_err());
        assert!(decode_path("a%zz").is_err());
        assert!(decode_path("a%2").is_err());
    }

    #[test]
    fn times_are_rfc3339_in_utc() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_798_761_599), "2026-12-31T23:59:59Z");
    }
}
