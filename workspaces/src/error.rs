//! What the workspaces layer answers when it will not or cannot act. Each
//! message names the thing, the rule and what to do.

use sandbox_paths::jail::JailError;
use sandbox_runtime::layout::{LayoutError, LayoutErrorKind};

use crate::store::StoreError;

/// Why a workspaces operation failed.
#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    /// No such workspace, conversation, agent or repository.
    #[error("{0}")]
    NotFound(String),
    /// The request cannot be taken as given.
    #[error("{message}")]
    Invalid {
        field: Option<&'static str>,
        message: String,
    },
    /// In use, or in the wrong state (a sandbox holds it, work not exported).
    #[error("{0}")]
    Conflict(String),
    /// A rule refused it (no reflink, a `.git` pointing elsewhere, no room,
    /// a non-fast-forward export).
    #[error("{0}")]
    Refused(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{what}")]
    Jail {
        what: String,
        #[source]
        source: JailError,
    },
    #[error("{what}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
}

impl WorkspaceError {
    pub(crate) fn invalid(field: &'static str, message: impl Into<String>) -> Self {
        Self::Invalid {
            field: Some(field),
            message: message.into(),
        }
    }

    pub(crate) fn jail(what: impl Into<String>, source: JailError) -> Self {
        Self::Jail {
            what: what.into(),
            source,
        }
    }

    /// How the runtime and the API classify it.
    pub fn kind(&self) -> LayoutErrorKind {
        match self {
            Self::NotFound(_) => LayoutErrorKind::NotFound,
            Self::Invalid { .. } => LayoutErrorKind::Invalid,
            Self::Conflict(_) | Self::Refused(_) => LayoutErrorKind::Conflict,
            Self::Store(_) | Self::Io { .. } => LayoutErrorKind::Internal,
            Self::Jail { source, .. } if source.denial().is_some() => LayoutErrorKind::Conflict,
            Self::Jail { .. } => LayoutErrorKind::Internal,
        }
    }

    /// The request field to blame, where one is.
    pub fn field(&self) -> Option<&'static str> {
        match self {
            Self::Invalid { field, .. } => *field,
            _ => None,
        }
    }

    /// As the runtime reports it (the whole chain in the message).
    pub fn to_layout(&self) -> LayoutError {
        LayoutError {
            kind: self.kind(),
            field: self.field(),
            message: sandbox_plugin_api::error_chain(self),
        }
    }
}
