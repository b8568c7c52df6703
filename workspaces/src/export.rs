//! `conversation export`: a conversation's commits back into the
//! registered checkout as a branch (SPEC H1), and the check that a
//! conversation holds no commits the checkout lacks.
//!
//! A clone is written by an agent, so the git the server runs never reads
//! it as a repository: its config (`core.fsmonitor`, `core.hooksPath`,
//! aliases, `include.path`), hooks and alternates would be code or paths of
//! the agent's choosing. The server first makes a **snapshot** beside the
//! clone, through the jail: `HEAD`, `refs/`, `packed-refs`, `shallow` and
//! `objects/` (without `info/alternates`) reflinked — a symlink swapped in
//! is refused, a file with several names too — and a `config` the server
//! writes. Then the registered checkout fetches from the snapshot with the
//! hardening of [`crate::git`]: no hook runs, no branch checked out there
//! is written (git's own refusal, checked first for a clearer message), a
//! non-fast-forward needs `force`; its working tree and `HEAD` are not
//! touched. The snapshot is removed afterwards.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use sandbox_paths::jail::{CloneChoice, CloneEntry, CloneSource, EntryKind, Jail, JailPath};

use crate::dirs::DataDir;
use crate::error::WorkspaceError;
use crate::provision::{self, REPO};
use crate::store::Conversation;
use crate::{DATA, Workspaces, git};

/// What an export did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Exported {
    pub repository: String,
    pub checkout: PathBuf,
    pub branch: String,
    pub commit: String,
}

/// The commits of a conversation's clones the registered checkouts lack,
/// as `repo ref sha`.
pub fn unexported(layer: &Workspaces, conv: &Conversation) -> Result<Vec<String>, WorkspaceError> {
    let data = layer.data_jail()?;
    let home = git_home(layer, &data)?;
    let mut out = Vec::new();
    for repo in &conv.repositories {
        let git_dir = DataDir::repos_rel(&conv.id).join(&repo.name).join(".git");
        let heads = read_heads(&data, &git_dir);
        if heads.is_empty() {
            continue;
        }
        let registered = repo.source.join(".git");
        let mut cmd = git::command(&home, &[&repo.source]);
        cmd.arg("--git-dir")
            .arg(&registered)
            .args(["cat-file", "--batch-check"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().map_err(|source| WorkspaceError::Io {
            what: "running git cat-file".into(),
            source,
        })?;
        if let Some(mut stdin) = child.stdin.take() {
            for (_, sha) in &heads {
                let _ = writeln!(stdin, "{sha}");
            }
        }
        let output = child
            .wait_with_output()
            .map_err(|source| WorkspaceError::Io {
                what: "running git cat-file".into(),
                source,
            })?;
        let text = String::from_utf8_lossy(&output.stdout);
        for (name, sha) in &heads {
            if text.lines().any(|l| l == format!("{sha} missing")) {
                out.push(format!(
                    "{} {name} {}",
                    repo.name,
                    &sha[..12.min(sha.len())]
                ));
            }
        }
    }
    Ok(out)
}

/// The branch heads and `HEAD` of a clone's git directory, as `(name, sha)`,
/// read through the jail (loose refs, `packed-refs`).
fn read_heads(data: &Jail, git_dir: &Path) -> Vec<(String, String)> {
    let read = |rel: &Path| {
        data.read(&JailPath::in_root(DATA, git_dir.join(rel)))
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .ok()
    };
    let mut heads = Vec::new();
    if let Some(head) = read(Path::new("HEAD")) {
        let head = head.trim();
        if is_sha(head) {
            heads.push(("HEAD".to_owned(), head.to_owned()));
        }
    }
    let base = data
        .root_path(DATA)
        .map(|r| r.join(git_dir).join("refs/heads"));
    if let (Ok(walk), Some(base)) = (
        data.walk(&JailPath::in_root(DATA, git_dir.join("refs/heads"))),
        base,
    ) {
        for entry in walk.flatten() {
            if entry.kind() != EntryKind::File {
                continue;
            }
            let path = entry.path();
            let Ok(name) = path.strip_prefix(&base) else {
                continue;
            };
            if let Some(text) = read(&Path::new("refs/heads").join(name)) {
                let sha = text.trim();
                if is_sha(sha) {
                    heads.push((format!("refs/heads/{}", name.display()), sha.to_owned()));
                }
            }
        }
    }
    if let Some(packed) = read(Path::new("packed-refs")) {
        for line in packed.lines() {
            if let Some((sha, name)) = line.split_once(' ')
                && is_sha(sha)
                && name.starts_with("refs/heads/")
                && !heads.iter().any(|(n, _)| n == name)
            {
                heads.push((name.to_owned(), sha.to_owned()));
            }
        }
    }
    heads
}

fn is_sha(text: &str) -> bool {
    matches!(text.len(), 40 | 64) && text.bytes().all(|b| b.is_ascii_hexdigit())
}

/// An empty home for the server's git, below the data directory.
fn git_home(layer: &Workspaces, data: &Jail) -> Result<PathBuf, WorkspaceError> {
    match data.mkdir(&JailPath::in_root(DATA, ".git-home")) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {}
        Err(e) => return Err(WorkspaceError::jail("making the server git's home", e)),
    }
    Ok(layer.data_dir().join(".git-home"))
}

/// Exports the `HEAD` of a conversation's clone of `repository` (the only
/// one when `None`) as the branch `branch` of its registered checkout.
pub fn export(
    layer: &Workspaces,
    id: &str,
    repository: Option<&str>,
    branch: &str,
    force: bool,
) -> Result<Exported, WorkspaceError> {
    let conv = layer.conversation(id)?;
    let repo = match repository {
        Some(name) => conv
            .repositories
            .iter()
            .find(|r| r.name == name)
            .ok_or_else(|| {
                WorkspaceError::NotFound(format!(
                    "the conversation `{id}` has no repository `{name}`"
                ))
            })?,
        None => match conv.repositories.as_slice() {
            [one] => one,
            [] => {
                return Err(WorkspaceError::invalid(
                    "repository",
                    format!("the conversation `{id}` has no repositories"),
                ));
            }
            many => {
                let names: Vec<&str> = many.iter().map(|r| r.name.as_str()).collect();
                return Err(WorkspaceError::invalid(
                    "repository",
                    format!(
                        "the conversation `{id}` has several repositories ({}): name one (--repo)",
                        names.join(", ")
                    ),
                ));
            }
        },
    };
    let data = layer.data_jail()?;
    let home = git_home(layer, &data)?;
    let checkout = &repo.source;
    git::run(
        {
            let mut c = git::command(&home, &[]);
            c.args(["check-ref-format", "--branch", branch]);
            c
        },
        &format!("the branch name {branch:?}"),
    )
    .map_err(|_| {
        WorkspaceError::invalid("branch", format!("{branch:?} is not a valid branch name"))
    })?;
    if let Some(place) = checked_out(checkout, branch, layer)? {
        return Err(WorkspaceError::Refused(format!(
            "the branch {branch} is checked out in {place}: exporting into it would change a working \
             tree under you. Export to another branch name"
        )));
    }
    let snapshot_rel = DataDir::conversation_rel(id).join(format!(
        ".export-{}",
        sandbox_runtime::random::hex(4).map_err(|source| WorkspaceError::Io {
            what: "reading /dev/urandom".into(),
            source
        })?
    ));
    let snapshot = Snapshot {
        jail: &data,
        rel: snapshot_rel.clone(),
    };
    let git_dir = JailPath::in_root(DATA, DataDir::repos_rel(id).join(&repo.name).join(".git"));
    let source = CloneSource {
        jail: &data,
        path: &git_dir,
        several_names: false,
    };
    data.clone_tree(
        &source,
        &JailPath::in_root(DATA, &snapshot_rel),
        &mut snapshot_choice,
        &mut |_| {},
    )
    .map_err(|e| WorkspaceError::jail(format!("reading the clone of {} in {id}", repo.name), e))?;
    data.write(
        &JailPath::in_root(DATA, snapshot_rel.join("config")),
        b"[core]\n\trepositoryformatversion = 0\n\tbare = true\n",
    )
    .map_err(|e| WorkspaceError::jail("writing the snapshot's config", e))?;
    let snapshot_abs = layer.data_dir().join(&snapshot_rel);
    let spec = format!("{}HEAD:refs/heads/{branch}", if force { "+" } else { "" });
    let mut fetch = git::command(&home, &[checkout, &snapshot_abs]);
    fetch
        .arg("--git-dir")
        .arg(checkout.join(".git"))
        .args([
            "fetch",
            "--no-tags",
            "--no-write-fetch-head",
            "--no-recurse-submodules",
        ])
        .arg(&snapshot_abs)
        .arg(&spec);
    match git::run(
        fetch,
        &format!("exporting {id} into {}", checkout.display()),
    ) {
        Ok(_) => {}
        Err(WorkspaceError::Refused(text))
            if text.contains("non-fast-forward") || text.contains("rejected") =>
        {
            return Err(WorkspaceError::Refused(format!(
                "the branch {branch} of {} has commits the conversation's HEAD does not (not a \
                 fast-forward): export to another branch, or pass --force to replace it",
                checkout.display()
            )));
        }
        Err(e) => return Err(e),
    }
    drop(snapshot);
    let mut parse = git::command(&home, &[checkout]);
    parse
        .arg("--git-dir")
        .arg(checkout.join(".git"))
        .args(["rev-parse", "--verify"])
        .arg(format!("refs/heads/{branch}"));
    let out = git::run(parse, "reading the exported branch")?;
    Ok(Exported {
        repository: repo.name.clone(),
        checkout: checkout.clone(),
        branch: branch.to_owned(),
        commit: String::from_utf8_lossy(&out.stdout).trim().to_owned(),
    })
}

/// What of a clone's git directory a snapshot takes: objects and refs.
fn snapshot_choice(entry: &CloneEntry<'_>) -> CloneChoice {
    let rel = entry.rel;
    let keep = rel == Path::new("HEAD")
        || rel == Path::new("packed-refs")
        || rel == Path::new("shallow")
        || rel.starts_with("refs")
        || (rel.starts_with("objects")
            && !rel.ends_with("info/alternates")
            && !rel.ends_with("info/http-alternates"));
    if keep && (entry.kind != EntryKind::Symlink || rel.starts_with("refs")) {
        CloneChoice::Clone
    } else {
        CloneChoice::Skip("not read by an export".into())
    }
}

/// Where in the registered checkout `branch` is checked out: its own
/// `HEAD` or a linked worktree's.
fn checked_out(
    checkout: &Path,
    branch: &str,
    layer: &Workspaces,
) -> Result<Option<String>, WorkspaceError> {
    let jail = provision::source_jail(checkout, layer.settings.home.clone())?;
    let want = format!("ref: refs/heads/{branch}");
    let head = |rel: &Path| {
        jail.read(&JailPath::in_root(REPO, rel))
            .map(|b| String::from_utf8_lossy(&b).trim() == want)
            .unwrap_or(false)
    };
    if head(Path::new(".git/HEAD")) {
        return Ok(Some(checkout.display().to_string()));
    }
    if let Ok(entries) = jail.list(&JailPath::in_root(REPO, ".git/worktrees")) {
        for entry in entries {
            let rel = Path::new(".git/worktrees").join(&entry.name).join("HEAD");
            if head(&rel) {
                return Ok(Some(format!(
                    "the linked worktree {}",
                    entry.name.to_string_lossy()
                )));
            }
        }
    }
    Ok(None)
}

/// The snapshot, removed when the export is done or fails.
struct Snapshot<'a> {
    jail: &'a Jail,
    rel: PathBuf,
}

impl Drop for Snapshot<'_> {
    fn drop(&mut self) {
        if let Err(e) = self.jail.remove_all(&JailPath::in_root(DATA, &self.rel))
            && e.raw_os_error() != Some(libc::ENOENT)
        {
            tracing::warn!("removing an export's snapshot: {e}");
        }
    }
}
