//! A mount's object, resolved once (SPEC G5): the descriptor a backend
//! checks and mounts instead of a path it would look up again.
//!
//! A bind source, a protected path or a mask point is named by a path that
//! was checked. Looked up again when mounted, that path may lead somewhere
//! else by then: a sandbox that shares the directory can swap one of its
//! components for a symlink between the check and the mount. [`pin`] opens
//! the checked spelling — canonical, so it holds no symlink — with
//! `openat2(RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)` as an `O_PATH`
//! descriptor: a symlink that appeared anywhere in it is refused
//! (`ELOOP`), and what is mounted afterwards is the object the descriptor
//! holds, whatever happens to its name.

use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use super::sys;

/// An `O_PATH` descriptor of `path`'s object, no symlink followed on the
/// way; `path` must be absolute. The error names the path; a symlink in it
/// is [`PinError::Changed`].
pub fn pin(path: &Path) -> Result<OwnedFd, PinError> {
    if !path.is_absolute() {
        return Err(PinError::Io(
            path.to_path_buf(),
            io::Error::from_raw_os_error(libc::EINVAL),
        ));
    }
    let c = sys::c_path(path.as_os_str()).map_err(|e| PinError::Io(path.to_path_buf(), e))?;
    // SAFETY: AT_FDCWD is a valid directory argument for openat2; the
    // absolute path makes it unused.
    let cwd = unsafe { BorrowedFd::borrow_raw(libc::AT_FDCWD) };
    sys::openat2(
        cwd,
        &c,
        libc::O_PATH,
        libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS,
    )
    .map_err(|e| match e.raw_os_error() {
        Some(libc::ELOOP) => PinError::Changed(path.to_path_buf()),
        _ => PinError::Io(path.to_path_buf(), e),
    })
}

/// The `/proc/self/fd/N` spelling of a descriptor: `mount(2)` given it
/// mounts on (or from) the descriptor's object, not a path's.
pub fn fd_spelling(fd: impl AsFd) -> PathBuf {
    use std::os::fd::AsRawFd;
    PathBuf::from(format!("/proc/self/fd/{}", fd.as_fd().as_raw_fd()))
}

/// Why a path could not be pinned.
#[derive(Debug)]
pub enum PinError {
    /// A symlink lies in a path that was checked without one: it changed
    /// since (a swap raced the launch), and is refused.
    Changed(PathBuf),
    /// Any other failure to open it.
    Io(PathBuf, io::Error),
}

impl std::fmt::Display for PinError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Changed(p) => write!(
                f,
                "{} changed between its check and its mount (a symlink now lies in its path): \
                 refused, nothing was mounted (rule: a mount is checked and made as one object); \
                 launch again once nothing swaps it",
                p.display()
            ),
            Self::Io(p, e) => write!(f, "opening {} to mount it: {e}", p.display()),
        }
    }
}

impl std::error::Error for PinError {}

impl PinError {
    /// The path it is about.
    pub fn path(&self) -> &OsStr {
        match self {
            Self::Changed(p) | Self::Io(p, _) => p.as_os_str(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The canonical spelling pins; a symlink anywhere in it is refused as
    /// a change, and the pinned object stays the one opened when its name
    /// is swapped afterwards.
    #[test]
    fn a_symlink_in_the_path_is_a_change_and_the_pin_holds_its_object() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir(root.join("real")).unwrap();
        std::fs::write(root.join("real/mine"), "").unwrap();
        std::fs::create_dir(root.join("other")).unwrap();
        std::os::unix::fs::symlink(root.join("other"), root.join("link")).unwrap();
        assert!(matches!(pin(&root.join("link")), Err(PinError::Changed(_))));
        assert!(matches!(
            pin(&root.join("link/x")),
            Err(PinError::Changed(_)) | Err(PinError::Io(..))
        ));
        assert!(matches!(pin(Path::new("relative")), Err(PinError::Io(..))));
        let fd = pin(&root.join("real")).unwrap();
        std::fs::rename(root.join("real"), root.join("moved")).unwrap();
        std::os::unix::fs::symlink(root.join("other"), root.join("real")).unwrap();
        assert!(fd_spelling(&fd).join("mine").exists());
    }
}
