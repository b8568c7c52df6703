//! From a path as named to descriptors the kernel resolved beneath a root:
//! the whole path (reads), or a parent directory and a final name
//! (changes), each with the canonical path the kernel reports for it.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use super::error::{Denial, JailError, NEEDS_OPENAT2, Op, rule};
use super::form::{self, Split};
use super::{Jail, JailPath, sys};

/// A final name in a directory the jail holds, beneath a root.
#[derive(Debug)]
pub(super) struct Target {
    /// The directory, `O_PATH`, resolved beneath the root.
    pub parent: OwnedFd,
    /// The final name: one plain name.
    pub name: CString,
    /// The directory's canonical path and the name: what the rules judge.
    pub path: PathBuf,
    /// The nearest root holding `path`.
    pub root: usize,
    /// The path as named, for messages.
    pub given: PathBuf,
}

/// A whole path resolved beneath a root.
#[derive(Debug)]
pub(super) struct Whole {
    /// The object, `O_PATH`.
    pub fd: OwnedFd,
    /// Its canonical path.
    pub path: PathBuf,
    /// The path as named, for messages.
    pub given: PathBuf,
}

/// Asks the kernel for `openat2` once, at construction: without it no
/// path could be resolved beneath the root.
pub(super) fn probe(root: &OwnedFd, path: &Path) -> Result<(), JailError> {
    sys::openat2(
        root.as_fd(),
        c".",
        libc::O_PATH | libc::O_DIRECTORY,
        sys::BENEATH,
    )
    .map(drop)
    .map_err(|e| resolution_error(Op::Open, path, e))
}

/// What the kernel's answer to a resolution beneath a root means: `EXDEV`
/// and `ELOOP` are refusals by rule, `ENOSYS` a kernel without `openat2`.
pub(super) fn resolution_error(op: Op, given: &Path, err: io::Error) -> JailError {
    match err.raw_os_error() {
        Some(libc::EXDEV) => denied(
            op,
            given,
            None,
            rule::ESCAPES_ROOT,
            "a `..` or an absolute symlink on the way leads out of the root",
            Some("name a path beneath the root; a symlink out of it is never followed"),
        ),
        Some(libc::ELOOP) => denied(
            op,
            given,
            None,
            rule::LINK_OUT,
            "a symlink on the way loops or leads out of the root, or is a magic link \
             (/proc/<pid>/fd, /proc/<pid>/root)",
            None,
        ),
        Some(libc::ENOSYS) => JailError::Unsupported {
            op,
            path: given.to_path_buf(),
            detail: NEEDS_OPENAT2.into(),
        },
        _ => io_error(op, given, err),
    }
}

/// A refusal.
pub(super) fn denied(
    op: Op,
    given: &Path,
    resolved: Option<&Path>,
    rule: &str,
    why: impl Into<String>,
    remedy: Option<&str>,
) -> JailError {
    JailError::Refused(Box::new(Denial {
        op,
        path: given.to_path_buf(),
        resolved: resolved.map(Path::to_path_buf),
        rule: rule.to_owned(),
        why: why.into(),
        remedy: remedy.map(str::to_owned),
    }))
}

/// An ordinary failure.
pub(super) fn io_error(op: Op, given: &Path, source: io::Error) -> JailError {
    JailError::Io {
        op,
        path: given.to_path_buf(),
        source,
    }
}

impl Jail {
    /// The path as messages show it: a root-relative one under its root's
    /// host path.
    pub(super) fn shown(&self, p: &JailPath) -> PathBuf {
        match p {
            JailPath::Host(path) => path.clone(),
            JailPath::InRoot { root, path } => match self.roots.iter().find(|r| r.label == *root) {
                Some(r) => r.given.join(path),
                None => PathBuf::from(format!("{root}:{}", path.display())),
            },
        }
    }

    /// The root a path is named beneath, and the path relative to it
    /// (lexically: what it leads to is the kernel's to say).
    fn locate(&self, op: Op, p: &JailPath, given: &Path) -> Result<(usize, PathBuf), JailError> {
        match p {
            JailPath::InRoot { root, path } => {
                let index = self
                    .roots
                    .iter()
                    .position(|r| r.label == *root)
                    .ok_or_else(|| {
                        denied(
                            op,
                            given,
                            None,
                            rule::PATH_FORM,
                            format!("no root is labelled {root}"),
                            None,
                        )
                    })?;
                Ok((index, path.clone()))
            }
            JailPath::Host(path) => {
                if !path.is_absolute() {
                    return Err(denied(
                        op,
                        given,
                        None,
                        rule::PATH_FORM,
                        "a host path must be absolute",
                        Some("name it relative to a root instead"),
                    ));
                }
                let spellings = self
                    .roots
                    .iter()
                    .enumerate()
                    .flat_map(|(i, r)| [(i, r.given.as_path()), (i, r.canonical.as_path())]);
                form::locate_host(path, spellings).ok_or_else(|| {
                    let roots: Vec<String> = self
                        .roots
                        .iter()
                        .map(|r| r.given.display().to_string())
                        .collect();
                    denied(
                        op,
                        given,
                        None,
                        rule::OUTSIDE_ROOTS,
                        "it lies under no root of this jail",
                        Some(&format!("name a path under {}", roots.join(", "))),
                    )
                })
            }
        }
    }

    /// The nearest root (by canonical path) holding `path`.
    pub(super) fn nearest_root(&self, path: &Path) -> Option<usize> {
        self.roots
            .iter()
            .enumerate()
            .filter(|(_, r)| path.starts_with(&r.canonical))
            .max_by_key(|(_, r)| r.canonical.components().count())
            .map(|(i, _)| i)
    }

    /// The canonical path of a descriptor the jail holds, and the nearest
    /// root holding it: none means it was moved out while held.
    pub(super) fn canonical(
        &self,
        op: Op,
        given: &Path,
        fd: &OwnedFd,
    ) -> Result<(PathBuf, usize), JailError> {
        let st = sys::fstat(fd.as_fd()).map_err(|e| io_error(op, given, e))?;
        if st.st_nlink == 0 {
            // Removed while held: its path would read "… (deleted)".
            return Err(io_error(
                op,
                given,
                io::Error::from_raw_os_error(libc::ENOENT),
            ));
        }
        let path = sys::fd_path(fd.as_fd()).map_err(|e| match e.raw_os_error() {
            Some(libc::EXDEV) => self.moved_out(op, given, None),
            _ => io_error(op, given, e),
        })?;
        let root = self
            .nearest_root(&path)
            .ok_or_else(|| self.moved_out(op, given, Some(&path)))?;
        Ok((path, root))
    }

    fn moved_out(&self, op: Op, given: &Path, resolved: Option<&Path>) -> JailError {
        denied(
            op,
            given,
            resolved,
            rule::ESCAPES_ROOT,
            "it resolved outside every root (moved away during the operation)",
            None,
        )
    }

    /// The whole path resolved beneath its root (symlinks followed while
    /// they stay beneath it, the last one too unless `flags` has
    /// `O_NOFOLLOW`), opened `O_PATH`.
    pub(super) fn whole(&self, op: Op, p: &JailPath, flags: i32) -> Result<Whole, JailError> {
        let given = self.shown(p);
        let (root, rel) = self.locate(op, p, &given)?;
        let rel = form::whole(&rel)
            .map_err(|why| denied(op, &given, None, rule::PATH_FORM, why, None))?;
        let c_rel = sys::c_path(rel.as_os_str()).map_err(|e| io_error(op, &given, e))?;
        let fd = sys::openat2(
            self.roots[root].fd.as_fd(),
            &c_rel,
            libc::O_PATH | flags,
            sys::BENEATH,
        )
        .map_err(|e| resolution_error(op, &given, e))?;
        let (path, _) = self.canonical(op, &given, &fd)?;
        Ok(Whole { fd, path, given })
    }

    /// The directory part resolved beneath its root, and the final name:
    /// what a change acts on. The root itself is no final name.
    pub(super) fn target(&self, op: Op, p: &JailPath) -> Result<Target, JailError> {
        let given = self.shown(p);
        let (root, rel) = self.locate(op, p, &given)?;
        let (dir, name) = match form::split_final(&rel) {
            Ok(Split::Entry { dir, name }) => (dir, name),
            Ok(Split::Root) => {
                return Err(denied(
                    op,
                    &given,
                    None,
                    rule::ROOT_ITSELF,
                    "the root itself is not an entry the jail changes",
                    Some("name an entry beneath it"),
                ));
            }
            Err(why) => return Err(denied(op, &given, None, rule::PATH_FORM, why, None)),
        };
        let dir = if dir.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            dir
        };
        let c_dir = sys::c_path(dir.as_os_str()).map_err(|e| io_error(op, &given, e))?;
        let parent = sys::openat2(
            self.roots[root].fd.as_fd(),
            &c_dir,
            libc::O_PATH | libc::O_DIRECTORY,
            sys::BENEATH,
        )
        .map_err(|e| resolution_error(op, &given, e))?;
        let (parent_path, _) = self.canonical(op, &given, &parent)?;
        let path = parent_path.join(&name);
        let root = self
            .nearest_root(&path)
            .ok_or_else(|| self.moved_out(op, &given, Some(&path)))?;
        let name = sys::c_path(&name).map_err(|e| io_error(op, &given, e))?;
        Ok(Target {
            parent,
            name,
            path,
            root,
            given,
        })
    }
}
