//! Errors that cross the plugin boundary: data, not types (an open code and a
//! message), so a newer plugin can report a code an older host does not know.

use std::fmt;

pub use crate::abi::ErrorCode;

/// An error returned by a backend, or by the host's side of the boundary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginError {
    /// What kind of failure; unknown codes are legal.
    pub code: ErrorCode,
    /// What went wrong and, where possible, what to do about it.
    pub message: String,
}

impl PluginError {
    /// An error with a code and a message.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    /// The operation is not offered by this backend.
    pub fn unsupported(what: &str) -> Self {
        Self::new(
            ErrorCode::UNSUPPORTED,
            format!("{what} is not supported by this backend"),
        )
    }

    /// The spec or request asks for something the backend cannot do as asked.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::INVALID_REQUEST, message)
    }

    /// Anything else.
    pub fn other(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::OTHER, message)
    }
}

impl fmt::Display for PluginError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.message, self.code)
    }
}

impl std::error::Error for PluginError {}
