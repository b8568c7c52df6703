//! The start-up scan: what exists under the roots that the rules protect
//! by identity or by place (files a glob matches, git hooks directories,
//! repositories).

use super::Rules;

/// Files looked at when recording the identities of protected files at start.
const INODE_SCAN_LIMIT: usize = 200_000;

/// Records `(dev, ino)` of every existing file under the roots that a glob
/// matches, so other names of them (hard links) are refused too, which
/// files `existing:` globs protect, and every git directory's hooks
/// directory below a `.git` (whatever a submodule's name). Returns `false` when the scan stopped at
/// its limit (then `existing:` globs protect every match: fail closed).
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
    let mut stack: Vec<std::path::PathBuf> = roots;
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
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
            // The type from the directory entry itself: no `stat`.
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            let path = entry.path();
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
                    && let Ok(meta) = entry.metadata()
                {
                    use std::os::unix::fs::MetadataExt;
                    found.push((meta.dev(), meta.ino()));
                }
                if at_start.existing_only {
                    existing.push(path);
                }
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
    true
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
