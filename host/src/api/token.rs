//! The bearer token every `/v1` request must carry, kept in a file only its
//! owner can read.

use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};

/// `$XDG_STATE_HOME/cc_server/token`, else `~/.local/state/cc_server/token`.
pub fn default_path() -> anyhow::Result<PathBuf> {
    if let Some(state) = std::env::var_os("XDG_STATE_HOME").filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(state).join("cc_server/token"));
    }
    let home = std::env::var_os("HOME")
        .filter(|v| !v.is_empty())
        .context("HOME is not set")?;
    Ok(PathBuf::from(home).join(".local/state/cc_server/token"))
}

/// Reads the token, creating it (mode 0600, 256 random bits) if absent.
/// Refuses a token file that others can read: a leaked token is full access.
pub fn ensure(path: &Path) -> anyhow::Result<String> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) => {
            if !meta.is_file() {
                bail!("the token file {} is not a regular file", path.display());
            }
            let mode = meta.mode() & 0o777;
            if mode & 0o077 != 0 {
                bail!(
                    "the token file {} is readable or writable by others (mode {mode:03o}); run `chmod 600 {}`",
                    path.display(),
                    path.display()
                );
            }
            let token = std::fs::read_to_string(path)
                .with_context(|| format!("reading the token file {}", path.display()))?
                .trim()
                .to_owned();
            if token.len() < 16 {
                bail!(
                    "the token in {} is shorter than 16 characters; delete the file to get a new one",
                    path.display()
                );
            }
            Ok(token)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => create(path),
        Err(e) => Err(e).with_context(|| format!("examining the token file {}", path.display())),
    }
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
    let token = crate::random::hex(32).context("reading /dev/urandom")?;
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
    fn comparison() {
        assert!(matches("secret-token", "secret-token"));
        assert!(!matches("secret-token", "secret-tokeN"));
        assert!(!matches("secret-token", "secret"));
    }
}
