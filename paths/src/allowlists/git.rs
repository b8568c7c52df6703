//! A git directory that existed at launch — a repository's `.git`, each of
//! its `modules/*` and `worktrees/*`, a bare repository, a git directory a
//! spec binds: only what git writes in ordinary work may change there
//! ([`GIT_WRITES`]: objects, refs, logs, the index, `HEAD` and the other
//! `*_HEAD` files, `packed-refs`, messages, rebase, merge, sequencer and
//! bisect state, and the lock file of each). What tells git where to look,
//! what to borrow or what to run never changes from inside: [`GIT_KEPT`]
//! names the usual ones (`config*`, `commondir`, `gitdir`,
//! `objects/info/alternates`, grafts, `shallow`, `hooks/` and the modes of
//! what is in it), but the rule is the allowlist, so a name nobody listed
//! is refused too.
//!
//! A git directory is found by its shape, as git finds one
//! ([`is_git_dir`]): a `HEAD`, with `objects/` and `refs/` or a
//! `commondir`. A worktree `git worktree add` makes below a known git
//! directory is the command's own ([`NEW_WORKTREES`]), as a repository
//! `git init` makes is.

use std::path::Path;

use crate::write_deny::GlobSet;

/// What git writes in ordinary work, relative to a git directory: globs,
/// each with what it is. A lock file (`X.lock`) may change when `X` may.
pub const GIT_WRITES: &[(&str, &str)] = &[
    ("objects/??", "a directory of loose objects"),
    ("objects/??/*", "loose objects and their temporary files"),
    ("objects/pack", "the packs' directory"),
    (
        "objects/pack/*",
        "packs, their indexes, reverse indexes, bitmaps, keep, promisor and mtimes files, \
         the multi-pack index, their temporary files",
    ),
    (
        "objects/pack/multi-pack-index.d/**",
        "an incremental multi-pack index",
    ),
    ("objects/info/packs*", "the pack list for dumb transports"),
    ("objects/info/commit-graph*", "the commit-graph"),
    ("objects/info/commit-graphs/**", "a split commit-graph"),
    (
        "objects/tmp_objdir-*/**",
        "the quarantine of objects a push or fetch brings",
    ),
    ("objects/incoming-*/**", "the quarantine of older gits"),
    (
        "objects/maintenance",
        "`git maintenance`'s lock (as `.lock`)",
    ),
    (
        "refs/**",
        "branches, tags, remote-tracking refs, notes, stash",
    ),
    ("logs/**", "reflogs"),
    ("reftable/**", "refs in the reftable format"),
    ("packed-refs", "packed refs"),
    ("packed-refs.new", "packed refs being written"),
    ("HEAD", "the current branch"),
    (
        "*_HEAD",
        "ORIG_HEAD, FETCH_HEAD, MERGE_HEAD, CHERRY_PICK_HEAD, REVERT_HEAD, REBASE_HEAD, …",
    ),
    ("AUTO_MERGE", "the tree of the last conflicted merge"),
    ("index", "the index"),
    ("index.stash.*", "the temporary index of `git stash`"),
    ("next-index-*", "the temporary index of a partial commit"),
    ("sharedindex.*", "a split index's shared part"),
    ("COMMIT_EDITMSG", "the last commit message"),
    ("MERGE_MSG", "the message of a merge in progress"),
    ("MERGE_MODE", "the mode of a merge in progress"),
    ("MERGE_RR", "rerere's record of a merge in progress"),
    ("SQUASH_MSG", "the message of a squash in progress"),
    ("TAG_EDITMSG", "the last tag message"),
    ("NOTES_*", "a notes merge in progress"),
    ("BISECT_*", "a bisection in progress"),
    ("rebase-merge/**", "a rebase in progress"),
    ("rebase-apply/**", "a rebase or `git am` in progress"),
    ("sequencer/**", "a cherry-pick or revert in progress"),
    ("rr-cache/**", "rerere's recorded resolutions"),
    ("gc.pid", "`git gc`'s lock"),
    ("gc.log", "`git gc --auto`'s last error"),
    (
        "info/refs",
        "the ref list for dumb transports (`git update-server-info`, run by `git gc`)",
    ),
    ("info/refs_*", "that list being written"),
    ("lfs/**", "Git LFS's object store and temporary files"),
];

/// Names the globs of [`GIT_WRITES`] reach that still never change: git
/// reads other repositories' objects from them.
pub const GIT_WRITES_EXCEPT: &[(&str, &str)] = &[
    (
        "objects/info/alternates",
        "borrows another repository's objects",
    ),
    (
        "objects/info/http-alternates",
        "borrows another repository's objects over HTTP",
    ),
];

/// A worktree made in the sandbox (`git worktree add`) below a git
/// directory of launch: its git directory is the command's own.
pub const NEW_WORKTREES: (&str, &str) = (
    "worktrees/*/**",
    "a worktree made inside: its git directory is the command's own, as a repository `git init` makes",
);

/// What tells git where to look, what to borrow or what to run: refused
/// from inside by the allowlist (with every other name it leaves out), and
/// kept read-only by mounts where they exist at the top of a bind.
pub const GIT_KEPT: &[(&str, &str)] = &[
    (
        "config",
        "aliases, hooks path, fsmonitor, filters, editors and pagers run commands",
    ),
    (
        "config.worktree",
        "per-worktree config: hooks path and fsmonitor run commands",
    ),
    ("hooks", "git runs these on commit, merge, checkout, push"),
    (
        "commondir",
        "where a linked worktree's shared git directory (and its config) is",
    ),
    ("gitdir", "where a linked worktree is"),
    (
        "objects/info/alternates",
        "borrows another repository's objects",
    ),
    (
        "objects/info/http-alternates",
        "borrows another repository's objects over HTTP",
    ),
    ("info/grafts", "rewrites the history git shows"),
    (
        "info/attributes",
        "names filters and diff drivers, which run commands",
    ),
    ("shallow", "where the history is cut"),
    ("modules", "the git directories of submodules"),
];

/// What a refused name in a git directory is told to do instead.
pub const GIT_REMEDY: &str = "make this change on the host (`git -C REPO remote add …`, \
     `git -C REPO branch --set-upstream-to …`), pass config for one command (`git -c \
     KEY=VALUE …`), or work in a clone made inside";

/// The allowlist, compiled.
#[derive(Debug, Clone)]
pub struct GitAllowlist {
    writes: GlobSet,
    except: GlobSet,
    worktrees: GlobSet,
}

impl Default for GitAllowlist {
    fn default() -> Self {
        Self::new()
    }
}

fn compile(list: &[(&str, &str)]) -> GlobSet {
    let texts: Vec<&str> = list.iter().map(|(g, _)| *g).collect();
    // The lists are checked by a test: a bad glob would make the set empty
    // (fail closed for the writes, open for the exceptions — the test
    // stands guard).
    GlobSet::parse(&texts).unwrap_or_default()
}

impl GitAllowlist {
    /// Compiles [`GIT_WRITES`], [`GIT_WRITES_EXCEPT`] and [`NEW_WORKTREES`].
    pub fn new() -> Self {
        Self {
            writes: compile(GIT_WRITES),
            except: compile(GIT_WRITES_EXCEPT),
            worktrees: compile(&[NEW_WORKTREES]),
        }
    }

    /// Whether the name at `rel` (relative to a git directory, not empty)
    /// may be created, written, renamed or removed. `new_worktrees`: a
    /// worktree directory there is the command's own (every git directory
    /// of launch is known, so one of them would have been judged as such).
    pub fn may_change(&self, rel: &Path, new_worktrees: bool) -> bool {
        use std::os::unix::ffi::OsStrExt;
        let text = rel.as_os_str().as_bytes();
        if text.is_empty() {
            return false;
        }
        let judged = match text.strip_suffix(b".lock") {
            Some(stem) if !stem.is_empty() && !stem.ends_with(b"/") => {
                Path::new(std::ffi::OsStr::from_bytes(stem))
            }
            _ => rel,
        };
        if self.except.matching(judged, false).is_some() {
            return false;
        }
        self.writes.matching(judged, false).is_some()
            || (new_worktrees && self.worktrees.matching(judged, false).is_some())
    }

    /// Whether a directory may be made at `rel`: a name that may change, or
    /// a directory such a name lies in (`info` for `info/refs`).
    pub fn may_make_dir(&self, rel: &Path, new_worktrees: bool) -> bool {
        self.may_change(rel, new_worktrees)
            || self.writes.guards_inside(rel, false)
            || (new_worktrees && self.worktrees.guards_inside(rel, false))
    }

    /// Whether the directory at `rel` holds, or may hold, a name that never
    /// changes though the writes' globs reach it (`objects/info`): it may
    /// not be moved, removed or replaced.
    pub fn holds_kept(&self, rel: &Path) -> bool {
        self.except.guards_inside(rel, false)
    }
}

/// What a directory entry is, for [`is_git_dir`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entry {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link.
    Link,
}

/// Whether a directory is a git directory, as git's discovery finds one,
/// from what its entries are: a `HEAD` (file or link), and `objects/` and
/// `refs/`, or a `commondir` (a linked worktree's git directory).
pub fn is_git_dir(entry: impl Fn(&str) -> Option<Entry>) -> bool {
    let head = matches!(entry("HEAD"), Some(Entry::File | Entry::Link));
    let store = entry("objects") == Some(Entry::Dir) && entry("refs") == Some(Entry::Dir);
    head && (store || entry("commondir") == Some(Entry::File))
}

/// The refusal text for a name in a git directory.
pub fn refusal(git_dir: &Path, rel: &Path) -> String {
    let text = rel.to_string_lossy();
    let stem = Path::new(text.strip_suffix(".lock").unwrap_or(&text));
    let kept = GIT_KEPT.iter().find(|(name, _)| stem.starts_with(name));
    let what = match kept {
        Some((name, why)) => format!("`{name}`: {why}"),
        None => "not a name git writes in ordinary work".to_owned(),
    };
    format!(
        "{} in the git directory {} is {what}; in a git directory of launch only objects, refs, \
         logs, the index, HEAD and the other *_HEAD files, packed-refs, messages and \
         rebase/merge/sequencer/bisect state may change (git metadata allowlist, \
         docs/threat-model.md §4): {GIT_REMEDY}",
        rel.display(),
        git_dir.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_list_parses_and_says_why() {
        for (glob, why) in GIT_WRITES
            .iter()
            .chain(GIT_WRITES_EXCEPT)
            .chain([&NEW_WORKTREES])
            .chain(GIT_KEPT)
        {
            assert!(crate::write_deny::Glob::parse(glob).is_ok(), "{glob}");
            assert!(why.len() > 5, "{glob}");
        }
    }

    /// The names a trace of ordinary git work (commit, branch, merge,
    /// tag, stash, rebase, cherry-pick, fetch, push, pull, revert, reset,
    /// bisect, notes, gc, repack, pack-refs, commit-graph, update-server-
    /// info) wrote in `.git`, each allowed; what tells git where to look
    /// or what to run, and names nobody listed, refused.
    #[test]
    fn ordinary_work_is_allowed_and_the_rest_refused() {
        let git = GitAllowlist::new();
        for yes in [
            "AUTO_MERGE.lock",
            "BISECT_EXPECTED_REV.lock",
            "BISECT_LOG",
            "CHERRY_PICK_HEAD",
            "COMMIT_EDITMSG",
            "FETCH_HEAD",
            "HEAD.lock",
            "MERGE_RR",
            "ORIG_HEAD",
            "gc.pid.lock",
            "index.lock",
            "index.stash.7130.lock",
            "info/refs_DqPR4R",
            "objects/info/commit-graph.lock",
            "objects/info/packs_P1wXD0",
            "objects/maintenance.lock",
            "objects/pack/tmp_pack_rcwxLI",
            "objects/e5/tmp_obj_omL6OF",
            "objects/tmp_objdir-incoming-OLirSs/dc/ba7e",
            "packed-refs.lock",
            "packed-refs.new",
            "refs/heads/feature.lock",
            "logs/refs/heads/main",
            "rebase-merge/git-rebase-todo",
            "sequencer/todo",
        ] {
            assert!(git.may_change(Path::new(yes), false), "{yes}");
        }
        for no in [
            "config",
            "config.lock",
            "config.worktree",
            "commondir",
            "gitdir",
            "hooks/pre-commit",
            "hooks/pre-commit.sample",
            "objects/info/alternates",
            "objects/info/alternates.lock",
            "objects/info/http-alternates",
            "info/grafts",
            "info/attributes",
            "info/exclude",
            "shallow",
            "shallow.lock",
            "description",
            "modules/sub/config",
            "modules/new/HEAD",
            "worktrees/new/commondir",
            "a-name-nobody-listed",
            ".lock",
            "objects/info/zz0",
            "objects/zzz/x",
            "objects/zz0",
        ] {
            assert!(!git.may_change(Path::new(no), false), "{no}");
        }
        assert!(git.may_change(Path::new("worktrees/new/commondir"), true));
        assert!(!git.may_change(Path::new(""), true));
    }

    #[test]
    fn directories_on_the_way_to_allowed_names_may_be_made() {
        let git = GitAllowlist::new();
        for yes in [
            "info",
            "objects/info",
            "objects/ab",
            "refs/heads/topic",
            "rebase-merge",
        ] {
            assert!(git.may_make_dir(Path::new(yes), false), "{yes}");
        }
        assert!(git.may_make_dir(Path::new("worktrees"), true));
        for no in ["hooks", "modules", "modules/x", "worktrees"] {
            assert!(!git.may_make_dir(Path::new(no), false), "{no}");
        }
        assert!(git.holds_kept(Path::new("objects/info")));
        assert!(git.holds_kept(Path::new("objects")));
        assert!(!git.may_make_dir(Path::new("objects/abc"), false));
        assert!(!git.holds_kept(Path::new("refs/heads")));
    }

    #[test]
    fn a_git_directory_is_known_by_its_shape() {
        let of = |names: &'static [(&'static str, Entry)]| {
            move |name: &str| names.iter().find(|(n, _)| *n == name).map(|(_, e)| *e)
        };
        assert!(is_git_dir(of(&[
            ("HEAD", Entry::File),
            ("objects", Entry::Dir),
            ("refs", Entry::Dir)
        ])));
        assert!(is_git_dir(of(&[
            ("HEAD", Entry::Link),
            ("commondir", Entry::File)
        ])));
        assert!(!is_git_dir(of(&[
            ("HEAD", Entry::File),
            ("objects", Entry::Dir)
        ])));
        assert!(!is_git_dir(of(&[
            ("objects", Entry::Dir),
            ("refs", Entry::Dir)
        ])));
    }
}
