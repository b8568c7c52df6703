//! What the plan does for the allowlists (SPEC G5;
//! `sandbox_paths::allowlists`, docs/threat-model.md §4): the create-time
//! guard refuses by the rules, whatever exists; the plan keeps what exists
//! read-only by mounts as well, so it holds with the guard lowered too.
//!
//! - A bound home: every top-level entry under its kept part (dot-paths,
//!   `HOME_CODE_DIRS`) but the data and the throwaway overlays re-bound
//!   read-only; the caches under it (the tools' default homes and caches,
//!   and `HOME_THROWAWAY`) shown as overlays on the bind, so their writes
//!   stay in the sandbox; a writable bind of a kept part itself
//!   (`~/.config`) made read-only, and so is one inside a git directory.
//! - The git directories at the top of each writable root, with their
//!   submodules' and worktrees': what tells git where to look or what to
//!   run (`GIT_KEPT`) re-bound read-only where it exists.
//! - `PATH` directories inside a writable bind: re-bound read-only.

use std::path::{Path, PathBuf};

use sandbox_paths::allowlists::git::{self, GIT_KEPT};
use sandbox_paths::allowlists::home::{self, HOME_THROWAWAY, HomeData};
use sandbox_paths::secrets::HOME_SECRETS;
use sandbox_paths::toolchains::{CACHES, HOMES};

use super::{HostFacts, Kind};
use crate::toolchains::Cache;

/// Whether a writable bind of the host path `path` (resolved) is made
/// read-only: it lies at or under the kept part of `home` (and is not
/// data), or inside a git directory (`.git/refs` bound alone: the guard's
/// scan would not see the git directory above it, so nothing of it may
/// change).
pub(super) fn kept_read_only(path: &Path, home: Option<&Path>, host: &dyn HostFacts) -> bool {
    let in_home = home
        .and_then(|h| path.strip_prefix(h).ok())
        .is_some_and(|rel| home::kept_part(rel).is_some() && !HomeData::new().is_data(rel));
    in_home || path.ancestors().skip(1).any(|dir| is_git_dir(dir, host))
}

/// Whether `dir` has a git directory's shape (`sandbox_paths::allowlists::git::is_git_dir`).
fn is_git_dir(dir: &Path, host: &dyn HostFacts) -> bool {
    use sandbox_paths::allowlists::git::Entry;
    git::is_git_dir(|name| {
        let path = dir.join(name);
        match (host.link_target(&path), host.kind(&path)) {
            (Some(_), Some(_)) if name == "HEAD" => Some(Entry::Link),
            (_, Some(Kind::Dir)) => Some(Entry::Dir),
            (_, Some(Kind::File)) => Some(Entry::File),
            (_, None) => None,
        }
    })
}

/// The caches a bound home adds, those that exist: [`HOME_THROWAWAY`], and
/// the default homes and caches of the tools the toolchain discovery knows
/// (`CARGO_HOME` with its `bin` read-only, `GOPATH` likewise, `~/.npm`, …),
/// whether or not the `PATH` leads there — in a bound home they are shown
/// by the bind, so each is overlaid on it and nothing written there reaches
/// the host. The home's secrets inside one are hidden by whiteouts, as a
/// toolchain cache's credentials are. A cache inside another is left out.
pub(super) fn home_throwaway(home: &Path, host: &dyn HostFacts) -> Vec<Cache> {
    let plain = |dir: &Path| host.kind(dir) == Some(Kind::Dir) && host.link_target(dir).is_none();
    let mut caches: Vec<Cache> = Vec::new();
    let mut add = |tool: String, dir: PathBuf, keep: &[&str], own: &[&str]| {
        if !plain(&dir) {
            return;
        }
        let mut hidden: Vec<PathBuf> = own
            .iter()
            .filter(|s| !s.contains('*'))
            .map(PathBuf::from)
            .collect();
        hidden.extend(HOME_SECRETS.iter().filter_map(|(secret, _)| {
            home.join(secret)
                .strip_prefix(&dir)
                .ok()
                .map(Path::to_path_buf)
        }));
        // A tool's own secret may be a home secret too: one whiteout each.
        let mut seen = std::collections::BTreeSet::new();
        hidden.retain(|name| seen.insert(name.clone()));
        caches.push(Cache {
            tool,
            read_only: keep
                .iter()
                .map(|k| dir.join(k))
                .filter(|d| host.kind(d) == Some(Kind::Dir))
                .collect(),
            hidden,
            path: dir,
            shims: false,
        });
    };
    for (rel, _) in HOME_THROWAWAY {
        add(format!("~/{rel}"), home.join(rel), &[], &[]);
    }
    for tool in HOMES {
        if let (Some(keep), Some(rel)) = (tool.overlay, tool.default) {
            add(tool.tool.to_owned(), home.join(rel), keep, tool.secrets);
        }
    }
    for (tool, _, default) in CACHES {
        if let Some(rel) = default {
            add((*tool).to_owned(), home.join(rel), &[], &[]);
        }
    }
    let all = caches.clone();
    caches.retain(|c| {
        !all.iter()
            .any(|o| o.path != c.path && c.path.starts_with(&o.path))
    });
    caches.sort_by(|a, b| a.path.cmp(&b.path));
    caches.dedup_by(|a, b| a.path == b.path);
    caches
}

/// The top-level entries of a bound home to keep read-only by mounts
/// (host paths, as named): every existing one under the kept part but the
/// data and the throwaway overlays.
pub(super) fn home_kept_entries(
    home: &Path,
    throwaway: &[PathBuf],
    host: &dyn HostFacts,
) -> Vec<PathBuf> {
    let data = HomeData::new();
    let mut out: Vec<PathBuf> = host
        .list(home)
        .into_iter()
        .map(PathBuf::from)
        .filter(|rel| home::kept_part(rel).is_some() && !data.is_data(rel))
        .map(|rel| home.join(rel))
        .filter(|path| !throwaway.iter().any(|t| t == path))
        .collect();
    out.sort();
    out
}

/// The files of the git directories at the top of `root` that tell git
/// where to look or what to run ([`GIT_KEPT`], `modules/` left to the
/// submodules' own), resolved, that exist: the repository's `.git` file
/// (its `gitdir:`), and in a `.git` directory its own, every submodule's
/// below `modules/` and every worktree's. Repositories deeper in a root
/// are the guard's (its start-up scan finds every git directory).
pub(super) fn git_internals(root: &Path, host: &dyn HostFacts) -> Vec<PathBuf> {
    let dot_git = root.join(".git");
    let mut out = Vec::new();
    match host.kind(&dot_git) {
        Some(Kind::File) => out.extend(host.resolve(&dot_git)),
        Some(Kind::Dir) => {
            let mut gitdirs = vec![dot_git.clone()];
            gitdirs.extend(module_gitdirs(&dot_git, host));
            let worktrees = dot_git.join("worktrees");
            gitdirs.extend(host.list(&worktrees).into_iter().map(|n| worktrees.join(n)));
            for gitdir in gitdirs {
                for (name, _) in GIT_KEPT.iter().filter(|(n, _)| *n != "modules") {
                    out.extend(host.resolve(&gitdir.join(name)));
                }
            }
        }
        None => {}
    }
    out
}

/// How deep submodules are looked for below `.git/modules` (a submodule's
/// name may hold `/`, and submodules nest); deeper ones are the guard's.
const MODULES_DEPTH: usize = 6;

/// The git directories of every submodule below `<dot_git>/modules`, to
/// [`MODULES_DEPTH`]: a directory holding `HEAD` is one (and may hold
/// `modules/` of its own); any other directory may be part of a name with
/// `/` in it.
pub(super) fn module_gitdirs(dot_git: &Path, host: &dyn HostFacts) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![(dot_git.join("modules"), 0usize)];
    while let Some((dir, level)) = stack.pop() {
        if level >= MODULES_DEPTH || host.kind(&dir) != Some(Kind::Dir) {
            continue;
        }
        for name in host.list(&dir) {
            let child = dir.join(name);
            if host.kind(&child) != Some(Kind::Dir) {
                continue;
            }
            if host.kind(&child.join("HEAD")) == Some(Kind::File) {
                stack.push((child.join("modules"), level + 1));
                out.push(child);
            } else {
                stack.push((child, level + 1));
            }
        }
    }
    out.sort();
    out
}

/// `path` with every symlink of its longest existing prefix resolved (a
/// `PATH` directory that does not exist yet is kept where it would be).
pub(super) fn resolve_existing_prefix(path: &Path, host: &dyn HostFacts) -> PathBuf {
    let mut missing = Vec::new();
    let mut at = path;
    loop {
        if let Some(resolved) = host.resolve(at) {
            return missing
                .iter()
                .rev()
                .fold(resolved, |acc: PathBuf, name: &&std::ffi::OsStr| {
                    acc.join(name)
                });
        }
        match (at.parent(), at.file_name()) {
            (Some(parent), Some(name)) => {
                missing.push(name);
                at = parent;
            }
            _ => return path.to_path_buf(),
        }
    }
}
