//! The repositories linked to a conversation's workspace, for the push
//! gateway (SPEC H8): the forge repositories the remotes of the workspace's
//! registered checkouts point at. Read from the user's checkouts — never
//! from a conversation's clone, whose config the agent can write — and from
//! the workspaces database, at each push, so a repository registered while
//! the server runs counts at once.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use sandbox_workspaces::store::Store;

/// A conversation's pushes may go to its workspace's repositories: those
/// under the push URLs or the upstream, when there is a state directory.
pub fn links(
    state_dir: Option<&Path>,
    push_urls: &[String],
    upstream: &str,
) -> Option<std::sync::Arc<dyn sandbox_gateway::forward::Links>> {
    let mut prefixes = push_urls.to_vec();
    prefixes.push(upstream.to_owned());
    let links = WorkspaceLinks {
        state_dir: state_dir?.to_path_buf(),
        prefixes,
    };
    Some(std::sync::Arc::new(links))
}

/// Looks a conversation's links up in the database of `state_dir`.
#[derive(Debug)]
pub struct WorkspaceLinks {
    pub state_dir: PathBuf,
    /// URL prefixes of the forge (`https://github.com/`, `git@github.com:`,
    /// the upstream's): what follows one is the repository's path.
    pub prefixes: Vec<String>,
}

impl sandbox_gateway::forward::Links for WorkspaceLinks {
    fn linked(&self, conversation: &str) -> Vec<String> {
        let checkouts = match self.checkouts(conversation) {
            Ok(checkouts) => checkouts,
            Err(e) => {
                tracing::warn!(%conversation, "the workspace's linked repositories: {e}");
                return Vec::new();
            }
        };
        checkouts
            .iter()
            .flat_map(|checkout| remote_urls(checkout))
            .filter_map(|url| repository(&url, &self.prefixes))
            .collect()
    }
}

impl WorkspaceLinks {
    /// The registered checkouts of the conversation's workspace.
    fn checkouts(&self, conversation: &str) -> Result<Vec<PathBuf>, String> {
        let Some(store) = Store::open(&self.state_dir, false).map_err(|e| e.to_string())? else {
            return Ok(Vec::new());
        };
        let Some(found) = store
            .conversation(conversation)
            .map_err(|e| e.to_string())?
        else {
            return Ok(Vec::new());
        };
        let workspace = store
            .workspace(&found.workspace)
            .map_err(|e| e.to_string())?;
        Ok(workspace
            .map(|w| w.repositories.into_iter().map(|r| r.path).collect())
            .unwrap_or_default())
    }
}

/// The URLs of the checkout's remotes, from its own `.git/config` only (no
/// includes, no system or global config).
fn remote_urls(checkout: &Path) -> Vec<String> {
    let out = Command::new("git")
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .arg("config")
        .arg("--file")
        .arg(checkout.join(".git/config"))
        .args(["--get-regexp", r"^remote\..*\.url$"])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output();
    let Ok(out) = out else {
        return Vec::new();
    };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| line.split_once(' ').map(|(_, url)| url.trim().to_owned()))
        .collect()
}

/// `owner/repo.git` of a remote URL under one of the forge's prefixes.
pub fn repository(url: &str, prefixes: &[String]) -> Option<String> {
    // The prefix ends at a separator: `https://github.com` is not a prefix
    // of `https://github.com.evil/…`.
    let rest = prefixes.iter().find_map(|p| {
        let rest = url.strip_prefix(p.as_str())?;
        (p.ends_with(['/', ':']) || rest.starts_with('/')).then_some(rest)
    })?;
    let rest = rest.trim_start_matches(['/', ':']).trim_end_matches('/');
    let mut parts = rest.split('/');
    let (owner, name) = (parts.next()?, parts.next()?);
    if owner.is_empty() || name.is_empty() || parts.next().is_some() {
        return None;
    }
    Some(format!("{owner}/{}.git", name.trim_end_matches(".git")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandbox_gateway::forward::Links;

    #[test]
    fn remote_urls_of_the_forge_name_their_repository() {
        let prefixes: Vec<String> = ["https://github.com/", "git@github.com:"]
            .iter()
            .map(|p| (*p).to_owned())
            .collect();
        let r = |u: &str| repository(u, &prefixes);
        assert_eq!(r("https://github.com/o/r.git").as_deref(), Some("o/r.git"));
        assert_eq!(r("https://github.com/o/r").as_deref(), Some("o/r.git"));
        assert_eq!(r("git@github.com:o/r.git").as_deref(), Some("o/r.git"));
        assert_eq!(r("https://github.com.evil/o/r.git"), None);
        assert_eq!(r("https://gitlab.com/o/r.git"), None);
        assert_eq!(r("https://github.com/o/r/extra"), None);
        let upstream = ["https://forge.test".to_owned()];
        assert_eq!(
            repository("https://forge.test/o/r.git", &upstream).as_deref(),
            Some("o/r.git")
        );
        assert_eq!(repository("https://forge.testx/o/r.git", &upstream), None);
    }

    /// A conversation's links are its workspace's checkouts' remotes, read
    /// from a real database and a real checkout.
    #[test]
    fn a_conversation_is_linked_to_its_workspaces_remotes() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let state = tmp.path().join("state");
        std::fs::create_dir(&state).unwrap();
        std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o700)).unwrap();
        let checkout = tmp.path().join("checkout");
        std::fs::create_dir(&checkout).unwrap();
        for args in [
            &["init", "-q"][..],
            &["remote", "add", "origin", "https://github.com/o/r.git"],
            &["remote", "add", "elsewhere", "https://gitlab.com/x/y.git"],
        ] {
            let out = Command::new("git")
                .args(args)
                .current_dir(&checkout)
                .env("GIT_CONFIG_GLOBAL", "/dev/null")
                .output()
                .unwrap();
            assert!(out.status.success(), "{out:?}");
        }
        let store = Store::open(&state, true).unwrap().unwrap();
        let workspace = sandbox_workspaces::store::Workspace {
            name: "w".into(),
            repositories: vec![sandbox_workspaces::store::Repository {
                name: "r".into(),
                path: checkout.clone(),
            }],
            attachments: None,
            include_secrets: Vec::new(),
            created_at: 0,
        };
        assert!(store.add_workspace(&workspace).unwrap());
        store.begin_conversation("c1", "w", "test").unwrap();
        drop(store);
        let links = WorkspaceLinks {
            state_dir: state,
            prefixes: vec!["https://github.com/".into()],
        };
        assert_eq!(links.linked("c1"), ["o/r.git"]);
        assert!(links.linked("no-such-conversation").is_empty());
    }
}
