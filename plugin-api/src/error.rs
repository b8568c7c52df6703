//! Errors that cross the plugin boundary: data, not types (an open code and a
//! message), so a newer plugin can report a code an older host does not know.

use std::fmt;

use abi_stable::std_types::{RResult, RString};

pub use crate::abi::ErrorCode;
use crate::abi::RawError;

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

    /// An error with a code, its message the Rust error and every
    /// `source()` below it (the boundary carries text, not types).
    pub fn from_error(code: ErrorCode, error: &(dyn std::error::Error + 'static)) -> Self {
        Self::new(code, chain(error))
    }
}

/// An error and its `source()` chain as one line, `outer: inner: innermost`
/// — what a user is shown where a typed error becomes text (a plugin error,
/// a log line, a JSON body). Types keep the parts apart; this joins them once.
pub fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut next = error.source();
    while let Some(source) = next {
        text.push_str(": ");
        text.push_str(&source.to_string());
        next = source.source();
    }
    text
}

impl fmt::Display for PluginError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.message, self.code)
    }
}

impl std::error::Error for PluginError {}

impl From<PluginError> for RawError {
    fn from(e: PluginError) -> Self {
        Self {
            code: e.code,
            message: e.message.into(),
            json: RString::new(),
        }
    }
}

impl From<RawError> for PluginError {
    fn from(e: RawError) -> Self {
        PluginError::new(e.code, e.message.into_string())
    }
}

/// Converts an SDK result for the wire.
pub(crate) fn to_rresult<T, U: From<T>>(r: Result<T, PluginError>) -> RResult<U, RawError> {
    match r {
        Ok(v) => RResult::ROk(v.into()),
        Err(e) => RResult::RErr(e.into()),
    }
}

/// `RResult` → `Result`, for host-side code.
pub(crate) fn from_rresult<T, U: From<T>>(r: RResult<T, RawError>) -> Result<U, PluginError> {
    match r {
        RResult::ROk(v) => Ok(v.into()),
        RResult::RErr(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Outer(std::io::Error);
    impl fmt::Display for Outer {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("reading the image")
        }
    }
    impl std::error::Error for Outer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn chain_joins_every_source_once() {
        let e = Outer(std::io::Error::other("disk on fire"));
        assert_eq!(chain(&e), "reading the image: disk on fire");
        let p = PluginError::from_error(ErrorCode::OTHER, &e);
        assert_eq!(p.message, "reading the image: disk on fire");
    }
}
