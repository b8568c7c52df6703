//! Refuses files and directories that someone else could have written, before
//! anything is dlopened: loading a library runs its code
//! (docs/research/plugin-abi.md §1.9).

use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// Why a path is not trusted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Distrust {
    /// Not a regular file (a directory, a fifo, a dangling link, …).
    #[error("not a regular file")]
    NotRegular,
    /// Group or others may write it.
    #[error("{what} is writable by group or others (mode {mode:03o}); run `chmod go-w {path}`")]
    Writable {
        /// "the file" or "its directory".
        what: &'static str,
        /// The permission bits.
        mode: u32,
        /// The path to fix.
        path: String,
    },
    /// Owned by a user other than root and the server's.
    #[error("{what} is owned by uid {owner}, neither root nor the server's uid {ours}")]
    Owner {
        /// "the file" or "its directory".
        what: &'static str,
        /// Its owner.
        owner: u32,
        /// The server's effective uid.
        ours: u32,
    },
    /// Could not be examined.
    #[error("cannot examine it: {0}")]
    Unreadable(String),
}

fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// A plugins directory must be writable only by root or the server's user.
pub fn check_dir(dir: &Path) -> Result<(), Distrust> {
    let meta = std::fs::metadata(dir).map_err(|e| Distrust::Unreadable(e.to_string()))?;
    check_owner_and_mode(&meta, "the directory", dir)
}

/// A plugin file must be a regular file (after links) writable only by root
/// or the server's user, in a directory that is too.
pub fn check_file(path: &Path) -> Result<(), Distrust> {
    let real = std::fs::canonicalize(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => Distrust::NotRegular,
        _ => Distrust::Unreadable(e.to_string()),
    })?;
    let meta = std::fs::metadata(&real).map_err(|e| Distrust::Unreadable(e.to_string()))?;
    if !meta.is_file() {
        return Err(Distrust::NotRegular);
    }
    check_owner_and_mode(&meta, "the file", &real)?;
    // A link may lead into another directory: that one must be safe too.
    if let Some(parent) = real.parent() {
        check_dir(parent)?;
    }
    Ok(())
}

fn check_owner_and_mode(
    meta: &std::fs::Metadata,
    what: &'static str,
    path: &Path,
) -> Result<(), Distrust> {
    let mode = meta.mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Err(Distrust::Writable {
            what,
            mode,
            path: path.display().to_string(),
        });
    }
    let ours = effective_uid();
    if meta.uid() != 0 && meta.uid() != ours {
        return Err(Distrust::Owner {
            what,
            owner: meta.uid(),
            ours,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn chmod(path: &Path, mode: u32) {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn writable_files_and_dirs_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("libsandbox_backend_x.so");
        std::fs::write(&file, "").unwrap();
        chmod(&file, 0o644);
        assert_eq!(check_file(&file), Ok(()));
        chmod(&file, 0o666);
        assert!(matches!(
            check_file(&file),
            Err(Distrust::Writable { mode: 0o666, .. })
        ));
        chmod(&file, 0o664);
        assert!(matches!(check_file(&file), Err(Distrust::Writable { .. })));
        chmod(&file, 0o644);
        chmod(dir.path(), 0o777);
        assert!(matches!(
            check_file(&file),
            Err(Distrust::Writable {
                what: "the directory",
                ..
            })
        ));
        assert!(check_dir(dir.path()).is_err());
        chmod(dir.path(), 0o755);
    }

    #[test]
    fn links_are_judged_by_what_they_lead_to() {
        let dir = tempfile::tempdir().unwrap();
        let unsafe_dir = dir.path().join("open");
        std::fs::create_dir(&unsafe_dir).unwrap();
        chmod(&unsafe_dir, 0o777);
        let target = unsafe_dir.join("real.so");
        std::fs::write(&target, "").unwrap();
        chmod(&target, 0o644);
        let link = dir.path().join("libsandbox_backend_x.so");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(matches!(
            check_file(&link),
            Err(Distrust::Writable {
                what: "the directory",
                ..
            })
        ));
        let dangling = dir.path().join("libsandbox_backend_y.so");
        std::os::unix::fs::symlink(dir.path().join("missing"), &dangling).unwrap();
        assert_eq!(check_file(&dangling), Err(Distrust::NotRegular));
        assert_eq!(check_file(dir.path()), Err(Distrust::NotRegular));
    }

    #[test]
    fn foreign_owners_are_refused() {
        if effective_uid() != 0 {
            return; // only root can give a file away
        }
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f.so");
        std::fs::write(&file, "").unwrap();
        chmod(&file, 0o644);
        std::os::unix::fs::chown(&file, Some(65534), None).unwrap();
        assert!(matches!(
            check_file(&file),
            Err(Distrust::Owner { owner: 65534, .. })
        ));
    }
}
