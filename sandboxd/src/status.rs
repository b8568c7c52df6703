//! How a refusal or a failure reads on the wire: a gRPC status with the
//! contract's codes, or the REST `Error` body (`{"code", "message"}`, plus
//! `rule` when a rule refused). Every refusal says what, by which rule,
//! and what changes it.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use sandbox_plugin_api::SandboxViolation;
use sandbox_runtime::sessions::SessionError;
use serde_json::json;
use tonic::Status;

/// A session's answer as a gRPC status: a policy refusal is
/// `PERMISSION_DENIED`, what the backend cannot do `FAILED_PRECONDITION`.
pub fn session_status(error: &SessionError) -> Status {
    let message = sandbox_plugin_api::error_chain(error);
    match error {
        SessionError::Refused(_) => Status::permission_denied(message),
        SessionError::Unsupported { .. } | SessionError::PolicyUnenforceable(_) => {
            Status::failed_precondition(message)
        }
        SessionError::Env(_) | SessionError::InvalidSpec { .. } => {
            Status::invalid_argument(message)
        }
        SessionError::Destroyed(_) => Status::unavailable(message),
        SessionError::NotFound(_) => Status::not_found(message),
        _ => Status::internal(message),
    }
}

/// One line of stderr for a violation: what was refused, the rule, the
/// remedy.
pub fn violation_line(v: &SandboxViolation) -> String {
    match sandbox_plugin_api::violation::explain(&v.action) {
        Some(e) => format!(
            "cc_server: refused {} {}: {}; {}\n",
            v.action, v.target, e.rule, e.remedy
        ),
        None => format!("cc_server: refused {} {}\n", v.action, v.target),
    }
}

/// A REST error: the status, the contract's code, the message, the rule.
#[derive(Debug)]
pub struct RestError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    pub rule: Option<String>,
}

impl RestError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            rule: None,
        }
    }

    pub fn denied(message: impl Into<String>, rule: Option<String>) -> Self {
        Self {
            rule,
            ..Self::new(StatusCode::FORBIDDEN, "PERMISSION_DENIED", message)
        }
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "NOT_FOUND", message)
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "INVALID_ARGUMENT", message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL", message)
    }
}

impl IntoResponse for RestError {
    fn into_response(self) -> Response {
        let mut body = json!({"code": self.code, "message": self.message});
        if let Some(rule) = self.rule {
            body["rule"] = rule.into();
        }
        (self.status, Json(body)).into_response()
    }
}
