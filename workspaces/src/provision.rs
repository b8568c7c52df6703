//! Copy-on-write provisioning (SPEC H1): a conversation's clone of each
//! registered repository — working tree and `.git`, ignored files too
//! (build caches are what makes a clone worth having) — made by reflink,
//! file by file, through the jail ([`sandbox_paths::jail::Jail::clone_tree`]).
//!
//! Before anything is made, each repository is surveyed through a
//! read-only jail: a `.git` that points elsewhere is refused with the
//! reason (a `gitdir:` file at the top, alternates, `core.worktree`, an
//! absolute submodule `gitdir:`), or rewritten to stand alone (the
//! original's linked worktrees, `.git/worktrees`, are left out); then one
//! file is cloned for real into the data directory — whether two
//! filesystems share extents is the kernel's to say (btrfs subvolumes
//! differ in `st_dev` and still do) — and the free space is checked. Files
//! the dispatch policy treats as secrets are left out unless the workspace
//! lists them.

use std::path::{Component, Path, PathBuf};

use sandbox_paths::jail::{
    CloneChoice, CloneEntry, EntryKind, Jail, JailConfig, JailPath, RootConfig,
};
use sandbox_paths::write_deny::GlobSet;

use crate::dirs::DATA_DIR_KEY;
use crate::error::WorkspaceError;
use crate::fsinfo;

/// The label of a registered checkout's root in its jail.
pub const REPO: &str = "repo";

/// Room a clone needs beyond shared extents: a block per entry, and this.
const SPACE_RESERVE: u64 = 16 << 20;
const SPACE_PER_ENTRY: u64 = 4096;

/// Provisioning's progress, for a bar at a terminal or events on the API.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Progress {
    pub repository: String,
    pub files_done: u64,
    pub files_total: u64,
    pub bytes_done: u64,
}

/// What a survey of one registered checkout found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Survey {
    pub files: u64,
    pub entries: u64,
    /// A regular file to try a reflink with.
    pub first_file: Option<PathBuf>,
    /// Left out of the clone so it stands alone, with why.
    pub drop: Vec<(PathBuf, String)>,
}

/// A read-only jail over a registered checkout.
pub fn source_jail(path: &Path, home: Option<PathBuf>) -> Result<Jail, WorkspaceError> {
    Jail::new(JailConfig::new(vec![RootConfig::read_only(REPO, path)]).with_home(home)).map_err(
        |e| {
            WorkspaceError::jail(
                format!("opening the registered checkout {}", path.display()),
                e,
            )
        },
    )
}

/// Surveys a registered checkout; a `.git` pointing elsewhere is refused.
pub fn survey(jail: &Jail, shown: &Path) -> Result<Survey, WorkspaceError> {
    let refuse = |why: String| {
        WorkspaceError::Refused(format!(
            "the registered checkout {} cannot be cloned to stand alone: {why}",
            shown.display()
        ))
    };
    let root = jail
        .root_path(REPO)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| shown.to_path_buf());
    match jail.stat(&JailPath::in_root(REPO, ".git"), false) {
        Ok(meta) if meta.is_dir() => {}
        Ok(meta) if meta.is_file() => {
            let text = read_text(jail, Path::new(".git"));
            return Err(refuse(format!(
                "its .git is a file ({}): it is a linked worktree or a submodule's checkout. \
                 Register the main checkout instead",
                text.trim()
            )));
        }
        _ => {
            return Err(refuse(
                "it has no .git directory (register a git checkout)".into(),
            ));
        }
    }
    let mut survey = Survey::default();
    let walk = jail
        .walk(&JailPath::in_root(REPO, "."))
        .map_err(|e| WorkspaceError::jail(format!("surveying {}", shown.display()), e))?;
    for entry in walk {
        let entry =
            entry.map_err(|e| WorkspaceError::jail(format!("surveying {}", shown.display()), e))?;
        survey.entries += 1;
        let path = entry.path();
        let Ok(rel) = path.strip_prefix(&root) else {
            continue;
        };
        if rel == Path::new(".git/worktrees") {
            survey.drop.push((
                rel.to_path_buf(),
                "the original's linked worktrees: the clone stands alone".into(),
            ));
        }
        if entry.kind() != EntryKind::File {
            continue;
        }
        survey.files += 1;
        if survey.first_file.is_none() && !rel.starts_with(".git/worktrees") {
            survey.first_file = Some(rel.to_path_buf());
        }
        if let Some(why) = link_problem(jail, rel) {
            return Err(refuse(why));
        }
    }
    Ok(survey)
}

/// Why a file of a checkout makes its `.git` depend on something outside.
fn link_problem(jail: &Jail, rel: &Path) -> Option<String> {
    let name = rel.file_name()?.to_str()?;
    let in_git = rel.starts_with(".git");
    if in_git
        && (rel.ends_with("objects/info/alternates")
            || rel.ends_with("objects/info/http-alternates"))
    {
        let text = read_text(jail, rel);
        return Some(format!(
            "{} borrows objects from {} (alternates). Make it stand alone first: `git repack -a -d` \
             then remove that file",
            rel.display(),
            text.trim().replace('\n', ", ")
        ));
    }
    if rel == Path::new(".git/commondir") {
        return Some(".git/commondir points at another repository's git directory".into());
    }
    if in_git
        && name == "config"
        && (rel == Path::new(".git/config") || rel.starts_with(".git/modules"))
    {
        let worktree = config_worktree(&read_text(jail, rel))?;
        let top = rel == Path::new(".git/config");
        if top || Path::new(&worktree).is_absolute() {
            return Some(format!(
                "{} sets core.worktree = {worktree}: the working tree lives elsewhere. Unset it \
                 (`git config --unset core.worktree`) or register that working tree",
                rel.display()
            ));
        }
    }
    if name == ".git" && !in_git {
        let text = read_text(jail, rel);
        let target = text.trim().strip_prefix("gitdir:")?.trim().to_owned();
        let parent = rel.parent().unwrap_or(Path::new(""));
        if Path::new(&target).is_absolute() || escapes(&parent.join(&target)) {
            return Some(format!(
                "{} says `gitdir: {target}`, outside the checkout: the submodule's git directory \
                 would not come along. Run `git submodule absorbgitdirs` first",
                rel.display()
            ));
        }
    }
    None
}

/// A small file of a checkout as text ("" when it cannot be read).
fn read_text(jail: &Jail, rel: &Path) -> String {
    jail.read(&JailPath::in_root(REPO, rel))
        .map(|b| String::from_utf8_lossy(&b[..b.len().min(4096)]).into_owned())
        .unwrap_or_default()
}

/// `core.worktree` in a git config text, if set.
pub fn config_worktree(text: &str) -> Option<String> {
    let mut in_core = false;
    let mut found = None;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            let section = line
                .trim_start_matches('[')
                .split([']', ' ', '"'])
                .next()
                .unwrap_or("");
            in_core = section.eq_ignore_ascii_case("core");
            continue;
        }
        if !in_core {
            continue;
        }
        if let Some((key, value)) = line.split_once('=')
            && key.trim().eq_ignore_ascii_case("worktree")
        {
            found = Some(value.trim().trim_matches('"').to_owned());
        }
    }
    found
}

/// Whether a relative path climbs out of where it starts (lexically).
fn escapes(path: &Path) -> bool {
    let mut depth: i64 = 0;
    for c in path.components() {
        match c {
            Component::ParentDir => depth -= 1,
            Component::Normal(_) => depth += 1,
            Component::CurDir => {}
            _ => return true,
        }
        if depth < 0 {
            return true;
        }
    }
    false
}

/// Tries one reflink from the checkout into `dir` of the data jail; the
/// refusal names both filesystems and the data directory's config key.
pub fn check_reflink(
    data: &Jail,
    dir: &JailPath,
    source: &Jail,
    survey: &Survey,
    repo: &Path,
    data_dir: &Path,
) -> Result<(), WorkspaceError> {
    let Some(file) = &survey.first_file else {
        return Ok(());
    };
    match data.try_reflink(source, &JailPath::in_root(REPO, file), dir) {
        Ok(()) => Ok(()),
        Err(e) if e.raw_os_error().is_some_and(no_reflink_errno) => {
            let said = e.raw_os_error().map(std::io::Error::from_raw_os_error);
            let fs_of = |p: &Path| {
                fsinfo::of(p).map_or_else(|_| "an unknown filesystem".into(), |f| f.to_string())
            };
            Err(WorkspaceError::Refused(format!(
                "cannot clone {} into the data directory {} by reflink: the repository is on {} \
                 and the data directory on {}, and the kernel refused to share extents between \
                 them ({}). A conversation is a copy-on-write clone, never a byte copy: put the \
                 data directory (`{DATA_DIR_KEY}`) on the repository's filesystem, an xfs made \
                 with reflink=1 or a btrfs",
                repo.display(),
                data_dir.display(),
                fs_of(repo),
                fs_of(data_dir),
                said.map_or_else(String::new, |s| s.to_string()),
            )))
        }
        Err(e) => Err(WorkspaceError::jail(
            format!(
                "trying a reflink from {} into {}",
                repo.display(),
                data_dir.display()
            ),
            e,
        )),
    }
}

/// The kernel's answers that mean "these two cannot share extents".
fn no_reflink_errno(errno: i32) -> bool {
    [
        libc::EOPNOTSUPP,
        libc::EINVAL,
        libc::EXDEV,
        libc::ENOTTY,
        libc::ENOSYS,
    ]
    .contains(&errno)
}

/// Refuses a clone the data directory's filesystem has no room for.
pub fn check_space(data_dir: &Path, entries: u64) -> Result<(), WorkspaceError> {
    let need = SPACE_RESERVE + entries.saturating_mul(SPACE_PER_ENTRY);
    let info = fsinfo::of(data_dir).map_err(|source| WorkspaceError::Io {
        what: format!("reading the free space of {}", data_dir.display()),
        source,
    })?;
    if info.free < need {
        return Err(WorkspaceError::Refused(format!(
            "the data directory {} ({info}) has {} MiB free; a conversation of {entries} entries \
             needs about {} MiB (shared extents cost nothing, each entry a block). Free space \
             there, or move `{DATA_DIR_KEY}`",
            data_dir.display(),
            info.free >> 20,
            need >> 20
        )));
    }
    Ok(())
}

/// What a clone leaves out: what the survey dropped, and secrets the
/// workspace does not list.
pub struct Chooser<'a> {
    pub secrets: &'a GlobSet,
    pub included: &'a GlobSet,
    pub drop: &'a [(PathBuf, String)],
}

impl Chooser<'_> {
    pub fn choose(&self, entry: &CloneEntry<'_>) -> CloneChoice {
        if let Some((_, why)) = self.drop.iter().find(|(p, _)| p == entry.rel) {
            return CloneChoice::Skip(why.clone());
        }
        if entry.kind == EntryKind::Dir {
            return CloneChoice::Clone;
        }
        if let Some(glob) = self.secrets.matching(entry.rel, false)
            && self.included.matching(entry.rel, false).is_none()
        {
            return CloneChoice::Skip(format!(
                "a secret by the dispatch policy (`{}`): list it in the workspace's include_secrets \
                 to clone it",
                glob.as_str()
            ));
        }
        CloneChoice::Clone
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn core_worktree_is_read_from_the_core_section_only() {
        assert_eq!(
            config_worktree("[core]\n\tbare = false\n\tworktree = /elsewhere\n"),
            Some("/elsewhere".into())
        );
        assert_eq!(config_worktree("[remote \"o\"]\n\tworktree = x\n"), None);
        assert_eq!(
            config_worktree("[Core]\nWorkTree=\"../../x\"\n"),
            Some("../../x".into())
        );
    }

    #[test]
    fn climbing_out_is_seen() {
        assert!(escapes(Path::new("a/../../b")));
        assert!(!escapes(Path::new("sub/../.git/modules/sub")));
    }

    #[test]
    fn secrets_are_left_out_unless_listed() {
        let secrets = GlobSet::parse(&["**/.env", "**/*.pem"]).unwrap();
        let included = GlobSet::parse(&["config/.env"]).unwrap();
        let chooser = Chooser {
            secrets: &secrets,
            included: &included,
            drop: &[(PathBuf::from(".git/worktrees"), "x".into())],
        };
        let entry = |rel: &'static str, kind| CloneEntry {
            rel: Path::new(rel),
            kind,
            len: 0,
        };
        assert!(matches!(
            chooser.choose(&entry(".env", EntryKind::File)),
            CloneChoice::Skip(_)
        ));
        assert_eq!(
            chooser.choose(&entry("config/.env", EntryKind::File)),
            CloneChoice::Clone
        );
        assert_eq!(
            chooser.choose(&entry("node_modules/x/a.pem", EntryKind::File)),
            CloneChoice::Clone
        );
        assert!(matches!(
            chooser.choose(&entry(".git/worktrees", EntryKind::Dir)),
            CloneChoice::Skip(_)
        ));
        assert_eq!(
            chooser.choose(&entry("src/main.rs", EntryKind::File)),
            CloneChoice::Clone
        );
    }
}
