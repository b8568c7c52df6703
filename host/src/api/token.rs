//! The bearer token every `/v1` request must carry, kept in a file only its
//! owner can read.

use std::io::{Read as _, Write as _};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::Path;

use anyhow::{Context as _, bail};

/// Reads the token, creating it (mode 0600, 256 random bits) if absent.
/// Refuses a token file that is not a regular file (a link included), that
/// another user owns (they could read or replace it), or that group or others
/// can read or write: a leaked token is full access. The checks are made on
/// the opened file, so what is checked is what is read.
pub fn ensure(path: &Path) -> anyhow::Result<String> {
    // O_NONBLOCK: opening a FIFO planted there must not hang the start.
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path);
    let mut file = match opened {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return create(path),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => bail!(
            "the token file {} is a symbolic link, not a regular file; point --token-file \
             (or `token_file`) at the file itself",
            path.display()
        ),
        Err(e) => {
            return Err(e).with_context(|| format!("opening the token file {}", path.display()));
        }
    };
    let meta = file
        .metadata()
        .with_context(|| format!("examining the token file {}", path.display()))?;
    // SAFETY: geteuid cannot fail.
    let uid = unsafe { libc::geteuid() };
    check(path, &meta, uid)?;
    let mut text = String::new();
    file.read_to_string(&mut text)
        .with_context(|| format!("reading the token file {}", path.display()))?;
    let token = text.trim().to_owned();
    if token.len() < 16 {
        bail!(
            "the token in {} is shorter than 16 characters; delete the file to get a new one",
            path.display()
        );
    }
    Ok(token)
}

/// The rules for an existing token file, on its metadata; `uid` is the
/// server's.
fn check(path: &Path, meta: &std::fs::Metadata, uid: u32) -> anyhow::Result<()> {
    if !meta.is_file() {
        bail!("the token file {} is not a regular file", path.display());
    }
    if meta.uid() != uid {
        bail!(
            "the token file {} belongs to uid {}, not to uid {uid} the server runs as: its \
             owner could read or replace the token. Give it to this user (`chown {uid} {}`), \
             delete it so the server makes a new one, or pass --token-file",
            path.display(),
            meta.uid(),
            path.display()
        );
    }
    let mode = meta.mode() & 0o777;
    if mode & 0o077 != 0 {
        bail!(
            "the token file {} is readable or writable by others (mode {mode:03o}); run `chmod 600 {}`",
            path.display(),
            path.display()
        );
    }
    Ok(())
}

fn create(path: &Path) -> anyhow::Result<String> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .with_context(|| {
                format!("creating the directory of the token file {}", dir.display())
            })?;
    }
    let token = sandbox_runtime::random::hex(32).context("reading /dev/urandom")?;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("creating the token file {}", path.display()))?;
    file.write_all(format!("{token}\n").as_bytes())
        .with_context(|| format!("writing the token file {}", path.display()))?;
    tracing::info!("created a new API token in {}", path.display());
    Ok(token)
}

/// Compares without leaking, through timing, how much of a guess was right.
pub fn matches(expected: &str, given: &str) -> bool {
    let (a, b) = (expected.as_bytes(), given.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn created_once_private_then_reused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state/cc/token");
        let first = ensure(&path).unwrap();
        assert_eq!(first.len(), 64);
        assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o777, 0o600);
        assert_eq!(ensure(&path).unwrap(), first);
    }

    #[test]
    fn a_readable_token_file_is_refused_with_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "0123456789abcdef0123").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = ensure(&path).unwrap_err().to_string();
        assert!(err.contains("chmod 600"), "{err}");
    }

    #[test]
    fn a_link_or_a_foreign_owner_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        std::fs::write(&real, "0123456789abcdef0123").unwrap();
        std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o600)).unwrap();
        let link = dir.path().join("token");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let err = ensure(&link).unwrap_err().to_string();
        assert!(err.contains("symbolic link"), "{err}");
        let meta = std::fs::metadata(&real).unwrap();
        let err = check(&real, &meta, meta.uid() + 1).unwrap_err().to_string();
        assert!(
            err.contains(&format!("belongs to uid {}", meta.uid())) && err.contains("chown"),
            "{err}"
        );
    }

    #[test]
    fn comparison() {
        assert!(matches("secret-token", "secret-token"));
        assert!(!matches("secret-token", "secret-tokeN"));
        assert!(!matches("secret-token", "secret"));
    }
}
