//! The allowlists' part of the rules ([`crate::allowlists`]): a bound
//! home's dot-paths, the git directories of launch, the shape of a bare
//! repository inside an existing one, and the `PATH` directories.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use super::{GuardConfig, Refusal, Rules};
use crate::allowlists::git::{self, GitAllowlist};
use crate::allowlists::home::{self, HomeData};

/// The home whose allowlist applies.
#[derive(Debug, Clone)]
struct HomeRule {
    dir: PathBuf,
    throwaway: Vec<PathBuf>,
    data: HomeData,
}

/// What the allowlists need, from the config and the start-up scan.
#[derive(Debug, Clone)]
pub(super) struct Allowlisted {
    home: Option<HomeRule>,
    path_dirs: Vec<PathBuf>,
    git: GitAllowlist,
    /// Git directories seen at start (by their shape).
    git_dirs: HashSet<PathBuf>,
    /// Directories inside a repository that held a `HEAD` at start without
    /// being a git directory: no `objects`, `refs` or `commondir` beside it.
    head_dirs: HashSet<PathBuf>,
    /// Where symlinks under the home's kept paths led at start, inside a
    /// root (`~/.bashrc -> dotfiles/bashrc`): kept as the link is.
    link_targets: Vec<PathBuf>,
}

impl Allowlisted {
    pub(super) fn new(config: &GuardConfig) -> Self {
        Self {
            home: config
                .allowlisted_home
                .clone()
                .filter(|h| h.is_absolute())
                .map(|dir| HomeRule {
                    dir,
                    throwaway: config.throwaway.clone(),
                    data: HomeData::new(),
                }),
            path_dirs: config
                .path_dirs
                .iter()
                .filter(|d| d.is_absolute())
                .cloned()
                .collect(),
            git: GitAllowlist::new(),
            git_dirs: HashSet::new(),
            head_dirs: HashSet::new(),
            link_targets: Vec::new(),
        }
    }
}

/// Whether `name` is `want`, in any ASCII case (a case-folding filesystem
/// opens `head` as `HEAD`).
fn is_name(name: Option<&std::ffi::OsStr>, want: &str) -> bool {
    name.is_some_and(|n| n.as_encoded_bytes().eq_ignore_ascii_case(want.as_bytes()))
}

impl Rules {
    /// Records a git directory found at start: only what git writes in
    /// ordinary work may change in it, and neither it nor a directory
    /// above it (below its root) may be moved.
    pub fn protect_git_dir(&mut self, dir: PathBuf) {
        self.pin_directories_of(&dir.join("x"));
        self.allowlisted.git_dirs.insert(dir);
    }

    /// Records a directory inside a repository that holds a `HEAD` at start
    /// without being a git directory: it may not become one, nor be moved.
    pub fn protect_head_dir(&mut self, dir: PathBuf) {
        self.pin_directories_of(&dir.join("HEAD"));
        self.allowlisted.head_dirs.insert(dir);
    }

    /// Records where a symlink under the home's kept paths leads (canonical,
    /// inside a root): kept read-only as what it stands for.
    pub fn keep_link_target(&mut self, target: PathBuf) {
        self.allowlisted.link_targets.push(target);
    }

    /// Whether `path` lies under the kept part of the home (a dot-path or a
    /// place tools keep code) and is neither data nor in a throwaway
    /// overlay: a symlink found there at start is followed by the scan.
    pub fn home_keeps(&self, path: &Path) -> bool {
        self.home_refusal(path).is_some()
    }

    /// Whether `path` lies strictly inside a git directory of launch.
    pub fn in_git_dir(&self, path: &Path) -> bool {
        self.git_dir_of(path).is_some()
    }

    /// Whether `path` is the allowlisted home or a directory above it.
    pub fn holds_the_home(&self, path: &Path) -> bool {
        self.allowlisted
            .home
            .as_ref()
            .is_some_and(|h| h.dir.starts_with(path))
    }

    /// Whether one of the allowlists could refuse something at `path`.
    pub(super) fn allowlisted_could_refuse(&self, path: &Path) -> bool {
        let a = &self.allowlisted;
        a.home
            .as_ref()
            .is_some_and(|h| path.strip_prefix(&h.dir).is_ok_and(home::is_kept))
            || a.path_dirs.iter().any(|d| path.starts_with(d))
            || a.link_targets.iter().any(|t| path.starts_with(t))
            || self.git_dir_of(path).is_some()
            || is_name(path.file_name(), "HEAD")
            || path.parent().is_some_and(|d| a.head_dirs.contains(d))
    }

    /// The allowlists' answer for a new name, or a change of an existing
    /// one, at `path`; `mkdir` when it is a directory being made.
    pub(super) fn check_allowlists(&self, path: &Path, mkdir: bool) -> Option<Refusal> {
        if !self.roots.iter().any(|r| path.starts_with(r)) {
            return None;
        }
        self.git_refusal(path, mkdir)
            .or_else(|| self.repository_shape(path))
            .or_else(|| self.home_refusal(path))
            .or_else(|| self.path_dir_refusal(path, mkdir))
    }

    /// Whether the directory at `path` may not be moved, removed or
    /// replaced for the allowlists' sake: a git directory of launch's
    /// directory that holds a name never to change (`objects/info`), the
    /// home or a directory above it, a `PATH` directory or one above it.
    pub(super) fn allowlisted_structural(&self, path: &Path) -> Option<Refusal> {
        let inside_a_root = self
            .roots
            .iter()
            .any(|r| path.starts_with(r) && path != r.as_path());
        if !inside_a_root {
            return None;
        }
        if let Some((dir, rel)) = self.git_dir_of(path)
            && self.allowlisted.git.holds_kept(rel)
        {
            return Some(Refusal {
                rule: git::refusal(dir, rel),
            });
        }
        if let Some(h) = &self.allowlisted.home
            && h.dir.starts_with(path)
        {
            return Some(Refusal {
                rule: format!(
                    "{} holds the home, whose allowlist would not follow it if it moved \
                     (docs/threat-model.md §4)",
                    path.display()
                ),
            });
        }
        self.allowlisted
            .path_dirs
            .iter()
            .find(|d| d.starts_with(path))
            .map(|d| Refusal {
                rule: format!(
                    "{} is, or holds, the PATH directory {}: it may not be moved or replaced; {}",
                    path.display(),
                    d.display(),
                    home::PATH_DIR_REMEDY
                ),
            })
    }

    /// The git directory of launch `path` lies strictly inside, and the
    /// path relative to it.
    fn git_dir_of<'p>(&'p self, path: &'p Path) -> Option<(&'p Path, &'p Path)> {
        let a = &self.allowlisted;
        if a.git_dirs.is_empty() {
            return None;
        }
        path.ancestors()
            .skip(1)
            .find(|d| a.git_dirs.contains(*d))
            .and_then(|d| Some((d, path.strip_prefix(d).ok()?)))
    }

    /// The git allowlist's answer for `path` (recorded at start too: a file
    /// it refuses is kept by identity).
    pub(super) fn git_refusal(&self, path: &Path, mkdir: bool) -> Option<Refusal> {
        let (dir, rel) = self.git_dir_of(path)?;
        let new_worktrees = self.scan_complete;
        let allowed = if mkdir {
            self.allowlisted.git.may_make_dir(rel, new_worktrees)
        } else {
            self.allowlisted.git.may_change(rel, new_worktrees)
        };
        (!allowed).then(|| Refusal {
            rule: git::refusal(dir, rel),
        })
    }

    /// When the scan did not finish, some git directories of launch are
    /// not known: an existing name in any `.git` that the allowlist leaves
    /// out may not change (fail closed, as `existing:` globs then protect
    /// every match). New names there are judged by the globs alone, so
    /// `git init` and `git clone` still work.
    pub(super) fn unscanned_git_refusal(&self, path: &Path) -> Option<Refusal> {
        if self.scan_complete || self.git_dir_of(path).is_some() {
            return None;
        }
        let dir = path
            .ancestors()
            .skip(1)
            .find(|d| d.file_name() == Some(".git".as_ref()))?;
        let rel = path.strip_prefix(dir).ok()?;
        (!self.allowlisted.git.may_change(rel, false)).then(|| Refusal {
            rule: git::refusal(dir, rel),
        })
    }

    /// A bare repository's shape made inside an existing repository
    /// (outside its git directories): a `HEAD`, or `objects`, `refs` or
    /// `commondir` beside a `HEAD` that was there at start. The host's git
    /// would take that directory for a repository and run its config.
    fn repository_shape(&self, path: &Path) -> Option<Refusal> {
        if self.git_dir_of(path).is_some() {
            return None;
        }
        let parent = path.parent()?;
        let name = path.file_name();
        let beside_head = self.allowlisted.head_dirs.contains(parent)
            && ["objects", "refs", "commondir"]
                .iter()
                .any(|n| is_name(name, n));
        if !(is_name(name, "HEAD") || beside_head) {
            return None;
        }
        let repository = self.repository_around(parent)?;
        Some(Refusal {
            rule: format!(
                "no repository shape inside the existing repository {}: a `HEAD` with \
                 `objects/` and `refs/` (or a `commondir`) makes {} a git directory the host's \
                 git finds and runs the config of; make fixture repositories outside it (in \
                 /tmp, or a target directory outside the repository) or on the host",
                repository.display(),
                parent.display()
            ),
        })
    }

    /// The home allowlist's answer for `path`.
    fn home_refusal(&self, path: &Path) -> Option<Refusal> {
        let a = &self.allowlisted;
        if let Some(target) = a.link_targets.iter().find(|t| path.starts_with(t)) {
            return Some(Refusal {
                rule: format!(
                    "{} is where a symlink in the home's dot-paths led at start ({}): kept \
                     read-only as the link is (docs/threat-model.md §4); make the change on the \
                     host",
                    path.display(),
                    target.display()
                ),
            });
        }
        let h = a.home.as_ref()?;
        let rel = path.strip_prefix(&h.dir).ok()?;
        let (top, why) = home::kept_part(rel)?;
        let throwaway = h
            .throwaway
            .iter()
            .any(|t| path.starts_with(t) && path != t.as_path());
        if throwaway || h.data.is_data(rel) {
            return None;
        }
        Some(Refusal {
            rule: home::refusal(path, &top, why),
        })
    }

    /// The `PATH` directories' answer: nothing may change inside one; at
    /// its own path only a directory may be made.
    fn path_dir_refusal(&self, path: &Path, mkdir: bool) -> Option<Refusal> {
        let dir = self
            .allowlisted
            .path_dirs
            .iter()
            .find(|d| path.starts_with(d) && (path != d.as_path() || !mkdir))?;
        Some(Refusal {
            rule: format!(
                "{} is a PATH directory: what is put there shadows a command on the host; {}",
                dir.display(),
                home::PATH_DIR_REMEDY
            ),
        })
    }
}

#[cfg(test)]
#[path = "allowlisted_tests.rs"]
mod tests;
