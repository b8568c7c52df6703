//! What the plan and the toolchain discovery read of the host's files,
//! behind a trait ([`HostFacts`]) so both are table-tested on fake hosts.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// What a path is on the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    File,
    Dir,
}

/// What the plan needs to know about the host filesystem.
pub trait HostFacts {
    /// What `path` is, following symlinks; `None` if nothing is there.
    fn kind(&self, path: &Path) -> Option<Kind>;
    /// `path` with every symlink resolved, if it exists.
    fn resolve(&self, path: &Path) -> Option<PathBuf>;
    /// The target of `path` if `path` itself is a symlink.
    fn link_target(&self, path: &Path) -> Option<PathBuf>;
    /// The names in a directory.
    fn list(&self, dir: &Path) -> Vec<OsString>;
}

/// The real filesystem.
pub struct RealHost;

impl HostFacts for RealHost {
    fn kind(&self, path: &Path) -> Option<Kind> {
        let meta = std::fs::metadata(path).ok()?;
        Some(if meta.is_dir() { Kind::Dir } else { Kind::File })
    }

    fn resolve(&self, path: &Path) -> Option<PathBuf> {
        std::fs::canonicalize(path).ok()
    }

    fn link_target(&self, path: &Path) -> Option<PathBuf> {
        std::fs::read_link(path).ok()
    }

    fn list(&self, dir: &Path) -> Vec<OsString> {
        std::fs::read_dir(dir)
            .map(|d| d.filter_map(Result::ok).map(|e| e.file_name()).collect())
            .unwrap_or_default()
    }
}
