//! What the plan and the toolchain discovery read of the host's files,
//! behind a trait ([`HostFacts`]) so both are table-tested on fake hosts.

use std::cell::RefCell;
use std::collections::HashMap;
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

/// The real filesystem, each answer remembered: one launch's plan and
/// toolchain discovery ask about the same paths (`$HOME`, the roots, their
/// parents) hundreds of times, and each `canonicalize` is a `readlink` per
/// component. For one launch only, made after it has created what it
/// creates (a new one sees the filesystem afresh).
#[derive(Default)]
pub struct RememberingHost {
    kinds: RefCell<HashMap<PathBuf, Option<Kind>>>,
    resolved: RefCell<HashMap<PathBuf, Option<PathBuf>>>,
}

impl HostFacts for RememberingHost {
    fn kind(&self, path: &Path) -> Option<Kind> {
        if let Some(kind) = self.kinds.borrow().get(path) {
            return *kind;
        }
        let kind = RealHost.kind(path);
        self.kinds.borrow_mut().insert(path.to_path_buf(), kind);
        kind
    }

    fn resolve(&self, path: &Path) -> Option<PathBuf> {
        self.resolve_within(path, 0)
    }

    fn link_target(&self, path: &Path) -> Option<PathBuf> {
        RealHost.link_target(path)
    }

    fn list(&self, dir: &Path) -> Vec<OsString> {
        RealHost.list(dir)
    }
}

impl RememberingHost {
    /// Symlinks followed at most in one resolution, as the kernel's ELOOP.
    const MAX_LINKS: usize = 40;

    /// The parent's answer (remembered) and one `readlink` of the last
    /// name: what `canonicalize` does per component, each prefix once. A
    /// symlink's target is resolved the same way; a path with `..` is left
    /// to `canonicalize` whole.
    fn resolve_within(&self, path: &Path, links: usize) -> Option<PathBuf> {
        if let Some(resolved) = self.resolved.borrow().get(path) {
            return resolved.clone();
        }
        let plain = path.is_absolute()
            && !path
                .components()
                .any(|c| c == std::path::Component::ParentDir);
        let resolved = match (path.parent(), path.file_name()) {
            (Some(parent), Some(name)) if plain => {
                self.resolve_within(parent, links).and_then(|real_parent| {
                    let candidate = real_parent.join(name);
                    match std::fs::read_link(&candidate) {
                        // There, and no symlink (EINVAL): the name stays.
                        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Some(candidate),
                        Err(_) => None,
                        Ok(_) if links >= Self::MAX_LINKS => None,
                        Ok(target) => self.resolve_within(&real_parent.join(target), links + 1),
                    }
                })
            }
            _ => RealHost.resolve(path),
        };
        self.resolved
            .borrow_mut()
            .insert(path.to_path_buf(), resolved.clone());
        resolved
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every answer is `canonicalize`'s, through symlinks to directories
    /// and files, relative and absolute, dangling, looping and with `..`.
    #[test]
    fn remembered_answers_are_those_of_canonicalize() {
        use std::os::unix::fs::symlink;
        let root = std::env::temp_dir().join(format!("host-facts-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("real/sub")).unwrap();
        std::fs::write(root.join("real/sub/file"), b"x").unwrap();
        symlink(root.join("real"), root.join("abs")).unwrap();
        symlink("real/sub", root.join("rel")).unwrap();
        symlink("../sub/file", root.join("real/sub/up")).unwrap();
        symlink("file", root.join("real/sub/same")).unwrap();
        symlink("nowhere", root.join("dangling")).unwrap();
        symlink("loop-b", root.join("loop-a")).unwrap();
        symlink("loop-a", root.join("loop-b")).unwrap();
        let host = RememberingHost::default();
        for rel in [
            "",
            "real",
            "real/sub/file",
            "abs",
            "abs/sub",
            "abs/sub/file",
            "rel",
            "rel/file",
            "real/sub/up",
            "real/sub/same",
            "abs/sub/same",
            "dangling",
            "loop-a",
            "loop-a/x",
            "missing",
            "real/missing/deeper",
            "real/../abs/sub",
            "rel/../sub",
        ] {
            let path = root.join(rel);
            for _ in 0..2 {
                assert_eq!(host.resolve(&path), RealHost.resolve(&path), "{rel}");
            }
        }
        assert_eq!(host.resolve(Path::new("/")), Some(PathBuf::from("/")));
        let _ = std::fs::remove_dir_all(&root);
    }
}
