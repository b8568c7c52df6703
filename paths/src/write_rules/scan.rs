//! The start-up scan: what exists under the roots that the rules protect
//! by identity or by place (files a glob matches, git hooks directories,
//! repositories, git directories, where the home's symlinks lead).

use std::path::{Path, PathBuf};

use super::Rules;
use crate::allowlists::git::{Entry, is_git_dir};

/// Files looked at when recording the identities of protected files at start.
const INODE_SCAN_LIMIT: usize = 200_000;

/// Records `(dev, ino)` of every existing file under the roots that a glob
/// matches, so other names of them (hard links) are refused too, which
/// files `existing:` globs protect, and every git directory's hooks
/// directory below a `.git` (whatever a submodule's name), every git
/// directory (by its shape: the git allowlist applies in it), every
/// directory of a repository holding a `HEAD` that is not one, and where
/// the symlinks under the home's kept paths lead. Returns `false` when the
/// scan stopped at its limit (then `existing:` globs protect every match,
/// and any `.git` counts as a git directory: fail closed).
///
/// Each file costs one match of the globs (most are ruled out by the
/// prefilter of [`crate::write_deny::GlobSet::judge`] without
/// running the matcher) and a `stat` only when protected. Every directory
/// is entered, none skipped: a "name anywhere" glob (`**/*.pem`) matches at
/// any depth, and every `.git` below a root is recorded as a repository,
/// so no subtree is provably free of what the scan must find.
pub fn scan_protected_inodes(rules: &mut Rules) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let mut seen = 0usize;
    let roots: Vec<_> = rules.roots().to_vec();
    let mut found = Vec::new();
    let mut existing = Vec::new();
    let mut hooks = Vec::new();
    let mut repositories = Vec::new();
    let mut scratch = Vec::new();
    let mut heads = Vec::new();
    let mut stack: Vec<PathBuf> = roots;
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        // The type from the directory entry itself: no `stat`.
        let entries: Vec<(PathBuf, std::fs::FileType)> = entries
            .flatten()
            .filter_map(|e| Some((e.path(), e.file_type().ok()?)))
            .collect();
        let entry = |name: &str| {
            entries
                .iter()
                .find(|(p, _)| p.file_name() == Some(name.as_ref()))
                .map(|(_, kind)| {
                    if kind.is_dir() {
                        Entry::Dir
                    } else if kind.is_symlink() {
                        Entry::Link
                    } else {
                        Entry::File
                    }
                })
        };
        if entry("HEAD").is_some() {
            if is_git_dir(entry) {
                rules.protect_git_dir(dir.clone());
            } else {
                heads.push(dir.clone());
            }
        }
        for (path, kind) in entries {
            seen += 1;
            if seen > INODE_SCAN_LIMIT {
                // Incomplete: `existing:` globs then protect every match.
                for (dev, ino) in found {
                    rules.protect_inode(dev, ino);
                }
                for dir in hooks {
                    rules.protect_hooks_dir(dir);
                }
                for worktree in repositories {
                    rules.protect_repository(worktree);
                }
                return false;
            }
            // Its name, by the bytes of its path (a directory, `/`, the name).
            if path.as_os_str().as_bytes().ends_with(b"/.git")
                && let Some(worktree) = path.parent()
            {
                repositories.push(worktree.to_path_buf());
            }
            if kind.is_dir() {
                if is_git_hooks_dir(&path) {
                    hooks.push(path.clone());
                }
                stack.push(path);
            } else if kind.is_file() {
                // One match of every glob; `stat` only for what it protects.
                let at_start = rules.judge_at_start(&path, &mut scratch);
                if at_start.protected
                    && let Ok(meta) = std::fs::symlink_metadata(&path)
                {
                    use std::os::unix::fs::MetadataExt;
                    found.push((meta.dev(), meta.ino()));
                }
                if at_start.existing_only {
                    existing.push(path);
                }
            } else if kind.is_symlink() && rules.home_keeps(&path) {
                follow_kept_link(rules, &path);
            }
        }
    }
    for (dev, ino) in found {
        rules.protect_inode(dev, ino);
    }
    for path in existing {
        rules.protect_existing(path);
    }
    for dir in hooks {
        rules.protect_hooks_dir(dir);
    }
    for worktree in repositories {
        rules.protect_repository(worktree);
    }
    rules.scan_completed();
    // After the git directories and repositories are all known: a `HEAD`
    // inside a repository's worktree, not in a git directory.
    for dir in heads {
        let head = dir.join("HEAD");
        if !rules.in_git_dir(&head) && rules.repository_around(&head).is_some() {
            rules.protect_head_dir(dir);
        }
    }
    true
}

/// Where a symlink under the home's kept paths leads, when that is another
/// place inside a root: kept as the link is (`~/.bashrc ->
/// dotfiles/bashrc`). Never the home, a root or a directory above either:
/// a link to `/` (wine's `z:`) keeps nothing.
fn follow_kept_link(rules: &mut Rules, link: &Path) {
    let Ok(target) = std::fs::canonicalize(link) else {
        return;
    };
    let inside_a_root = rules
        .roots()
        .iter()
        .any(|r| target.starts_with(r) && target != *r);
    if inside_a_root && !rules.home_keeps(&target) && !rules.holds_the_home(&target) {
        rules.keep_link_target(target);
    }
}

/// Whether `dir` is the hooks directory of a git directory inside a `.git`
/// (`.git/hooks`, `.git/modules/<any name>/hooks`): named `hooks`, beside a
/// `HEAD`, below a `.git`.
fn is_git_hooks_dir(dir: &std::path::Path) -> bool {
    dir.file_name().is_some_and(|n| n == "hooks")
        && dir.parent().is_some_and(|gitdir| {
            gitdir.join("HEAD").is_file() && gitdir.components().any(|c| c.as_os_str() == ".git")
        })
}
