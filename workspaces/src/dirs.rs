//! Where the workspaces keep things: the state directory (the database)
//! and the data directory (conversations), and the layout below the data
//! directory. Pure: the caller passes the environment.
//!
//! ```text
//! <data>/conversations/<id>/repos/<name>          a clone per registered repository (rw inside)
//! <data>/conversations/<id>/agents/<agent>/work   the agent's workdir (rw inside, the default cwd)
//! <data>/conversations/<id>/agents/<agent>/config the agent's config dir (ro inside)
//! ```

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// The config key of the data directory, named in every refusal about it.
pub const DATA_DIR_KEY: &str = "[workspaces] data_dir";

/// The config key of the state directory.
pub const STATE_DIR_KEY: &str = "[workspaces] state_dir";

/// `$XDG_STATE_HOME/cc_server`, else `~/.local/state/cc_server` (where
/// the token lives, which every backend masks).
pub fn default_state_dir(xdg_state_home: Option<&OsStr>, home: Option<&OsStr>) -> Option<PathBuf> {
    match xdg_state_home.filter(|v| Path::new(v).is_absolute()) {
        Some(state) => Some(Path::new(state).join("cc_server")),
        None => home
            .filter(|h| Path::new(h).is_absolute())
            .map(|h| Path::new(h).join(".local/state/cc_server")),
    }
}

/// `$XDG_DATA_HOME/cc_server`, else `~/.local/share/cc_server`.
pub fn default_data_dir(xdg_data_home: Option<&OsStr>, home: Option<&OsStr>) -> Option<PathBuf> {
    match xdg_data_home.filter(|v| Path::new(v).is_absolute()) {
        Some(data) => Some(Path::new(data).join("cc_server")),
        None => home
            .filter(|h| Path::new(h).is_absolute())
            .map(|h| Path::new(h).join(".local/share/cc_server")),
    }
}

/// The layout below a data directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataDir {
    pub root: PathBuf,
}

impl DataDir {
    /// `<data>/conversations`.
    pub fn conversations(&self) -> PathBuf {
        self.root.join("conversations")
    }

    /// Relative to the data directory: a conversation.
    pub fn conversation_rel(id: &str) -> PathBuf {
        Path::new("conversations").join(id)
    }

    /// Relative: its `repos/`.
    pub fn repos_rel(id: &str) -> PathBuf {
        Self::conversation_rel(id).join("repos")
    }

    /// Relative: an agent's directory.
    pub fn agent_rel(id: &str, agent: &str) -> PathBuf {
        Self::conversation_rel(id).join("agents").join(agent)
    }

    /// Absolute, from a relative one.
    pub fn abs(&self, rel: &Path) -> PathBuf {
        self.root.join(rel)
    }
}

/// Names of workspaces, repositories and agents, and conversation ids:
/// they name directories and URL segments.
pub fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        && !name.starts_with('.')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_follow_xdg_then_home() {
        assert_eq!(
            default_state_dir(Some(OsStr::new("/s")), Some(OsStr::new("/h"))),
            Some("/s/cc_server".into())
        );
        assert_eq!(
            default_state_dir(Some(OsStr::new("rel")), Some(OsStr::new("/h"))),
            Some("/h/.local/state/cc_server".into())
        );
        assert_eq!(
            default_data_dir(None, Some(OsStr::new("/h"))),
            Some("/h/.local/share/cc_server".into())
        );
        assert_eq!(default_data_dir(None, None), None);
    }

    #[test]
    fn names_are_path_and_url_safe() {
        for good in ["a", "my-repo", "v1.2_x"] {
            assert!(valid_name(good), "{good}");
        }
        for bad in ["", ".", "..", ".git", "a/b", "a b", &"x".repeat(65)] {
            assert!(!valid_name(bad), "{bad}");
        }
    }
}
